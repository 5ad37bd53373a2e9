//! What both ends of an atomic pipe hold: the fd (until closed), its blocking mode, and the
//! flag through which an owner's close ends a wait from another thread.

use super::wait::{wait_for, Wait};
use rustix::event::PollFlags;
use rustix::fs::FileType;
use rustix::io::{Errno, ReadWriteFlags};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// An owned fd and whether it is in non-blocking mode (read once, then kept in step).
///
/// Cancellation ([`set_cancel`](Self::set_cancel)): a blocking fd would sleep in read(2) or
/// write(2) where no flag can reach it, so once a cancel flag is set an end never sleeps in
/// the kernel outside poll(2): pipes, FIFOs and sockets are read and written with
/// `RWF_NOWAIT` (preadv2(2)/pwritev2(2): the same syscall count, `EAGAIN` instead of
/// sleeping), then wait in a cancellable poll; other fds (or kernels without `RWF_NOWAIT` for
/// them) poll first.
#[derive(Debug)]
pub(crate) struct PipeEnd {
    fd: Option<OwnedFd>,
    nonblocking: bool,
    cancel: Option<Arc<AtomicBool>>,
    /// Whether a wait forever on a blocking fd must stay cancellable (see `set_cancel_waits`).
    cancel_waits: bool,
    /// Whether `RWF_NOWAIT` is worth trying: a pipe, FIFO or socket, until the kernel refuses.
    nowait: bool,
}

impl Default for PipeEnd {
    fn default() -> Self {
        PipeEnd {
            fd: None,
            nonblocking: false,
            cancel: None,
            cancel_waits: true,
            nowait: false,
        }
    }
}

/// Errors that say `RWF_NOWAIT` (or preadv2 itself) is not supported for this fd.
fn nowait_refused(e: Errno) -> bool {
    e == Errno::OPNOTSUPP || e == Errno::NOSYS || e == Errno::INVAL
}

impl PipeEnd {
    /// Takes ownership of `fd`, reading `O_NONBLOCK` once.
    pub fn new(fd: OwnedFd) -> Result<Self, Errno> {
        let nonblocking = !crate::fd::get_blocking(fd.as_fd())?;
        // Only where poll(2) and RWF_NOWAIT agree on "would block" (a regular file may say
        // EAGAIN for RWF_NOWAIT while poll says ready).
        let nowait = rustix::fs::fstat(&fd).is_ok_and(|st| {
            matches!(
                FileType::from_raw_mode(st.st_mode),
                FileType::Fifo | FileType::Socket
            )
        });
        Ok(PipeEnd {
            fd: Some(fd),
            nonblocking,
            cancel: None,
            cancel_waits: true,
            nowait,
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

    /// Sets (or clears) the flag that ends this end's waits with `ECANCELED`.
    pub fn set_cancel(&mut self, cancel: Option<Arc<AtomicBool>>) {
        self.cancel = cancel;
    }

    /// Whether a wait forever on a blocking fd must stay cancellable (`RWF_NOWAIT`, then a
    /// cancellable poll: a poll and a read per wake-up) or may sleep in read(2)/write(2) (one
    /// syscall): an owner that knows nobody can cancel during the call (no other thread)
    /// turns it off for that call. Waits with a deadline stay cancellable either way.
    pub fn set_cancel_waits(&mut self, on: bool) {
        self.cancel_waits = on;
    }

    fn cancellable(&self) -> bool {
        self.cancel.is_some() && self.cancel_waits
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

    /// Whether the next read/write is issued with `RWF_NOWAIT`: a blocking fd that must not
    /// sleep in the syscall (a cancel flag is set) and supports it.
    pub fn nowait(&self, wait: Wait) -> bool {
        !self.nonblocking && self.nowait && self.cancellable() && wait.is_forever()
    }

    /// Whether a plain read/write must poll first: a blocking fd would sleep in the syscall
    /// past `wait`'s deadline, or past a cancellation.
    pub fn poll_first(&self, wait: Wait) -> bool {
        !self.nonblocking && (!wait.is_forever() || self.cancellable())
    }

    /// Polls the fd for `events` within `wait`, ending with `ECANCELED` once cancelled.
    pub fn wait_for(
        &self,
        events: PollFlags,
        wait: Wait,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<bool, Errno> {
        wait_for(self.fd()?, events, wait, self.cancel.as_deref(), checkpoint)
    }

    /// `read(2)`, or `preadv2(RWF_NOWAIT)` when `nowait`. A refused `RWF_NOWAIT` turns it off
    /// for this end and reports `EAGAIN` (the caller polls, then reads plainly).
    pub fn read(&mut self, buf: &mut [u8], nowait: bool) -> Result<usize, Errno> {
        let fd = self.fd()?;
        if !nowait {
            return rustix::io::read(fd, buf);
        }
        let r = rustix::io::preadv2(
            fd,
            &mut [IoSliceMut::new(buf)],
            u64::MAX,
            ReadWriteFlags::NOWAIT,
        );
        match r {
            Err(e) if nowait_refused(e) => {
                self.nowait = false;
                Err(Errno::AGAIN)
            }
            other => other,
        }
    }

    /// `write(2)`, or `pwritev2(RWF_NOWAIT)` when `nowait` (one buffer of at most `PIPE_BUF`
    /// stays one atomic write). A refused `RWF_NOWAIT` turns it off for this end and reports
    /// `EAGAIN`.
    pub fn write(&mut self, buf: &[u8], nowait: bool) -> Result<usize, Errno> {
        let fd = self.fd()?;
        if !nowait {
            return rustix::io::write(fd, buf);
        }
        match rustix::io::pwritev2(fd, &[IoSlice::new(buf)], u64::MAX, ReadWriteFlags::NOWAIT) {
            Err(e) if nowait_refused(e) => {
                self.nowait = false;
                Err(Errno::AGAIN)
            }
            other => other,
        }
    }

    /// Closes the fd (once; later calls do nothing).
    pub fn close(&mut self) -> Result<(), Errno> {
        self.fd.take().map_or(Ok(()), crate::fd::close)
    }
}
