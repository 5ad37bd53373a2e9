//! A [`Pipe`]'s transfers that run to the end (Go zerocopy's `ReadFrom`/`WriteTo`), with a
//! userspace fallback for fds that refuse splice(2) and waits on non-blocking fds, and its
//! standing tee ([`Mirror`]): every chunk that leaves the pipe is first copied to each mirror.
//!
//! The mirroring is relay's recording, generalised: each chunk is duplicated with tee(2) into
//! a private pipe per mirror that is empty and at least as large as the pipe, so one tee always
//! takes the whole chunk (tee copies from the head, so a chunk duplicated in part could never
//! be finished), then that private pipe is emptied into the mirror's fd (splice, or read/write
//! for an fd that refuses splice), waiting as long as the mirror needs. Only then does the
//! chunk leave for the destination: mirrors never miss a byte and never get one twice.
//! See splice(2), tee(2), pipe(7).

use super::job::refused;
use super::pipe::Pipe;
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::pipe::SpliceFlags;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The most one splice or copy moves in a run-to-end transfer.
const STEP: usize = 1 << 20;
/// The userspace fallback's buffer.
const COPY_BUFFER: usize = 256 << 10;

/// One fd a [`Pipe`]'s standing tee copies everything into, with the private pipe each chunk
/// goes through on its way (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Mirror<'a> {
    /// Where the copy goes: any fd open for writing (a file, a socket, another pipe).
    pub fd: BorrowedFd<'a>,
    /// The mirror's private pipe: empty between calls, resized to the source pipe's size.
    pub via: &'a Pipe,
}

/// Where a [`Pipe::write_to_all`] stands, kept by the caller across an interruption (`EINTR`,
/// handled, then the same call again) so that a chunk half mirrored is finished, never
/// mirrored twice.
#[derive(Debug, Default, Clone)]
pub struct WriteProgress {
    /// Bytes moved to the destination so far.
    pub moved: u64,
    /// The chunk in flight (0: none).
    chunk: usize,
    /// Mirrors that have the whole chunk.
    mirrored: usize,
    /// The next mirror's private pipe holds (what is left of) the chunk.
    teed: bool,
    /// Bytes of the chunk already delivered.
    delivered: usize,
}

fn cancelled(cancel: &[&AtomicBool]) -> bool {
    cancel.iter().any(|c| c.load(Ordering::SeqCst))
}

