//! The writing end: messages and bursts out to a pipe in atomic writes.
//!
//! A blocking writer writes each call's chunks before returning. A non-blocking writer writes
//! what the pipe takes and queues the rest (whole write units, so a later write keeps every
//! chunk atomic); [`MessageWriter::flush`] waits for the pipe with poll(2), never a busy loop,
//! and later writes go out after the queued ones, in order. A vanished reader is `EPIPE`, never
//! a SIGPIPE death: SIGPIPE is held back around the writes unless the process ignores it.

use super::compress::{Compression, Compressor};
use super::encoder::{
    encode_burst, encode_burst_unchecked, fits_in_burst, message_chunks, BurstError,
};
use super::pipe_end::PipeEnd;
use super::wait::Wait;
use super::wire::{Mode, Writer};
use super::write_queue::WriteQueue;
use crate::fd::SigpipeGuard;
use rustix::event::PollFlags;
use rustix::io::Errno;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A blocking batch writes out once this much is encoded, bounding the memory a long batch
/// holds (a non-blocking one tries, and queues what the pipe does not take).
const BATCH_FLUSH: usize = 1 << 16;

/// When a writer is dropped with output queued, it keeps flushing while the reader makes
/// progress, and gives up after this long without any.
pub const DROP_STALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The writing end of an atomic pipe. See the [module docs](crate::atomic_pipe).
#[derive(Debug)]
pub struct MessageWriter {
    end: PipeEnd,
    mode: Mode,
    compressor: Option<Compressor>,
    queue: WriteQueue,
    scratch: Vec<u8>,
}

impl MessageWriter {
    /// Takes ownership of `fd` (a pipe's write end, a FIFO opened for writing, or any fd).
    /// Reads `O_NONBLOCK` once: change it through [`set_blocking`](Self::set_blocking).
    pub fn new(fd: OwnedFd, mode: Mode) -> Result<Self, Errno> {
        Ok(MessageWriter {
            end: PipeEnd::new(fd)?,
            mode,
            compressor: None,
            queue: WriteQueue::default(),
            scratch: Vec::new(),
        })
    }

    /// A writer with no fd, already closed (a placeholder where one must be).
    pub fn closed(mode: Mode) -> Self {
        MessageWriter {
            end: PipeEnd::default(),
            mode,
            compressor: None,
            queue: WriteQueue::default(),
            scratch: Vec::new(),
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
        self.mode
    }

    /// Switches framing (Atomic::Pipe's `set_mixed_data_mode`). Queued output keeps the
    /// framing it was encoded with.
    pub fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }

    /// Compresses every later message and burst with zstd (`None`: stop compressing).
    pub fn set_compression(&mut self, config: Option<&Compression>) -> std::io::Result<()> {
        self.compressor = config.map(Compressor::new).transpose()?;
        Ok(())
    }

    /// Whether the fd is in blocking mode.
    pub fn is_blocking(&self) -> bool {
        self.end.is_blocking()
    }

    /// Sets or clears `O_NONBLOCK` on the fd. See fcntl(2).
    pub fn set_blocking(&mut self, blocking: bool) -> Result<(), Errno> {
        self.end.set_blocking(blocking)
    }

    /// Lets another thread end this writer's waits: once `cancel` is set, a wait for room ends
    /// with `ECANCELED` within [`crate::fd::CANCEL_SLICE`] and drops what is queued (the owner
    /// is closing), and a blocking fd is never left asleep in write(2). `None`: waits are not
    /// cancellable (a blocking write sleeps in write(2)).
    pub fn set_cancel(&mut self, cancel: Option<Arc<AtomicBool>>) {
        self.end.set_cancel(cancel);
    }

    /// Whether a wait forever must stay cancellable once a cancel flag is set (the default),
    /// or may sleep in the syscall for this call: an owner that knows nobody can cancel now
    /// (no other thread) saves the poll.
    pub fn set_cancel_waits(&mut self, on: bool) {
        self.end.set_cancel_waits(on);
    }

    /// Bytes queued by a non-blocking writer and not yet taken by the pipe.
    pub fn pending_output(&self) -> usize {
        self.queue.len()
    }

