//! `poll` that keeps its deadline across signals.

use rustix::event::{PollFd, Timespec};
use rustix::io::Errno;
use std::time::{Duration, Instant};

/// `poll(fds, nfds, timeout)`: waits until an fd is ready or `timeout` passes (`None`: forever).
///
/// On `EINTR` it calls `checkpoint` and, if that says go on, polls again for what is left of the
/// original timeout rather than starting it over. Returns how many fds have events. See poll(2).
pub fn poll(
    fds: &mut [PollFd<'_>],
    timeout: Option<Duration>,
    mut checkpoint: impl FnMut() -> Result<(), Errno>,
) -> Result<usize, Errno> {
    let deadline = timeout.map(|t| Instant::now().checked_add(t));
    loop {
        let remaining = match deadline {
            None => None,
            // A deadline past what Instant can hold is as good as forever.
            Some(None) => None,
            Some(Some(d)) => Some(d.saturating_duration_since(Instant::now())),
        };
        let ts = remaining.map(|r| Timespec {
            tv_sec: r.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: r.subsec_nanos().into(),
        });
        match rustix::event::poll(fds, ts.as_ref()) {
            Err(Errno::INTR) => checkpoint()?,
            other => return other,
        }
    }
}

/// How often a cancellable wait looks at its flag, at most: an owner's `close()` from another
/// thread ends the wait within this long (see [`poll_cancellable`]).
pub const CANCEL_SLICE: Duration = Duration::from_millis(20);

/// One slice of a cancellable wait: between half of [`CANCEL_SLICE`] and all of it, varied
/// from call to call so that the wake-ups do not fall in step with anything periodic (an
/// observer sampling every 100 ms would otherwise always catch the thread between slices).
pub fn cancel_slice() -> Duration {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let half = CANCEL_SLICE / 2;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    let calls = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let spread = (now ^ calls.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    half + Duration::from_nanos(spread % half.as_nanos() as u64)
}

/// [`poll`] that another thread can end: with a `cancel` flag, it polls in slices of at most
/// [`CANCEL_SLICE`] and returns `ECANCELED` once the flag is set (checked before each slice).
/// Returns 0 when `timeout` passes (`None`: forever). See poll(2).
///
/// Why slices and not a wake-up eventfd in the poll set: an eventfd is shared with every child
/// a `fork()` makes, so a parent's close would wake (and end) its children's waits.
pub fn poll_cancellable(
    fds: &mut [PollFd<'_>],
    timeout: Option<Duration>,
    cancel: Option<&std::sync::atomic::AtomicBool>,
    mut checkpoint: impl FnMut() -> Result<(), Errno>,
) -> Result<usize, Errno> {
    let Some(cancel) = cancel else {
        return poll(fds, timeout, checkpoint);
    };
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        if cancel.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Errno::CANCELED);
        }
        let left = match (timeout, deadline) {
            (Some(_), Some(d)) => d.saturating_duration_since(Instant::now()),
            _ => CANCEL_SLICE,
        };
        let slice = left.min(cancel_slice());
        let n = poll(fds, Some(slice), &mut checkpoint)?;
        if n > 0 || (timeout.is_some() && deadline.is_some() && slice >= left) {
            return Ok(n);
        }
    }
}
