//! The reading end: bytes from a pipe through the [`Decoder`] into whole messages, bursts and
//! lines, decompressed when the stream is compressed.
//!
//! Reads are large (64 KiB, or the pipe's size when larger, up to 1 MiB) and go straight into
//! the decoder's buffer, so a burst of small messages costs one `read(2)` for hundreds of them.
//! A blocking fd with no deadline sleeps in read(2); any deadline (or a non-blocking fd) waits
//! with poll(2) instead. With a cancel flag ([`MessageReader::set_cancel`]) the read is tried
//! with `RWF_NOWAIT` and the wait is a poll that the flag ends.

use super::compress::{Compression, Decompressor};
use super::decoder::{Decoder, Event};
use super::pipe_end::PipeEnd;
use super::protocol_error::{ProtocolError, ProtocolErrorKind};
use super::wait::Wait;
use super::wire::Mode;
use rustix::event::PollFlags;
use rustix::io::Errno;
use std::collections::VecDeque;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The smallest read: 64 KiB, the default pipe size.
const MIN_READ: usize = 1 << 16;
/// The largest read, for pipes resized up to 1 MiB.
const MAX_READ: usize = 1 << 20;

/// Why a read failed: the kernel refused, or the stream broke the wire format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// `read(2)`/`poll(2)` failed (or a checkpoint stopped the wait with `EINTR`).
    Os(Errno),
    /// The stream is not valid Atomic::Pipe data (see [`ProtocolError`]).
    Protocol(ProtocolError),
}

impl From<Errno> for ReadError {
    fn from(e: Errno) -> Self {
        ReadError::Os(e)
    }
}

