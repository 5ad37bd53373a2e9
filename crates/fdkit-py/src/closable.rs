//! The one locking model for the Python objects that own fds and may be closed from any
//! thread while another thread waits in them: `AtomicPipe`, `zerocopy.Pipe` and `uring.Ring`.
//!
//! The problem: a call blocked in the kernel (a read on an empty pipe, a write to a full one,
//! a splice, an io_uring wait) holds the object. `close()` from another thread must not wait
//! for it (it could wait forever), must not fail (PyO3's `RuntimeError: Already borrowed`),
//! and must not close the fd under it: the kernel hands a closed number to the next `open()`
//! at once, and a call still in flight would then read or write a stranger's file.
//!
//! The model, in four rules:
//!
//! 1. **Uses.** Every call that touches the object's fds runs inside a *use*
//!    ([`Closable::enter`]), counted in one atomic word. Uses never wait for each other here
//!    (an object may add its own lock inside: the atomic pipe's one-reader lock, the ring's
//!    mutex, each waited for in slices with the signal handlers run between). Once close has
//!    begun, `enter` refuses and the object raises `ValueError("I/O operation on a closed
//!    …")`, as `io` does.
//! 2. **Waits never sleep where close cannot reach them.** A use that may block waits in
//!    poll(2) or io_uring_enter(2) in slices of at most [`fdkit::fd::CANCEL_SLICE`] (20 ms)
//!    and looks at the object's `closing` flag ([`Closable::closing_flag`]) between slices;
//!    reads and writes are issued so that they cannot sleep (`RWF_NOWAIT`,
//!    `SPLICE_F_NONBLOCK`, or a poll first). A wait that sees the flag ends with `ECANCELED`,
//!    reported as the same ValueError. Ctrl-C still interrupts the poll (`EINTR`) and the
//!    signal handlers run, as before. (With no other Python thread nobody can close the
//!    object during a syscall, so the atomic pipe then lets a blocking wait sleep in
//!    read(2)/write(2) as it always did, one syscall; waits become cancellable again as soon
//!    as signal handlers have run.)
//! 3. **Close.** `close()` marks the word closing and sets the flag (new uses refused, waiting
//!    uses end within a slice), then waits, with the GIL released, for the uses in flight to
//!    leave, running Python's signal handlers every 20 ms (Ctrl-C in a waiting close raises
//!    and leaves the object open, as if close had not been called). Only then are the fds
//!    released ([`Release`]): no call of this object touches a number after it was given back.
//!    A close() from a thread that is itself inside a use (a signal handler that runs while
//!    its thread waits in `read_message`) cannot wait for itself: it marks the object closing
//!    and returns, and the last use to leave releases the fds.
//! 4. **Fork.** The word also records the fork generation ([`fdkit::fd::fork_generation`]): in
//!    a child, uses and a closer counted in the parent belong to threads that do not exist
//!    there and are forgotten. This is also why the waits use slices rather than a wake-up
//!    eventfd in the poll set: a child shares the parent's eventfd, so a parent's close would
//!    end the child's waits.
//!
//! Cost on the hot path: two compare-and-swaps and a thread-local push/pop per call.

use crate::gil::without_gil;
use fdkit::fd::fork_generation;
use pyo3::prelude::*;
use std::cell::{RefCell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// The low bits: uses in flight.
const USES: u64 = (1 << 24) - 1;
/// close() has begun: `enter` refuses.
const CLOSING: u64 = 1 << 24;
/// A thread is running the release.
const CLOSER: u64 = 1 << 25;
/// The fds are released (for good).
const RELEASED: u64 = 1 << 26;
/// The last use to leave releases (close() was called from inside a use).
const DEFERRED: u64 = 1 << 27;
/// The fork generation sits above this bit.
const GEN_SHIFT: u32 = 32;

/// `ValueError("I/O operation on a closed {what}")`, as `io` says it: what every object under
/// this model raises once close() has begun (`what`: the class, `Pipe`, `Ring`…).
pub fn closed_error(what: &str) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(format!("I/O operation on a closed {what}"))
}

