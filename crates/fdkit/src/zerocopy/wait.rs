//! Waiting for the side that would block, never spinning.

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Which way an fd is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Waiting for data to read.
    Read,
    /// Waiting for room to write.
    Write,
}

/// `poll` on one fd until it is ready for `want` (or reports an error or hang-up, which the
/// next syscall will then return). `EINTR` goes to `checkpoint`. See poll(2).
pub fn wait(
    fd: BorrowedFd<'_>,
    want: Want,
    timeout: Option<Duration>,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<bool, Errno> {
    let events = match want {
        Want::Read => PollFlags::IN,
        Want::Write => PollFlags::OUT,
    };
    let mut fds = [PollFd::from_borrowed_fd(fd, events)];
    let n = crate::fd::poll(&mut fds, timeout, &mut *checkpoint)?;
    Ok(n > 0)
}

/// After an `EAGAIN` on a call that both reads `src` and writes `dst` (a direct splice), finds
/// out which side is not ready and waits for that one: a full destination must not be mistaken
/// for an empty source.
pub fn wait_either(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<(), Errno> {
    let mut fds = [
        PollFd::from_borrowed_fd(src, PollFlags::IN),
        PollFd::from_borrowed_fd(dst, PollFlags::OUT),
    ];
    crate::fd::poll(&mut fds, Some(Duration::ZERO), &mut *checkpoint)?;
    let src_ready = !fds[0].revents().is_empty();
    let dst_ready = !fds[1].revents().is_empty();
    match (src_ready, dst_ready) {
        (false, _) => wait(src, Want::Read, None, checkpoint).map(drop),
        (true, false) => wait(dst, Want::Write, None, checkpoint).map(drop),
        // Both ready by now: the state changed since the EAGAIN; just retry.
        (true, true) => Ok(()),
    }
}

/// One side of a splice or tee: an fd and which way the call uses it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Side<'a> {
    /// The fd.
    pub fd: BorrowedFd<'a>,
    /// Read from (`Want::Read`) or written to (`Want::Write`).
    pub want: Want,
}

impl Side<'_> {
    fn events(self) -> PollFlags {
        match self.want {
            Want::Read => PollFlags::IN,
            Want::Write => PollFlags::OUT,
        }
    }
}

/// Runs `op`, a splice(2) or tee(2) between `sides` issued with `SPLICE_F_NONBLOCK`, so that
/// it never sleeps in the kernel where `cancel` cannot reach it, and otherwise behaves as the
/// same call without that flag: while a side is not ready, a blocking side is waited for with
/// poll(2) in slices that end with `ECANCELED` once a `cancel` flag is set (within
/// [`crate::fd::CANCEL_SLICE`]); when only non-blocking sides are not ready, `op` runs and
/// reports `EAGAIN` as the plain call would. Costs one zero-timeout poll(2) before `op` (and
/// `fcntl(F_GETFL)` only when a side is not ready). `EINTR` goes to `checkpoint`.
///
/// Why not just the syscall: `SPLICE_F_NONBLOCK` covers only the pipe sides (a TCP socket
/// without `O_NONBLOCK` still sleeps in a splice), and a sleeping syscall cannot be woken by
/// another thread's close. See splice(2), tee(2), poll(2).
pub(crate) fn splice_cancellable(
    sides: [Side<'_>; 2],
    cancel: &[&AtomicBool],
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    mut op: impl FnMut() -> Result<usize, Errno>,
) -> Result<usize, Errno> {
    'again: loop {
        let cancelled = || cancel.iter().any(|c| c.load(Ordering::SeqCst));
        if cancelled() {
            return Err(Errno::CANCELED);
        }
        let mut fds = sides.map(|s| PollFd::from_borrowed_fd(s.fd, s.events()));
        crate::fd::poll(&mut fds, Some(Duration::ZERO), &mut *checkpoint)?;
        let ready = [!fds[0].revents().is_empty(), !fds[1].revents().is_empty()];
        for (side, _) in sides.iter().zip(ready).filter(|(_, r)| !r) {
            if crate::fd::get_blocking(side.fd)? {
                // Slices, so that a set flag is seen within CANCEL_SLICE.
                let mut one = [PollFd::from_borrowed_fd(side.fd, side.events())];
                crate::fd::poll(&mut one, Some(crate::fd::CANCEL_SLICE), &mut *checkpoint)?;
                continue 'again;
            }
        }
        let waiting = ready.contains(&false);
        match op() {
            // Ready a moment ago, taken by someone else since: wait again.
            Err(Errno::AGAIN) if !waiting => continue,
            other => return other,
        }
    }
}