    /// Writes one message as the calling thread ([`Writer::current`]); returns the number of
    /// chunks (Atomic::Pipe's `write_message` returns its parts). An empty message writes
    /// nothing, as in Atomic::Pipe (compressed, it is a non-empty frame and is written).
    pub fn write_message(
        &mut self,
        message: &[u8],
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<usize, Errno> {
        let chunks = self.queue_message(Writer::current(), message)?;
        self.flush_default(checkpoint)?;
        Ok(chunks)
    }

    /// Writes many messages as the calling thread; chunks of consecutive messages share a
    /// write while together they fit in `PIPE_BUF`. Returns how many were written or queued.
    pub fn write_messages<'a>(
        &mut self,
        messages: impl IntoIterator<Item = &'a [u8]>,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<usize, Errno> {
        let writer = Writer::current();
        let mut count = 0;
        for message in messages {
            self.queue_message(writer, message)?;
            count += 1;
            if self.queue.len() >= BATCH_FLUSH {
                self.drain(self.default_wait(), checkpoint)?;
            }
        }
        self.drain(self.default_wait(), checkpoint)?;
        Ok(count)
    }

    /// Encodes (and compresses) `message` from `writer` into the queue without writing it.
    /// Callers that batch use this, then [`flush`](Self::flush) or
    /// [`try_write`](Self::try_write). Returns the number of chunks queued.
    pub fn queue_message(&mut self, writer: Writer, message: &[u8]) -> Result<usize, Errno> {
        self.fd()?;
        let body = match self.compressor.as_mut() {
            Some(c) => {
                c.compress_into(message, &mut self.scratch)
                    .map_err(|_| Errno::NOMEM)?;
                &self.scratch[..]
            }
            None => message,
        };
        let mut chunks = 0;
        for chunk in message_chunks(self.mode, writer, body) {
            self.queue.push(chunk.len(), |out| chunk.append_to(out));
            chunks += 1;
        }
        Ok(chunks)
    }

    /// The burst's size on the wire (compressed when compression is on), if it fits in one
    /// atomic write. See [`fits_in_burst`].
    pub fn fits_in_burst(&mut self, data: &[u8]) -> Result<Option<usize>, Errno> {
        let mode = self.mode;
        let body = self.burst_body(data)?;
        Ok(fits_in_burst(mode, body.len()))
    }

