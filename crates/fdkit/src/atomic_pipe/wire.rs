//! The Atomic::Pipe wire format: sizes, control bytes, the 16-byte chunk header.
//!
//! As written by Perl's Atomic::Pipe 0.028 (the vectors and their notes are in the repository's
//! `tests/vectors/atomic_pipe_vectors/`):
//!
//! - **Message chunk (normal mode)**: a 16-byte header then the payload, in one `write(2)` of at
//!   most `PIPE_BUF` bytes, so the kernel never interleaves it with another writer's chunk
//!   (pipe(7), "PIPE_BUF"). Header fields are native-endian (little-endian on x86-64 and
//!   aarch64): pid `i32`, tid `i32`, chunk id `u32` (counts down N-1 … 0; 0 ends the message),
//!   payload size `u32` (≤ 4080).
//! - **Burst**: one atomic write with no header (≤ `PIPE_BUF` bytes).
//! - **Mixed data mode**: plain writes (lines) and framed data share one stream. A burst is
//!   `0x0E` + data + `0x0F`; a message chunk is `0x0E 0x10` + header + payload (≤ 4077) +
//!   `0x0F`. Everything outside frames is line data, split after each `\n`.

/// The largest write the kernel keeps atomic on a pipe (Linux: 4096). See pipe(7).
pub const PIPE_BUF: usize = 4096;
/// Bytes in a chunk header: pid, tid, chunk id, payload size (4 bytes each).
pub const HEADER_LEN: usize = 16;
/// The most payload bytes one normal-mode chunk carries: `PIPE_BUF - HEADER_LEN` = 4080.
pub const MAX_PAYLOAD: usize = PIPE_BUF - HEADER_LEN;
/// The most payload bytes one mixed-mode chunk carries (3 framing bytes fewer) = 4077.
pub const MIXED_MAX_PAYLOAD: usize = MAX_PAYLOAD - 3;
/// Mixed mode: the byte that opens a frame (ASCII Shift Out).
pub const FRAME_START: u8 = 0x0E;
/// Mixed mode: the byte that closes a frame (ASCII Shift In).
pub const FRAME_END: u8 = 0x0F;
/// Mixed mode: after [`FRAME_START`], marks the frame as a message chunk (ASCII DLE).
pub const MESSAGE_KEY: u8 = 0x10;

/// How the stream is framed; both ends must agree (nothing on the wire says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Message chunks back to back; bursts are raw bytes a message reader cannot tell apart.
    Normal,
    /// Lines, bursts and message chunks in one stream, frames marked by control bytes.
    Mixed,
}

impl Mode {
    /// The most payload bytes one chunk carries in this mode (4080 normal, 4077 mixed).
    pub const fn max_payload(self) -> usize {
        match self {
            Mode::Normal => MAX_PAYLOAD,
            Mode::Mixed => MIXED_MAX_PAYLOAD,
        }
    }

    /// The most data bytes one burst carries in this mode (4096 normal, 4094 mixed).
    pub const fn max_burst(self) -> usize {
        match self {
            Mode::Normal => PIPE_BUF,
            Mode::Mixed => PIPE_BUF - 2,
        }
    }

    /// Framing bytes around a burst's data (0 normal, 2 mixed).
    pub const fn burst_overhead(self) -> usize {
        match self {
            Mode::Normal => 0,
            Mode::Mixed => 2,
        }
    }

    /// Bytes a chunk adds to its payload: the header, plus 3 framing bytes in mixed mode.
    pub const fn chunk_overhead(self) -> usize {
        match self {
            Mode::Normal => HEADER_LEN,
            Mode::Mixed => HEADER_LEN + 3,
        }
    }
}

/// One writer of a shared pipe: messages are reassembled per (pid, tid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Writer {
    /// The writer's process id at write time.
    pub pid: i32,
    /// The writer's thread id (0 on the main thread / when unthreaded).
    pub tid: i32,
}

impl Writer {
    /// A writer from its process and thread ids.
    pub const fn new(pid: i32, tid: i32) -> Self {
        Writer { pid, tid }
    }
}

impl std::fmt::Display for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "writer pid {} tid {}", self.pid, self.tid)
    }
}

/// The 16-byte header in front of every message chunk (Perl: `pack("l2L2", ...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Who wrote the chunk.
    pub writer: Writer,
    /// Counts down from N-1 to 0 over a message's N chunks; 0 marks the last chunk.
    pub chunk_id: u32,
    /// Payload bytes following the header in this chunk.
    pub size: u32,
}

impl Header {
    /// The header's wire bytes (native-endian, as Perl's `pack("l2L2")`).
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&self.writer.pid.to_ne_bytes());
        b[4..8].copy_from_slice(&self.writer.tid.to_ne_bytes());
        b[8..12].copy_from_slice(&self.chunk_id.to_ne_bytes());
        b[12..16].copy_from_slice(&self.size.to_ne_bytes());
        b
    }

    /// Reads a header from its wire bytes; every bit pattern is a header (validate `size`).
    pub fn from_bytes(b: &[u8; HEADER_LEN]) -> Self {
        let word = |i: usize| [b[i], b[i + 1], b[i + 2], b[i + 3]];
        Header {
            writer: Writer::new(i32::from_ne_bytes(word(0)), i32::from_ne_bytes(word(4))),
            chunk_id: u32::from_ne_bytes(word(8)),
            size: u32::from_ne_bytes(word(12)),
        }
    }

    /// Reads the writer from the first 8 header bytes, if that many are present.
    pub(crate) fn writer_prefix(b: &[u8]) -> Option<Writer> {
        let pid: [u8; 4] = b.get(0..4)?.try_into().ok()?;
        let tid: [u8; 4] = b.get(4..8)?.try_into().ok()?;
        Some(Writer::new(
            i32::from_ne_bytes(pid),
            i32::from_ne_bytes(tid),
        ))
    }
}
