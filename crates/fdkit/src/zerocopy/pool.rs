//! A bounded pool of internal pipes for splicing between two non-pipe fds.
//!
//! Creating a pipe and raising it to 1 MiB costs three syscalls; a transfer that splices
//! through one should not pay that every call. The pool keeps at most [`POOL_CAPACITY`] idle
//! pipes. A pipe goes back only empty (a pipe holding bytes from a failed transfer would leak
//! them into the next one): [`PooledPipe`] counts what went in and out and closes the pipe
//! instead when the count is not zero. When no pipe can be had (`EMFILE`, `ENFILE`, the
//! kernel's pipe budget), [`PooledPipe::get`] says so and the caller degrades to read/write.

use super::pipe::Pipe;
use rustix::io::Errno;
use rustix::pipe::PipeFlags;
use std::sync::Mutex;

/// Idle pipes kept for reuse.
pub const POOL_CAPACITY: usize = 16;
/// The size pooled pipes are raised toward (the kernel may allow less).
pub const POOL_PIPE_SIZE: usize = 1 << 20;

/// Idle pipes with their capacity (kept so a reused pipe costs no `F_GETPIPE_SZ`).
static IDLE: Mutex<Vec<(Pipe, usize)>> = Mutex::new(Vec::new());

/// How many idle pipes the pool holds now.
pub fn pool_idle() -> usize {
    IDLE.lock().map(|v| v.len()).unwrap_or(0)
}

/// Closes every idle pipe; returns how many (`pool_clear`, in `held.rs`, also closes the
/// parked pipes whose fds were closed: it lives there because the parked bytes sit above the
/// pool).
pub(super) fn close_idle() -> usize {
    IDLE.lock().map(|mut v| v.drain(..).count()).unwrap_or(0)
}

/// A non-blocking pipe on loan from the pool; it tracks the bytes it holds.
#[derive(Debug)]
pub struct PooledPipe {
    pipe: Option<Pipe>,
    held: usize,
    capacity: usize,
}

impl PooledPipe {
    /// An idle pipe from the pool, or a new one raised toward [`POOL_PIPE_SIZE`]. `Err` when
    /// the process or system is out of fds or pipes: the caller falls back to read/write.
    pub fn get() -> Result<PooledPipe, Errno> {
        let reused = IDLE.lock().ok().and_then(|mut v| v.pop());
        let (pipe, capacity) = match reused {
            Some(idle) => idle,
            None => {
                let p = Pipe::new(PipeFlags::NONBLOCK)?;
                // EPERM (over pipe-max-size or the per-user budget) keeps the default size.
                let capacity = match p.resize_or_max(POOL_PIPE_SIZE) {
                    Ok(size) => size,
                    Err(_) => p.size()?,
                };
                (p, capacity)
            }
        };
        Ok(PooledPipe {
            pipe: Some(pipe),
            held: 0,
            capacity,
        })
    }

    /// The pipe.
    pub fn pipe(&self) -> &Pipe {
        self.pipe
            .as_ref()
            .expect("a PooledPipe holds its pipe until dropped")
    }

    /// Its capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes the pipe holds now (spliced in, not yet out).
    pub fn held(&self) -> usize {
        self.held
    }

    /// Records `n` bytes spliced in.
    pub fn filled(&mut self, n: usize) {
        self.held += n;
    }

    /// Records `n` bytes spliced or read out.
    pub fn drained(&mut self, n: usize) {
        self.held = self.held.saturating_sub(n);
    }
}

impl Drop for PooledPipe {
    fn drop(&mut self) {
        let Some(pipe) = self.pipe.take() else { return };
        // Only an empty pipe goes back. Every splice in and out is counted, so `held` is exact;
        // debug builds (the tests) confirm it with FIONREAD, release builds spare the syscall.
        if self.held != 0 {
            return;
        }
        debug_assert_eq!(pipe.pending(), Ok(0), "a pooled pipe's byte count drifted");
        if let Ok(mut idle) = IDLE.lock() {
            if idle.len() < POOL_CAPACITY {
                idle.push((pipe, self.capacity));
            }
        }
    }
}
