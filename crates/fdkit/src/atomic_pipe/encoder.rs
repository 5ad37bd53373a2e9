//! Encoding: a message into atomic chunks, data into a burst, byte-for-byte as Atomic::Pipe.
//!
//! Every item here is at most `PIPE_BUF` bytes and must go to the pipe in one `write(2)` (or
//! `writev(2)`) so it stays atomic; several whole items may share one write while the total is
//! still ≤ `PIPE_BUF`. See pipe(7) and the vectors' README.

use super::wire::{Header, Mode, Writer, FRAME_END, FRAME_START, HEADER_LEN, MESSAGE_KEY};
use std::fmt;

/// How many chunks a message of `len` bytes takes in `mode` (0 for an empty message).
pub fn chunk_count(mode: Mode, len: usize) -> usize {
    len.div_ceil(mode.max_payload())
}

/// Wire bytes of a message of `len` bytes in `mode`, all chunks together.
pub fn encoded_len(mode: Mode, len: usize) -> usize {
    len + chunk_count(mode, len) * mode.chunk_overhead()
}

/// One chunk of a message, ready for one atomic write: `head`, then `payload`, then `tail`.
///
/// The three parts are kept apart so a writer can `writev(2)` them without copying the payload.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    head: [u8; HEADER_LEN + 2],
    head_len: u8,
    payload: &'a [u8],
    tail: &'static [u8],
    header: Header,
}

impl<'a> Chunk<'a> {
    /// Framing before the payload: the header (with `0x0E 0x10` in front in mixed mode).
    pub fn head(&self) -> &[u8] {
        &self.head[..usize::from(self.head_len)]
    }

    /// The slice of the message this chunk carries.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Framing after the payload: `0x0F` in mixed mode, nothing in normal mode.
    pub fn tail(&self) -> &'static [u8] {
        self.tail
    }

    /// The chunk's header fields.
    pub fn header(&self) -> Header {
        self.header
    }

    /// Total wire bytes of the chunk (never more than `PIPE_BUF`).
    #[allow(clippy::len_without_is_empty)] // a chunk always has its header
    pub fn len(&self) -> usize {
        usize::from(self.head_len) + self.payload.len() + self.tail.len()
    }

    /// Appends the chunk's wire bytes to `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.head());
        out.extend_from_slice(self.payload);
        out.extend_from_slice(self.tail);
    }
}

/// The chunks of one message, first to last (chunk ids N-1 down to 0). See [`message_chunks`].
#[derive(Debug, Clone)]
pub struct MessageChunks<'a> {
    mode: Mode,
    writer: Writer,
    rest: &'a [u8],
    remaining: usize,
}

impl<'a> Iterator for MessageChunks<'a> {
    type Item = Chunk<'a>;

