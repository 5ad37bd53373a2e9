//! `relay` (one direction, optionally recorded) and `proxy` (both directions) between sockets.

use super::copy_loops;
use super::job::{Job, Step, CHECK_EVERY};
use super::kind::{fd_kind, FdKind};
use super::pool::PooledPipe;
use crate::fd::{
    get_blocking, reset_connection, set_blocking, siocoutq, tcp_state, SigpipeGuard, TCP_CLOSE,
};
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::Shutdown;
use rustix::pipe::SpliceFlags;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

/// Relays everything from `src` to `dst` until `src` ends, splicing through a pooled pipe, and
/// when `record` is given tees every chunk to it as well (the camera → client + recording
/// case). Falls back to read/write when splice is refused. Returns the bytes relayed.
/// See splice(2), tee(2).
///
/// A reset is passed on as a reset: when the source's peer resets (`ECONNRESET` after its last
/// bytes), every byte read has already been written to `dst`; the relay waits (bounded, see
/// [`RESET_DRAIN_STALL`]) until `dst`'s peer has acknowledged them, then resets `dst`, so its
/// reader gets `ECONNRESET` rather than an end of file that would make a cut stream look
/// complete. When the destination's peer resets (`EPIPE`/`ECONNRESET` on write), the source
/// is reset at once. The error is returned either way. Only TCP sockets can be reset (see
/// [`crate::fd::reset_connection`]); a clean end of the source still returns `Ok`, with `dst`
/// untouched.
pub fn relay(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    record: Option<BorrowedFd<'_>>,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<u64, Errno> {
    match relay_inner(src, dst, record, checkpoint) {
        Err(e) if e != Errno::INTR => {
            // The error does not say which end failed: the socket the kernel has put in
            // TCP_CLOSE did (a reset). Neither (or not TCP): nothing to pass on.
            let dead = |fd| tcp_state(fd) == Ok(TCP_CLOSE);
            if dead(src) && !dead(dst) {
                let _ = wait_acknowledged(dst, RESET_DRAIN_STALL, checkpoint);
                let _ = reset_connection(dst);
            } else if dead(dst) && !dead(src) {
                let _ = reset_connection(src);
            }
            Err(e)
        }
        r => r,
    }
}

fn relay_inner(
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
        nonblocking: false,
        held: None,
    };
    match copy_loops::splice_via_pipe(&mut job, record)? {
        // A blocking job never stops at a side that would block.
        Step::Done | Step::Blocked(_) => Ok(job.moved),
        Step::Unsupported(..) if record.is_none() => {
            copy_loops::read_write(&mut job)?;
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
            copy_loops::write_all(fd, None, &buf[..n], false, job.checkpoint)?;
        }
        job.moved += n as u64;
    }
}

/// How long a reset waits without progress for the bytes ahead of it to reach the surviving
/// side's peer (delivered from the pipe, then acknowledged) before it resets that side anyway:
/// a reader that stopped reading must not hold the proxy forever. The bytes it did get are
/// then a prefix of the stream, followed by `ECONNRESET`.
pub const RESET_DRAIN_STALL: Duration = Duration::from_secs(2);

/// How often a reset that waits for acknowledgements looks at the send queue again (no poll
/// event says "acknowledged").
const ACK_POLL: Duration = Duration::from_millis(5);

/// Waits until the peer has acknowledged every byte written to `fd` (`SIOCOUTQ` is 0), the
/// socket fails, or the queue stops shrinking for `stall`. Not a TCP socket: returns at once.
fn wait_acknowledged(
    fd: BorrowedFd<'_>,
    stall: Duration,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<(), Errno> {
    let mut last = Instant::now();
    let mut queued = usize::MAX;
    loop {
        match siocoutq(fd) {
            Ok(0) | Err(_) => return Ok(()),
            Ok(n) if n < queued => {
                queued = n;
                last = Instant::now();
            }
            Ok(_) => {}
        }
        let left = stall.saturating_sub(last.elapsed());
        if left.is_zero() {
            return Ok(());
        }
        // No events: wakes early only for an error or hang-up on `fd`.
        let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::empty())];
        if crate::fd::poll(&mut fds, Some(left.min(ACK_POLL)), &mut *checkpoint)? > 0 {
            return Ok(());
        }
    }
}

