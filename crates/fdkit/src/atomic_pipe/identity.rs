//! Who is writing: the (pid, tid) pair every chunk header carries.
//!
//! Perl's Atomic::Pipe writes `$$` and `threads->tid` (0 when unthreaded). fdkit writes the
//! process id at write time (so a forked child is told apart from its parent) and 0 on a
//! process's main thread, the kernel thread id on any other thread: distinct per live thread,
//! and the main thread reads exactly as an unthreaded Perl writer does.

use super::wire::Writer;
use std::cell::Cell;

thread_local! {
    /// (pid, tid as written) computed on this thread; the pid tells a stale copy after fork.
    static CACHED: Cell<(i32, i32)> = const { Cell::new((0, 0)) };
}

impl Writer {
    /// The calling thread's identity: `getpid()` and, unless this is the main thread,
    /// `gettid()`. One `getpid` syscall per call; the tid is cached per thread and per process.
    /// See getpid(2), gettid(2).
    pub fn current() -> Writer {
        let pid = rustix::process::getpid().as_raw_nonzero().get();
        CACHED.with(|cached| {
            let (seen_pid, tid) = cached.get();
            if seen_pid == pid {
                return Writer::new(pid, tid);
            }
            // First use on this thread, or the first after a fork (the child's thread-local
            // copy still holds the parent's pid).
            let kernel_tid = rustix::thread::gettid().as_raw_nonzero().get();
            let tid = if kernel_tid == pid { 0 } else { kernel_tid };
            cached.set((pid, tid));
            Writer::new(pid, tid)
        })
    }
}
