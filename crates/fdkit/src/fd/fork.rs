//! Which side of a fork(2) this process is on: a counter bumped in every child.
//!
//! State cached per process (a writer's pid, a lock's owner) is stale in a forked child. Asking
//! the kernel (`getpid`) on every use costs a syscall; comparing this counter costs an atomic
//! load. A `pthread_atfork` child handler bumps it; forks that skip the C library's `fork`
//! (a raw `clone` syscall) are not seen. See pthread_atfork(3).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    // Async-signal-safe: one atomic add.
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// The fork generation: changes in a child after every fork that happened once this was
/// first called (earlier forks are not counted, and need not be: nothing was cached then).
pub fn fork_generation() -> u64 {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only does an atomic add, valid for the life of the
        // process (a static function); no preparation or parent handler.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
    GENERATION.load(Ordering::SeqCst)
}