    /// Writes `data` as one burst (one atomic write, no header; framed in mixed mode) and
    /// returns its wire size. A refused burst writes nothing: `Ok(Err(TooLarge))` when it
    /// does not fit (Atomic::Pipe returns undef then), and in mixed mode
    /// `Ok(Err(ContainsFrameEnd | StartsWithMessageKey))` for data a reader would misframe
    /// (compressed bursts are exempt: readers find their end from the zstd frame).
    pub fn write_burst(
        &mut self,
        data: &[u8],
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<Result<usize, BurstError>, Errno> {
        let queued = self.queue_burst(data)?;
        if queued.is_ok() {
            self.flush_default(checkpoint)?;
        }
        Ok(queued)
    }

    /// Encodes (and compresses) a burst into the queue without writing it; see
    /// [`write_burst`](Self::write_burst) for what is refused.
    pub fn queue_burst(&mut self, data: &[u8]) -> Result<Result<usize, BurstError>, Errno> {
        let compressed = self.compressor.is_some();
        let mode = self.mode;
        let body = self.burst_body(data)?;
        let mut framed = Vec::new();
        let encoded = if compressed {
            encode_burst_unchecked(mode, body, &mut framed)
        } else {
            encode_burst(mode, body, &mut framed)
        };
        if let Ok(size) = encoded {
            // A burst is a write of its own: it carries no header, and a reader in normal
            // mode sees one burst per read only when it was one write.
            self.queue
                .push_alone(size, |out| out.extend_from_slice(&framed));
        }
        Ok(encoded)
    }

    /// Writes queued output as the fd's mode allows: all of it (blocking), or what the pipe
    /// takes now (non-blocking; the rest stays queued).
    pub fn flush_default(
        &mut self,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        self.drain(self.default_wait(), checkpoint).map(drop)
    }

    /// Writes queued output within `wait`; `Ok(true)` when nothing is left.
    pub fn flush_until(
        &mut self,
        wait: Wait,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<bool, Errno> {
        self.drain(wait, checkpoint)
    }

    fn burst_body<'s>(&'s mut self, data: &'s [u8]) -> Result<&'s [u8], Errno> {
        self.fd()?;
        match self.compressor.as_mut() {
            Some(c) => {
                c.compress_into(data, &mut self.scratch)
                    .map_err(|_| Errno::NOMEM)?;
                Ok(&self.scratch[..])
            }
            None => Ok(data),
        }
    }

    /// Writes queued output until the queue is empty (`Ok(true)`) or `timeout` passes
    /// (`Ok(false)`; `None`: no limit). Waits with poll(2) when the pipe is full.
    pub fn flush(
        &mut self,
        timeout: Option<Duration>,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<bool, Errno> {
        self.flush_until(Wait::timeout(timeout), checkpoint)
    }

    /// Writes what the pipe takes now, without waiting. `Ok(true)` when nothing is left.
    pub fn try_write(
        &mut self,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<bool, Errno> {
        self.drain(Wait::Never, checkpoint)
    }

    /// Flushes queued output (waiting as long as it takes), then closes the fd. The fd is
    /// closed even when the flush fails (a vanished reader: `EPIPE`), except when the
    /// checkpoint stopped it (`EINTR`): then nothing is lost and `close` may be called again.
    pub fn close(
        &mut self,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        if self.end.is_closed() {
            return Ok(());
        }
        let flushed = self.drain(Wait::Until(None), checkpoint);
        match flushed {
            Err(Errno::INTR) => return Err(Errno::INTR),
            Err(_) => self.queue.clear(),
            Ok(_) => {}
        }
        let closed = self.end.close();
        flushed.map(drop).and(closed)
    }

    fn default_wait(&self) -> Wait {
        self.end.default_wait()
    }

    /// Writes queued units in order. `Ok(true)`: all written; `Ok(false)`: the pipe is full and
    /// `wait` ran out. On `EPIPE` the queue is dropped (nobody can ever read it).
    fn drain(
        &mut self,
        wait: Wait,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<bool, Errno> {
        if self.queue.is_empty() {
            return Ok(true);
        }
        self.end.fd()?;
        let _sigpipe = SigpipeGuard::if_needed();
        match self.drain_queue(wait, checkpoint) {
            Err(e @ (Errno::PIPE | Errno::CANCELED)) => {
                // Nobody can ever read it (EPIPE), or the owner is closing and a blocked write
                // must end (ECANCELED): what is queued will never be written.
                self.queue.clear();
                Err(e)
            }
            other => other,
        }
    }

    fn drain_queue(
        &mut self,
        wait: Wait,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> Result<bool, Errno> {
        while let Some(unit) = self.queue.front() {
            let nowait = self.end.nowait(wait);
            // A blocking fd would sleep in write(2) past a deadline (or a cancel): poll first.
            if !nowait
                && self.end.poll_first(wait)
                && !self.end.wait_for(PollFlags::OUT, wait, checkpoint)?
            {
                return Ok(false);
            }
            match self.end.write(unit, nowait) {
                Ok(n) => self.queue.consume(n),
                Err(Errno::AGAIN) => {
                    if !self.end.wait_for(PollFlags::OUT, wait, checkpoint)? {
                        return Ok(false);
                    }
                }
                Err(Errno::INTR) => checkpoint()?,
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

impl Drop for MessageWriter {
    /// Queued output is not dropped silently: the writer keeps flushing while the reader makes
    /// progress (poll, not a spin) and gives up after [`DROP_STALL_TIMEOUT`] without any.
    fn drop(&mut self) {
        while !self.queue.is_empty() && !self.end.is_closed() {
            let before = self.queue.len();
            let deadline = Instant::now() + DROP_STALL_TIMEOUT;
            let mut go_on = crate::fd::no_checkpoint;
            match self.drain(Wait::Until(Some(deadline)), &mut go_on) {
                Ok(false) if self.queue.len() < before => continue,
                _ => break,
            }
        }
    }
}
