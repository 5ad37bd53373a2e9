//! The incremental decoder: bytes in, split anywhere; messages, bursts and lines out, in order.
//!
//! Linear time: the decoder keeps an offset into its buffer and never looks at a parsed byte
//! again (a mixed-mode burst remembers how far it searched for `0x0F`); the parsed prefix is
//! dropped when the buffer is empty or more than half parsed. No I/O: the caller feeds bytes
//! ([`Decoder::feed`], or [`Decoder::feed_with`] to read straight into the buffer) and says
//! when the stream ended ([`Decoder::finish`]).
//!
//! Errors (a [`ProtocolError`] names the stream offset and the writer):
//! - at end of stream, after every complete event: a truncated chunk or burst, then each
//!   half-received message (oldest first);
//! - a chunk whose id breaks its writer's countdown: reported, the partial message dropped,
//!   the chunk starts a new message;
//! - normal mode, a header claiming more than 4080 bytes: fatal (nothing to resynchronize on);
//!   the decoder returns that error from then on, never waits or spins;
//! - mixed mode, a malformed frame: reported once, its `0x0E` kept as line data, and decoding
//!   resumes on the next byte.

use super::protocol_error::{ProtocolError, ProtocolErrorKind};
use super::reassembly::{Outcome, Reassembly};
use super::wire::{Header, Mode, Writer, HEADER_LEN, MAX_PAYLOAD, MESSAGE_KEY};
use std::collections::VecDeque;
use std::ops::Range;

/// Drop the parsed prefix once it is at least this large and half the buffer.
const COMPACT_MIN: usize = 64 * 1024;

/// One item of a decoded stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A whole message, reassembled from its chunks.
    Message {
        /// Who wrote it.
        writer: Writer,
        /// The message bytes (still compressed if the pipe uses compression).
        data: Vec<u8>,
    },
    /// A burst (mixed mode; in normal mode bursts are raw bytes with no framing).
    Burst(Vec<u8>),
    /// A line of plain data (mixed mode), with its `\n` (none on a last line at end of stream).
    Line(Vec<u8>),
}

/// What one parsing step did.
pub(crate) enum Step {
    Event(Event),
    Progress,
    NeedMore,
    Error(ProtocolError),
}

/// Decodes an Atomic::Pipe byte stream incrementally. See the module docs.
#[derive(Debug)]
pub struct Decoder {
    pub(crate) mode: Mode,
    pub(crate) zstd_bursts: bool,
    pub(crate) buf: Vec<u8>,
    pub(crate) pos: usize,
    base: u64,
    reassembly: Reassembly,
    pub(crate) line: Vec<u8>,
    pub(crate) burst_scanned: usize,
    eof: bool,
    tail: Option<VecDeque<Result<Event, ProtocolError>>>,
    fatal: Option<ProtocolError>,
    deferred: VecDeque<ProtocolError>,
}

impl Decoder {
    /// A decoder for a stream in `mode`.
    pub fn new(mode: Mode) -> Self {
        Decoder {
            mode,
            zstd_bursts: false,
            buf: Vec::new(),
            pos: 0,
            base: 0,
            reassembly: Reassembly::default(),
            line: Vec::new(),
            burst_scanned: 0,
            eof: false,
            tail: None,
            fatal: None,
            deferred: VecDeque::new(),
        }
    }

    /// Mixed mode: bursts starting with a zstd frame end where the frame ends (then `0x0F`),
    /// so compressed data holding `0x0F` is not cut short. Other bursts end at the first
    /// `0x0F`, as in Atomic::Pipe. For pipes with compression on.
    pub fn with_zstd_bursts(mut self, on: bool) -> Self {
        self.zstd_bursts = on;
        self
    }

    /// Turns [`with_zstd_bursts`](Self::with_zstd_bursts) on or off for the bytes to come.
    pub fn set_zstd_bursts(&mut self, on: bool) {
        self.zstd_bursts = on;
    }

