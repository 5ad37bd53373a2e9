//! How long a read or write may wait for the pipe, and the poll(2) that does the waiting.

use crate::fd::poll_cancellable;
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use std::os::fd::BorrowedFd;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// How long a call may wait for the pipe to become ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Not at all: return what can be done now (a non-blocking caller).
    Never,
    /// Until the deadline (`None`: as long as it takes).
    Until(Option<Instant>),
}

impl Wait {
    /// Waits at most `timeout` from now (`None`: forever).
    pub fn timeout(timeout: Option<Duration>) -> Wait {
        // A deadline past what Instant can hold is as good as forever.
        Wait::Until(timeout.and_then(|t| Instant::now().checked_add(t)))
    }

    /// Whether a blocking `read`/`write` may be issued straight away: only when waiting
    /// forever (a deadline needs poll first, a blocking fd would ignore it).
    pub(crate) fn is_forever(self) -> bool {
        self == Wait::Until(None)
    }
}

/// Polls `fd` for `events` within `wait`: `Ok(true)` when ready (or in error/hang-up, which the
/// next read or write reports), `Ok(false)` when the time is up or `wait` is [`Wait::Never`].
/// `checkpoint` runs on `EINTR` (see [`crate::fd::poll`]); `cancel` set by another thread ends
/// the wait with `ECANCELED` (see [`crate::fd::poll_cancellable`]). See poll(2).
pub(crate) fn wait_for(
    fd: BorrowedFd<'_>,
    events: PollFlags,
    wait: Wait,
    cancel: Option<&AtomicBool>,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<bool, Errno> {
    let timeout = match wait {
        Wait::Never => return Ok(false),
        Wait::Until(None) => None,
        Wait::Until(Some(deadline)) => Some(deadline.saturating_duration_since(Instant::now())),
    };
    let mut fds = [PollFd::from_borrowed_fd(fd, events)];
    Ok(poll_cancellable(&mut fds, timeout, cancel, checkpoint)? > 0)
}
