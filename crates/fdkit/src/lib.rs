//! fdkit: Linux I/O at kernel speed.
//!
//! The core crate is pure Rust and knows nothing of Python. It wraps the kernel's fast paths
//! behind small, syscall-named functions that take [`BorrowedFd`](std::os::fd::BorrowedFd) and
//! return [`OwnedFd`](std::os::fd::OwnedFd), so a Rust program can use it on its own and the
//! Python binding (`fdkit-py`) stays thin glue.
//!
//! Families:
//! - [`atomic_pipe`]: the Atomic::Pipe wire codec (encode messages into PIPE_BUF-sized atomic
//!   chunks, decode a stream back per writer); the I/O layers come next.
//! - [`fd`]: fd-native syscalls (sockets, files, pipes, `accept_many`, `sendfile`).
//! - [`zerocopy`]: `transfer` (the best kernel path for two fds, with fallbacks), `Pipe`,
//!   `proxy`, `relay`.
//! - [`servers`]: native servers (the forwarding proxy).
//! - [`uring`]: io_uring, starting with the probe that says whether and how it works here.

pub mod atomic_pipe;
pub mod error;
pub mod fd;
pub mod http;
pub mod servers;
pub mod uring;
pub mod zerocopy;

pub use error::{Error, Result};
pub use rustix::io::Errno;
