//! Who is writing: the (pid, tid) pair every chunk header carries.
//!
//! Perl's Atomic::Pipe writes `$$` and `threads->tid` (0 when unthreaded). fdkit writes the
//! process id at write time (so a forked child is told apart from its parent) and 0 on a
//! process's main thread, the kernel thread id on any other thread: distinct per live thread,
//! and the main thread reads exactly as an unthreaded Perl writer does.

use super::wire::Writer;
use crate::fd::fork_generation;
use std::cell::Cell;

thread_local! {
    /// This thread's identity and the fork generation it was computed in: a forked child's
    /// copy is stale (its pid is the parent's) and is recomputed.
    static CACHED: Cell<Option<(u64, Writer)>> = const { Cell::new(None) };
}

impl Writer {
    /// The calling thread's identity: `getpid()` and, unless this is the main thread,
    /// `gettid()`. Both are asked once per thread and per process (after a fork, again): a
    /// message per call costs no identity syscall. See getpid(2), gettid(2).
    pub fn current() -> Writer {
        let generation = fork_generation();
        CACHED.with(|cached| match cached.get() {
            Some((seen, writer)) if seen == generation => writer,
            _ => {
                let pid = rustix::process::getpid().as_raw_nonzero().get();
                let kernel_tid = rustix::thread::gettid().as_raw_nonzero().get();
                let tid = if kernel_tid == pid { 0 } else { kernel_tid };
                let writer = Writer::new(pid, tid);
                cached.set(Some((generation, writer)));
                writer
            }
        })
    }
}
