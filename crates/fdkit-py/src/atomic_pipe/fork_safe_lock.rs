//! A lock for state shared by Python threads that a `fork()` cannot leave stuck.
//!
//! `AtomicPipe` keeps its end behind a mutex held across the syscall (with the GIL released).
//! If another thread forks meanwhile, the child inherits the mutex locked by a thread that does
//! not exist there: the classic way `multiprocessing.Queue` and friends deadlock after fork.
//! Here each acquisition records the fork generation it happened in
//! ([`fdkit::fd::fork_generation`], a counter bumped in every child); a child that finds the
//! lock held in an older generation knows nobody will ever release it, sets the stuck state
//! aside (leaked on purpose: dropping it would run the parent's pending work twice) and
//! rebuilds fresh state from what the owner provides. See pthread_atfork(3), fork(2).
//!
//! Deadlock rule kept from before: nobody *waits* for the lock while holding the GIL. The wait
//! is in slices with the signal handlers run between (Ctrl-C works while another thread holds
//! it); see `closable` for how a close() from another thread ends the holder's call.

use fdkit::fd::fork_generation;
use parking_lot::lock_api::ArcMutexGuard;
use parking_lot::{Mutex, RawMutex};
use pyo3::{PyResult, Python};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// `T` behind a lock that a fork cannot leave stuck; see the module docs.
pub struct ForkSafe<T> {
    /// The current state. This outer mutex is only ever taken with the GIL held and never
    /// across a GIL release, so no other thread can hold it when the GIL holder forks.
    slot: std::sync::Mutex<Arc<Mutex<T>>>,
    /// 0 when free, else the fork generation + 1 in which the holder took the lock.
    held_in: Arc<AtomicU64>,
}

/// The locked state; releasing it clears the holder's generation.
pub struct Held<T> {
    guard: ArcMutexGuard<RawMutex, T>,
    held_in: Arc<AtomicU64>,
}

impl<T> Deref for Held<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for Held<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for Held<T> {
    fn drop(&mut self) {
        // Runs before `guard` (a field) unlocks: the lock is never seen free with a stale mark.
        self.held_in.store(0, Ordering::SeqCst);
    }
}

impl<T: Send> ForkSafe<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Self {
        // Registers the fork handler now, before any fork this lock must survive.
        fork_generation();
        ForkSafe {
            slot: std::sync::Mutex::new(Arc::new(Mutex::new(value))),
            held_in: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Locks, waiting (with the GIL released) while another thread holds it, in slices of
    /// [`fdkit::fd::CANCEL_SLICE`] with Python's signal handlers run between them: Ctrl-C
    /// ends the wait with KeyboardInterrupt. In a forked child whose parent held the lock at
    /// fork time, `rebuild` makes fresh state instead.
    pub fn lock(&self, py: Python<'_>, rebuild: impl FnOnce() -> T) -> PyResult<Held<T>> {
        let mut rebuild = Some(rebuild);
        loop {
            let current = self.current(&mut rebuild);
            if let Some(guard) = current.try_lock_arc() {
                return Ok(self.held(guard));
            }
            // Wait without the GIL (the holder may need it to finish), then try again: the
            // state may have been replaced meanwhile.
            let got =
                crate::gil::without_gil(py, || current.try_lock_arc_for(fdkit::fd::cancel_slice()));
            // Got it: drop and retake it through the slot (it may have been replaced).
            if got.is_none() {
                py.check_signals()?;
            }
        }
    }

    /// Mutable access without locking, for `Drop` (no other reference can exist then).
    pub fn get_mut(&mut self) -> Option<&mut T> {
        let slot = self.slot.get_mut().unwrap_or_else(|p| p.into_inner());
        Arc::get_mut(slot).map(Mutex::get_mut)
    }

    fn held(&self, guard: ArcMutexGuard<RawMutex, T>) -> Held<T> {
        let generation = fork_generation();
        self.held_in.store(generation + 1, Ordering::SeqCst);
        Held {
            guard,
            held_in: Arc::clone(&self.held_in),
        }
    }

    /// The current state, replaced first when it is stuck in a lock from before a fork.
    fn current(&self, rebuild: &mut Option<impl FnOnce() -> T>) -> Arc<Mutex<T>> {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        let held_in = self.held_in.load(Ordering::SeqCst);
        let now = fork_generation() + 1;
        if held_in != 0 && held_in != now {
            if let Some(rebuild) = rebuild.take() {
                let stuck = std::mem::replace(&mut *slot, Arc::new(Mutex::new(rebuild())));
                // The stuck state belongs to a thread that does not exist here: dropping it
                // would redo the parent's work (write its queued bytes again) and close fds
                // the fresh state now uses.
                std::mem::forget(stuck);
                self.held_in.store(0, Ordering::SeqCst);
            }
        }
        Arc::clone(&slot)
    }
}
