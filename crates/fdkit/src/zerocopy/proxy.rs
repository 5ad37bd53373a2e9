//! `relay` (one direction, optionally recorded) and `proxy` (both directions) between sockets.

use super::engines::{self, Job, Step, CHECK_EVERY};
use super::kind::{fd_kind, FdKind};
use super::pool::PooledPipe;
use crate::fd::{get_blocking, set_blocking, SigpipeGuard};
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::Shutdown;
use rustix::pipe::SpliceFlags;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// Relays everything from `src` to `dst` until `src` ends, splicing through a pooled pipe, and
/// when `record` is given tees every chunk to it as well (the camera → client + recording
/// case). Falls back to read/write when splice is refused. Returns the bytes relayed.
/// See splice(2), tee(2).
pub fn relay(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    record: Option<BorrowedFd<'_>>,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<u64, Errno> {
    let (dst_kind, _) = fd_kind(dst)?;
    if let Some(rec) = record {
        // A bad recording fd must fail before a chunk is taken from the source and lost.
        fd_kind(rec)?;
    }
    // splice into a socket whose peer is gone raises SIGPIPE (there is no MSG_NOSIGNAL for
    // splice): hold it off on this thread while relaying.
    let _sigpipe = SigpipeGuard::if_needed();
    let mut job = Job {
        src,
        dst,
        dst_kind,
        remaining: None,
        src_off: None,
        dst_off: None,
        moved: 0,
        checkpoint,
    };
    match engines::splice_via_pipe(&mut job, record)? {
        Step::Done => Ok(job.moved),
        Step::Unsupported(..) if record.is_none() => {
            engines::read_write(&mut job)?;
            Ok(job.moved)
        }
        // Recording needs tee, which needs splice: without it, copy through memory to both.
        Step::Unsupported(..) => relay_by_copy(&mut job, record),
    }
}

fn relay_by_copy(job: &mut Job<'_>, record: Option<BorrowedFd<'_>>) -> Result<u64, Errno> {
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match rustix::io::read(job.src, &mut buf[..]) {
            Ok(0) => return Ok(job.moved),
            Ok(n) => n,
            Err(e) => {
                job.retry_read(e)?;
                continue;
            }
        };
        for fd in [Some(job.dst), record].into_iter().flatten() {
            engines::write_all(fd, None, &buf[..n], false, job.checkpoint)?;
        }
        job.moved += n as u64;
    }
}

/// One direction of a proxy: source socket → pipe → destination socket.
struct Direction<'a> {
    src: BorrowedFd<'a>,
    dst: BorrowedFd<'a>,
    pipe: PooledPipe,
    /// The source reached EOF.
    eof: bool,
    /// EOF was passed on with `shutdown(dst, SHUT_WR)`.
    closed: bool,
    moved: u64,
}

impl Direction<'_> {
    fn done(&self) -> bool {
        self.closed
    }

    fn wants(&self) -> (PollFlags, PollFlags) {
        if self.closed {
            (PollFlags::empty(), PollFlags::empty())
        } else if self.pipe.held() > 0 {
            (PollFlags::empty(), PollFlags::OUT)
        } else if !self.eof {
            (PollFlags::IN, PollFlags::empty())
        } else {
            (PollFlags::empty(), PollFlags::empty())
        }
    }

    /// Moves what it can without blocking; returns whether any byte moved.
    fn pump(&mut self) -> Result<bool, Errno> {
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        let mut progressed = false;
        loop {
            if self.pipe.held() == 0 && !self.eof {
                match self
                    .pipe
                    .pipe()
                    .read_from(self.src, None, self.pipe.capacity(), flags)
                {
                    Ok(0) => self.eof = true,
                    Ok(n) => {
                        self.pipe.filled(n);
                        progressed = true;
                    }
                    Err(Errno::AGAIN) => {}
                    Err(Errno::INTR) => continue,
                    Err(e) => return Err(e),
                }
            }
            if self.pipe.held() > 0 {
                match self
                    .pipe
                    .pipe()
                    .write_to(self.dst, None, self.pipe.held(), flags)
                {
                    Ok(n) => {
                        self.pipe.drained(n);
                        self.moved += n as u64;
                        progressed = true;
                        continue;
                    }
                    Err(Errno::AGAIN) => {}
                    Err(Errno::INTR) => continue,
                    Err(e) => return Err(e),
                }
            }
            if self.eof && self.pipe.held() == 0 && !self.closed {
                // Pass the half-close on; the other direction keeps going.
                match rustix::net::shutdown(self.dst, Shutdown::Write) {
                    Ok(()) | Err(Errno::NOTCONN) => {}
                    Err(e) => return Err(e),
                }
                self.closed = true;
            }
            return Ok(progressed);
        }
    }
}