    /// Switches the framing for the bytes not parsed yet (Atomic::Pipe's
    /// `set_mixed_data_mode` on a live reader). Messages in flight stay in flight.
    pub fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
        self.burst_scanned = 0;
    }

    /// Mixed mode: the line data parsed so far whose `\n` has not arrived.
    pub fn partial_line(&self) -> &[u8] {
        &self.line
    }

    /// True once the stream ended and every event and error was returned.
    pub fn is_drained(&self) -> bool {
        self.eof && self.deferred.is_empty() && self.tail.as_ref().is_some_and(VecDeque::is_empty)
    }

    /// True when nothing received is left to return: no unparsed byte, no partial line, no
    /// message in flight, no error or end-of-stream event pending.
    pub fn nothing_left(&self) -> bool {
        self.pos == self.buf.len()
            && self.line.is_empty()
            && self.reassembly.pending() == 0
            && self.deferred.is_empty()
            && self.fatal.is_none()
            && self.tail.as_ref().is_none_or(VecDeque::is_empty)
    }

    /// Hands an error back to be returned first by the next [`next_event`](Self::next_event)
    /// (a caller that stopped a batch there, to return the events before it).
    pub fn push_back_error(&mut self, e: ProtocolError) {
        self.deferred.push_front(e);
    }

    /// The stream's framing mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Appends received bytes. Ignored after [`finish`](Self::finish) or a fatal error.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.eof || self.fatal.is_some() {
            return;
        }
        self.compact();
        self.buf.extend_from_slice(bytes);
    }

    /// Lets `fill` write up to `max` bytes straight into the buffer (a `read(2)`), keeping the
    /// count it returns. Its error is passed through and nothing is kept.
    pub fn feed_with<E>(
        &mut self,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        if self.eof || self.fatal.is_some() {
            return Ok(0);
        }
        self.compact();
        let old = self.buf.len();
        self.buf.resize(old + max, 0);
        let got = fill(&mut self.buf[old..]);
        let n = got.as_ref().map_or(0, |&n| n.min(max));
        self.buf.truncate(old + n);
        got.map(|_| n)
    }

    /// Marks the end of the stream: the remaining events come out, then the errors for what
    /// was left incomplete.
    pub fn finish(&mut self) {
        self.eof = true;
    }

    /// True once [`finish`](Self::finish) was called.
    pub fn is_finished(&self) -> bool {
        self.eof
    }

    /// Stream offset of the next byte to parse (bytes fed and fully parsed so far).
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Bytes received but not yet returned in an event (unparsed, or a line without `\n`).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos + self.line.len()
    }

    /// Writers with a message in flight (some chunks received, not the last).
    pub fn pending_messages(&self) -> usize {
        self.reassembly.pending()
    }

    /// The next event, `Ok(None)` when more bytes are needed (or, after
    /// [`finish`](Self::finish), when all is returned), or an error. See the module docs.
    pub fn next_event(&mut self) -> Result<Option<Event>, ProtocolError> {
        if let Some(e) = self.deferred.pop_front() {
            return Err(e);
        }
        if let Some(e) = &self.fatal {
            return Err(e.clone());
        }
        loop {
            let step = match self.mode {
                Mode::Normal => self.step_normal(),
                Mode::Mixed => self.step_mixed(),
            };
            match step {
                Step::Event(e) => return Ok(Some(e)),
                Step::Progress => {}
                Step::NeedMore => break,
                Step::Error(e) => {
                    if e.is_fatal() {
                        self.fatal = Some(e.clone());
                    }
                    return Err(e);
                }
            }
        }
        self.compact();
        if !self.eof {
            return Ok(None);
        }
        if self.tail.is_none() {
            self.tail = Some(self.end_of_stream());
        }
        match self.tail.as_mut().and_then(VecDeque::pop_front) {
            Some(Ok(e)) => Ok(Some(e)),
            Some(Err(e)) => Err(e),
            None => Ok(None),
        }
    }

    /// An iterator over [`next_event`](Self::next_event) until it returns `Ok(None)` or a
    /// fatal error.
    pub fn events(&mut self) -> Events<'_> {
        Events {
            decoder: self,
            done: false,
        }
    }

    pub(crate) fn stream_offset(&self, at: usize) -> u64 {
        self.base + at as u64
    }

    fn compact(&mut self) {
        if self.pos == self.buf.len() {
            self.base += self.pos as u64;
            self.buf.clear();
            self.pos = 0;
        } else if self.pos >= COMPACT_MIN && self.pos * 2 >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.base += self.pos as u64;
            self.pos = 0;
        }
    }

    fn step_normal(&mut self) -> Step {
        let at = self.pos;
        let Some(header) = self.header_at(at) else {
            return Step::NeedMore;
        };
        if let Some(kind) = too_large(&header, MAX_PAYLOAD) {
            let e = ProtocolError::new(kind, self.stream_offset(at), Some(header.writer), true);
            return Step::Error(e);
        }
        let size = header.size as usize;
        let end = at + HEADER_LEN + size;
        if self.buf.len() < end {
            return Step::NeedMore;
        }
        self.chunk(header, at + HEADER_LEN..end, at, end)
    }

    /// The chunk header at `at` in the buffer, or None while fewer than its 16 bytes are there.
    pub(crate) fn header_at(&self, at: usize) -> Option<Header> {
        let head = self.buf.get(at..at + HEADER_LEN)?;
        Some(Header::from_bytes(head.try_into().expect("16 bytes")))
    }

    /// Hands a complete chunk (`start..end` in the buffer) to reassembly.
    pub(crate) fn chunk(
        &mut self,
        header: Header,
        payload: Range<usize>,
        start: usize,
        end: usize,
    ) -> Step {
        let offset = self.stream_offset(start);
        match self.reassembly.chunk(header, &self.buf[payload], offset) {
            Outcome::Message(data) => {
                self.pos = end;
                Step::Event(Event::Message {
                    writer: header.writer,
                    data,
                })
            }
            Outcome::Pending => {
                self.pos = end;
                Step::Progress
            }
            // The chunk stays unparsed: the next step starts a new message with it.
            Outcome::OutOfOrder { expected, dropped } => {
                let kind = ProtocolErrorKind::ChunkOutOfOrder {
                    expected,
                    got: header.chunk_id,
                    dropped,
                };
                Step::Error(ProtocolError::new(kind, offset, Some(header.writer), false))
            }
        }
    }

    /// Everything due at end of stream: a last line, a truncated chunk, incomplete messages.
    fn end_of_stream(&mut self) -> VecDeque<Result<Event, ProtocolError>> {
        let mut out = VecDeque::new();
        if !self.line.is_empty() {
            out.push_back(Ok(Event::Line(std::mem::take(&mut self.line))));
        }
        let rest = &self.buf[self.pos..];
        if !rest.is_empty() {
            let offset = self.stream_offset(self.pos);
            let head = match self.mode {
                Mode::Normal => Some(rest),
                Mode::Mixed if rest.len() < 2 => Some(&rest[1..]),
                Mode::Mixed if rest[1] == MESSAGE_KEY => Some(&rest[2..]),
                Mode::Mixed => None,
            };
            let (kind, writer) = match head {
                Some(head) => {
                    let need = head.get(..HEADER_LEN).map(|h| {
                        let h = Header::from_bytes(h.try_into().expect("16 bytes"));
                        rest.len() - head.len()
                            + HEADER_LEN
                            + h.size as usize
                            + usize::from(self.mode == Mode::Mixed)
                    });
                    let kind = ProtocolErrorKind::TruncatedChunk {
                        have: rest.len(),
                        need,
                    };
                    (kind, Header::writer_prefix(head))
                }
                None => (
                    ProtocolErrorKind::TruncatedBurst {
                        have: rest.len() - 1,
                    },
                    None,
                ),
            };
            out.push_back(Err(ProtocolError::new(kind, offset, writer, false)));
            self.pos = self.buf.len();
        }
        for (writer, p) in self.reassembly.take_all() {
            let kind = ProtocolErrorKind::IncompleteMessage {
                chunks: p.chunks,
                bytes: p.data.len(),
                expected_id: p.expected_id,
            };
            out.push_back(Err(ProtocolError::new(
                kind,
                p.first_offset,
                Some(writer),
                false,
            )));
        }
        out
    }
}

/// Iterator over a decoder's events; see [`Decoder::events`].
#[derive(Debug)]
pub struct Events<'a> {
    decoder: &'a mut Decoder,
    done: bool,
}

impl Iterator for Events<'_> {
    type Item = Result<Event, ProtocolError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.decoder.next_event() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => None,
            Err(e) => {
                self.done = e.is_fatal();
                Some(Err(e))
            }
        }
    }
}

/// `ChunkTooLarge` when `header` announces more than `max` payload bytes (the mode's limit).
pub(crate) fn too_large(header: &Header, max: usize) -> Option<ProtocolErrorKind> {
    (header.size as usize > max).then_some(ProtocolErrorKind::ChunkTooLarge {
        size: header.size,
        max,
    })
}