/// Releasing what a [`Closable`] holds: closing its fds.
pub trait Release {
    /// Closes the fds (the caller has exclusive access: no use exists or can start).
    /// `deferred`: run by the last use leaving, in a destructor: it must neither wait nor run
    /// Python code (its error is dropped).
    fn release(&mut self, py: Python<'_>, deferred: bool) -> PyResult<()>;

    /// Whether the fds are gone (a failed release may have closed them anyway, or not).
    fn is_released(&self) -> bool;
}

/// `T` (an object's fds and state) under the model in the module docs.
pub struct Closable<T> {
    value: UnsafeCell<T>,
    state: AtomicU64,
    closing: Arc<AtomicBool>,
}

// SAFETY: `value` is shared (`&T`) only inside uses and after the release, and handed out
// exclusively (`&mut T`) only to the one closer while no use exists and none can start (see
// `close` and `Use::drop`): `T: Sync` makes the shared access from several threads sound,
// `T: Send` the exclusive access from any thread.
unsafe impl<T: Send + Sync> Sync for Closable<T> {}

thread_local! {
    /// The addresses of the Closables this thread is inside a use of.
    static INSIDE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

fn generation() -> u64 {
    fork_generation() & 0xffff_ffff
}

/// The word as this process sees it: uses, a closer and a deferral counted before a fork (by
/// threads that do not exist here) are dropped.
fn current(word: u64, gen: u64) -> u64 {
    if word >> GEN_SHIFT == gen {
        word
    } else {
        (gen << GEN_SHIFT) | (word & (CLOSING | RELEASED))
    }
}

/// One call's use of a [`Closable`]; derefs to the value. Not `Send` (it holds the GIL token):
/// it is made and dropped with the GIL held, which the deferred release relies on.
pub struct Use<'a, 'py, T: Release + Send + Sync> {
    owner: &'a Closable<T>,
    gen: u64,
    py: Python<'py>,
}

impl<T: Release + Send + Sync> std::ops::Deref for Use<'_, '_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a use exists, so no closer holds `&mut T` (see the Sync impl).
        unsafe { &*self.owner.value.get() }
    }
}

impl<T: Release + Send + Sync> Use<'_, '_, T> {
    /// Whether close() has begun (the call should end with the closed error).
    pub fn closing(&self) -> bool {
        self.owner.closing.load(SeqCst)
    }
}

impl<T: Release + Send + Sync> Drop for Use<'_, '_, T> {
    fn drop(&mut self) {
        let me = self.owner.addr();
        INSIDE.with(|v| {
            let mut v = v.borrow_mut();
            if let Some(i) = v.iter().rposition(|&a| a == me) {
                v.swap_remove(i);
            }
        });
        let mut raw = self.owner.state.load(SeqCst);
        loop {
            if raw >> GEN_SHIFT != self.gen {
                return; // counted before a fork: already forgotten here
            }
            let mut new = raw - 1;
            let release_now =
                new & USES == 0 && new & DEFERRED != 0 && new & (CLOSER | RELEASED) == 0;
            if release_now {
                new = (new & !DEFERRED) | CLOSER;
            }
            match self
                .owner
                .state
                .compare_exchange_weak(raw, new, SeqCst, SeqCst)
            {
                Ok(_) => {
                    if release_now {
                        // Nobody to report to from a destructor.
                        let _ = self.owner.finish_release(self.py, true);
                    }
                    return;
                }
                Err(now) => raw = now,
            }
        }
    }
}

impl<T: Release + Send + Sync> Closable<T> {
    /// Wraps `value`, open.
    pub fn new(value: T) -> Self {
        Self::with_flag(value, Arc::new(AtomicBool::new(false)))
    }

    /// Wraps `value`, open, with `closing` as its flag (the value's core parts watch it).
    pub fn with_flag(value: T, closing: Arc<AtomicBool>) -> Self {
        Closable {
            value: UnsafeCell::new(value),
            state: AtomicU64::new(generation() << GEN_SHIFT),
            closing,
        }
    }

    fn addr(&self) -> usize {
        self as *const Self as usize
    }