/// Why a direction stopped before its source ended.
enum Broken {
    /// Reading the source failed: the source's side is gone.
    Source(Errno),
    /// Writing the destination failed: the destination's side is gone.
    Destination(Errno),
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
    /// The source's side was reset: its remaining bytes are delivered, a read error counts as
    /// its end, and the destination is reset afterwards rather than shut down.
    aborting: bool,
    moved: u64,
}

impl<'a> Direction<'a> {
    fn new(src: BorrowedFd<'a>, dst: BorrowedFd<'a>) -> Result<Self, Errno> {
        Ok(Direction {
            src,
            dst,
            pipe: PooledPipe::get()?,
            eof: false,
            closed: false,
            aborting: false,
            moved: 0,
        })
    }

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
    fn pump(&mut self) -> Result<bool, Broken> {
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
                    // Linux reports a reset once, after the bytes that arrived before it.
                    Err(_) if self.aborting => self.eof = true,
                    Err(e) => return Err(Broken::Source(e)),
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
                    Err(e) => return Err(Broken::Destination(e)),
                }
            }
            if self.eof && self.pipe.held() == 0 && !self.closed && !self.aborting {
                // Pass the half-close on; the other direction keeps going.
                match rustix::net::shutdown(self.dst, Shutdown::Write) {
                    Ok(()) | Err(Errno::NOTCONN) => {}
                    Err(e) => return Err(Broken::Destination(e)),
                }
                self.closed = true;
            }
            return Ok(progressed);
        }
    }

    /// The source's side was reset: delivers what it still holds (its kernel's last bytes and
    /// the pipe) to the destination, waits for the destination's peer to acknowledge them, then
    /// resets the destination. Gives up waiting after `stall` without progress; the
    /// destination failing too ends it at once. See [`RESET_DRAIN_STALL`].
    fn pass_reset_on(
        &mut self,
        stall: Duration,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        self.aborting = true;
        let mut last = Instant::now();
        let result = loop {
            match self.pump() {
                Ok(true) => last = Instant::now(),
                Ok(false) => {}
                Err(_) => break Ok(()),
            }
            if self.eof && self.pipe.held() == 0 {
                break wait_acknowledged(self.dst, stall, checkpoint);
            }
            let left = stall.saturating_sub(last.elapsed());
            if left.is_zero() {
                break Ok(());
            }
            let want = if self.pipe.held() > 0 {
                (self.dst, PollFlags::OUT)
            } else {
                (self.src, PollFlags::IN)
            };
            let mut fds = [PollFd::from_borrowed_fd(want.0, want.1)];
            if let Err(e) = crate::fd::poll(&mut fds, Some(left), &mut *checkpoint) {
                break Err(e);
            }
        };
        let _ = reset_connection(self.dst);
        result
    }
}

/// Restores an fd's blocking mode when the proxy ends, however it ends.
struct RestoreBlocking<'a>(BorrowedFd<'a>, bool);

impl Drop for RestoreBlocking<'_> {
    fn drop(&mut self) {
        let _ = set_blocking(self.0, self.1);
    }
}

