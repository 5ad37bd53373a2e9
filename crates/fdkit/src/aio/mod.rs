//! The engine under `fdkit.aio`, the asyncio event loop: a [`Reactor`] that runs everything
//! the loop waits for through one io_uring, with one io_uring_enter(2) per loop iteration.
//!
//! It knows two kinds of interest, and nothing of Python:
//! - **selector interest** (`asyncio`'s `add_reader`/`add_writer`): level-triggered readiness,
//!   built from one-shot `IORING_OP_POLL_ADD`s re-armed after each report, so a handler that
//!   leaves data unread is told again, as epoll(7) in level mode would;
//! - **streams**: a connected socket read by a multishot receive on a provided-buffer ring
//!   (the bytes arrive with the completion: no readiness round trip, no recv(2) call), paused
//!   and resumed for flow control without losing a byte;
//! - **listeners**: a listening socket served by one multishot accept.
//!
//! Every op carries a `user_data` never used before, so a completion of a cancelled op, or of
//! an op on an fd number since closed and reused, can never reach a later owner.

mod reactor;

pub use reactor::{Event, Interest, ListenerId, Reactor, ReactorOptions, StreamId};