impl From<ProtocolError> for ReadError {
    fn from(e: ProtocolError) -> Self {
        ReadError::Protocol(e)
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Os(e) => write!(f, "{e}"),
            ReadError::Protocol(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// What one attempt to get more bytes did.
enum Fill {
    Data,
    Eof,
    NotReady,
}

/// The reading end of an atomic pipe. See the [module docs](crate::atomic_pipe).
#[derive(Debug)]
pub struct MessageReader {
    end: PipeEnd,
    decoder: Decoder,
    decompressor: Option<Decompressor>,
    keep_compressed: bool,
    /// With `keep_compressed`: the zstd frame of each message or burst returned, oldest first.
    kept: VecDeque<Vec<u8>>,
    read_size: usize,
    /// The last read took less than it asked for: the pipe is probably empty now.
    drained: bool,
}

impl MessageReader {
    /// Takes ownership of `fd` (a pipe's read end, a FIFO opened for reading, or any fd).
    /// Reads `O_NONBLOCK` once: change it through [`set_blocking`](Self::set_blocking).
    pub fn new(fd: OwnedFd, mode: Mode) -> Result<Self, Errno> {
        let read_size = crate::fd::pipe_size(&fd)
            .unwrap_or(MIN_READ)
            .clamp(MIN_READ, MAX_READ);
        Ok(MessageReader {
            end: PipeEnd::new(fd)?,
            decoder: Decoder::new(mode),
            decompressor: None,
            keep_compressed: false,
            kept: VecDeque::new(),
            read_size,
            drained: false,
        })
    }

    /// A reader with no fd, already closed (a placeholder where one must be).
    pub fn closed(mode: Mode) -> Self {
        MessageReader {
            end: PipeEnd::default(),
            decoder: Decoder::new(mode),
            decompressor: None,
            keep_compressed: false,
            kept: VecDeque::new(),
            read_size: MIN_READ,
            drained: false,
        }
    }

    /// The fd, or `EBADF` once closed.
    pub fn fd(&self) -> Result<BorrowedFd<'_>, Errno> {
        self.end.fd()
    }

    /// Whether [`close`](Self::close) ran.
    pub fn is_closed(&self) -> bool {
        self.end.is_closed()
    }

    /// The framing in use.
    pub fn mode(&self) -> Mode {
        self.decoder.mode()
    }

    /// Switches to mixed data mode (Atomic::Pipe's `set_mixed_data_mode`). Bytes already
    /// received and not yet parsed are parsed in the new mode.
    pub fn set_mixed_mode(&mut self) {
        self.decoder.set_mode(Mode::Mixed);
    }

    /// Decompresses every later message and burst (`None`: stop). With `keep_compressed`, the
    /// zstd frame each message or burst was sent as is kept too (to forward it untouched):
    /// [`take_compressed`](Self::take_compressed) hands it out after its event, as
    /// Atomic::Pipe's `keep_compressed` returns both.
    pub fn set_compression(
        &mut self,
        config: Option<&Compression>,
        keep_compressed: bool,
    ) -> std::io::Result<()> {
        self.decompressor = config.map(Decompressor::new).transpose()?;
        self.keep_compressed = keep_compressed;
        if !keep_compressed {
            self.kept.clear();
        }
        self.decoder.set_zstd_bursts(self.decompressor.is_some());
        Ok(())
    }

    /// With `keep_compressed`: the compressed frame of the oldest message or burst returned
    /// and not yet asked for (one per such event, in order), else `None`.
    pub fn take_compressed(&mut self) -> Option<Vec<u8>> {
        self.kept.pop_front()
    }

    /// The most bytes one `read(2)` asks for.
    pub fn read_size(&self) -> usize {
        self.read_size
    }

    /// Sets the most bytes one `read(2)` asks for (at least 1).
    pub fn set_read_size(&mut self, n: usize) {
        self.read_size = n.max(1);
    }

    /// Reads once into the buffer (Atomic::Pipe's `fill_buffer`), waiting within `wait`:
    /// the bytes read, 0 at end of stream or when nothing came in time.
    pub fn fill_buffer(
        &mut self,
        wait: Wait,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<usize, Errno> {
        if self.decoder.is_finished() {
            return Ok(0);
        }
        let before = self.decoder.buffered();
        Ok(match self.fill(wait, checkpoint)? {
            Fill::Data => self.decoder.buffered().saturating_sub(before).max(1),
            Fill::Eof | Fill::NotReady => 0,
        })
    }

    /// Atomic::Pipe's `eof`: looks at the pipe (one read that does not wait) rather than
    /// only at what an earlier read saw. True once the writers are gone and nothing received
    /// is left to return.
    pub fn check_eof(
        &mut self,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<bool, Errno> {
        if !self.decoder.is_finished() {
            // Look before reading: bytes waiting mean "not yet", and they stay in the pipe. A
            // read here would move them into our buffer behind the back of a caller that asks
            // eof() and then sleeps in poll(2) on the fd (fdkit.logging's listener, fdkit.aio's
            // read_message did, and waited for ever). Only a hang-up with nothing to read is
            // read (a read of 0 bytes, which consumes nothing) to learn the end.
            use rustix::event::{poll, PollFd, PollFlags, Timespec};
            let got = {
                let fd = self.end.fd()?;
                let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                let zero = Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                match poll(&mut fds, Some(&zero)) {
                    Ok(_) | Err(Errno::INTR) => {}
                    Err(e) => return Err(e),
                }
                fds[0].revents()
            };
            if got.contains(PollFlags::IN) || !got.intersects(PollFlags::HUP | PollFlags::ERR) {
                return Ok(false);
            }
            // A zero timeout, not Wait::Never: a blocking fd is polled (never read blindly).
            let now = Wait::timeout(Some(std::time::Duration::ZERO));
            match self.fill(now, checkpoint)? {
                Fill::Data | Fill::NotReady => return Ok(false),
                Fill::Eof => {}
            }
        }
        Ok(self.decoder.nothing_left())
    }

    /// Whether the fd is in blocking mode.
    pub fn is_blocking(&self) -> bool {
        self.end.is_blocking()
    }

    /// Sets or clears `O_NONBLOCK` on the fd. See fcntl(2).
    pub fn set_blocking(&mut self, blocking: bool) -> Result<(), Errno> {
        self.end.set_blocking(blocking)
    }

    /// True once the writers are gone (end of file) and every event was returned.
    pub fn is_eof(&self) -> bool {
        self.decoder.is_drained()
    }

    /// Mixed mode: the start of a line whose `\n` has not arrived (for `peek_line`).
    pub fn partial_line(&self) -> &[u8] {
        self.decoder.partial_line()
    }

    /// The next event, waiting within `wait` for bytes. `Ok(None)`: end of stream (see
    /// [`is_eof`](Self::is_eof)), time up, or nothing ready for [`Wait::Never`]. A protocol
    /// error comes only after every complete event before it.
    pub fn next_event(
        &mut self,
        wait: Wait,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<Option<Event>, ReadError> {
        self.next_event_or(wait, false, checkpoint)
    }

    /// Like [`next_event`](Self::next_event); with `stop_at_partial_line`, returns `Ok(None)`
    /// instead of waiting when a partial line is buffered (Atomic::Pipe's `peek_line`).
    pub fn next_event_or(
        &mut self,
        wait: Wait,
        stop_at_partial_line: bool,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<Option<Event>, ReadError> {
        loop {
            if let Some(event) = self.decoder.next_event()? {
                return Ok(Some(self.decompress(event)?));
            }
            if self.decoder.is_finished()
                || (stop_at_partial_line && !self.decoder.partial_line().is_empty())
            {
                return Ok(None);
            }
            match self.fill(wait, checkpoint)? {
                Fill::Data | Fill::Eof => {}
                Fill::NotReady => return Ok(None),
            }
        }
    }

    /// Up to `max` events: waits within `wait` for the first, then takes what is already
    /// received (one more read only if nothing is buffered). The batch read behind
    /// `read_messages`. A protocol error after some events is kept for the next call.
    pub fn next_events(
        &mut self,
        max: usize,
        wait: Wait,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
        out: &mut Vec<Event>,
    ) -> Result<(), ReadError> {
        let start = out.len();
        while out.len() - start < max {
            let step = if out.len() == start {
                self.next_event(wait, checkpoint)
            } else {
                self.decoder.next_event().map_err(ReadError::from)
            };
            match step {
                Ok(Some(event)) if out.len() == start => out.push(event),
                Ok(Some(event)) => match self.decompress(event) {
                    Ok(event) => out.push(event),
                    Err(e) => {
                        self.decoder.push_back_error(e);
                        break;
                    }
                },
                Ok(None) => break,
                Err(ReadError::Protocol(e)) if out.len() > start => {
                    self.decoder.push_back_error(e);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Lets another thread end this reader's waits: once `cancel` is set, a wait for bytes
    /// ends with `ECANCELED` within [`crate::fd::CANCEL_SLICE`], and a blocking fd is never
    /// left asleep in read(2) (see the owner's close in the Python binding). `None`: waits are
    /// not cancellable (a blocking read sleeps in read(2), one syscall per fill).
    pub fn set_cancel(&mut self, cancel: Option<Arc<AtomicBool>>) {
        self.end.set_cancel(cancel);
    }

    /// Whether a wait forever must stay cancellable once a cancel flag is set (the default),
    /// or may sleep in the syscall for this call: an owner that knows nobody can cancel now
    /// (no other thread) saves the poll.
    pub fn set_cancel_waits(&mut self, on: bool) {
        self.end.set_cancel_waits(on);
    }

    /// Closes the fd (once).
    pub fn close(&mut self) -> Result<(), Errno> {
        self.kept.clear();
        self.end.close()
    }

    fn fill(
        &mut self,
        wait: Wait,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<Fill, Errno> {
        loop {
            let nowait = self.end.nowait(wait);
            // A short last read drained the pipe: poll first (poll + read) rather than a
            // read that says EAGAIN, then poll, then read again.
            let poll_first = self.end.poll_first(wait) && (!nowait || self.drained);
            if poll_first && !self.end.wait_for(PollFlags::IN, wait, checkpoint)? {
                return Ok(Fill::NotReady);
            }
            let end = &mut self.end;
            let mut asked = 0;
            let got = self.decoder.feed_with(self.read_size, |buf| {
                asked = buf.len();
                end.read(buf, nowait)
            });
            match got {
                Ok(0) => {
                    self.decoder.finish();
                    return Ok(Fill::Eof);
                }
                Ok(n) => {
                    self.drained = n < asked;
                    return Ok(Fill::Data);
                }
                Err(Errno::AGAIN) => {
                    self.drained = true;
                    if !self.end.wait_for(PollFlags::IN, wait, checkpoint)? {
                        return Ok(Fill::NotReady);
                    }
                }
                Err(Errno::INTR) => checkpoint()?,
                Err(e) => return Err(e),
            }
        }
    }

    fn decompress(&mut self, event: Event) -> Result<Event, ProtocolError> {
        let Some(d) = self.decompressor.as_mut() else {
            return Ok(event);
        };
        let offset = self.decoder.offset();
        let (writer, frame) = match &event {
            Event::Message { writer, data } => (Some(*writer), data),
            Event::Burst(data) => (None, data),
            Event::Line(_) => return Ok(event),
        };
        let data = d.decompress(frame).map_err(|e| {
            ProtocolError::new(
                ProtocolErrorKind::BadCompressedData { len: frame.len() },
                offset,
                writer,
                false,
            )
            .with_detail(e.0)
        })?;
        let (event, frame) = match event {
            Event::Message {
                writer,
                data: frame,
            } => (Event::Message { writer, data }, frame),
            Event::Burst(frame) => (Event::Burst(data), frame),
            Event::Line(_) => unreachable!("lines returned above"),
        };
        if self.keep_compressed {
            self.kept.push_back(frame);
        }
        Ok(event)
    }
}

impl From<ReadError> for std::io::Error {
    /// The errno as `from_raw_os_error`; a broken stream as [`std::io::ErrorKind::InvalidData`]
    /// carrying the [`ProtocolError`].
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Os(errno) => std::io::Error::from_raw_os_error(errno.raw_os_error()),
            ReadError::Protocol(p) => p.into(),
        }
    }
}
