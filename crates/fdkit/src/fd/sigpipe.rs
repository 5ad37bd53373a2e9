//! Keeping `SIGPIPE` from killing the process while a loop splices into sockets.
//!
//! `splice(2)` into a socket whose peer is gone fails with `EPIPE` and also raises `SIGPIPE`:
//! there is no `MSG_NOSIGNAL` for splice (seen on Linux 6.x with TCP and unix sockets alike).
//! Python and Rust programs ignore `SIGPIPE` already, but a library cannot count on that, and
//! changing the process-wide disposition would race with other threads. The kernel sends this
//! `SIGPIPE` to the thread that wrote (`send_sig` on `current`), so blocking it on the loop's
//! thread is enough: the signal then only waits as pending. When the run ends, the guard
//! takes it off the pending set with a zero-timeout `sigtimedwait` (unless one was pending
//! before the run: that one is not ours to consume) and restores the thread's signal mask.
//! See signal(7), pthread_sigmask(3), sigtimedwait(2).

use std::mem::MaybeUninit;

/// Blocks `SIGPIPE` on this thread until dropped (on the same thread).
pub struct SigpipeGuard {
    set: libc::sigset_t,
    old: libc::sigset_t,
    pending_before: bool,
    /// `!Send`: the mask is per thread, so the guard must drop where it was made.
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl SigpipeGuard {
    /// A guard only when one is needed: `None` when `SIGPIPE` is ignored process-wide (as
    /// Python and most Rust programs arrange), which costs one `sigaction` query instead of
    /// the four calls a guard makes. See sigaction(2).
    pub fn if_needed() -> Option<Self> {
        let mut current = MaybeUninit::<libc::sigaction>::uninit();
        // SAFETY: a null new action only queries; `current` is writable and filled on success.
        let queried =
            unsafe { libc::sigaction(libc::SIGPIPE, std::ptr::null(), current.as_mut_ptr()) };
        // SAFETY: sigaction returned 0, so it filled `current`.
        if queried == 0 && unsafe { current.assume_init() }.sa_sigaction == libc::SIG_IGN {
            return None;
        }
        Some(Self::new())
    }

    /// `pthread_sigmask(SIG_BLOCK, {SIGPIPE})`, remembering the previous mask.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        let set = sigpipe_set();
        let mut old = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: `set` is an initialised signal set and `old` a writable one the call fills;
        // blocking a signal on the calling thread cannot break memory safety.
        let blocked = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, old.as_mut_ptr()) };
        let old = if blocked == 0 {
            // SAFETY: pthread_sigmask returned 0, so it wrote the previous mask into `old`.
            unsafe { old.assume_init() }
        } else {
            // Cannot fail with valid arguments; if it did, restoring "SIGPIPE unblocked"
            // is the right undo anyway.
            empty_set()
        };
        SigpipeGuard {
            set,
            old,
            pending_before: sigpipe_pending(),
            _thread_bound: std::marker::PhantomData,
        }
    }
}

impl Drop for SigpipeGuard {
    fn drop(&mut self) {
        if !self.pending_before {
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // Standard signals do not queue: at most one SIGPIPE is pending. The loop stops on
            // EAGAIN (none pending) and on any other error too.
            // SAFETY: `self.set` is an initialised set, the info pointer may be null, and
            // `zero` is a valid timeout; the call only dequeues a pending blocked signal.
            while unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &zero) }
                == libc::SIGPIPE
            {}
        }
        // SAFETY: `self.old` is the mask pthread_sigmask reported on this thread (the guard is
        // !Send); setting it back is what the caller had before.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

fn empty_set() -> libc::sigset_t {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the whole set it is given.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        set.assume_init()
    }
}

fn sigpipe_set() -> libc::sigset_t {
    let mut set = empty_set();
    // SAFETY: `set` is initialised and SIGPIPE is a valid signal number.
    unsafe { libc::sigaddset(&mut set, libc::SIGPIPE) };
    set
}

fn sigpipe_pending() -> bool {
    let mut set = empty_set();
    // SAFETY: `set` is a writable signal set the call fills; sigismember only reads it.
    unsafe { libc::sigpending(&mut set) == 0 && libc::sigismember(&set, libc::SIGPIPE) == 1 }
}
