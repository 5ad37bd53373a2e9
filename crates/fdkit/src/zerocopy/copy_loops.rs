//! The copy loops, one per kernel path. Each moves bytes until the count is reached or the
//! source ends, waits with poll on the side that would block (or, for a non-blocking job,
//! returns [`Step::Blocked`] at once), and reports a path the kernel refuses for these fds as
//! [`Step::Unsupported`] so `transfer` can take the next one.

use super::held::Held;
use super::job::{refused, Job, Step, WouldBlock};
use super::kind::FdKind;
use super::pool::PooledPipe;
use super::wait::{wait, wait_either, Want};
use crate::fd::MAX_RW_COUNT;
use rustix::io::Errno;
use rustix::net::SendFlags;
use rustix::pipe::SpliceFlags;
use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;

/// A zero from copy_file_range or sendfile is only end-of-file if the file has no bytes left;
/// procfs, sysfs and some FUSE files report 0 although data exists.
fn zero_is_eof(job: &Job<'_>) -> bool {
    let pos = match job.src_off.as_deref() {
        Some(&off) => off,
        None => match rustix::fs::seek(job.src, rustix::fs::SeekFrom::Current(0)) {
            Ok(p) => p,
            Err(_) => return true,
        },
    };
    match rustix::fs::fstat(job.src) {
        Ok(st) => pos >= st.st_size as u64,
        Err(_) => true,
    }
}

/// `copy_file_range(2)` between two files: the filesystem may share extents (reflink) or copy
/// inside the kernel.
pub fn copy_file_range(job: &mut Job<'_>) -> Result<Step, Errno> {
    while !job.finished() {
        let want = job.want(MAX_RW_COUNT);
        match rustix::fs::copy_file_range(
            job.src,
            job.src_off.as_deref_mut(),
            job.dst,
            job.dst_off.as_deref_mut(),
            want,
        ) {
            Ok(0) if zero_is_eof(job) => return Ok(Step::Done),
            Ok(0) => {
                return Ok(Step::Unsupported(
                    None,
                    "returned 0 before the end of the file",
                ))
            }
            Ok(n) => job.delivered(n)?,
            Err(Errno::INTR) => (job.checkpoint)()?,
            Err(e) if refused(e) => return Ok(Step::Unsupported(Some(e), "refused by the kernel")),
            Err(e) => return Err(e),
        }
    }
    Ok(Step::Done)
}

/// `sendfile(2)` from a file (or block device) to anything, socket first of all.
pub fn sendfile(job: &mut Job<'_>) -> Result<Step, Errno> {
    if job.dst_off.is_some() {
        return Ok(Step::Unsupported(
            None,
            "sendfile cannot write at an offset",
        ));
    }
    while !job.finished() {
        let want = job.want(MAX_RW_COUNT);
        match rustix::fs::sendfile(job.dst, job.src, job.src_off.as_deref_mut(), want) {
            Ok(0) if zero_is_eof(job) => return Ok(Step::Done),
            Ok(0) => {
                return Ok(Step::Unsupported(
                    None,
                    "returned 0 before the end of the file",
                ))
            }
            Ok(n) => {
                job.delivered(n)?;
                if n < want {
                    (job.checkpoint)()?;
                }
            }
            Err(Errno::AGAIN) if job.nonblocking => return Ok(Step::Blocked(WouldBlock::Write)),
            Err(Errno::AGAIN) => {
                wait(job.dst, Want::Write, None, job.checkpoint)?;
            }
            Err(Errno::INTR) => (job.checkpoint)()?,
            Err(e) if refused(e) => return Ok(Step::Unsupported(Some(e), "refused by the kernel")),
            Err(e) => return Err(e),
        }
    }
    Ok(Step::Done)
}