/// Waits until every side is ready (or in error/hang-up, which the next call reports), in
/// poll(2) slices that end with `ECANCELED` once a `cancel` flag is set. `EINTR` goes to
/// `checkpoint`.
fn wait_ready(
    sides: &[(BorrowedFd<'_>, PollFlags)],
    cancel: &[&AtomicBool],
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<(), Errno> {
    loop {
        if cancelled(cancel) {
            return Err(Errno::CANCELED);
        }
        let mut fds: Vec<PollFd<'_>> = sides
            .iter()
            .map(|(fd, ev)| PollFd::from_borrowed_fd(*fd, *ev))
            .collect();
        crate::fd::poll(&mut fds, Some(Duration::ZERO), &mut *checkpoint)?;
        let Some(i) = fds.iter().position(|p| p.revents().is_empty()) else {
            return Ok(());
        };
        let mut one = [PollFd::from_borrowed_fd(sides[i].0, sides[i].1)];
        crate::fd::poll(&mut one, Some(crate::fd::cancel_slice()), &mut *checkpoint)?;
    }
}

/// Writes all of `bytes` to `fd` (at `off` when given), waiting (cancellably) when it is full.
fn write_all(
    fd: BorrowedFd<'_>,
    mut off: Option<&mut u64>,
    mut bytes: &[u8],
    cancel: &[&AtomicBool],
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> Result<(), Errno> {
    while !bytes.is_empty() {
        if cancelled(cancel) {
            return Err(Errno::CANCELED);
        }
        let r = match off.as_deref_mut() {
            Some(o) => rustix::io::pwrite(fd, bytes, *o).inspect(|&n| *o += n as u64),
            None => match rustix::net::send(fd, bytes, rustix::net::SendFlags::NOSIGNAL) {
                Err(Errno::NOTSOCK) => rustix::io::write(fd, bytes),
                other => other,
            },
        };
        match r {
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::AGAIN) => wait_ready(&[(fd, PollFlags::OUT)], cancel, checkpoint)?,
            Err(Errno::INTR) => checkpoint()?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Pipe {
    /// Moves bytes from `src` into the pipe until `src` ends (or `limit` bytes moved): Go
    /// zerocopy's `Pipe.ReadFrom`. Splices, and falls back to read/write for an `src` that
    /// refuses splice (procfs files, eventfds…); waits for a non-blocking `src` with data or a
    /// full pipe with room, in slices that end with `ECANCELED` once a `cancel` flag is set.
    /// Someone must drain the pipe meanwhile unless what comes fits in it. `moved` counts the
    /// bytes moved, also when an error stops the call (a caller that resumes after `EINTR`
    /// passes it again: `limit` counts from 0). Returns the bytes moved. See splice(2).
    pub fn read_from_all(
        &self,
        src: BorrowedFd<'_>,
        mut offset: Option<&mut u64>,
        limit: Option<u64>,
        moved: &mut u64,
        cancel: &[&AtomicBool],
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<u64, Errno> {
        let total = moved;
        let mut copy = false;
        let mut buf = Vec::new();
        loop {
            let want = limit.map_or(STEP, |l| l.saturating_sub(*total).min(STEP as u64) as usize);
            if want == 0 {
                return Ok(*total);
            }
            let step = if copy {
                self.copy_in(
                    src,
                    offset.as_deref_mut(),
                    want,
                    &mut buf,
                    cancel,
                    checkpoint,
                )
            } else {
                self.read_from_cancellable(
                    src,
                    offset.as_deref_mut(),
                    want,
                    SpliceFlags::MOVE,
                    cancel,
                    checkpoint,
                )
            };
            match step {
                Ok(0) => return Ok(*total),
                Ok(n) => *total += n as u64,
                Err(e) if !copy && refused(e) => copy = true,
                Err(Errno::AGAIN) => {
                    let sides = [(src, PollFlags::IN), (self.write_end(), PollFlags::OUT)];
                    wait_ready(&sides, cancel, checkpoint)?;
                }
                Err(Errno::INTR) => checkpoint()?,
                Err(e) => return Err(e),
            }
        }
    }

    /// One read of `src` into memory, then all of it into the pipe.
    fn copy_in(
        &self,
        src: BorrowedFd<'_>,
        offset: Option<&mut u64>,
        want: usize,
        buf: &mut Vec<u8>,
        cancel: &[&AtomicBool],
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<usize, Errno> {
        buf.resize(want.min(COPY_BUFFER), 0);
        wait_ready(&[(src, PollFlags::IN)], cancel, checkpoint)?;
        let n = match offset {
            Some(o) => rustix::io::pread(src, &mut buf[..], *o).inspect(|&n| *o += n as u64)?,
            None => rustix::io::read(src, &mut buf[..])?,
        };
        write_all(self.write_end(), None, &buf[..n], cancel, checkpoint)?;
        Ok(n)
    }

    /// Moves bytes out of the pipe into `dst` until the pipe ends (its write end closed, see
    /// [`close_write`](Self::close_write), and drained) or `limit` bytes moved: Go zerocopy's
    /// `Pipe.WriteTo`. With `once`, stops after the first chunk (the single-shot form). Each
    /// chunk goes to every mirror first (see the module docs). Splices, and falls back to
    /// read/write for a `dst` that refuses splice (an `O_APPEND` file…); waits like
    /// [`read_from_all`](Self::read_from_all), and counts in `moved` as it does. Returns the
    /// bytes moved.
    #[allow(clippy::too_many_arguments)]
    pub fn write_to_all(
        &self,
        dst: BorrowedFd<'_>,
        mut offset: Option<&mut u64>,
        limit: Option<u64>,
        once: bool,
        mirrors: &[Mirror<'_>],
        progress: &mut WriteProgress,
        cancel: &[&AtomicBool],
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<u64, Errno> {
        let mut copy = false;
        let mut buf = Vec::new();
        loop {
            let total = &mut progress.moved;
            let want = limit.map_or(STEP, |l| l.saturating_sub(*total).min(STEP as u64) as usize);
            if want == 0 && progress.chunk == 0 {
                return Ok(*total);
            }
            if !mirrors.is_empty() || progress.chunk > 0 {
                if progress.chunk == 0 {
                    let n = self.next_chunk(want, mirrors, cancel, checkpoint)?;
                    if n == 0 {
                        return Ok(progress.moved);
                    }
                    *progress = WriteProgress {
                        moved: progress.moved,
                        chunk: n,
                        ..WriteProgress::default()
                    };
                }
                self.mirror_chunk(mirrors, progress, cancel, checkpoint)?;
                self.deliver(
                    dst,
                    offset.as_deref_mut(),
                    progress,
                    &mut copy,
                    cancel,
                    checkpoint,
                )?;
                progress.moved += progress.chunk as u64;
                progress.chunk = 0;
                if once {
                    return Ok(progress.moved);
                }
                continue;
            }
            let step = if copy {
                self.copy_out(
                    dst,
                    offset.as_deref_mut(),
                    want,
                    &mut buf,
                    cancel,
                    checkpoint,
                )
            } else {
                self.write_to_cancellable(
                    dst,
                    offset.as_deref_mut(),
                    want,
                    SpliceFlags::MOVE,
                    cancel,
                    checkpoint,
                )
            };
            match step {
                Ok(0) => return Ok(*total),
                Ok(n) => {
                    *total += n as u64;
                    if once {
                        return Ok(*total);
                    }
                }
                Err(e) if !copy && refused(e) && e != Errno::BADF => copy = true,
                Err(Errno::AGAIN) => {
                    let sides = [(self.read_end(), PollFlags::IN), (dst, PollFlags::OUT)];
                    wait_ready(&sides, cancel, checkpoint)?;
                }
                Err(Errno::INTR) => checkpoint()?,
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads what the pipe holds (up to `want`, waiting for the first bytes) into memory and
    /// writes all of it to `dst`. 0 at the pipe's end.
    fn copy_out(
        &self,
        dst: BorrowedFd<'_>,
        offset: Option<&mut u64>,
        want: usize,
        buf: &mut Vec<u8>,
        cancel: &[&AtomicBool],
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<usize, Errno> {
        buf.resize(want.min(COPY_BUFFER), 0);
        let n = loop {
            // Poll first: a blocking pipe must not sleep in read(2) where `cancel` cannot reach.
            wait_ready(&[(self.read_end(), PollFlags::IN)], cancel, checkpoint)?;
            match rustix::io::read(self.read_end(), &mut buf[..]) {
                Ok(n) => break n,
                Err(Errno::AGAIN) => {}
                Err(Errno::INTR) => checkpoint()?,
                Err(e) => return Err(e),
            }
        };
        write_all(dst, offset, &buf[..n], cancel, checkpoint)?;
        Ok(n)
    }

    /// Waits for bytes in the pipe and sizes the next chunk (at most `want` bytes, no more than
    /// any mirror's private pipe takes whole). 0 at the pipe's end.
    fn next_chunk(
        &self,
        want: usize,
        mirrors: &[Mirror<'_>],
        cancel: &[&AtomicBool],
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<usize, Errno> {
        let pending = loop {
            if cancelled(cancel) {
                return Err(Errno::CANCELED);
            }
            let pending = self.pending()?;
            if pending > 0 {
                break pending;
            }
            let mut fds = [PollFd::from_borrowed_fd(self.read_end(), PollFlags::IN)];
            crate::fd::poll(&mut fds, Some(crate::fd::cancel_slice()), &mut *checkpoint)?;
            let hup = fds[0].revents().contains(PollFlags::HUP);
            if hup && self.pending()? == 0 {
                return Ok(0); // no writer left, nothing in the pipe: the end
            }
        };
        let size = self.size()?;
        let mut chunk = want.min(pending);
        for m in mirrors {
            // Each private pipe must be empty (the last chunk left it so) and no smaller than
            // this one, so that one tee takes the whole chunk, however it is cut in pages.
            if m.via.size()? < size {
                m.via.resize_or_max(size)?;
            }
            chunk = chunk.min(m.via.size()?);
        }
        Ok(chunk)
    }

    /// Copies the chunk in flight into every mirror that does not have it yet, without
    /// consuming it: tee into the mirror's private pipe, then empty that into its fd.
    fn mirror_chunk(
        &self,
        mirrors: &[Mirror<'_>],
        progress: &mut WriteProgress,
        cancel: &[&AtomicBool],
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        let chunk = progress.chunk;
        while let Some(m) = mirrors.get(progress.mirrored) {
            while !progress.teed {
                match self.tee(m.via, chunk, SpliceFlags::NONBLOCK) {
                    Ok(n) if n == chunk => progress.teed = true,
                    // A partial duplicate could not be finished (tee copies from the head):
                    // refuse rather than give the mirror a stream with a hole.
                    Ok(_) => return Err(Errno::IO),
                    Err(Errno::INTR) => checkpoint()?,
                    Err(e) => return Err(e),
                }
            }
            let mut copy = false;
            let mut buf = Vec::new();
            loop {
                let left = m.via.pending()?;
                if left == 0 {
                    break;
                }
                let step = if copy {
                    m.via
                        .copy_out(m.fd, None, left, &mut buf, cancel, checkpoint)
                } else {
                    m.via.write_to_cancellable(
                        m.fd,
                        None,
                        left,
                        SpliceFlags::MOVE,
                        cancel,
                        checkpoint,
                    )
                };
                match step {
                    Ok(_) => {}
                    Err(e) if !copy && refused(e) && e != Errno::BADF => copy = true,
                    Err(Errno::AGAIN) => {
                        wait_ready(&[(m.fd, PollFlags::OUT)], cancel, checkpoint)?;
                    }
                    Err(Errno::INTR) => checkpoint()?,
                    Err(e) => return Err(e),
                }
            }
            progress.teed = false;
            progress.mirrored += 1;
        }
        Ok(())
    }

    /// Moves the rest of the chunk in flight (already in the pipe) to `dst`.
    fn deliver(
        &self,
        dst: BorrowedFd<'_>,
        mut offset: Option<&mut u64>,
        progress: &mut WriteProgress,
        copy: &mut bool,
        cancel: &[&AtomicBool],
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        let mut buf = Vec::new();
        while progress.delivered < progress.chunk {
            let left = progress.chunk - progress.delivered;
            let step = if *copy {
                self.copy_out(
                    dst,
                    offset.as_deref_mut(),
                    left,
                    &mut buf,
                    cancel,
                    checkpoint,
                )
            } else {
                self.write_to_cancellable(
                    dst,
                    offset.as_deref_mut(),
                    left,
                    SpliceFlags::MOVE,
                    cancel,
                    checkpoint,
                )
            };
            match step {
                Ok(0) => return Err(Errno::IO), // the bytes were there: cannot happen
                Ok(m) => progress.delivered += m,
                Err(e) if !*copy && refused(e) && e != Errno::BADF => *copy = true,
                Err(Errno::AGAIN) => wait_ready(&[(dst, PollFlags::OUT)], cancel, checkpoint)?,
                Err(Errno::INTR) => checkpoint()?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