/// Restores an fd's blocking mode when the proxy ends, however it ends.
struct RestoreBlocking<'a>(BorrowedFd<'a>, bool);

impl Drop for RestoreBlocking<'_> {
    fn drop(&mut self) {
        let _ = set_blocking(self.0, self.1);
    }
}

/// Relays both directions between two connected stream sockets until both have ended,
/// passing each half-close on with `shutdown(SHUT_WR)`. A reset or error on either side ends
/// both (the error is returned). `idle_timeout` ends the proxy with `ETIMEDOUT` after that
/// long without a byte moving. Both fds are switched to non-blocking for the duration and
/// restored after. Returns the bytes moved `(a → b, b → a)`. See splice(2), shutdown(2).
pub fn proxy(
    a: BorrowedFd<'_>,
    b: BorrowedFd<'_>,
    idle_timeout: Option<Duration>,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<(u64, u64), Errno> {
    for fd in [a, b] {
        if fd_kind(fd)?.0 != FdKind::Socket {
            return Err(Errno::NOTSOCK);
        }
    }
    let _sigpipe = SigpipeGuard::if_needed();
    let _restore_a = RestoreBlocking(a, get_blocking(a)?);
    let _restore_b = RestoreBlocking(b, get_blocking(b)?);
    set_blocking(a, false)?;
    set_blocking(b, false)?;
    let mut ab = Direction {
        src: a,
        dst: b,
        pipe: PooledPipe::get()?,
        eof: false,
        closed: false,
        moved: 0,
    };
    let mut ba = Direction {
        src: b,
        dst: a,
        pipe: PooledPipe::get()?,
        eof: false,
        closed: false,
        moved: 0,
    };
    let mut last_progress = Instant::now();
    let mut hung_up = [false; 2];
    loop {
        let before = ab.moved + ba.moved;
        let p1 = ab.pump()?;
        let p2 = ba.pump()?;
        if p1 || p2 {
            last_progress = Instant::now();
        }
        // Under continuous traffic poll never sees EINTR: give Ctrl-C its chance by volume.
        if before / CHECK_EVERY != (ab.moved + ba.moved) / CHECK_EVERY {
            checkpoint()?;
        }
        if ab.done() && ba.done() {
            return Ok((ab.moved, ba.moved));
        }
        let (ab_src, ab_dst) = ab.wants();
        let (ba_src, ba_dst) = ba.wants();
        // a is ab's source and ba's destination; b the other way round. A side nothing waits on
        // stays in the poll set (with no events) so that a reset on it is still seen; once it
        // has reported a plain hang-up it is left out, or poll would report that forever.
        let wanted = [ab_src | ba_dst, ba_src | ab_dst];
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(2);
        let mut sides: Vec<usize> = Vec::with_capacity(2);
        for (i, fd) in [a, b].into_iter().enumerate() {
            if !wanted[i].is_empty() || !hung_up[i] {
                fds.push(PollFd::from_borrowed_fd(fd, wanted[i]));
                sides.push(i);
            }
        }
        let wait = match idle_timeout {
            None => None,
            Some(t) => {
                let left = t.saturating_sub(last_progress.elapsed());
                if left.is_zero() {
                    return Err(Errno::TIMEDOUT);
                }
                Some(left)
            }
        };
        crate::fd::poll(&mut fds, wait, &mut *checkpoint)?;
        for (f, &i) in fds.iter().zip(&sides) {
            let got = f.revents();
            if got.contains(PollFlags::NVAL) {
                return Err(Errno::BADF);
            }
            if wanted[i].is_empty() {
                if got.contains(PollFlags::ERR) {
                    // A reset on a side nothing waits on (say, after its half-close).
                    rustix::net::sockopt::socket_error([a, b][i])??;
                    return Err(Errno::CONNRESET);
                }
                if got.contains(PollFlags::HUP) {
                    hung_up[i] = true;
                }
            }
        }
    }
}