    fn next(&mut self) -> Option<Chunk<'a>> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let take = self.rest.len().min(self.mode.max_payload());
        let (payload, rest) = self.rest.split_at(take);
        self.rest = rest;
        let header = Header {
            writer: self.writer,
            // chunk_count fits in u32 for any message below 16 TiB; larger ones are refused
            // by message_chunks.
            chunk_id: self.remaining as u32,
            size: take as u32,
        };
        let mut head = [0u8; HEADER_LEN + 2];
        let (head_len, tail): (usize, &'static [u8]) = match self.mode {
            Mode::Normal => {
                head[..HEADER_LEN].copy_from_slice(&header.to_bytes());
                (HEADER_LEN, &[])
            }
            Mode::Mixed => {
                head[0] = FRAME_START;
                head[1] = MESSAGE_KEY;
                head[2..].copy_from_slice(&header.to_bytes());
                (HEADER_LEN + 2, &[FRAME_END])
            }
        };
        Some(Chunk {
            head,
            head_len: head_len as u8,
            payload,
            tail,
            header,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for MessageChunks<'_> {}

/// Splits `message` into the atomic chunks Atomic::Pipe writes for `writer` in `mode`.
///
/// An empty message has no chunks (Atomic::Pipe writes nothing for it). Panics if the message
/// needs more than `u32::MAX` chunks (16 TiB), which the header cannot count.
pub fn message_chunks(mode: Mode, writer: Writer, message: &[u8]) -> MessageChunks<'_> {
    let remaining = chunk_count(mode, message.len());
    assert!(
        u32::try_from(remaining).is_ok(),
        "message too large for the chunk id field"
    );
    MessageChunks {
        mode,
        writer,
        rest: message,
        remaining,
    }
}

/// Appends every chunk of `message` to `out`, back to back; returns the number of chunks.
///
/// The result is the exact byte stream Atomic::Pipe's `write_message` puts on the pipe; each
/// chunk still has to be written atomically (see [`message_chunks`] for the boundaries).
pub fn encode_message(mode: Mode, writer: Writer, message: &[u8], out: &mut Vec<u8>) -> usize {
    out.reserve(encoded_len(mode, message.len()));
    let chunks = message_chunks(mode, writer, message);
    let n = chunks.len();
    for chunk in chunks {
        chunk.append_to(out);
    }
    n
}

/// Why a burst was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BurstError {
    /// The data (with its framing) does not fit in one atomic write of `PIPE_BUF` bytes.
    TooLarge {
        /// Data bytes offered.
        len: usize,
        /// The most data bytes a burst carries in this mode.
        max: usize,
    },
    /// Mixed mode: the data holds `0x0F`, which a reader takes for the end of the burst.
    ContainsFrameEnd {
        /// Index of the first `0x0F` in the data.
        at: usize,
    },
    /// Mixed mode: the data starts with `0x10`, which a reader takes for a message chunk.
    StartsWithMessageKey,
}

impl fmt::Display for BurstError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BurstError::TooLarge { len, max } => {
                write!(
                    f,
                    "burst of {len} bytes does not fit in one atomic write (max {max})"
                )
            }
            BurstError::ContainsFrameEnd { at } => write!(
                f,
                "burst data holds 0x0F at byte {at}: a mixed-mode reader would cut it there"
            ),
            BurstError::StartsWithMessageKey => write!(
                f,
                "burst data starts with 0x10: a mixed-mode reader would take it for a message"
            ),
        }
    }
}

impl std::error::Error for BurstError {}

/// Atomic::Pipe's `fits_in_burst`: the wire size of a burst of `len` data bytes, if it fits.
pub fn fits_in_burst(mode: Mode, len: usize) -> Option<usize> {
    (len <= mode.max_burst()).then_some(len + mode.burst_overhead())
}

/// Appends a burst (`data` as one atomic write, framed in mixed mode) to `out`; returns its
/// wire size.
///
/// Refuses what Atomic::Pipe would silently garble: in mixed mode, data holding `0x0F` or
/// starting with `0x10` (a reader would cut or misread it). Use [`encode_burst_unchecked`] for
/// self-delimiting data (a zstd frame) read by a [`Decoder`](super::Decoder) that knows it.
pub fn encode_burst(mode: Mode, data: &[u8], out: &mut Vec<u8>) -> Result<usize, BurstError> {
    if mode == Mode::Mixed {
        if data.first() == Some(&MESSAGE_KEY) {
            return Err(BurstError::StartsWithMessageKey);
        }
        if let Some(at) = data.iter().position(|&b| b == FRAME_END) {
            return Err(BurstError::ContainsFrameEnd { at });
        }
    }
    encode_burst_unchecked(mode, data, out)
}

/// Like [`encode_burst`] but checks only the size, as Atomic::Pipe's `write_burst` does.
pub fn encode_burst_unchecked(
    mode: Mode,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Result<usize, BurstError> {
    let size = fits_in_burst(mode, data.len()).ok_or(BurstError::TooLarge {
        len: data.len(),
        max: mode.max_burst(),
    })?;
    out.reserve(size);
    match mode {
        Mode::Normal => out.extend_from_slice(data),
        Mode::Mixed => {
            out.push(FRAME_START);
            out.extend_from_slice(data);
            out.push(FRAME_END);
        }
    }
    Ok(size)
}

impl From<BurstError> for std::io::Error {
    /// [`std::io::ErrorKind::InvalidInput`] (the caller's data cannot go as one burst), carrying
    /// the [`BurstError`].
    fn from(e: BurstError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}