/// `splice(2)` straight from `src` to `dst`, one of which is a pipe.
pub fn splice_direct(job: &mut Job<'_>) -> Result<Step, Errno> {
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    // Non-blocking: EAGAINs in a row while poll says both sides are ready.
    let mut races = 0;
    while !job.finished() {
        let want = job.want(MAX_RW_COUNT);
        match rustix::pipe::splice(
            job.src,
            job.src_off.as_deref_mut(),
            job.dst,
            job.dst_off.as_deref_mut(),
            want,
            flags,
        ) {
            Ok(0) => return Ok(Step::Done),
            Ok(n) => job.delivered(n)?,
            // With SPLICE_F_NONBLOCK an empty source pipe or a full destination pipe (or a
            // non-blocking socket/file side) says EAGAIN: find which one and wait for it.
            Err(Errno::AGAIN) if job.nonblocking => {
                match which_blocks(job.src, job.dst, job.checkpoint)? {
                    Some(side) => return Ok(Step::Blocked(side)),
                    // Both ready by now: retry, but never spin on a disagreement.
                    None if races < 3 => races += 1,
                    None => return Ok(Step::Blocked(WouldBlock::Write)),
                }
            }
            Err(Errno::AGAIN) => wait_either(job.src, job.dst, job.checkpoint)?,
            Err(Errno::INTR) => (job.checkpoint)()?,
            Err(e) if refused(e) => return Ok(Step::Unsupported(Some(e), "refused by the kernel")),
            Err(e) => return Err(e),
        }
    }
    Ok(Step::Done)
}

