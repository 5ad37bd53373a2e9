//! The end of a ring's life, the one way: wait (bounded) for the completions of the ops still
//! in flight, then leak what the kernel may still use.
//!
//! An op lends the kernel memory (a buffer, an iovec array, a `msghdr`) until its last
//! completion arrives. Closing the ring does not end that at once: the kernel cancels and
//! finishes the requests in the background (`io_ring_exit_work`), and may still write into
//! their memory. So a ring that stops first cancels or shuts down what it has in flight,
//! waits at most a bounded time for the completions, and what is still in flight after that
//! is leaked, never freed. [`Ring`](super::Ring)'s close and drop and the static server's
//! io_uring engine both end this way. See io_uring_enter(2), io_uring_queue_exit(3).

use std::time::{Duration, Instant};

/// The longest single wait while draining (so a failing ring is noticed soon).
const STEP: Duration = Duration::from_millis(50);

/// What owns memory lent to the kernel by the ops of one ring.
pub(crate) trait InFlight {
    /// Whether some op has not had its last completion yet.
    fn in_flight(&self) -> bool;
    /// Submits what is queued, waits at most `max` for completions and reaps them (freeing
    /// what the completed ops owned). `false`: the ring failed, stop waiting.
    fn complete_some(&mut self, max: Duration) -> bool;
    /// Gives up on the ops still in flight: leaks (never frees) what they own.
    fn leak_in_flight(&mut self);
}

/// Waits at most `timeout` until nothing is in flight; leaks what still is then. Returns
/// whether everything completed.
pub(crate) fn drain(ring: &mut impl InFlight, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while ring.in_flight() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !ring.complete_some(left.min(STEP)) {
            break;
        }
    }
    if ring.in_flight() {
        ring.leak_in_flight();
        return false;
    }
    true
}

/// Never frees `what`: the kernel may still read or write it. See [`drain`].
pub(crate) fn leak<T>(what: T) {
    std::mem::forget(what);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Completes one op per call; `stuck` ops never complete.
    struct Fake {
        left: usize,
        stuck: usize,
        calls: usize,
        leaked: bool,
        fail: bool,
    }

    impl InFlight for Fake {
        fn in_flight(&self) -> bool {
            self.left + self.stuck > 0
        }
        fn complete_some(&mut self, max: Duration) -> bool {
            assert!(max <= STEP && !max.is_zero());
            self.calls += 1;
            if self.fail {
                return false;
            }
            if self.left > 0 {
                self.left -= 1;
            } else {
                std::thread::sleep(max);
            }
            true
        }
        fn leak_in_flight(&mut self) {
            self.leaked = true;
        }
    }

    fn fake(left: usize, stuck: usize, fail: bool) -> Fake {
        Fake {
            left,
            stuck,
            calls: 0,
            leaked: false,
            fail,
        }
    }

    #[test]
    fn drains_then_frees() {
        let mut f = fake(3, 0, false);
        assert!(drain(&mut f, Duration::from_secs(5)));
        assert_eq!((f.calls, f.leaked), (3, false));
    }

    #[test]
    fn leaks_what_never_completes_within_the_timeout() {
        let mut f = fake(1, 1, false);
        let t = Instant::now();
        assert!(!drain(&mut f, Duration::from_millis(120)));
        assert!(f.leaked);
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_failing_ring_leaks_at_once() {
        let mut f = fake(2, 0, true);
        assert!(!drain(&mut f, Duration::from_secs(5)));
        assert_eq!((f.calls, f.leaked), (1, true));
    }
}
