//! Waiting for the side that would block, never spinning.

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use std::os::fd::BorrowedFd;
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