/// `splice(2)` through an internal pipe from the pool: source → pipe → destination, with an
/// optional `tee(2)` of every chunk to `record`.
pub fn splice_via_pipe(job: &mut Job<'_>, record: Option<BorrowedFd<'_>>) -> Result<Step, Errno> {
    let mut pipe = match PooledPipe::get() {
        Ok(p) => p,
        Err(e) => return Ok(Step::Unsupported(Some(e), "no internal pipe available")),
    };
    let mut rec_pipe = match record {
        Some(_) => match PooledPipe::get() {
            Ok(p) => Some(p),
            Err(e) => return Ok(Step::Unsupported(Some(e), "no internal pipe available")),
        },
        None => None,
    };
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    // A chunk must fit the recording pipe whole: tee always copies from the head of the pipe,
    // so a chunk it could only half duplicate could not be finished.
    let chunk = rec_pipe
        .as_ref()
        .map_or(pipe.capacity(), |rp| rp.capacity().min(pipe.capacity()));
    while !job.finished() {
        // Fill: the pipe is empty here, so an EAGAIN can only mean the source has no data.
        let want = job.want(chunk);
        let n = match pipe
            .pipe()
            .read_from(job.src, job.src_off.as_deref_mut(), want, flags)
        {
            Ok(0) => return Ok(Step::Done),
            Ok(n) => n,
            Err(e) if refused(e) => return Ok(Step::Unsupported(Some(e), "refused by the kernel")),
            Err(Errno::AGAIN) if job.nonblocking => return Ok(Step::Blocked(WouldBlock::Read)),
            Err(e) => {
                job.retry_read(e)?;
                continue;
            }
        };
        pipe.filled(n);
        if let (Some(rec), Some(rp)) = (record, rec_pipe.as_mut()) {
            record_chunk(&pipe, rp, rec, n, job.checkpoint)?;
        }
        // Drain: the pipe holds bytes, so an EAGAIN can only mean the destination is full.
        while pipe.held() > 0 {
            match pipe
                .pipe()
                .write_to(job.dst, job.dst_off.as_deref_mut(), pipe.held(), flags)
            {
                Ok(n) => {
                    pipe.drained(n);
                    job.delivered(n)?;
                }
                Err(Errno::AGAIN) if job.nonblocking => {
                    // The bytes in the pipe were taken from the source: they stay with the job
                    // (and then with the fd pair) until the destination takes them.
                    job.held = Some(Held::from_pipe(pipe));
                    return Ok(Step::Blocked(WouldBlock::Write));
                }
                Err(Errno::AGAIN) => {
                    wait(job.dst, Want::Write, None, job.checkpoint)?;
                }
                Err(Errno::INTR) => (job.checkpoint)()?,
                Err(e) if refused(e) => {
                    // The destination refuses splice with bytes already in the pipe: hand them
                    // over by read/write, then let the next path carry on.
                    if let Some(side) = drain_by_copy(job, &mut pipe)? {
                        return Ok(Step::Blocked(side));
                    }
                    return Ok(Step::Unsupported(Some(e), "destination refused splice"));
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(Step::Done)
}

/// Copies `n` bytes just spliced into `pipe` to `record` without consuming them: tee into the
/// recording pipe, then empty that into the recording fd.
fn record_chunk(
    pipe: &PooledPipe,
    rec_pipe: &mut PooledPipe,
    record: BorrowedFd<'_>,
    n: usize,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<(), Errno> {
    // tee copies from the head of `pipe`, which holds exactly this chunk; the recording pipe
    // is empty and at least as large, so one tee takes the whole chunk.
    loop {
        match pipe.pipe().tee(rec_pipe.pipe(), n, SpliceFlags::NONBLOCK) {
            Ok(m) if m == n => {
                rec_pipe.filled(m);
                break;
            }
            // A partial duplicate cannot be completed (the head cannot be skipped): report it
            // rather than record a stream with a hole. Count what went in, so the recording
            // pipe is closed rather than pooled with those bytes.
            Ok(m) => {
                rec_pipe.filled(m);
                return Err(Errno::IO);
            }
            Err(Errno::INTR) => checkpoint()?,
            Err(e) => return Err(e),
        }
    }
    while rec_pipe.held() > 0 {
        match rec_pipe
            .pipe()
            .write_to(record, None, rec_pipe.held(), SpliceFlags::MOVE)
        {
            Ok(m) => rec_pipe.drained(m),
            Err(Errno::AGAIN) => {
                wait(record, Want::Write, None, checkpoint)?;
            }
            Err(Errno::INTR) => checkpoint()?,
            Err(e) if refused(e) => {
                // An O_APPEND file or another fd that refuses splice: copy through memory.
                let held = rec_pipe.held();
                copy_out_of_pipe(rec_pipe, record, None, held, false, checkpoint)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Moves what the pipe holds to the job's destination through memory. A non-blocking job
/// whose destination fills keeps the rest in [`Job::held`] and says so.
fn drain_by_copy(job: &mut Job<'_>, pipe: &mut PooledPipe) -> Result<Option<WouldBlock>, Errno> {
    let held = pipe.held();
    let socket = job.dst_kind == FdKind::Socket;
    let dst = job.dst;
    if job.nonblocking {
        let mut bytes = read_pipe(pipe, held, job.checkpoint)?;
        let n = write_nonblocking(
            dst,
            job.dst_off.as_deref_mut(),
            &bytes,
            socket,
            job.checkpoint,
        )?;
        job.delivered(n)?;
        if n < bytes.len() {
            bytes.drain(..n);
            job.held = Some(Held::from_bytes(bytes));
            return Ok(Some(WouldBlock::Write));
        }
        return Ok(None);
    }
    copy_out_of_pipe(
        pipe,
        dst,
        job.dst_off.as_deref_mut(),
        held,
        socket,
        job.checkpoint,
    )?;
    job.delivered(held)?;
    Ok(None)
}

/// Delivers `held`'s bytes to the job's destination, counting them as delivered, until none
/// is left or the job's count is reached. A blocking job waits for room; a non-blocking
/// one stops with the side that would block.
pub(super) fn deliver_held(
    held: &mut Held,
    job: &mut Job<'_>,
) -> Result<Option<WouldBlock>, Errno> {
    let socket = job.dst_kind == FdKind::Socket;
    let dst = job.dst;
    while !job.finished() {
        if !held.front.is_empty() {
            let want = job.want(held.front.len());
            let n = if job.nonblocking {
                write_nonblocking(
                    dst,
                    job.dst_off.as_deref_mut(),
                    &held.front[..want],
                    socket,
                    job.checkpoint,
                )?
            } else {
                write_all(
                    dst,
                    job.dst_off.as_deref_mut(),
                    &held.front[..want],
                    socket,
                    job.checkpoint,
                )?;
                want
            };
            held.front.drain(..n);
            job.delivered(n)?;
            if n < want {
                return Ok(Some(WouldBlock::Write));
            }
            continue;
        }
        let Some(pipe) = held.pipe.as_mut() else {
            break;
        };
        if pipe.held() == 0 {
            break;
        }
        let want = job.want(pipe.held());
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        match pipe
            .pipe()
            .write_to(dst, job.dst_off.as_deref_mut(), want, flags)
        {
            Ok(n) => {
                pipe.drained(n);
                job.delivered(n)?;
            }
            Err(Errno::AGAIN) if job.nonblocking => return Ok(Some(WouldBlock::Write)),
            Err(Errno::AGAIN) => {
                wait(dst, Want::Write, None, job.checkpoint)?;
            }
            Err(Errno::INTR) => (job.checkpoint)()?,
            Err(e) if refused(e) => {
                // This destination takes no splice: move the bytes to memory and write.
                let n = pipe.held();
                held.front = read_pipe(pipe, n, job.checkpoint)?;
            }
            Err(e) => return Err(e),
        }
    }
    if held.pipe.as_ref().is_some_and(|p| p.held() == 0) {
        held.pipe = None; // back to the pool, empty
    }
    Ok(None)
}

/// Reads the `n` bytes `pipe` holds (they are there: no wait) into memory.
pub(super) fn read_pipe(
    pipe: &mut PooledPipe,
    n: usize,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match rustix::io::read(pipe.pipe().read_end(), &mut buf[got..]) {
            Ok(0) => break,
            Ok(m) => {
                pipe.drained(m);
                got += m;
            }
            Err(Errno::INTR) => checkpoint()?,
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// Writes what `dst` takes of `bytes` now (at `off` when given) and returns how much: short
/// when `dst` would block. Sockets get `MSG_NOSIGNAL`.
pub(super) fn write_nonblocking(
    dst: BorrowedFd<'_>,
    mut off: Option<&mut u64>,
    bytes: &[u8],
    socket: bool,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<usize, Errno> {
    let mut done = 0;
    while done < bytes.len() {
        let rest = &bytes[done..];
        let r = match off.as_deref_mut() {
            Some(o) => rustix::io::pwrite(dst, rest, *o).inspect(|&n| *o += n as u64),
            None if socket => rustix::net::send(dst, rest, SendFlags::NOSIGNAL),
            None => rustix::io::write(dst, rest),
        };
        match r {
            Ok(n) => done += n,
            Err(Errno::AGAIN) => break,
            Err(Errno::INTR) => checkpoint()?,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// After an `EAGAIN` from a call that reads `src` and writes `dst`: which side is not ready
/// (a zero-timeout poll(2), never a wait), or `None` when both are by now.
fn which_blocks(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<Option<WouldBlock>, Errno> {
    use rustix::event::{PollFd, PollFlags};
    let mut fds = [
        PollFd::from_borrowed_fd(src, PollFlags::IN),
        PollFd::from_borrowed_fd(dst, PollFlags::OUT),
    ];
    crate::fd::poll(&mut fds, Some(std::time::Duration::ZERO), checkpoint)?;
    Ok(if fds[0].revents().is_empty() {
        Some(WouldBlock::Read)
    } else if fds[1].revents().is_empty() {
        Some(WouldBlock::Write)
    } else {
        None
    })
}

/// Reads `n` bytes out of `pipe` and writes them to `dst` (at `off` when given): for an fd
/// that refuses splice after bytes are already in the pipe.
fn copy_out_of_pipe(
    pipe: &mut PooledPipe,
    dst: BorrowedFd<'_>,
    mut off: Option<&mut u64>,
    n: usize,
    socket: bool,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<(), Errno> {
    let mut buf = vec![MaybeUninit::<u8>::uninit(); n.min(1 << 20)];
    let mut left = n;
    while left > 0 {
        let got = match rustix::io::read(pipe.pipe().read_end(), &mut buf[..left.min(1 << 20)]) {
            Ok((init, _)) => init.len(),
            Err(Errno::INTR) => {
                checkpoint()?;
                continue;
            }
            Err(e) => return Err(e),
        };
        pipe.drained(got);
        left -= got;
        // SAFETY: `read` initialised the first `got` bytes of `buf`.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), got) };
        write_all(dst, off.as_deref_mut(), bytes, socket, checkpoint)?;
    }
    Ok(())
}

/// Writes all of `bytes` (at `off` when given), waiting with poll when the fd is full.
/// Sockets are written with `MSG_NOSIGNAL`: a vanished peer is `EPIPE`, not a `SIGPIPE`.
pub(super) fn write_all(
    dst: BorrowedFd<'_>,
    mut off: Option<&mut u64>,
    mut bytes: &[u8],
    socket: bool,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<(), Errno> {
    while !bytes.is_empty() {
        let r = match off.as_deref_mut() {
            Some(o) => rustix::io::pwrite(dst, bytes, *o).inspect(|&n| *o += n as u64),
            None if socket => rustix::net::send(dst, bytes, SendFlags::NOSIGNAL),
            None => rustix::io::write(dst, bytes),
        };
        match r {
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::AGAIN) => {
                wait(dst, Want::Write, None, checkpoint)?;
            }
            Err(Errno::INTR) => checkpoint()?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The buffer the read/write loop uses for a transfer of unknown or large size.
const COPY_BUFFER: usize = 256 << 10;

/// The fallback that works for every fd kind: `read(2)` into memory, `write(2)` out.
pub fn read_write(job: &mut Job<'_>) -> Result<Step, Errno> {
    let socket = job.dst_kind == FdKind::Socket;
    let size = job.want(COPY_BUFFER).max(1);
    let mut buf: Vec<MaybeUninit<u8>> = Vec::with_capacity(size);
    // SAFETY: `MaybeUninit<u8>` needs no initialisation; the length equals the capacity.
    unsafe { buf.set_len(size) };
    while !job.finished() {
        let want = job.want(size);
        let r = match job.src_off.as_deref_mut() {
            Some(o) => rustix::io::pread(job.src, &mut buf[..want], *o)
                .map(|(init, _)| init.len())
                .inspect(|&n| *o += n as u64),
            None => rustix::io::read(job.src, &mut buf[..want]).map(|(init, _)| init.len()),
        };
        let n = match r {
            Ok(0) => return Ok(Step::Done),
            Ok(n) => n,
            Err(Errno::AGAIN) if job.nonblocking => return Ok(Step::Blocked(WouldBlock::Read)),
            Err(e) => {
                job.retry_read(e)?;
                continue;
            }
        };
        // SAFETY: the read initialised the first `n` bytes of `buf`.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
        if job.nonblocking {
            let dst = job.dst;
            let w = write_nonblocking(
                dst,
                job.dst_off.as_deref_mut(),
                bytes,
                socket,
                job.checkpoint,
            )?;
            job.delivered(w)?;
            if w < n {
                job.held = Some(Held::from_bytes(bytes[w..].to_vec()));
                return Ok(Step::Blocked(WouldBlock::Write));
            }
            continue;
        }
        write_all(
            job.dst,
            job.dst_off.as_deref_mut(),
            bytes,
            socket,
            job.checkpoint,
        )?;
        job.delivered(n)?;
    }
    Ok(Step::Done)
}
