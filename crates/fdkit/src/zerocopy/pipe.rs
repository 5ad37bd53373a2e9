//! A pipe pair as a value: splice into it, out of it, and tee it to other pipes. The run-to-end
//! transfers and the standing tee are in `pipe_stream`.

use super::wait::{splice_cancellable, Side, Want};
use crate::fd::{pipe_size, set_pipe_size, set_pipe_size_or_max};
use rustix::io::Errno;
use rustix::pipe::{pipe_with, splice, tee};
use rustix::pipe::{PipeFlags, SpliceFlags};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// Both ends of a pipe. Dropping it closes both.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// [`close_write`](Pipe::close_write) ran: `write` now leads to a pipe nobody reads.
    write_closed: AtomicBool,
}

impl Pipe {
    /// `pipe2(flags | O_CLOEXEC)`. Pass `PipeFlags::NONBLOCK` for a pipe whose splices must
    /// never wait on the pipe itself. See pipe(2).
    pub fn new(flags: PipeFlags) -> Result<Pipe, Errno> {
        let (read, write) = pipe_with(flags | PipeFlags::CLOEXEC)?;
        Ok(Pipe {
            read,
            write,
            write_closed: AtomicBool::new(false),
        })
    }

    /// Half-close: the pipe loses its writer, so once it is drained its reader sees end of
    /// file (a splice out returns 0), while the read end stays open. The write end's fd number
    /// is atomically pointed (`dup3(2)`) at a pipe nobody reads, so a call racing with this one
    /// never touches a number given back to the kernel: writes through it fail with `EPIPE`.
    /// Other processes holding a duplicate of the write end still keep the pipe open.
    /// Closing twice is harmless. See pipe(7).
    pub fn close_write(&self) -> Result<(), Errno> {
        if self.write_closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let (dead_read, dead_write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)
            .inspect_err(|_| self.write_closed.store(false, Ordering::SeqCst))?;
        drop(dead_read);
        crate::fd::dup3(
            dead_write.as_fd(),
            self.write.as_raw_fd(),
            rustix::io::DupFlags::CLOEXEC,
        )
        .inspect_err(|_| self.write_closed.store(false, Ordering::SeqCst))?;
        Ok(())
    }

    /// Whether [`close_write`](Self::close_write) ran.
    pub fn is_write_closed(&self) -> bool {
        self.write_closed.load(Ordering::SeqCst)
    }

    /// The read end.
    pub fn read_end(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// The write end.
    pub fn write_end(&self) -> BorrowedFd<'_> {
        self.write.as_fd()
    }

    /// Takes both ends out (read, write), for a caller that owns them from now on.
    pub fn into_fds(self) -> (OwnedFd, OwnedFd) {
        (self.read, self.write)
    }

    /// `fcntl(F_GETPIPE_SZ)`: the capacity in bytes. See pipe(7).
    pub fn size(&self) -> Result<usize, Errno> {
        pipe_size(&self.read)
    }

    /// `fcntl(F_SETPIPE_SZ)`: asks for `size` bytes; the kernel rounds up to a power-of-two
    /// number of pages and returns what it set. `EPERM` above `pipe-max-size` without
    /// CAP_SYS_RESOURCE; `EBUSY` when the pipe holds more than `size`. See pipe(7).
    pub fn resize(&self, size: usize) -> Result<usize, Errno> {
        set_pipe_size(&self.read, size)
    }

    /// Resizes to `size`, or to `pipe-max-size` when `size` is above what is allowed; returns
    /// the size set. An `EPERM` at the maximum too (a per-user page budget exhausted) leaves
    /// the pipe as it was and returns its current size: a smaller pipe still works.
    pub fn resize_or_max(&self, size: usize) -> Result<usize, Errno> {
        set_pipe_size_or_max(&self.read, size)
    }

    /// `ioctl(FIONREAD)`: bytes waiting in the pipe. See pipe(7).
    pub fn pending(&self) -> Result<usize, Errno> {
        rustix::io::ioctl_fionread(&self.read).map(|n| n as usize)
    }

