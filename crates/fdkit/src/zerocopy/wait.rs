//! Waiting for the side that would block, never spinning.

use rustix::event::{PollFd, PollFlags};
use rustix::fs::{FileType, OFlags};
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

/// Whether a splice may sleep on this side that is not ready: a blocking fd that is no pipe
/// (`SPLICE_F_NONBLOCK` covers pipes) and is open for the way it is used (else the kernel
/// refuses at once with `EBADF`). Costs `fcntl(F_GETFL)` and maybe fstat(2): slow path only.
fn may_sleep(side: Side<'_>) -> Result<bool, Errno> {
    let flags = rustix::fs::fcntl_getfl(side.fd)?;
    if flags.contains(OFlags::NONBLOCK) {
        return Ok(false);
    }
    let access = flags & OFlags::RWMODE;
    let usable = match side.want {
        Want::Read => access != OFlags::WRONLY,
        Want::Write => access != OFlags::RDONLY,
    };
    if !usable {
        return Ok(false);
    }
    let st = rustix::fs::fstat(side.fd)?;
    Ok(FileType::from_raw_mode(st.st_mode) != FileType::Fifo)
}

/// Runs `op`, a splice(2) or tee(2) between `sides` issued with `SPLICE_F_NONBLOCK`, so that
/// it never sleeps in the kernel where `cancel` cannot reach it, and otherwise behaves as the
/// same call without that flag: errors the kernel reports at once still come at once; while
/// a side that would make the plain call wait is not ready, it is waited for with poll(2) in
/// slices of [`crate::fd::CANCEL_SLICE`], and the wait ends with `ECANCELED` once a `cancel`
/// flag is set; a non-blocking side that is not ready gives `EAGAIN`, as the plain call does.
/// Costs one zero-timeout poll(2) before `op` (more only on the slow path). `EINTR` goes to
/// `checkpoint`.
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
    let cancelled = || cancel.iter().any(|c| c.load(Ordering::SeqCst));
    loop {
        if cancelled() {
            return Err(Errno::CANCELED);
        }
        let mut fds = sides.map(|s| PollFd::from_borrowed_fd(s.fd, s.events()));
        crate::fd::poll(&mut fds, Some(Duration::ZERO), &mut *checkpoint)?;
        if fds.iter().any(|p| p.revents().contains(PollFlags::NVAL)) {
            return op(); // a bad fd: the kernel says EBADF at once
        }
        let not_ready: Vec<Side<'_>> = sides
            .iter()
            .zip(&fds)
            .filter(|(_, p)| p.revents().is_empty())
            .map(|(s, _)| *s)
            .collect();
        let mut sleeper = None;
        for side in &not_ready {
            if may_sleep(*side)? {
                sleeper = Some(*side);
                break;
            }
        }
        let wait_on = match sleeper {
            Some(side) => side,
            None => match op() {
                Err(Errno::AGAIN) => {
                    // Which side said EAGAIN: a blocking one makes the plain call wait.
                    let mut blocking = None;
                    for side in &not_ready {
                        if crate::fd::get_blocking(side.fd)? {
                            blocking = Some(*side);
                            break;
                        }
                    }
                    match (blocking, not_ready.is_empty()) {
                        (Some(side), _) => side,
                        // Ready a moment ago, taken by someone else since: look again.
                        (None, true) => continue,
                        (None, false) => return Err(Errno::AGAIN),
                    }
                }
                other => return other,
            },
        };
        // A slice at most, so that a set flag is seen within CANCEL_SLICE.
        let mut one = [PollFd::from_borrowed_fd(wait_on.fd, wait_on.events())];
        crate::fd::poll(&mut one, Some(crate::fd::cancel_slice()), &mut *checkpoint)?;
    }
}
