//! What an op is queued with, and what the ring holds back before the kernel sees it: the
//! `IOSQE_*` flags ([`SqeFlags`], io-uring's own) and the linked chain being built
//! ([`PendingChain`]). The ring (`ring.rs`), the ops (`ops.rs`), the slots and the chain logic
//! (`chain.rs`) all take these types; this file takes none of theirs.

use io_uring::squeue;

/// The `IOSQE_*` flags an op can be queued with ([`Ring::with_flags`]): io-uring's own
/// [`squeue::Flags`], bit for bit what the kernel reads. `IO_LINK`: the next op starts only
/// once this one completed, and if this one fails (an error, or a short read or write) the rest
/// of the chain completes with `ECANCELED`; `IO_HARDLINK`: the same, but the chain goes on if
/// it fails; `IO_DRAIN`: starts only after every op queued before it completed; `ASYNC`: goes
/// straight to the kernel's worker threads; `SKIP_SUCCESS` (`IOSQE_CQE_SKIP_SUCCESS`, Linux
/// 5.17): no completion when the op succeeds, one with the error when it fails (not for ops
/// that create an fd, multishot ops, `send_zc` or `cancel`). `FIXED_FILE` and `BUFFER_SELECT`
/// are the ring's to set (a [`Target::Fixed`](super::Target::Fixed) fd, a buffer group), and
/// refused here.
///
/// [`Ring::with_flags`]: super::Ring::with_flags
pub use io_uring::squeue::Flags as SqeFlags;

/// Whether `flags` link the op to the next one (`IO_LINK` or `IO_HARDLINK`).
pub(super) fn linked(flags: SqeFlags) -> bool {
    flags.intersects(SqeFlags::IO_LINK | SqeFlags::IO_HARDLINK)
}

/// The chain being queued: its entries (held back until it is complete) and its last op.
#[derive(Default)]
pub(crate) struct PendingChain {
    /// The chain's entries, held back until it is complete.
    pub(super) entries: Vec<squeue::Entry>,
    /// The slot key of the chain's last op so far (it has `LINK` or `HARDLINK`).
    pub(super) tail: Option<u64>,
}