    /// `splice(fd → pipe)`: moves up to `n` bytes from `fd` (at `offset` when given, which then
    /// advances) into the pipe. 0 means end of input. See splice(2).
    pub fn read_from(
        &self,
        fd: BorrowedFd<'_>,
        offset: Option<&mut u64>,
        n: usize,
        flags: SpliceFlags,
    ) -> Result<usize, Errno> {
        splice(fd, offset, &self.write, None, n, flags)
    }

    /// `splice(pipe → fd)`: moves up to `n` bytes out of the pipe into `fd`. See splice(2).
    pub fn write_to(
        &self,
        fd: BorrowedFd<'_>,
        offset: Option<&mut u64>,
        n: usize,
        flags: SpliceFlags,
    ) -> Result<usize, Errno> {
        splice(&self.read, None, fd, offset, n, flags)
    }

    /// `tee(pipe → other)`: duplicates up to `n` bytes into `other` without consuming them
    /// here. See tee(2).
    pub fn tee(&self, other: &Pipe, n: usize, flags: SpliceFlags) -> Result<usize, Errno> {
        tee(&self.read, &other.write, n, flags)
    }
}

/// The same calls, cancellable from another thread: each waits (when a side is not ready) in
/// poll(2) slices that end with `ECANCELED` once a `cancel` flag is set, never asleep in splice(2)
/// itself, and otherwise behaves like its plain counterpart (see
/// `wait::splice_cancellable`). For owners that may be closed while a call waits.
impl Pipe {
    /// [`read_from`](Self::read_from), cancellable.
    pub fn read_from_cancellable(
        &self,
        fd: BorrowedFd<'_>,
        offset: Option<&mut u64>,
        n: usize,
        flags: SpliceFlags,
        cancel: &[&AtomicBool],
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<usize, Errno> {
        let ends = [(fd, offset), (self.write.as_fd(), None)];
        splice_waiting(ends, n, flags, cancel, checkpoint)
    }

    /// [`write_to`](Self::write_to), cancellable.
    pub fn write_to_cancellable(
        &self,
        fd: BorrowedFd<'_>,
        offset: Option<&mut u64>,
        n: usize,
        flags: SpliceFlags,
        cancel: &[&AtomicBool],
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<usize, Errno> {
        let ends = [(self.read.as_fd(), None), (fd, offset)];
        splice_waiting(ends, n, flags, cancel, checkpoint)
    }

    /// [`tee`](Self::tee), cancellable.
    pub fn tee_cancellable(
        &self,
        other: &Pipe,
        n: usize,
        flags: SpliceFlags,
        cancel: &[&AtomicBool],
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<usize, Errno> {
        let sides = [
            Side {
                fd: self.read.as_fd(),
                want: Want::Read,
            },
            Side {
                fd: other.write.as_fd(),
                want: Want::Write,
            },
        ];
        if n == 0 {
            return self.tee(other, 0, flags); // never waits
        }
        splice_cancellable(sides, cancel, checkpoint, || {
            tee(&self.read, &other.write, n, flags | SpliceFlags::NONBLOCK)
        })
    }
}

/// splice(2) of up to `n` bytes from `ends[0]` to `ends[1]` (each an fd and the offset to read
/// or write it at, which advances), waiting in cancellable poll(2) slices while a side is not
/// ready. `n == 0` never waits: it is the plain call.
fn splice_waiting(
    ends: [(BorrowedFd<'_>, Option<&mut u64>); 2],
    n: usize,
    flags: SpliceFlags,
    cancel: &[&AtomicBool],
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<usize, Errno> {
    let [(from, mut from_off), (to, mut to_off)] = ends;
    if n == 0 {
        return splice(from, from_off, to, to_off, 0, flags);
    }
    let sides = [
        Side {
            fd: from,
            want: Want::Read,
        },
        Side {
            fd: to,
            want: Want::Write,
        },
    ];
    splice_cancellable(sides, cancel, checkpoint, || {
        splice(
            from,
            from_off.as_deref_mut(),
            to,
            to_off.as_deref_mut(),
            n,
            flags | SpliceFlags::NONBLOCK,
        )
    })
}
