//! io_uring: the probe that says whether and how it works here, and [`Ring`], a safe ring
//! that owns what its ops lend the kernel until they complete.
//!
//! - `probe.rs`: [`probe`] (availability, supported opcodes, `DEFER_TASKRUN`).
//! - `ring.rs`: [`Ring`] setup, submit, wait, close.
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
mod slots;

pub(crate) use buf_ring::BufRing;
pub use buf_ring::MAX_BUFFERS;
pub use completion::{Completion, CompletionFlags, OpKind};
pub use probe::{probe, Availability, OpSupport};
pub use ring::{Ring, RingOptions, CLOSE_TIMEOUT, MAX_ENTRIES};
