//! What a decoder reports when the stream breaks the wire format.
//!
//! Every error names the byte offset in the stream (counted from the first byte fed) and, when
//! the header was readable, the writer. Atomic::Pipe itself detects none of these: it waits
//! forever on a truncated chunk, spins in mixed mode, and merges interleaved messages.

use super::wire::Writer;
use std::fmt;

/// What went wrong; see [`ProtocolError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtocolErrorKind {
    /// The stream ended inside a chunk (or a mixed-mode frame).
    TruncatedChunk {
        /// Bytes of the chunk that arrived.
        have: usize,
        /// Bytes the chunk needs, when its header arrived.
        need: Option<usize>,
    },
    /// Mixed mode: the stream ended inside a burst (`0x0E` with no closing `0x0F`).
    TruncatedBurst {
        /// Bytes after `0x0E` that arrived.
        have: usize,
    },
    /// The stream ended with part of a message received from a writer.
    IncompleteMessage {
        /// Chunks received.
        chunks: u32,
        /// Payload bytes received.
        bytes: usize,
        /// The chunk id that was expected next.
        expected_id: u32,
    },
    /// A chunk header claims more payload than fits in an atomic write: not this format.
    ChunkTooLarge {
        /// The size the header claims.
        size: u32,
        /// The largest payload a chunk carries in this mode.
        max: usize,
    },
    /// A writer's chunk ids did not count down (two messages of one writer interleaved, or a
    /// writer died mid-message and its pid was reused); the partial message was dropped.
    ChunkOutOfOrder {
        /// The id the partial message needed next.
        expected: u32,
        /// The id that arrived (the chunk starts a new message).
        got: u32,
        /// Payload bytes of the dropped partial message.
        dropped: usize,
    },
    /// Mixed mode: a message chunk is not followed by `0x0F`.
    MissingFrameEnd {
        /// The byte found where `0x0F` belongs.
        found: u8,
    },
    /// Mixed mode: no `0x0F` within a burst's maximum size after `0x0E` (or a zstd burst
    /// frame not followed by `0x0F`): stray data, not a burst.
    BadBurst,
    /// Compression is on and a message or burst is not a valid zstd frame (or decompresses
    /// past the size limit); it was dropped and decoding goes on.
    BadCompressedData {
        /// Bytes of the frame as received.
        len: usize,
    },
}

/// A break in the wire format, with its stream offset and the writer when known.
///
/// Fatal errors ([`is_fatal`](Self::is_fatal)) leave the stream unreadable (normal mode has no
/// marker to resynchronize on): the decoder returns the same error from then on. Other errors
/// are reported once and decoding goes on after the damaged part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError {
    kind: ProtocolErrorKind,
    offset: u64,
    writer: Option<Writer>,
    fatal: bool,
    detail: Option<String>,
}

impl ProtocolError {
    pub(crate) fn new(
        kind: ProtocolErrorKind,
        offset: u64,
        writer: Option<Writer>,
        fatal: bool,
    ) -> Self {
        ProtocolError {
            kind,
            offset,
            writer,
            fatal,
            detail: None,
        }
    }

    /// Adds the underlying cause (the zstd error text) to the message.
    pub(crate) fn with_detail(mut self, detail: String) -> Self {
        self.detail = Some(detail);
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> ProtocolErrorKind {
        self.kind
    }

    /// Stream offset of the chunk or frame at fault (for an incomplete message: its first
    /// chunk).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The writer, when the chunk header was readable.
    pub fn writer(&self) -> Option<Writer> {
        self.writer
    }

    /// True when decoding cannot go on (the decoder keeps returning this error).
    pub fn is_fatal(&self) -> bool {
        self.fatal
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.offset;
        let who = match self.writer {
            Some(w) => format!(" from {w}"),
            None => String::new(),
        };
        match self.kind {
            ProtocolErrorKind::TruncatedChunk { have, need } => {
                write!(f, "stream ended inside the chunk at byte {at}{who}: ")?;
                match need {
                    Some(need) => write!(f, "{have} of {need} bytes arrived"),
                    None => write!(f, "{have} bytes arrived, its header is incomplete"),
                }
            }
            ProtocolErrorKind::TruncatedBurst { have } => write!(
                f,
                "stream ended inside the burst at byte {at}: {have} bytes and no closing 0x0F"
            ),
            ProtocolErrorKind::IncompleteMessage {
                chunks,
                bytes,
                expected_id,
            } => write!(
                f,
                "stream ended with a half-received message{who} started at byte {at}: \
                 {chunks} chunk(s), {bytes} bytes, chunk id {expected_id} never arrived"
            ),
            ProtocolErrorKind::ChunkTooLarge { size, max } => write!(
                f,
                "chunk at byte {at}{who} claims {size} payload bytes (max {max}): \
                 not an Atomic::Pipe stream, or a mismatched mode"
            ),
            ProtocolErrorKind::ChunkOutOfOrder {
                expected,
                got,
                dropped,
            } => write!(
                f,
                "chunk at byte {at}{who} has id {got}, expected {expected}: two messages \
                 interleaved; dropped the partial message ({dropped} bytes)"
            ),
            ProtocolErrorKind::MissingFrameEnd { found } => write!(
                f,
                "message chunk at byte {at}{who} is not closed by 0x0F (found 0x{found:02X})"
            ),
            ProtocolErrorKind::BadBurst => write!(
                f,
                "0x0E at byte {at} opens no valid burst; its bytes are kept as line data"
            ),
            ProtocolErrorKind::BadCompressedData { len } => {
                write!(
                    f,
                    "compressed data ({len} bytes){who} ending before byte {at} does not decompress"
                )?;
                match &self.detail {
                    Some(d) => write!(f, ": {d}"),
                    None => Ok(()),
                }
            }
        }
    }
}

impl std::error::Error for ProtocolError {}

impl From<ProtocolError> for std::io::Error {
    fn from(e: ProtocolError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}
