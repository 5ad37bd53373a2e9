//! What a [`Ring`](super::Ring) hands back: one [`Completion`] per completion queue entry.
//!
//! A completion carries the caller's `user_data`, the kernel's result, the flags that matter to
//! a caller (more to come, buffer used, zero-copy notification), the bytes a receive or read
//! produced, and the new fd a `socket` or `accept` created (owned: dropping an unclaimed
//! completion closes it). See io_uring_cqe_get_data(3), io_uring_enter(2).

use bitflags::bitflags;
use rustix::io::Errno;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

bitflags! {
    /// The completion flags a caller acts on (`IORING_CQE_F_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct CompletionFlags: u32 {
        /// `IORING_CQE_F_BUFFER`: the op used a provided buffer; its id is in `buffer_id`.
        const BUFFER = 1 << 0;
        /// `IORING_CQE_F_MORE`: the op stays armed; more completions will follow (multishot,
        /// or the notification of a zero-copy send).
        const MORE = 1 << 1;
        /// `IORING_CQE_F_SOCK_NONEMPTY`: the socket still had data after this receive.
        const SOCK_NONEMPTY = 1 << 2;
        /// `IORING_CQE_F_NOTIF`: the zero-copy send's notification that the kernel no longer
        /// uses the data.
        const NOTIF = 1 << 3;
    }
}

/// Which op a completion belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OpKind {
    /// `IORING_OP_NOP`
    Nop,
    /// `IORING_OP_SOCKET`
    Socket,
    /// `IORING_OP_ACCEPT`
    Accept,
    /// `IORING_OP_ACCEPT` with `IORING_ACCEPT_MULTISHOT`
    AcceptMulti,
    /// `IORING_OP_CONNECT`
    Connect,
    /// `IORING_OP_RECV` into a buffer the ring owns
    Recv,
    /// `IORING_OP_RECV` multishot, from a provided-buffer ring
    RecvMulti,
    /// `IORING_OP_SEND`
    Send,
    /// `IORING_OP_SEND_ZC`
    SendZc,
    /// `IORING_OP_READ`
    Read,
    /// `IORING_OP_WRITE`
    Write,
    /// `IORING_OP_SPLICE`
    Splice,
    /// `IORING_OP_TEE`
    Tee,
    /// `IORING_OP_SHUTDOWN`
    Shutdown,
    /// `IORING_OP_CLOSE`
    Close,
    /// `IORING_OP_POLL_ADD`
    PollAdd,
    /// `IORING_OP_TIMEOUT`
    Timeout,
    /// `IORING_OP_ASYNC_CANCEL`
    Cancel,
}

impl OpKind {
    /// The op's name as the Python API spells its method (`"recv_multishot"`, …).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Nop => "nop",
            OpKind::Socket => "socket",
            OpKind::Accept => "accept",
            OpKind::AcceptMulti => "accept_multishot",
            OpKind::Connect => "connect",
            OpKind::Recv => "recv",
            OpKind::RecvMulti => "recv_multishot",
            OpKind::Send => "send",
            OpKind::SendZc => "send_zc",
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Splice => "splice",
            OpKind::Tee => "tee",
            OpKind::Shutdown => "shutdown",
            OpKind::Close => "close",
            OpKind::PollAdd => "poll_add",
            OpKind::Timeout => "timeout",
            OpKind::Cancel => "cancel",
        }
    }

    /// Whether a non-negative result is a new fd (which the completion then owns).
    pub(crate) fn creates_fd(self) -> bool {
        matches!(self, OpKind::Socket | OpKind::Accept | OpKind::AcceptMulti)
    }
}

/// One completion: the result of an op (or one of a multishot op's results).
#[derive(Debug)]
pub struct Completion {
    /// The `user_data` the caller gave the op.
    pub user_data: u64,
    /// Which op this is.
    pub op: OpKind,
    /// The kernel's result: a byte count, a new fd, 0, or `-errno`.
    pub result: i32,
    /// The flags a caller acts on.
    pub flags: CompletionFlags,
    /// The provided buffer's id, when the op took one from a buffer ring (already copied into
    /// `data` and given back to the ring).
    pub buffer_id: Option<u16>,
    /// The bytes received or read (`recv`, `recv_multishot`, `read`) when `result >= 0`.
    pub data: Option<Vec<u8>>,
    pub(crate) fd: Option<OwnedFd>,
}

impl Completion {
    /// The errno when the op failed (`result < 0`).
    pub fn error(&self) -> Option<Errno> {
        (self.result < 0).then(|| Errno::from_raw_os_error(-self.result))
    }

    /// Whether more completions for the same op will follow (`IORING_CQE_F_MORE`).
    pub fn more(&self) -> bool {
        self.flags.contains(CompletionFlags::MORE)
    }

    /// Whether this is a zero-copy send's notification (`IORING_CQE_F_NOTIF`).
    pub fn notif(&self) -> bool {
        self.flags.contains(CompletionFlags::NOTIF)
    }

    /// The new fd of a successful `socket` or `accept`, still owned by the completion.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    /// Takes ownership of the new fd of a successful `socket` or `accept` (None afterwards).
    /// An fd never taken is closed when the completion is dropped.
    pub fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fd.take()
    }
}

/// Translates the kernel's `IORING_CQE_F_*` bits into [`CompletionFlags`].
pub(crate) fn flags_from_cqe(raw: u32) -> CompletionFlags {
    const F_BUFFER: u32 = 1 << 0;
    const F_MORE: u32 = 1 << 1;
    const F_SOCK_NONEMPTY: u32 = 1 << 2;
    const F_NOTIF: u32 = 1 << 3;
    let mut f = CompletionFlags::empty();
    f.set(CompletionFlags::BUFFER, raw & F_BUFFER != 0);
    f.set(CompletionFlags::MORE, raw & F_MORE != 0);
    f.set(CompletionFlags::SOCK_NONEMPTY, raw & F_SOCK_NONEMPTY != 0);
    f.set(CompletionFlags::NOTIF, raw & F_NOTIF != 0);
    f
}
