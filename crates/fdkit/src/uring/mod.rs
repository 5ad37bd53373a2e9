//! io_uring: the probe that says whether and how it works here, and [`Ring`], a safe ring
//! that owns what its ops lend the kernel until they complete.
//!
//! - `probe.rs`: [`probe`] (availability, supported opcodes, `DEFER_TASKRUN`).
//! - `setup.rs`: the one ring setup (`Setup`: flags, best first, `EINVAL` falls back), the
//!   timed wait, and [`KernelVersion`]; used by [`Ring`], [`probe`] and the static server.
//! - `teardown.rs`: the one way a ring ends: bounded wait for what is in flight, then leak it.
//! - `ring.rs`: [`Ring`]: submit, wait, close.
//! - `ops.rs`: the op set, written once ([`ring_ops!`](crate::ring_ops), one row per op:
//!   `nop`, `socket`, `accept`, `recv`, `send`, …, `cancel`, `link_timeout`, `openat`,
//!   `statx`, `fsync`, `sendmsg`, `recvmsg`, `read_fixed`, `write_fixed`), from which [`Ring`]'s
//!   op methods, [`OPS`] and the binding's Python methods follow; registered files and
//!   buffers live in `ring.rs`.
//! - `chain.rs`: SQE flags ([`SqeFlags`], [`Ring::with_flags`]), linked chains, and the
//!   bookkeeping of `skip_success` ops that post no completion.
//! - `reap.rs`: completion queue entries into [`Completion`]s; overflow flush; cancel order.
//! - `epoll_wait.rs`: `IORING_OP_EPOLL_WAIT`, the aio reactor's wait (not a Python `Ring` op).
//! - `slots.rs`: what each op in flight owns.
//! - `buf_ring.rs`: provided-buffer rings for multishot receives.
//! - `completion.rs`: [`Completion`], [`CompletionFlags`], [`OpKind`].
//!
//! Errors: setting up, queueing and waiting return [`crate::Result`] (the kernel's errno in
//! [`crate::Error::Os`], or an argument refused before it reached the kernel); an op's own
//! failure arrives in its completion ([`Completion::error`]).
//!
//! # Example
//!
//! Read a pipe through the ring: queue the read, write the bytes, wait for the completion.
//! io_uring can be missing or forbidden (seccomp, `kernel.io_uring_disabled`), so a program
//! asks [`probe`] first.
//!
//! ```
//! use fdkit::fd::{pipe2, write, PipeFlags};
//! use fdkit::uring::{probe, OpKind, Ring};
//! use std::os::fd::AsFd;
//! use std::time::Duration;
//!
//! # fn main() -> std::io::Result<()> {
//! let here = probe();
//! if !here.available {
//!     eprintln!("no io_uring here: {}", here.reason.unwrap_or_default());
//!     return Ok(());
//! }
//! let mut ring = Ring::new(8)?;
//! let (r, w) = pipe2(PipeFlags::CLOEXEC)?;
//! ring.nop(1)?;
//! ring.read(r.as_fd(), 64, None, 2)?; // the ring owns the 64-byte buffer until it completes
//! write(&w, b"through the ring")?;
//!
//! let mut done = Vec::new();
//! while done.len() < 2 {
//!     done.extend(ring.wait(2 - done.len(), Some(Duration::from_secs(10)))?);
//! }
//! done.sort_by_key(|c| c.user_data);
//! assert_eq!((done[0].op, done[0].result), (OpKind::Nop, 0));
//! assert_eq!(done[1].op, OpKind::Read);
//! assert_eq!(done[1].data.as_deref(), Some(&b"through the ring"[..]));
//! # Ok(())
//! # }
//! ```
//!
//! # References
//!  - [io_uring(7)](https://man7.org/linux/man-pages/man7/io_uring.7.html)
//!  - [io_uring_setup(2)](https://man7.org/linux/man-pages/man2/io_uring_setup.2.html)
//!  - [io_uring_enter(2)](https://man7.org/linux/man-pages/man2/io_uring_enter.2.html)

mod buf_ring;
mod chain;
mod completion;
mod epoll_wait;
mod errno;
mod ops;
mod probe;
mod reap;
mod ring;
mod setup;
mod slots;
mod sqe;
mod teardown;

pub(crate) use buf_ring::BufRing;
pub use buf_ring::MAX_BUFFERS;
pub use completion::{Completion, CompletionFlags, OpFd, OpKind, Statx, Target};
pub(crate) use epoll_wait::EVENT_SIZE as EPOLL_EVENT_SIZE;
pub use ops::{FixedData, OpSpec, OPS};
pub(crate) use probe::{explain, missing_op};
pub use probe::{probe, Availability, OpSupport};
pub use ring::{Ring, RingOptions, CLOSE_TIMEOUT, MAX_ENTRIES};
pub(crate) use setup::{enter_timeout, Built, Setup};
pub use setup::{KernelVersion, MIN_KERNEL};
pub use sqe::SqeFlags;
pub(crate) use teardown::{drain, leak, InFlight};
