//! Atomic pipe messages: many writers, one pipe, whole messages, wire-compatible with Perl's
//! Atomic::Pipe 0.028.
//!
//! Writes of at most `PIPE_BUF` bytes to a pipe are atomic (pipe(7)); larger ones interleave.
//! Atomic::Pipe splits each message into chunks of at most `PIPE_BUF` bytes with a small header
//! (pid, tid, a countdown chunk id, size) and reassembles them per writer on the reading side.
//! This module speaks its exact wire format, described in [`wire`] and in
//! `../shared/atomic_pipe_vectors/README.md`.
//!
//! The pure codec (no I/O):
//! - encoding: [`message_chunks`] / [`encode_message`] (a message → its chunks for a writer),
//!   [`encode_burst`] (one atomic write), [`fits_in_burst`], [`chunk_count`];
//! - decoding: [`Decoder`] (bytes split anywhere → [`Event`]s, per-writer reassembly, linear
//!   time, [`ProtocolError`]s that name the writer and the byte offset).
//!
//! The I/O ends: [`MessageWriter`] (atomic writes, batching, a non-blocking queue flushed with
//! poll, `EPIPE` instead of SIGPIPE) and [`MessageReader`] (large reads into the decoder,
//! deadlines, decompression). [`Writer::current`] is the calling thread's identity.
//!
//! Compression (zstd, [`Compression`]) happens outside the codec: a compressed message is one zstd frame,
//! chunked like any message; the codec hands it back still compressed. In mixed mode,
//! [`Decoder::with_zstd_bursts`] finds a compressed burst's end from the frame itself
//! ([`zstd_frame_len`]), so a `0x0F` inside compressed data does not cut it short.

mod compress;
mod decoder;
mod decoder_mixed;
mod encoder;
mod identity;
mod pipe_end;
mod protocol_error;
mod reader;
mod reassembly;
mod wait;
pub mod wire;
mod write_queue;
mod writer;
mod zstd_frame;

pub use compress::{
    Compression, Compressor, DecompressError, Decompressor, DEFAULT_LEVEL, MAX_DECOMPRESSED,
};
pub use decoder::{Decoder, Event, Events};
pub use encoder::{
    chunk_count, encode_burst, encode_burst_unchecked, encode_message, encoded_len, fits_in_burst,
    message_chunks, BurstError, Chunk, MessageChunks,
};
pub use protocol_error::{ProtocolError, ProtocolErrorKind};
pub use reader::{MessageReader, ReadError};
pub use wait::Wait;
pub use wire::{Header, Mode, Writer, PIPE_BUF};
pub use writer::{MessageWriter, DROP_STALL_TIMEOUT};
pub use zstd_frame::{zstd_frame_len, FrameScan, ZSTD_MAGIC};
