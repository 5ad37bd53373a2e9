//! What an op is queued with, and what the ring holds back before the kernel sees it: the
//! `IOSQE_*` flags ([`SqeFlags`]) and the linked chain being built ([`PendingChain`]). The
//! ring (`ring.rs`), the ops (`ops.rs`), the slots and the chain logic (`chain.rs`) all take
//! these types; this file takes none of theirs.

use bitflags::bitflags;
use io_uring::squeue;

bitflags! {
    /// The `IOSQE_*` flags an op can be queued with ([`Ring::with_flags`]).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SqeFlags: u8 {
        /// `IOSQE_IO_LINK`: the next op starts only once this one completed; if this one
        /// fails (an error, or a short read or write), the rest of the chain completes with
        /// `ECANCELED`.
        const LINK = 1 << 0;
        /// `IOSQE_IO_HARDLINK`: like `LINK`, but the chain goes on even if this op fails.
        const HARDLINK = 1 << 1;
        /// `IOSQE_IO_DRAIN`: this op starts only after every op queued before it completed,
        /// and ops queued after it wait for it.
        const DRAIN = 1 << 2;
        /// `IOSQE_ASYNC`: go straight to the kernel's worker threads (no first try inline).
        const ASYNC = 1 << 3;
        /// `IOSQE_CQE_SKIP_SUCCESS`: no completion when the op succeeds (one, with the
        /// error, when it fails). Not for ops that create an fd (it would be lost), multishot
        /// ops, `send_zc` or `cancel`. Needs Linux 5.17 (`IORING_FEAT_CQE_SKIP`).
        const SKIP_SUCCESS = 1 << 4;
    }
}

impl SqeFlags {
    pub(crate) fn kernel(self) -> squeue::Flags {
        let mut f = squeue::Flags::empty();
        f.set(squeue::Flags::IO_LINK, self.contains(SqeFlags::LINK));
        f.set(
            squeue::Flags::IO_HARDLINK,
            self.contains(SqeFlags::HARDLINK),
        );
        f.set(squeue::Flags::IO_DRAIN, self.contains(SqeFlags::DRAIN));
        f.set(squeue::Flags::ASYNC, self.contains(SqeFlags::ASYNC));
        f.set(
            squeue::Flags::SKIP_SUCCESS,
            self.contains(SqeFlags::SKIP_SUCCESS),
        );
        f
    }

    pub(super) fn linked(self) -> bool {
        self.intersects(SqeFlags::LINK | SqeFlags::HARDLINK)
    }
}

/// The chain being queued: its entries (held back until it is complete) and its last op.
#[derive(Default)]
pub(crate) struct PendingChain {
    /// The chain's entries, held back until it is complete.
    pub(super) entries: Vec<squeue::Entry>,
    /// The slot key of the chain's last op so far (it has `LINK` or `HARDLINK`).
    pub(super) tail: Option<u64>,
}