/// `from_dead`'s source side failed with `e`: it finishes, then resets the survivor. Returns
/// the error for the caller; the checkpoint's own (Ctrl-C while delivering) wins over `e`.
fn abort(
    from_dead: &mut Direction<'_>,
    e: Errno,
    stall: Duration,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Errno {
    match from_dead.pass_reset_on(stall, checkpoint) {
        Err(Errno::INTR) => Errno::INTR,
        _ => e,
    }
}

/// `proxy(a, b, idle_timeout, checkpoint)`: relays both directions between two connected
/// stream sockets until both have ended, passing each half-close on.
///
/// The full form; [`proxy_all`] is the everyday one. Bytes move socket → pipe → socket with
/// splice and never enter userspace; each half-close is passed on with `shutdown(SHUT_WR)`.
///
/// A reset is passed on as a reset: when one side's peer resets (or fails otherwise), the
/// bytes that side's kernel still holds and the pipe's are delivered to the other side, then
/// the other side is reset (`SO_LINGER {1, 0}` and a disconnect, see
/// [`crate::fd::reset_connection`]), so its peer reads `ECONNRESET` after a prefix of the
/// stream instead of a clean end of file. The delivery waits at most [`RESET_DRAIN_STALL`]
/// (or `idle_timeout`, if shorter) without progress. The first error is returned; the caller
/// still owns and closes both fds. Unix stream sockets cannot be reset: their peer sees the end
/// of file when the caller closes them.
///
/// `idle_timeout` ends the proxy with `ETIMEDOUT` after that long without a byte moving. Both
/// fds are switched to non-blocking for the duration and restored after. `checkpoint` runs
/// after `EINTR` and every 64 MiB moved; its `Err` stops the proxy with that error. Returns
/// the bytes moved `(a → b, b → a)`.
///
/// # References
///  - [splice(2)](https://man7.org/linux/man-pages/man2/splice.2.html)
///  - [shutdown(2)](https://man7.org/linux/man-pages/man2/shutdown.2.html)
///  - [socket(7)](https://man7.org/linux/man-pages/man7/socket.7.html) (`SO_LINGER`)
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
    let mut ab = Direction::new(a, b)?;
    let mut ba = Direction::new(b, a)?;
    let stall = idle_timeout.map_or(RESET_DRAIN_STALL, |t| t.min(RESET_DRAIN_STALL));
    let mut last_progress = Instant::now();
    let mut hung_up = [false; 2];
    loop {
        let before = ab.moved + ba.moved;
        let p1 = match ab.pump() {
            Ok(p) => p,
            Err(Broken::Source(e)) => return Err(abort(&mut ab, e, stall, checkpoint)),
            Err(Broken::Destination(e)) => return Err(abort(&mut ba, e, stall, checkpoint)),
        };
        let p2 = match ba.pump() {
            Ok(p) => p,
            Err(Broken::Source(e)) => return Err(abort(&mut ba, e, stall, checkpoint)),
            Err(Broken::Destination(e)) => return Err(abort(&mut ab, e, stall, checkpoint)),
        };
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
        let mut reset = None;
        for (f, &i) in fds.iter().zip(&sides) {
            let got = f.revents();
            if got.contains(PollFlags::NVAL) {
                return Err(Errno::BADF);
            }
            if wanted[i].is_empty() {
                if got.contains(PollFlags::ERR) {
                    // A reset on a side nothing waits on (say, after its half-close, or while
                    // its direction's pipe waits for the other side).
                    let e = match rustix::net::sockopt::socket_error([a, b][i]) {
                        Ok(Ok(())) => Errno::CONNRESET,
                        Ok(Err(e)) | Err(e) => e,
                    };
                    reset = Some((i, e));
                    break;
                }
                if got.contains(PollFlags::HUP) {
                    hung_up[i] = true;
                }
            }
        }
        match reset {
            Some((0, e)) => return Err(abort(&mut ab, e, stall, checkpoint)),
            Some((_, e)) => return Err(abort(&mut ba, e, stall, checkpoint)),
            None => {}
        }
    }
}

/// `proxy_all(a, b)`: relays both directions between two connected stream sockets until
/// both have ended.
///
/// The simple form of [`proxy`]: no idle timeout, `EINTR` retried. Takes anything that lends
/// an fd (`&TcpStream`, `&UnixStream`, `&OwnedFd`, [`BorrowedFd`]). Returns the bytes moved
/// `(a → b, b → a)`.
///
/// # Example
///
/// Two socket pairs spliced together: what one end writes comes out at the other, and the
/// half-close travels too.
///
/// ```
/// use fdkit::zerocopy::proxy_all;
/// use std::io::{Read, Write};
/// use std::net::Shutdown;
/// use std::os::unix::net::UnixStream;
///
/// # fn main() -> std::io::Result<()> {
/// let (mut client, a) = UnixStream::pair()?;
/// let (b, mut server) = UnixStream::pair()?;
/// let relay = std::thread::spawn(move || proxy_all(&a, &b));
///
/// client.write_all(b"ping")?;
/// client.shutdown(Shutdown::Write)?;
/// let mut got = Vec::new();
/// server.read_to_end(&mut got)?; // ends: the client's half-close came through
/// assert_eq!(got, b"ping");
///
/// server.write_all(b"pong")?;
/// drop(server);
/// let mut back = Vec::new();
/// client.read_to_end(&mut back)?;
/// assert_eq!(back, b"pong");
///
/// assert_eq!(relay.join().unwrap()?, (4, 4));
/// # Ok(())
/// # }
/// ```
///
/// # References
///  - [splice(2)](https://man7.org/linux/man-pages/man2/splice.2.html)
///  - [shutdown(2)](https://man7.org/linux/man-pages/man2/shutdown.2.html)
pub fn proxy_all(a: impl AsFd, b: impl AsFd) -> Result<(u64, u64), Errno> {
    proxy(a.as_fd(), b.as_fd(), None, &mut crate::fd::no_checkpoint)
}
