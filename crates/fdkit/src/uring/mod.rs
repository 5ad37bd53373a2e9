//! io_uring: the probe that says whether and how it works here, and [`Ring`], a safe ring
//! that owns what its ops lend the kernel until they complete.
//!
//! - `probe.rs`: [`probe`] (availability, supported opcodes, `DEFER_TASKRUN`).
//! - `setup.rs`: the one ring setup (`Setup`: flags, best first, `EINVAL` falls back), the
//!   timed wait, and [`KernelVersion`]; used by [`Ring`], [`probe`] and the static server.
//! - `teardown.rs`: the one way a ring ends: bounded wait for what is in flight, then leak it.
//! - `ring.rs`: [`Ring`]: submit, wait, close.
//! - `ops.rs`: one method per op (`nop`, `socket`, `accept`, `recv`, `send`, …, `cancel`).
//! - `reap.rs`: completion queue entries into [`Completion`]s; overflow flush; cancel order.
//! - `slots.rs`: what each op in flight owns.
//! - `buf_ring.rs`: provided-buffer rings for multishot receives.
//! - `completion.rs`: [`Completion`], [`CompletionFlags`], [`OpKind`].

mod buf_ring;
mod completion;
mod ops;
mod probe;
mod reap;
mod ring;
mod setup;
mod slots;
mod teardown;

pub(crate) use buf_ring::BufRing;
pub use buf_ring::MAX_BUFFERS;
pub use completion::{Completion, CompletionFlags, OpKind};
pub(crate) use probe::{explain, missing_op};
pub use probe::{probe, Availability, OpSupport};
pub use ring::{Ring, RingOptions, CLOSE_TIMEOUT, MAX_ENTRIES};
pub use setup::KernelVersion;
pub(crate) use setup::{enter_timeout, Built, Setup};
pub(crate) use teardown::{drain, leak, InFlight};
