//! fdkit: Linux I/O at kernel speed.
//!
//! The core of fdkit, pure Rust with no Python in it: the kernel's fast paths behind small
//! functions named after the syscalls they wrap, which take [`BorrowedFd`](std::os::fd::BorrowedFd)
//! (or anything [`AsFd`](std::os::fd::AsFd)) and return [`OwnedFd`](std::os::fd::OwnedFd) for
//! new fds. A Rust program can use it on its own; the Python binding (`fdkit-py`, the
//! `fdkit` package) is thin glue over it.
//!
//! # Capabilities
//!
//! - [`fd`]: fd-native syscalls: sockets ([`fd::accept_many`] drains a listener in one
//!   call), files and temporaries, pipes, `fcntl`, socket options, `stat`, a `poll` that keeps
//!   its deadline across signals, [`fd::sendfile_all`]. Every fd is close-on-exec from birth.
//! - [`zerocopy`]: moving bytes inside the kernel. [`zerocopy::transfer_all`] (and the full
//!   [`zerocopy::transfer`]) picks copy_file_range, sendfile or splice for the two fd kinds and
//!   falls back to the next path at run time; [`zerocopy::Pipe`] with `tee`;
//!   [`zerocopy::proxy_all`] (and [`zerocopy::proxy`]) relays two sockets both ways;
//!   [`zerocopy::relay`] one way, optionally recorded.
//! - [`uring`]: io_uring: [`uring::probe`] says whether and how it works here;
//!   [`uring::Ring`] is a safe ring that owns what its ops lend the kernel until they complete.
//! - [`aio`]: the native parts of `fdkit.aio`'s asyncio loop: [`aio::Reactor`] waits through one
//!   io_uring for the loop's epoll instance, one io_uring_enter(2) per sleeping iteration, and
//!   leaves nothing armed between waits.
//! - [`atomic_pipe`]: many writers, one pipe, whole messages, wire-compatible with Perl's
//!   Atomic::Pipe: the pure codec, [`atomic_pipe::MessageWriter`] and
//!   [`atomic_pipe::MessageReader`], optional zstd compression.
//! - [`http`]: the small HTTP/1.1 request parser, target resolution, ranges, preconditions and
//!   response heads the static server uses; pure logic, no I/O, never panics.
//! - [`servers`]: native servers whose hot loop never leaves Rust: a static file server
//!   (io_uring or epoll) and a forwarding proxy (splice through pipes).
//! - [`error`]: [`Error`], [`Result`], and the conversions described below.
//!
//! The layers go one way: `fd` and `http` know nothing of the others; `zerocopy`, `uring` and
//! `atomic_pipe` use `fd` only; `aio` uses `uring` and `fd`; `servers` use everything; nothing
//! uses `servers`.
//!
//! # Errors
//!
//! Which error type a call returns follows from where its failures can come from:
//!
//! - **Only the kernel**: `Result<T, `[`Errno`]`>`, rustix's errno (what `rustix::io::Result`
//!   is), with nothing lost: `Copy`, no allocation, matched by name (`Errno::AGAIN`). Most of
//!   [`fd`], [`zerocopy`] and the I/O ends of [`atomic_pipe`].
//! - **The kernel, or a misuse fdkit refuses first** (a blocking listener given to
//!   [`fd::accept_many`], a ring size out of range): [`Result<T>`](Result), that is
//!   `Result<T, `[`Error`]`>`, where [`Error::Os`] keeps the kernel's errno intact. The
//!   [`uring`] ring and [`fd::accept_many`].
//! - **The kernel, or something outside it** (name resolution, zstd, a server's
//!   configuration): [`std::io::Result`], with the kernel's errno kept in
//!   [`raw_os_error`](std::io::Error::raw_os_error). The [`servers`] and the compression
//!   settings of [`atomic_pipe`].
//! - **Pure parsers and codecs** (no syscall) return what went wrong in their own terms:
//!   [`atomic_pipe::ProtocolError`] (which writer, which byte),
//!   [`atomic_pipe::BurstError`], an [`http::Status`] to answer with. The atomic pipe reader,
//!   which reads and decodes, returns [`atomic_pipe::ReadError`]: an errno or a protocol error.
//!
//! Every one of them converts into [`std::io::Error`], so `?` works in a function that
//! returns `std::io::Result` whatever it calls: an errno stays an errno
//! ([`raw_os_error`](std::io::Error::raw_os_error)), and fdkit's own errors ride along as the
//! payload ([`get_ref`](std::io::Error::get_ref) and `downcast_ref` give them back). The
//! [`error`] module lists the conversions.
//!
//! Long loops take a `checkpoint` closure, called after `EINTR` and between waits: it returns
//! `Err` to stop the loop (the Python binding runs signal handlers there, so Ctrl-C works).
//! Rust callers pass [`fd::no_checkpoint`], or [`fd::stop_when`] to stop from another thread;
//! the simple forms ([`zerocopy::transfer_all`], [`zerocopy::proxy_all`]) need none.
//!
//! # Example
//!
//! A file into a pipe by splice, the bytes never copied through userspace:
//!
//! ```
//! use fdkit::fd::{mkstemp, pipe2, read, PipeFlags};
//! use fdkit::zerocopy::transfer_all;
//! use std::io::{Seek, Write};
//!
//! # fn main() -> std::io::Result<()> {
//! let (fd, path) = mkstemp(&std::env::temp_dir(), "fdkit-".as_ref(), ".txt".as_ref(), true)?;
//! std::fs::remove_file(path)?;
//! let mut file = std::fs::File::from(fd);
//! file.write_all(b"hello from the page cache")?;
//! file.rewind()?;
//!
//! let (r, w) = pipe2(PipeFlags::CLOEXEC)?;
//! assert_eq!(transfer_all(&file, &w)?, 25);
//!
//! let mut buf = [0u8; 64];
//! let n = read(&r, &mut buf)?;
//! assert_eq!(&buf[..n], b"hello from the page cache");
//! # Ok(())
//! # }
//! ```
//!
//! # Platform
//!
//! Linux only (the syscalls are Linux's); io_uring where the kernel allows it, probed at run
//! time. Each capability's module has a runnable example; see also the crate README.

pub mod aio;
pub mod atomic_pipe;
pub mod error;
pub mod fd;
pub mod http;
pub mod servers;
pub mod uring;
pub mod zerocopy;

pub use error::{Error, Result};
pub use rustix::io::Errno;

/// The crate README's example, run as a doctest so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
