//! Atomic pipe messages: many writers, one pipe, whole messages, wire-compatible with Perl's
//! Atomic::Pipe 0.028.
//!
//! Writes of at most `PIPE_BUF` bytes to a pipe are atomic (pipe(7)); larger ones interleave.
//! Atomic::Pipe splits each message into chunks of at most `PIPE_BUF` bytes with a small header
//! (pid, tid, a countdown chunk id, size) and reassembles them per writer on the reading side.
//! This module speaks its exact wire format, described in [`wire`] (the repository keeps bytes
//! written by the Perl module in `tests/vectors/atomic_pipe_vectors/`, and the tests check both
//! directions against them).
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
//!
//! Errors: the I/O ends return the kernel's [`Errno`](crate::Errno) (a vanished reader is
//! `EPIPE`, never SIGPIPE); the reader's [`ReadError`] adds the [`ProtocolError`] of a stream
//! that breaks the format. Both convert into [`std::io::Error`] with `?`.
//!
//! # Example
//!
//! Two threads write whole messages into one pipe; the reader gets each message whole, with
//! the writer that sent it:
//!
//! ```
//! use fdkit::atomic_pipe::{Event, MessageReader, MessageWriter, Mode, Wait};
//! use fdkit::fd::{no_checkpoint, pipe2, PipeFlags};
//! use std::time::Duration;
//!
//! # fn main() -> std::io::Result<()> {
//! let (r, w) = pipe2(PipeFlags::CLOEXEC)?;
//! let mut writer = MessageWriter::new(w, Mode::Normal)?;
//! let big = vec![b'x'; 10_000]; // more than PIPE_BUF: three chunks, reassembled
//! let other = std::thread::spawn({
//!     let w = fdkit::fd::dup(writer.fd()?, true)?;
//!     move || -> std::io::Result<()> {
//!         let mut writer = MessageWriter::new(w, Mode::Normal)?;
//!         writer.write_message(b"from the other thread", &mut no_checkpoint)?;
//!         Ok(())
//!     }
//! });
//! writer.write_message(&big, &mut no_checkpoint)?;
//! drop(writer); // with the other writer gone too, the reader sees the end of the stream
//! other.join().unwrap()?;
//!
//! let mut reader = MessageReader::new(r, Mode::Normal)?;
//! let wait = Wait::timeout(Some(Duration::from_secs(10)));
//! let mut messages = Vec::new();
//! while let Some(event) = reader.next_event(wait, &mut no_checkpoint)? {
//!     if let Event::Message { writer, data } = event {
//!         messages.push((writer, data));
//!     }
//! }
//! assert!(reader.is_eof());
//! messages.sort_by_key(|(_, data)| data.len());
//! assert_eq!(messages[0].1, b"from the other thread");
//! assert_eq!(messages[1].1, big);
//! assert_ne!(messages[0].0, messages[1].0); // different threads: different writers
//! # Ok(())
//! # }
//! ```
//!
//! # References
//!  - [pipe(7)](https://man7.org/linux/man-pages/man7/pipe.7.html) (`PIPE_BUF`)
//!  - [Atomic::Pipe](https://metacpan.org/pod/Atomic::Pipe)

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
