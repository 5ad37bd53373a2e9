//! The state one transfer carries from path to path ([`Job`]), how a path ends ([`Step`]),
//! and the side a non-blocking transfer waits on ([`WouldBlock`]): the types the copy loops
//! (`copy_loops.rs`), `transfer` and `proxy` share. This file imports none of those three, so
//! none of them needs another just for a type.

use super::held::Held;
use super::kind::FdKind;
use super::wait::{wait, Want};
use rustix::io::Errno;
use std::os::fd::BorrowedFd;

/// The side of a non-blocking transfer that would block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WouldBlock {
    /// The source has no data now: wait until it is readable.
    Read,
    /// The destination is full: wait until it is writable.
    Write,
}

impl WouldBlock {
    /// The name Python sees: `"read"` or `"write"`.
    pub fn name(self) -> &'static str {
        match self {
            WouldBlock::Read => "read",
            WouldBlock::Write => "write",
        }
    }
}

/// How one path ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The count was reached or the source ended.
    Done,
    /// The kernel refused this path for these fds (after moving what it could, all of which
    /// reached the destination): try the next one.
    Unsupported(Option<Errno>, &'static str),
    /// A non-blocking job met a side that would block. Bytes taken from the source and not yet
    /// delivered are in [`Job::held`].
    Blocked(WouldBlock),
}

/// The state of one transfer, shared by the paths it tries in turn.
pub struct Job<'a> {
    /// Where bytes come from.
    pub src: BorrowedFd<'a>,
    /// Where bytes go.
    pub dst: BorrowedFd<'a>,
    /// The destination's kind (a socket gets `MSG_NOSIGNAL` writes).
    pub dst_kind: FdKind,
    /// Bytes still to move; `None` moves until the source ends.
    pub remaining: Option<u64>,
    /// The source offset to read at (advancing), or `None` for the file position.
    pub src_off: Option<&'a mut u64>,
    /// The destination offset to write at (advancing), or `None` for the file position.
    pub dst_off: Option<&'a mut u64>,
    /// Bytes delivered to the destination so far.
    pub moved: u64,
    /// Called after `EINTR`, short transfers and waits; `Err` stops the transfer.
    pub checkpoint: &'a mut dyn FnMut() -> Result<(), Errno>,
    /// Return [`Step::Blocked`] where the job would wait with poll.
    pub nonblocking: bool,
    /// Bytes taken from the source but not delivered when a non-blocking job stopped.
    pub held: Option<Held>,
}

impl Job<'_> {
    pub(super) fn want(&self, cap: usize) -> usize {
        match self.remaining {
            Some(r) => r.min(cap as u64) as usize,
            None => cap,
        }
    }

    /// After a read-side `EAGAIN` (wait for data) or `EINTR` (run the checkpoint): `Ok` means
    /// retry the read. Any other errno comes back as the error.
    pub(super) fn retry_read(&mut self, e: Errno) -> Result<(), Errno> {
        match e {
            Errno::AGAIN => wait(self.src, Want::Read, None, self.checkpoint).map(drop),
            Errno::INTR => (self.checkpoint)(),
            e => Err(e),
        }
    }

    pub(super) fn finished(&self) -> bool {
        self.remaining == Some(0)
    }

    /// Counts `n` bytes delivered, and runs the checkpoint every [`CHECK_EVERY`] bytes: a
    /// transfer whose syscalls never block or come up short (`/dev/zero` to `/dev/null`)
    /// would otherwise never give Ctrl-C a chance.
    pub(super) fn delivered(&mut self, n: usize) -> Result<(), Errno> {
        let before = self.moved;
        self.moved += n as u64;
        if let Some(r) = self.remaining.as_mut() {
            *r -= n as u64;
        }
        if before / CHECK_EVERY != self.moved / CHECK_EVERY {
            (self.checkpoint)()?;
        }
        Ok(())
    }
}

/// Bytes between two checkpoints on a transfer that never waits (a few ms of copying).
pub(super) const CHECK_EVERY: u64 = 64 << 20;

/// The errnos that mean "this path does not work for these fds" rather than "this transfer
/// failed": each kernel call uses them for fd kinds, filesystems or flags it cannot handle.
pub(super) fn refused(e: Errno) -> bool {
    matches!(
        e,
        Errno::NOSYS | Errno::INVAL | Errno::XDEV | Errno::OPNOTSUPP | Errno::BADF | Errno::PERM
    )
}
