//! What a [`Ring`](super::Ring) hands back: one [`Completion`] per completion queue entry.
//!
//! A completion carries the caller's `user_data`, the kernel's result, the flags that matter to
//! a caller (more to come, buffer used, zero-copy notification), the bytes a receive or read
//! produced, and the new fd a `socket` or `accept` created (owned: dropping an unclaimed
//! completion closes it). See io_uring_cqe_get_data(3), io_uring_enter(2).

use bitflags::bitflags;
use rustix::io::Errno;
use rustix::net::SocketAddrAny;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

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
    /// `IORING_OP_LINK_TIMEOUT`
    LinkTimeout,
    /// `IORING_OP_OPENAT`
    OpenAt,
    /// `IORING_OP_STATX`
    Statx,
    /// `IORING_OP_FSYNC`
    Fsync,
    /// `IORING_OP_SENDMSG`
    SendMsg,
    /// `IORING_OP_RECVMSG`
    RecvMsg,
    /// `IORING_OP_READ_FIXED` (a registered buffer)
    ReadFixed,
    /// `IORING_OP_WRITE_FIXED` (a registered buffer)
    WriteFixed,
    /// `IORING_OP_EPOLL_WAIT`: the aio reactor's own wait; no `Ring` method queues it
    EpollWait,
}

impl OpKind {
    /// The name of the Python `Ring` method that queued the op (`"recv_multishot"`,
    /// `"close_fd"`, …): a multishot accept is `Ring.accept(..., multishot=True)`, so it is
    /// `"accept"` too (its `more` flag tells it apart).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Nop => "nop",
            OpKind::Socket => "socket",
            OpKind::Accept | OpKind::AcceptMulti => "accept",
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
            OpKind::Close => "close_fd",
            OpKind::PollAdd => "poll_add",
            OpKind::Timeout => "timeout",
            OpKind::Cancel => "cancel",
            OpKind::LinkTimeout => "link_timeout",
            OpKind::OpenAt => "openat",
            OpKind::Statx => "statx",
            OpKind::Fsync => "fsync",
            OpKind::SendMsg => "sendmsg",
            OpKind::RecvMsg => "recvmsg",
            OpKind::ReadFixed => "read_fixed",
            OpKind::WriteFixed => "write_fixed",
            OpKind::EpollWait => "epoll_wait",
        }
    }

    /// Whether a non-negative result is a new fd (which the completion then owns).
    pub(crate) fn creates_fd(self) -> bool {
        matches!(
            self,
            OpKind::Socket | OpKind::Accept | OpKind::AcceptMulti | OpKind::OpenAt
        )
    }
}

/// The fd an op was on: a plain fd number, or an index into the ring's registered files
/// ([`Ring::register_files`](super::Ring::register_files)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpFd {
    /// A file descriptor.
    Raw(RawFd),
    /// An index into the registered files (`IOSQE_FIXED_FILE`).
    Fixed(u32),
}

/// What an op takes as its fd: a borrowed fd, or a registered file's index
/// (`IOSQE_FIXED_FILE`). A `BorrowedFd` converts into it, so ops accept either.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// A file descriptor, borrowed until the op is submitted.
    Fd(BorrowedFd<'a>),
    /// An index into the ring's registered files.
    Fixed(u32),
}

impl<'a> From<BorrowedFd<'a>> for Target<'a> {
    fn from(fd: BorrowedFd<'a>) -> Self {
        Target::Fd(fd)
    }
}

impl<'a> From<&'a OwnedFd> for Target<'a> {
    fn from(fd: &'a OwnedFd) -> Self {
        Target::Fd(fd.as_fd())
    }
}

impl Target<'_> {
    /// The number the kernel sees in the entry's fd field, and whether it is a fixed index.
    pub(crate) fn raw(self) -> (RawFd, bool) {
        match self {
            Target::Fd(fd) => (fd.as_raw_fd(), false),
            Target::Fixed(i) => (i as RawFd, true),
        }
    }

    pub(crate) fn op_fd(self) -> OpFd {
        match self {
            Target::Fd(fd) => OpFd::Raw(fd.as_raw_fd()),
            Target::Fixed(i) => OpFd::Fixed(i),
        }
    }
}

/// The result of a successful `statx` (the fields of `struct statx` fdkit hands on; times in
/// nanoseconds since the epoch). See statx(2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Statx {
    /// `stx_mask`: which fields the kernel filled.
    pub mask: u32,
    /// `stx_mode`: file type and permission bits.
    pub mode: u32,
    /// `stx_ino`.
    pub ino: u64,
    /// `stx_nlink`.
    pub nlink: u32,
    /// `stx_uid`.
    pub uid: u32,
    /// `stx_gid`.
    pub gid: u32,
    /// `stx_size` in bytes.
    pub size: u64,
    /// `stx_blksize`.
    pub blksize: u32,
    /// `stx_blocks` (512-byte units).
    pub blocks: u64,
    /// `stx_atime` in nanoseconds.
    pub atime_ns: i128,
    /// `stx_mtime` in nanoseconds.
    pub mtime_ns: i128,
    /// `stx_ctime` in nanoseconds.
    pub ctime_ns: i128,
    /// `stx_btime` in nanoseconds (0 when the mask lacks `STATX_BTIME`).
    pub btime_ns: i128,
    /// The device the file is on (`makedev(stx_dev_major, stx_dev_minor)`).
    pub dev: u64,
    /// The device a special file is (`makedev(stx_rdev_major, stx_rdev_minor)`).
    pub rdev: u64,
}

impl Statx {
    pub(crate) fn from_raw(s: &libc::statx) -> Statx {
        let ns =
            |t: libc::statx_timestamp| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
        Statx {
            mask: s.stx_mask,
            mode: u32::from(s.stx_mode),
            ino: s.stx_ino,
            nlink: s.stx_nlink,
            uid: s.stx_uid,
            gid: s.stx_gid,
            size: s.stx_size,
            blksize: s.stx_blksize,
            blocks: s.stx_blocks,
            atime_ns: ns(s.stx_atime),
            mtime_ns: ns(s.stx_mtime),
            ctime_ns: ns(s.stx_ctime),
            btime_ns: ns(s.stx_btime),
            dev: libc::makedev(s.stx_dev_major, s.stx_dev_minor),
            rdev: libc::makedev(s.stx_rdev_major, s.stx_rdev_minor),
        }
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
    /// The bytes received or read (`recv`, `recv_multishot`, `read`, `read_fixed`,
    /// `recvmsg`) when `result >= 0`.
    pub data: Option<Vec<u8>>,
    /// The fd the op was on (`fd_in` for `splice` and `tee`; the fd closed for `close_fd`);
    /// None for ops on no fd (`nop`, `socket`, `timeout`, `link_timeout`, `cancel`, and
    /// `openat`/`statx`, which name a path).
    pub target: Option<OpFd>,
    /// The peer's address: an `accept` queued with `want_address`, or the sender of a
    /// `recvmsg` (when the socket reports one).
    pub address: Option<SocketAddrAny>,
    /// The file's metadata, for a successful `statx`.
    pub statx: Option<Statx>,
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
