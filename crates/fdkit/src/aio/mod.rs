//! The engine under `fdkit.aio`, the asyncio event loop: a [`Reactor`] that waits for what
//! the loop waits for through one io_uring, one io_uring_enter(2) per loop iteration.
//!
//! The reactor **waits and reaps; it never calls its user**. [`Reactor::poll`] submits what
//! changed, waits, files each completion where it belongs, and returns what is ready: the
//! loop then takes the bytes ([`Reactor::recv`]) or the connections ([`Reactor::accept`]) when
//! it runs the callback that wants them, as asyncio's loop calls recv(2) and accept(2) when it
//! runs its reader callbacks. So everything asyncio decides between two callbacks (a pause, a
//! close, an exception, a callback replaced) holds for the next one.
//!
//! It knows three kinds of interest, and nothing of Python:
//! - **readiness** (`set_interest`): level-triggered, from one-shot `IORING_OP_POLL_ADD`s re-armed
//!   after each report, as epoll(7) in level mode. `fdkit.aio` registers one fd here, the epoll
//!   instance that holds asyncio's `add_reader`/`add_writer` registrations, so that those keep
//!   epoll's semantics exactly (a closed fd leaves the set, a regular file is refused);
//! - **streams**: a connected socket read by a multishot receive on a provided-buffer ring
//!   (the bytes arrive with the completion: no readiness round trip, no recv(2) call), kept in
//!   the stream's inbox until taken, paused and resumed for flow control without losing a byte;
//! - **listeners**: a listening socket served by one multishot accept, the connections kept
//!   in the listener's queue until taken.
//!
//! Every op carries a `user_data` never used before, so a completion of a cancelled op, or of
//! an op on an fd number since closed and reused, can never reach a later owner.

mod interest;
mod listener;
mod reactor;
mod stream;
mod timers;

pub use interest::Interest;
pub use listener::ListenerId;
pub use reactor::{Reactor, ReactorOptions, Ready};
pub use stream::{Received, StreamId};
pub use timers::TimerHeap;