    /// Starts a use, or None once close() has begun.
    #[inline]
    pub fn enter<'py>(&self, py: Python<'py>) -> Option<Use<'_, 'py, T>> {
        let gen = generation();
        let mut raw = self.state.load(SeqCst);
        loop {
            let s = current(raw, gen);
            if s & CLOSING != 0 || s & USES == USES {
                return None;
            }
            match self.state.compare_exchange_weak(raw, s + 1, SeqCst, SeqCst) {
                Ok(_) => break,
                Err(now) => raw = now,
            }
        }
        INSIDE.with(|v| v.borrow_mut().push(self.addr()));
        Some(Use {
            owner: self,
            gen,
            py,
        })
    }

    /// The value once released (read-only for good), for getters that still answer then.
    pub fn released(&self) -> Option<&T> {
        let s = current(self.state.load(SeqCst), generation());
        // SAFETY: after RELEASED nobody ever takes `&mut T` again (close returns early).
        (s & RELEASED != 0).then(|| unsafe { &*self.value.get() })
    }

    /// Whether close() has begun (and was not interrupted).
    pub fn is_closed(&self) -> bool {
        current(self.state.load(SeqCst), generation()) & CLOSING != 0
    }

    /// The flag the core's waits watch (`ECANCELED` once set).
    pub fn closing_flag(&self) -> &Arc<AtomicBool> {
        &self.closing
    }

    /// Exclusive access without locking, for `Drop` (no other reference can exist then).
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// `close()`: see rule 3 in the module docs. Closing twice is harmless; a close() while
    /// another thread's close() runs waits for it.
    pub fn close(&self, py: Python<'_>) -> PyResult<()> {
        let gen = generation();
        let me = self.addr();
        let inside = INSIDE.with(|v| v.borrow().contains(&me));
        loop {
            let raw = self.state.load(SeqCst);
            let s = current(raw, gen);
            if s & RELEASED != 0 {
                return Ok(());
            }
            if s & (CLOSER | DEFERRED) != 0 {
                if inside {
                    return Ok(()); // the last use (ours, among others) releases
                }
                // Another thread releases (or the last use will): wait for it.
                self.wait_until(py, |s| s & RELEASED != 0 || s & (CLOSER | DEFERRED) == 0)?;
                continue;
            }
            let new = s | CLOSING | if inside { DEFERRED } else { CLOSER };
            if self
                .state
                .compare_exchange(raw, new, SeqCst, SeqCst)
                .is_ok()
            {
                self.closing.store(true, SeqCst);
                if inside {
                    return Ok(());
                }
                break;
            }
        }
        if let Err(e) = self.wait_until(py, |s| s & USES == 0) {
            self.reopen();
            return Err(e);
        }
        self.finish_release(py, false)
    }

    /// Runs the release; the caller holds the CLOSER bit and no use exists.
    fn finish_release(&self, py: Python<'_>, deferred: bool) -> PyResult<()> {
        // SAFETY: CLOSER is ours, the use count is 0 and CLOSING stops new uses: no other
        // reference to the value exists until we clear CLOSER below.
        let value = unsafe { &mut *self.value.get() };
        let result = value.release(py, deferred);
        if value.is_released() || deferred {
            self.update(|s| (s & !CLOSER) | RELEASED);
        } else {
            self.reopen();
        }
        result
    }

    /// Back to open, as if close() had not been called (it was interrupted, or failed before
    /// releasing anything).
    fn reopen(&self) {
        self.closing.store(false, SeqCst);
        self.update(|s| s & !(CLOSING | CLOSER | DEFERRED));
    }

    fn update(&self, f: impl Fn(u64) -> u64) {
        let gen = generation();
        let mut raw = self.state.load(SeqCst);
        loop {
            let new = f(current(raw, gen));
            match self.state.compare_exchange_weak(raw, new, SeqCst, SeqCst) {
                Ok(_) => return,
                Err(now) => raw = now,
            }
        }
    }

    /// Waits (GIL released, 1 ms sleeps) until `done(word)`, running Python's signal handlers
    /// every 20 ms: a handler's exception (Ctrl-C) ends the wait.
    fn wait_until(&self, py: Python<'_>, done: impl Fn(u64) -> bool + Sync) -> PyResult<()> {
        let gen = generation();
        let met = || done(current(self.state.load(SeqCst), gen));
        loop {
            if met() {
                return Ok(());
            }
            let ok = without_gil(py, || {
                for _ in 0..20 {
                    std::thread::sleep(Duration::from_millis(1));
                    if met() {
                        return true;
                    }
                }
                false
            });
            if ok {
                return Ok(());
            }
            py.check_signals()?;
        }
    }
}
