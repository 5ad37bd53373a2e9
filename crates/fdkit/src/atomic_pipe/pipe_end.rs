//! What both ends of an atomic pipe hold: the fd (until closed) and its blocking mode.

use super::wait::Wait;
use rustix::io::Errno;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// An owned fd and whether it is in non-blocking mode (read once, then kept in step).
#[derive(Debug, Default)]
pub(crate) struct PipeEnd {
    fd: Option<OwnedFd>,
    nonblocking: bool,
}

impl PipeEnd {
    /// Takes ownership of `fd`, reading `O_NONBLOCK` once.
    pub fn new(fd: OwnedFd) -> Result<Self, Errno> {
        let nonblocking = !crate::fd::get_blocking(fd.as_fd())?;
        Ok(PipeEnd {
            fd: Some(fd),
            nonblocking,
        })
    }

    /// The fd, or `EBADF` once closed.
    pub fn fd(&self) -> Result<BorrowedFd<'_>, Errno> {
        self.fd.as_ref().map(AsFd::as_fd).ok_or(Errno::BADF)
    }

    pub fn is_closed(&self) -> bool {
        self.fd.is_none()
    }

    pub fn is_blocking(&self) -> bool {
        !self.nonblocking
    }

    /// Sets or clears `O_NONBLOCK` on the fd. See fcntl(2).
    pub fn set_blocking(&mut self, blocking: bool) -> Result<(), Errno> {
        crate::fd::set_blocking(self.fd()?, blocking)?;
        self.nonblocking = !blocking;
        Ok(())
    }

    /// How long a call may wait when the caller does not say: forever on a blocking fd, not
    /// at all on a non-blocking one.
    pub fn default_wait(&self) -> Wait {
        if self.nonblocking {
            Wait::Never
        } else {
            Wait::Until(None)
        }
    }

    /// Whether a read/write must poll first: a blocking fd would sleep in the syscall past
    /// `wait`'s deadline.
    pub fn poll_first(&self, wait: Wait) -> bool {
        !self.nonblocking && !wait.is_forever()
    }

    /// Closes the fd (once; later calls do nothing).
    pub fn close(&mut self) -> Result<(), Errno> {
        self.fd.take().map_or(Ok(()), crate::fd::close)
    }
}
