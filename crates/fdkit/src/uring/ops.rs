//! The ops a [`Ring`] queues, written once: [`ring_ops!`](crate::ring_ops), one row per op,
//! from which the ring's methods here and the Python `Ring`'s methods in the binding both
//! follow, and [`OPS`], the table as data. Each row builds its submission entry with the
//! io-uring crate's opcode builder and hands the ring whatever the kernel will read or write,
//! so it stays alive and in place until the completion.
//!
//! A queued op takes effect at the next submit ([`Ring::submit`], or [`Ring::wait`]); the fds
//! it names must stay open until then (the kernel takes its own reference at submission).

use super::completion::{OpFd, OpKind, Target};
use super::ring::{Ring, NO_TARGET};
use super::slots::{CancelState, MsgParts, Owned, Slot};
use super::sqe::SqeFlags;
use crate::error::{Error, Result};
use crate::fd::MAX_RW_COUNT;
use io_uring::{opcode, types};
use rustix::event::PollFlags;
use rustix::io::Errno;
use rustix::net::{AddressFamily, Protocol, RecvFlags, SendFlags, Shutdown, SocketAddrAny};
use rustix::net::{SocketFlags, SocketType};
use rustix::pipe::SpliceFlags;
use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::time::Duration;

/// The io_uring op set, one row per op: what it is called, the arguments it takes, and how
/// the ring queues it. `fdkit` builds [`Ring`]'s op methods and [`OPS`] from it, the Python
/// binding its `Ring` methods: `ring_ops!(callback)` (or `ring_ops!(callback, { tokens })`)
/// calls `callback!` with the tokens, `[ring, user_data]` and the rows, each in the form
/// `name [docs] (arg Kind ...) (* keyword Kind default ...) (fixed) (Return) { body }`.
///
/// A row reads
/// `fn name(arg: Kind, ...) * (keyword: Kind = default, ...) [fixed] -> Return => { body }`:
///
/// - the arguments every caller gives, in order (the op's `user_data` comes after them);
/// - after `*`, the ones with a default (Python's keyword-only arguments; in Rust, every
///   argument is given, in this order, before `user_data`);
/// - `[fixed]` when the binding offers `fixed=True` (the fd is a registered file's index);
/// - the return type when it is not `Result<()>`;
/// - the body, run with the ring as `ring` and the op's `user_data` as `user_data`.
///
/// A kind is a type the core takes as it is (`usize` a byte count, `u16` a buffer's index or
/// group, `BorrowedFd` a plain fd, `CString` a path, `Duration`, `RecvFlags`, …), or one the
/// core spells out: `Target` (an fd or a registered file's index), `Data` (bytes the kernel
/// reads), `Offset` (a file offset, or none: the file position), `DirFd`, `OptProtocol`,
/// `Buffers`, `OptAddress`. The binding reads each from Python in its own terms.
#[macro_export]
macro_rules! ring_ops {
    (@rows $callback:ident [$($extra:tt)*] [$ring:ident, $user_data:ident] $(
        $(#[$doc:meta])*
        fn $name:ident ($($arg:ident : $kind:ident),*)
            $(* ($($kw:ident : $kw_kind:ident = $default:tt),*))?
            $([$fixed:ident])?
            $(-> $ret:ty)?
            => $body:block
    )*) => {
        $callback! { $($extra)* [$ring, $user_data] $(
            $name [$(#[$doc])*] ($($arg $kind)*) ($(* $($kw $kw_kind $default)*)?) ($($fixed)?)
            ($($ret)?) $body
        )* }
    };
    ($callback:ident $(, $extra:tt)?) => {
        $crate::ring_ops! {
            @rows $callback [$($extra)?] [ring, user_data]

            /// `IORING_OP_NOP`: completes with result 0; useful to test the ring.
            /// io_uring_prep_nop(3).
            fn nop() => {
                ring.push(opcode::Nop::new().build(), Slot::new(user_data, OpKind::Nop, Owned::Nothing))
            }

            /// `IORING_OP_SOCKET`: a new socket, always close-on-exec (`type` may include
            /// `SOCK_NONBLOCK`, as socket(2)'s does); the new fd comes with the completion.
            /// io_uring_prep_socket(3).
            fn socket(family: AddressFamily, r#type: SocketType) * (proto: OptProtocol = 0) => {
                ring.queue_socket(family, r#type, proto, user_data)
            }

            /// `IORING_OP_ACCEPT`: a connection from listener `fd`, close-on-exec; the new fd
            /// comes with the completion. With `multishot`, one completion per connection
            /// (flag `MORE` while armed) until cancelled; with `address`, the completion's
            /// `address` is the peer's (not with `multishot`). io_uring_prep_accept(3),
            /// io_uring_prep_multishot_accept(3).
            fn accept(fd: Target) * (multishot: bool = false, address: bool = false) [fixed] => {
                ring.queue_accept(fd.into(), multishot, address, user_data)
            }

            /// `IORING_OP_CONNECT` to `address` (the ring keeps its own copy; from Python, as
            /// `socket.connect` takes it). io_uring_prep_connect(3).
            fn connect(fd: Target, address: SocketAddrAny) => {
                let addr = Box::new(address);
                let (ptr, len) = (addr.as_ptr().cast(), addr.addr_len());
                let (fd, slot) = on(fd, Slot::new(user_data, OpKind::Connect, Owned::Addr(addr)));
                ring.push(opcode::Connect::new(fd, ptr, len).build(), slot)
            }

            /// `IORING_OP_RECV` of up to `nbytes` bytes into a buffer the ring owns; the
            /// completion's `data` carries them. io_uring_prep_recv(3).
            fn recv(fd: Target, nbytes: usize) * (flags: RecvFlags = 0) [fixed] => {
                let (owned, ptr) = fill(nbytes)?;
                let (fd, slot) = on(fd, Slot::new(user_data, OpKind::Recv, owned));
                let entry = opcode::Recv::new(fd, ptr, nbytes as u32).flags(flags.bits() as i32);
                ring.push(entry.build(), slot)
            }

            /// Multishot `IORING_OP_RECV` from buffer group `group` (`provide_buffers`): one
            /// completion per chunk received, with its bytes, flag `MORE` while armed. Result 0
            /// is end of stream; `ENOBUFS` means the group ran dry and the receive ended (queue
            /// it again: the data waits in the socket). io_uring_prep_recv_multishot(3).
            fn recv_multishot(fd: Target, group: u16) * () [fixed] => {
                if !ring.has_group(group) {
                    return Err(Error::InvalidArgument("no such buffer group (call provide_buffers first)"));
                }
                let (fd, slot) = on(fd, Slot::new(user_data, OpKind::RecvMulti, Owned::Group(group)));
                ring.push_op(opcode::RecvMulti::new(fd, group).build(), slot, true)
            }

            /// `IORING_OP_SEND` of `data` (kept by the ring until the completion; from Python,
            /// any bytes-like object: `bytes` by reference, others copied).
            /// io_uring_prep_send(3).
            fn send(fd: Target, data: Data) * (flags: SendFlags = 0) [fixed] => {
                ring.queue_send(OpKind::Send, fd.into(), data, flags, user_data)
            }

            /// `IORING_OP_SEND_ZC`: a zero-copy send. Two completions: the result (flag `MORE`
            /// when a notification follows), then the notification (flag `NOTIF`) once the
            /// kernel no longer reads `data`, which the ring keeps until then.
            /// io_uring_prep_send_zc(3).
            fn send_zc(fd: Target, data: Data) * (flags: SendFlags = 0) [fixed] => {
                ring.queue_send(OpKind::SendZc, fd.into(), data, flags, user_data)
            }

            /// `IORING_OP_READ` of up to `nbytes` bytes at `offset` (none: the file position,
            /// which advances); the completion's `data` carries them. io_uring_prep_read(3).
            fn read(fd: Target, nbytes: usize) * (offset: Offset = None) [fixed] => {
                let (owned, ptr) = fill(nbytes)?;
                let (fd, slot) = on(fd, Slot::new(user_data, OpKind::Read, owned));
                ring.push(opcode::Read::new(fd, ptr, nbytes as u32).offset(at(offset)).build(), slot)
            }

            /// `IORING_OP_WRITE` of `data` at `offset` (none: the file position, which
            /// advances). io_uring_prep_write(3).
            fn write(fd: Target, data: Data) * (offset: Offset = None) [fixed] => {
                let (owned, ptr, len) = lend(data)?;
                let (fd, slot) = on(fd, Slot::new(user_data, OpKind::Write, owned));
                ring.push(opcode::Write::new(fd, ptr, len).offset(at(offset)).build(), slot)
            }

            /// `IORING_OP_SPLICE`: up to `nbytes` bytes from `fd_in` to `fd_out`, one of them
            /// a pipe; offsets as in splice(2) (none: the file position).
            /// io_uring_prep_splice(3).
            fn splice(fd_in: BorrowedFd, fd_out: BorrowedFd, nbytes: u32)
                * (off_in: Offset = None, off_out: Offset = None, flags: SpliceFlags = 0) => {
                let (off_in, off_out) = (splice_offset(off_in)?, splice_offset(off_out)?);
                let (fd_in, slot) = on(fd_in, Slot::new(user_data, OpKind::Splice, Owned::Nothing));
                let entry = opcode::Splice::new(fd_in, off_in, raw(fd_out), off_out, nbytes);
                ring.push(entry.flags(flags.bits()).build(), slot)
            }

            /// `IORING_OP_TEE`: duplicates up to `nbytes` bytes from pipe `fd_in` into pipe
            /// `fd_out` without consuming them. io_uring_prep_tee(3).
            fn tee(fd_in: BorrowedFd, fd_out: BorrowedFd, nbytes: u32) * (flags: SpliceFlags = 0) => {
                let (fd_in, slot) = on(fd_in, Slot::new(user_data, OpKind::Tee, Owned::Nothing));
                ring.push(opcode::Tee::new(fd_in, raw(fd_out), nbytes).flags(flags.bits()).build(), slot)
            }

            /// `IORING_OP_SHUTDOWN`; `how` is `SHUT_RD`, `SHUT_WR` or `SHUT_RDWR`.
            /// io_uring_prep_shutdown(3).
            fn shutdown(fd: Target, how: Shutdown) * () [fixed] => {
                let how = match how {
                    Shutdown::Read => libc::SHUT_RD,
                    Shutdown::Write => libc::SHUT_WR,
                    Shutdown::Both => libc::SHUT_RDWR,
                };
                let (fd, slot) = on(fd, Slot::new(user_data, OpKind::Shutdown, Owned::Nothing));
                ring.push(opcode::Shutdown::new(fd, how).build(), slot)
            }

            /// `IORING_OP_CLOSE`: the ring takes `fd` and closes it. If the op cannot be
            /// queued, the error comes back with the fd, still open; if it is cancelled before
            /// it runs (a failed link: `ECANCELED`), the ring closes the fd itself.
            /// io_uring_prep_close(3).
            fn close_fd(fd: OwnedFd) -> std::result::Result<(), (Error, OwnedFd)> => {
                ring.queue_close(fd, user_data)
            }

            /// `IORING_OP_POLL_ADD`: completes with the ready events (a `POLL*` bit set) once
            /// `fd` has one of `events`; `multishot` keeps it armed (flag `MORE`).
            /// io_uring_prep_poll_add(3), io_uring_prep_poll_multishot(3).
            fn poll_add(fd: Target, events: PollFlags) * (multishot: bool = false) [fixed] => {
                let (fd, slot) = on(fd, Slot::new(user_data, OpKind::PollAdd, Owned::Nothing));
                let entry = opcode::PollAdd::new(fd, u32::from(events.bits())).multi(multishot);
                ring.push_op(entry.build(), slot, multishot)
            }

            /// `IORING_OP_TIMEOUT`: completes with `ETIME` after `seconds`, or with 0 once
            /// `count` other completions were posted (`count` 0: time only); `cancel` it for
            /// `ECANCELED`. io_uring_prep_timeout(3).
            fn timeout(seconds: Duration) * (count: u32 = 0) => {
                let ts = Box::new(types::Timespec::from(seconds));
                let entry = opcode::Timeout::new(&*ts).count(count).build();
                ring.push(entry, Slot::new(user_data, OpKind::Timeout, Owned::Time(ts)))
            }

            /// `IORING_OP_ASYNC_CANCEL` of every op in flight whose `user_data` is
            /// `target_user_data`. Its completion comes only after each target's last one
            /// (which then usually says `ECANCELED`): result 0 when every target was found,
            /// `ENOENT` when none was in flight, `EALREADY` when one was running and could not
            /// be stopped at once (it still completes first). io_uring_prep_cancel(3).
            fn cancel(target_user_data: u64) => {
                ring.queue_cancel(target_user_data, user_data)
            }

            /// `IORING_OP_LINK_TIMEOUT`: bounds the op queued just before it (queued with
            /// `link` or `hardlink`): if that op has not completed after `seconds`, it is
            /// cancelled (`ECANCELED`, or `EINTR` for some) and this one completes with `ETIME`;
            /// if the op completes first, this one completes with `ECANCELED`.
            /// io_uring_prep_link_timeout(3).
            fn link_timeout(seconds: Duration) => {
                let ts = Box::new(types::Timespec::from(seconds));
                let entry = opcode::LinkTimeout::new(&*ts).build();
                ring.push(entry, Slot::new(user_data, OpKind::LinkTimeout, Owned::Time(ts)))
            }

            /// `IORING_OP_OPENAT`: opens `path` (relative to `dir_fd`; none: the working
            /// directory) with `flags` (always `O_CLOEXEC`) and `mode`, as `os.open` does; the
            /// new fd comes with the completion. io_uring_prep_openat(3).
            fn openat(path: CString, flags: i32) * (mode: u32 = 0o777, dir_fd: DirFd = None) => {
                let entry = opcode::OpenAt::new(at_dir(dir_fd), path.as_ptr());
                let entry = entry.flags(flags | libc::O_CLOEXEC).mode(mode).build();
                ring.push(entry, Slot::new(user_data, OpKind::OpenAt, Owned::Path(path)))
            }

            /// `IORING_OP_STATX` of `path` (relative to `dir_fd`; with `AT_EMPTY_PATH` and an
            /// empty path, `dir_fd` itself); `flags` are `AT_*`, `mask` the `STATX_*` fields
            /// wanted (default `STATX_BASIC_STATS`). The completion's `statx` has the answer.
            /// io_uring_prep_statx(3), statx(2).
            fn statx(path: CString) * (dir_fd: DirFd = None, flags: i32 = 0, mask: u32 = 0x7ff) => {
                ring.queue_statx(path, at_dir(dir_fd), flags, mask, user_data)
            }

            /// `IORING_OP_FSYNC` of `fd` (`datasync`: `IORING_FSYNC_DATASYNC`, as
            /// fdatasync(2)). io_uring_prep_fsync(3).
            fn fsync(fd: Target) * (datasync: bool = false) [fixed] => {
                let mut flags = types::FsyncFlags::empty();
                flags.set(types::FsyncFlags::DATASYNC, datasync);
                let (fd, slot) = on(fd, Slot::new(user_data, OpKind::Fsync, Owned::Nothing));
                ring.push(opcode::Fsync::new(fd).flags(flags).build(), slot)
            }

            /// `IORING_OP_SENDMSG`: sends `buffers` as one message (to `address` when given: a
            /// datagram's destination). The ring keeps the buffers, header and address until
            /// the completion. io_uring_prep_sendmsg(3), sendmsg(2).
            fn sendmsg(fd: Target, buffers: Buffers)
                * (address: OptAddress = None, flags: SendFlags = 0) [fixed] => {
                let mut parts = MsgParts::to_send(buffers, address.as_ref())?;
                let hdr = &raw mut parts.hdr;
                let (fd, slot) = on(fd, Slot::new(user_data, OpKind::SendMsg, Owned::Msg(parts)));
                ring.push(opcode::SendMsg::new(fd, hdr).flags(flags.bits()).build(), slot)
            }

            /// `IORING_OP_RECVMSG` of up to `nbytes` bytes: the completion's `data` carries
            /// them and its `address` the sender's (for sockets that report one).
            /// io_uring_prep_recvmsg(3), recvmsg(2).
            fn recvmsg(fd: Target, nbytes: usize) * (flags: RecvFlags = 0) [fixed] => {
                let mut parts = MsgParts::to_receive(fill_buffer(nbytes)?, nbytes);
                let hdr = &raw mut parts.hdr;
                let (fd, slot) = on(fd, Slot::new(user_data, OpKind::RecvMsg, Owned::Msg(parts)));
                ring.push(opcode::RecvMsg::new(fd, hdr).flags(flags.bits()).build(), slot)
            }

            /// `IORING_OP_READ_FIXED`: up to `nbytes` bytes at `offset` (none: the file
            /// position) into registered buffer `buf_index` (`register_buffers`); the
            /// completion's `data` is a copy of the bytes read, which also stay in the buffer.
            /// io_uring_prep_read_fixed(3).
            fn read_fixed(fd: Target, buf_index: u16, nbytes: usize) * (offset: Offset = None) [fixed] => {
                let (fd, slot) = on(fd, Slot::new(user_data, OpKind::ReadFixed, Owned::FixedBuf(buf_index)));
                let ptr = ring.fixed_ptr(buf_index, nbytes)?;
                let entry = opcode::ReadFixed::new(fd, ptr, nbytes as u32, buf_index);
                ring.push(entry.offset(at(offset)).build(), slot)
            }

            /// `IORING_OP_WRITE_FIXED` from registered buffer `buf_index` at `offset` (none:
            /// the file position): `data` is copied into the buffer first, or a length writes
            /// the buffer's first bytes as they are (put there by `fill_fixed`, or by a linked
            /// `read_fixed`). io_uring_prep_write_fixed(3).
            fn write_fixed(fd: Target, buf_index: u16, data: FixedData) * (offset: Offset = None) [fixed] => {
                let nbytes = ring.fixed_data(buf_index, data)?;
                let (fd, slot) = on(fd, Slot::new(user_data, OpKind::WriteFixed, Owned::FixedBuf(buf_index)));
                let ptr = ring.fixed_ptr(buf_index, nbytes)?;
                let entry = opcode::WriteFixed::new(fd, ptr, nbytes as u32, buf_index);
                ring.push(entry.offset(at(offset)).build(), slot)
            }
        }
    };
}

/// The core's reading of [`ring_ops!`](crate::ring_ops): one public method of [`Ring`] per
/// row (the row's arguments in order, its keywords after them, `user_data` last) and [`OPS`].
macro_rules! ring_op_methods {
    (@ty Target) => { impl Into<Target<'a>> };
    (@ty Offset) => { Option<u64> };
    (@ty Data) => { impl AsRef<[u8]> + Send + 'static };
    (@ty DirFd) => { Option<BorrowedFd<'a>> };
    (@ty OptProtocol) => { Option<Protocol> };
    (@ty Buffers) => { Vec<Box<dyn AsRef<[u8]> + Send>> };
    (@ty OptAddress) => { Option<SocketAddrAny> };
    (@ty $type:ident) => { $type };
    (@ret) => { Result<()> };
    (@ret $ret:ty) => { $ret };
    ([$ring:ident, $user_data:ident] $(
        $name:ident [$(#[$doc:meta])*] ($($arg:ident $kind:ident)*)
        ($(* $($kw:ident $kw_kind:ident $default:tt)*)?) ($($fixed:ident)?) ($($ret:ty)?) $body:block
    )*) => {
        impl Ring {
            $(
                $(#[$doc])*
                #[allow(clippy::extra_unused_lifetimes, clippy::needless_lifetimes)]
                #[allow(clippy::too_many_arguments)]
                pub fn $name<'a>(
                    &mut self,
                    $($arg: ring_op_methods!(@ty $kind),)*
                    $($($kw: ring_op_methods!(@ty $kw_kind),)*)?
                    $user_data: u64,
                ) -> ring_op_methods!(@ret $($ret)?) {
                    let $ring = self;
                    $body
                }
            )*
        }

        /// Every op of [`ring_ops!`](crate::ring_ops), in its order: the table as data, for
        /// the binding (`_fdkit.RING_OPS`) and the tests that hold the Python stub to it.
        pub const OPS: &[OpSpec] = &[
            $(
                OpSpec {
                    name: stringify!($name),
                    args: &[$(stringify!($arg),)* stringify!($user_data)],
                    keywords: &[$($((stringify!($kw), stringify!($default)),)*)?],
                    fixed: !stringify!($($fixed)?).is_empty(),
                },
            )*
        ];
    };
}

/// One op of [`ring_ops!`](crate::ring_ops), as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpSpec {
    /// The op's method name (`"recv"`).
    pub name: &'static str,
    /// The arguments every caller gives, in order, `user_data` last (raw identifiers as
    /// written: `r#type`).
    pub args: &'static [&'static str],
    /// The arguments with a default, and the default as the table writes it (`0`, `None`,
    /// `false`, `0o777`).
    pub keywords: &'static [(&'static str, &'static str)],
    /// Whether the binding offers `fixed` (the fd is a registered file's index).
    pub fixed: bool,
}

ring_ops!(ring_op_methods);

/// What [`Ring::write_fixed`] writes from its registered buffer.
pub enum FixedData {
    /// The buffer's first `n` bytes, as they are.
    Len(usize),
    /// These bytes, copied into the buffer (from its start) first.
    Copy(Box<dyn AsRef<[u8]> + Send>),
}

impl From<usize> for FixedData {
    fn from(n: usize) -> Self {
        FixedData::Len(n)
    }
}

/// The entry's fd field for `fd` (an fd, or a registered file's index: the ring adds
/// `IOSQE_FIXED_FILE`), and `slot` reporting it as the op's fd.
fn on<'a>(fd: impl Into<Target<'a>>, slot: Slot) -> (types::Fd, Slot) {
    let t = fd.into();
    (types::Fd(t.raw().0), slot.on(t.op_fd()))
}

/// The entry's fd field for a plain fd.
fn raw(fd: BorrowedFd<'_>) -> types::Fd {
    types::Fd(fd.as_raw_fd())
}

/// The entry's directory fd: `dir_fd`, or `AT_FDCWD`.
fn at_dir(dir_fd: Option<BorrowedFd<'_>>) -> types::Fd {
    types::Fd(dir_fd.map_or(libc::AT_FDCWD, |d| d.as_raw_fd()))
}

/// An entry's offset: `offset`, or `u64::MAX` for the file position.
fn at(offset: Option<u64>) -> u64 {
    offset.unwrap_or(u64::MAX)
}

/// A splice offset: `offset`, or -1 for the file position.
fn splice_offset(offset: Option<u64>) -> Result<i64> {
    offset.map_or(Ok(-1), |o| {
        i64::try_from(o).map_err(|_| Error::InvalidArgument("offset out of range"))
    })
}

/// A buffer of `len` bytes for the kernel to fill, owned by the op, and its address.
fn fill(len: usize) -> Result<(Owned, *mut u8)> {
    let mut buf = fill_buffer(len)?;
    let ptr = buf.as_mut_ptr();
    Ok((Owned::Fill(buf), ptr))
}

/// A buffer of `len` bytes for the kernel to fill, or `ENOMEM` (never an abort).
fn fill_buffer(len: usize) -> Result<Vec<u8>> {
    if len > MAX_RW_COUNT {
        return Err(Error::InvalidArgument("length must be at most 0x7ffff000"));
    }
    let mut buf = Vec::new();
    buf.try_reserve_exact(len)
        .map_err(|_| Error::Os(Errno::NOMEM))?;
    Ok(buf)
}

/// Boxes data the kernel will read; returns it with its address and length.
fn lend(data: impl AsRef<[u8]> + Send + 'static) -> Result<(Owned, *const u8, u32)> {
    let data: Box<dyn AsRef<[u8]> + Send> = Box::new(data);
    let (ptr, len) = {
        let s = (*data).as_ref();
        (s.as_ptr(), s.len())
    };
    let len = u32::try_from(len.min(MAX_RW_COUNT))
        .map_err(|_| Error::InvalidArgument("data too large"))?;
    Ok((Owned::Data(data), ptr, len))
}

/// The parts of the table's rows that are longer than a row.
impl Ring {
    /// `send` and `send_zc` (`op`): `data`, lent to the kernel until the completion.
    fn queue_send(
        &mut self,
        op: OpKind,
        fd: Target<'_>,
        data: impl AsRef<[u8]> + Send + 'static,
        flags: SendFlags,
        user_data: u64,
    ) -> Result<()> {
        let (owned, ptr, len) = lend(data)?;
        let (fd, slot) = on(fd, Slot::new(user_data, op, owned));
        let flags = flags.bits() as i32;
        let entry = match op {
            OpKind::SendZc => opcode::SendZc::new(fd, ptr, len).flags(flags).build(),
            _ => opcode::Send::new(fd, ptr, len).flags(flags).build(),
        };
        self.push(entry, slot)
    }

    /// `socket`'s row: the family, type and protocol as the kernel takes them.
    fn queue_socket(
        &mut self,
        family: AddressFamily,
        socket_type: SocketType,
        proto: Option<Protocol>,
        user_data: u64,
    ) -> Result<()> {
        let ty = socket_type.as_raw() | SocketFlags::CLOEXEC.bits();
        let proto = proto.map_or(0, |p| p.as_raw().get());
        let entry =
            opcode::Socket::new(i32::from(family.as_raw()), ty as i32, proto as i32).build();
        self.push(entry, Slot::new(user_data, OpKind::Socket, Owned::Nothing))
    }

    /// `accept`'s row: one connection, one per connection (`multishot`), or one with the
    /// peer's address.
    fn queue_accept(
        &mut self,
        fd: Target<'_>,
        multishot: bool,
        address: bool,
        user_data: u64,
    ) -> Result<()> {
        if multishot && address {
            return Err(Error::InvalidArgument(
                "a multishot accept cannot collect addresses (use address=False)",
            ));
        }
        if multishot {
            let (fd, slot) = on(
                fd,
                Slot::new(user_data, OpKind::AcceptMulti, Owned::Nothing),
            );
            let entry = opcode::AcceptMulti::new(fd).flags(libc::SOCK_CLOEXEC);
            return self.push_op(entry.build(), slot, true);
        }
        if !address {
            let (fd, slot) = on(fd, Slot::new(user_data, OpKind::Accept, Owned::Nothing));
            let entry = opcode::Accept::new(fd, std::ptr::null_mut(), std::ptr::null_mut());
            return self.push(entry.flags(libc::SOCK_CLOEXEC).build(), slot);
        }
        // SAFETY: an all-zero sockaddr_storage is a valid value (family AF_UNSPEC).
        let mut addr: Box<(libc::sockaddr_storage, libc::socklen_t)> =
            Box::new((unsafe { std::mem::zeroed() }, 0));
        addr.1 = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let (name, len) = ((&raw mut addr.0).cast(), &raw mut addr.1);
        let (fd, slot) = on(
            fd,
            Slot::new(user_data, OpKind::Accept, Owned::PeerAddr(addr)),
        );
        let entry = opcode::Accept::new(fd, name, len).flags(libc::SOCK_CLOEXEC);
        self.push(entry.build(), slot)
    }

    /// `statx`'s row: the path and the buffer the kernel fills live in one box.
    fn queue_statx(
        &mut self,
        path: CString,
        dir_fd: types::Fd,
        flags: i32,
        mask: u32,
        user_data: u64,
    ) -> Result<()> {
        // SAFETY: struct statx is plain integers; all zeroes is a valid value.
        let mut parts: Box<(CString, libc::statx)> =
            Box::new((path, unsafe { std::mem::zeroed() }));
        let buf: *mut libc::statx = &raw mut parts.1;
        let entry = opcode::Statx::new(dir_fd, parts.0.as_ptr(), buf.cast())
            .flags(flags)
            .mask(mask)
            .build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::Statx, Owned::Statx(parts)),
        )
    }

    /// `write_fixed`'s row: how many bytes of buffer `index` to write, after copying `data`
    /// in when it is bytes.
    fn fixed_data(&mut self, index: u16, data: FixedData) -> Result<usize> {
        match data {
            FixedData::Len(n) => Ok(n),
            FixedData::Copy(bytes) => {
                let bytes = (*bytes).as_ref();
                self.fill_fixed(index, 0, bytes)?;
                Ok(bytes.len())
            }
        }
    }

    /// `close_fd`'s row: the ring takes `fd`, or gives it back with the error.
    fn queue_close(
        &mut self,
        fd: OwnedFd,
        user_data: u64,
    ) -> std::result::Result<(), (Error, OwnedFd)> {
        if self.ring.submission().is_full() {
            if let Err(e) = self.submit() {
                return Err((e, fd));
            }
            if self.ring.submission().is_full() {
                return Err((Error::Os(Errno::BUSY), fd));
            }
        }
        let raw = fd.into_raw_fd();
        let entry = opcode::Close::new(types::Fd(raw)).build();
        let slot = Slot::new(user_data, OpKind::Close, Owned::Closing(raw)).on(OpFd::Raw(raw));
        // The queue has room (checked above): only refused flags make this push fail (the
        // slot is dropped with the error; `Owned::Closing` does not close on drop).
        self.push(entry, slot).map_err(|e| {
            // SAFETY: the push failed, so the kernel never saw `raw`; it is still ours, from
            // the `OwnedFd` just taken apart.
            (e, unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) })
        })
    }

    /// `cancel`'s row: one kernel cancel request per target (or one that matches nothing),
    /// answered once every request was answered and every target finished.
    fn queue_cancel(&mut self, target_user_data: u64, user_data: u64) -> Result<()> {
        let flags = self.take_flags();
        if flags.intersects(SqeFlags::IO_LINK | SqeFlags::IO_HARDLINK | SqeFlags::SKIP_SUCCESS) {
            return Err(Error::InvalidArgument(
                "cancel cannot be linked or skip_success (it may be several kernel requests)",
            ));
        }
        if self.chain_open() {
            return Err(Error::InvalidArgument(
                "cancel cannot end a linked chain: queue the chain's last op first",
            ));
        }
        let targets = self.slots.ids_with_user_data(target_user_data);
        let kernel_targets: Vec<u64> = if targets.is_empty() {
            vec![NO_TARGET]
        } else {
            targets.iter().map(|&t| self.slots.key(t)).collect()
        };
        // Everything is registered before the first push: a push may submit (and, on old
        // kernels, reap), so targets and answers can arrive while we are still pushing.
        let state = CancelState {
            requests_left: kernel_targets.len() as u32,
            targets_left: targets.len() as u32,
            result: 0,
        };
        let id = self
            .slots
            .insert(Slot::new(user_data, OpKind::Cancel, Owned::Cancel(state)));
        for &t in &targets {
            if let Some(slot) = self.slots.get_mut(t) {
                slot.waiters.push(id);
            }
        }
        let mut pushed = 0usize;
        let mut failure = None;
        for &t in &kernel_targets {
            let entry = opcode::AsyncCancel::new(t)
                .build()
                .flags(flags)
                .user_data(self.slots.key(id));
            if let Err(e) = self.push_entry(entry) {
                failure = Some(e);
                break;
            }
            pushed += 1;
        }
        let Some(failure) = failure else {
            return Ok(());
        };
        // Forget the targets the kernel was never asked to cancel.
        let unasked = if targets.is_empty() {
            &[][..]
        } else {
            &targets[pushed..]
        };
        let mut forgotten = 0u32;
        for &t in unasked {
            if let Some(slot) = self.slots.get_mut(t) {
                let before = slot.waiters.len();
                slot.waiters.retain(|&w| w != id);
                forgotten += (before - slot.waiters.len()) as u32;
            }
        }
        if pushed == 0 {
            self.slots.remove(id);
            return Err(failure);
        }
        if let Some(slot) = self.slots.get_mut(id) {
            if let Owned::Cancel(state) = &mut slot.owned {
                let not_sent = (kernel_targets.len() - pushed) as u32;
                state.requests_left = state.requests_left.saturating_sub(not_sent);
                state.targets_left = state.targets_left.saturating_sub(forgotten);
            }
        }
        self.finish_cancel_if_done(id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::OPS;

    #[test]
    fn the_table_names_each_op_once_with_user_data_last() {
        let mut names: Vec<&str> = OPS.iter().map(|op| op.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), OPS.len());
        assert!(OPS.iter().all(|op| op.args.last() == Some(&"user_data")));
        let recv = OPS.iter().find(|op| op.name == "recv").expect("recv");
        assert_eq!(recv.args, ["fd", "nbytes", "user_data"]);
        assert_eq!(recv.keywords, [("flags", "0")]);
        assert!(recv.fixed);
    }
}
