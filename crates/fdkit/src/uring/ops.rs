//! The ops a [`Ring`] queues, one method each, named after the opcode. Each builds its
//! submission entry with the io-uring crate's opcode builder and hands the ring whatever the
//! kernel will read or write, so it stays alive and in place until the completion.
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
use std::os::fd::{AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::time::Duration;

fn target(fd: BorrowedFd<'_>) -> types::Fd {
    types::Fd(fd.as_raw_fd())
}

/// The entry's fd field for `fd` (an fd, or a registered file's index) and what the
/// completion reports; the ring adds `IOSQE_FIXED_FILE` for an index.
fn on<'a>(fd: impl Into<Target<'a>>) -> (types::Fd, OpFd) {
    let t = fd.into();
    (types::Fd(t.raw().0), t.op_fd())
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

impl Ring {
    /// `IORING_OP_NOP`: completes with result 0; useful to test the ring.
    /// See io_uring_prep_nop(3).
    pub fn nop(&mut self, user_data: u64) -> Result<()> {
        let slot = Slot::new(user_data, OpKind::Nop, Owned::Nothing);
        self.push(opcode::Nop::new().build(), slot)
    }

    /// `IORING_OP_SOCKET`: a new socket, always close-on-exec; the completion owns the fd
    /// ([`Completion::take_fd`](super::Completion::take_fd)). See io_uring_prep_socket(3).
    pub fn socket(
        &mut self,
        domain: AddressFamily,
        socket_type: SocketType,
        flags: SocketFlags,
        protocol: Option<Protocol>,
        user_data: u64,
    ) -> Result<()> {
        let ty = socket_type.as_raw() | (flags | SocketFlags::CLOEXEC).bits();
        let proto = protocol.map_or(0, |p| p.as_raw().get());
        let entry =
            opcode::Socket::new(i32::from(domain.as_raw()), ty as i32, proto as i32).build();
        self.push(entry, Slot::new(user_data, OpKind::Socket, Owned::Nothing))
    }

    /// `IORING_OP_ACCEPT`: one connection from listener `fd`, close-on-exec; the completion
    /// owns the new fd. The peer address is not collected. See io_uring_prep_accept(3).
    pub fn accept<'a>(&mut self, fd: impl Into<Target<'a>>, user_data: u64) -> Result<()> {
        let (fd, at) = on(fd);
        let entry = opcode::Accept::new(fd, std::ptr::null_mut(), std::ptr::null_mut())
            .flags(libc::SOCK_CLOEXEC)
            .build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::Accept, Owned::Nothing).on(at),
        )
    }

    /// `IORING_OP_ACCEPT` with `IORING_ACCEPT_MULTISHOT`: one completion per connection (flag
    /// `MORE` while armed) until cancelled or an error ends it. See
    /// io_uring_prep_multishot_accept(3).
    pub fn accept_multishot<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        let entry = opcode::AcceptMulti::new(fd)
            .flags(libc::SOCK_CLOEXEC)
            .build();
        let slot = Slot::new(user_data, OpKind::AcceptMulti, Owned::Nothing).on(at);
        self.push_op(entry, slot, true)
    }

    /// `IORING_OP_CONNECT` to `addr` (the ring keeps its own copy). See
    /// io_uring_prep_connect(3).
    pub fn connect<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        addr: &SocketAddrAny,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        let addr = Box::new(addr.clone());
        let entry = opcode::Connect::new(fd, addr.as_ptr().cast(), addr.addr_len()).build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::Connect, Owned::Addr(addr)).on(at),
        )
    }

    /// `IORING_OP_RECV` of up to `len` bytes into a buffer the ring owns; the completion
    /// carries the bytes. See io_uring_prep_recv(3).
    pub fn recv<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        len: usize,
        flags: RecvFlags,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        let mut buf = fill_buffer(len)?;
        let entry = opcode::Recv::new(fd, buf.as_mut_ptr(), len as u32)
            .flags(flags.bits() as i32)
            .build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::Recv, Owned::Fill(buf)).on(at),
        )
    }

    /// Multishot `IORING_OP_RECV` from buffer group `group` (see
    /// [`provide_buffers`](Ring::provide_buffers)): one completion per chunk received, with
    /// its bytes, `MORE` while armed. Result 0 is end of stream; `ENOBUFS` means the group ran
    /// dry and the receive ended (queue it again: the data waits in the socket).
    /// See io_uring_prep_recv_multishot(3).
    pub fn recv_multishot<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        group: u16,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        if !self.has_group(group) {
            return Err(Error::InvalidArgument(
                "no such buffer group (call provide_buffers first)",
            ));
        }
        let entry = opcode::RecvMulti::new(fd, group).build();
        let slot = Slot::new(user_data, OpKind::RecvMulti, Owned::Group(group)).on(at);
        self.push_op(entry, slot, true)
    }

    /// `IORING_OP_SEND` of `data` (kept by the ring until the completion).
    /// See io_uring_prep_send(3).
    pub fn send<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        data: impl AsRef<[u8]> + Send + 'static,
        flags: SendFlags,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        let (owned, ptr, len) = lend(data)?;
        let entry = opcode::Send::new(fd, ptr, len)
            .flags(flags.bits() as i32)
            .build();
        self.push(entry, Slot::new(user_data, OpKind::Send, owned).on(at))
    }

    /// `IORING_OP_SEND_ZC`: a zero-copy send. Two completions: the result (flag `MORE` when a
    /// notification follows), then the notification (flag `NOTIF`) once the kernel no longer
    /// reads `data`, which the ring keeps until then. See io_uring_prep_send_zc(3).
    pub fn send_zc<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        data: impl AsRef<[u8]> + Send + 'static,
        flags: SendFlags,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        let (owned, ptr, len) = lend(data)?;
        let entry = opcode::SendZc::new(fd, ptr, len)
            .flags(flags.bits() as i32)
            .build();
        self.push(entry, Slot::new(user_data, OpKind::SendZc, owned).on(at))
    }

    /// `IORING_OP_READ` of up to `len` bytes at `offset` (None: the file position, which
    /// advances); the completion carries the bytes. See io_uring_prep_read(3).
    pub fn read<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        len: usize,
        offset: Option<u64>,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        let mut buf = fill_buffer(len)?;
        let entry = opcode::Read::new(fd, buf.as_mut_ptr(), len as u32)
            .offset(offset.unwrap_or(u64::MAX))
            .build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::Read, Owned::Fill(buf)).on(at),
        )
    }

    /// `IORING_OP_WRITE` of `data` at `offset` (None: the file position, which advances).
    /// See io_uring_prep_write(3).
    pub fn write<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        data: impl AsRef<[u8]> + Send + 'static,
        offset: Option<u64>,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        let (owned, ptr, len) = lend(data)?;
        let entry = opcode::Write::new(fd, ptr, len)
            .offset(offset.unwrap_or(u64::MAX))
            .build();
        self.push(entry, Slot::new(user_data, OpKind::Write, owned).on(at))
    }

    /// `IORING_OP_SPLICE`: up to `len` bytes from `fd_in` to `fd_out`, one of them a pipe;
    /// offsets as in splice(2) (None: the file position). See io_uring_prep_splice(3).
    #[allow(clippy::too_many_arguments)]
    pub fn splice(
        &mut self,
        fd_in: BorrowedFd<'_>,
        off_in: Option<u64>,
        fd_out: BorrowedFd<'_>,
        off_out: Option<u64>,
        len: u32,
        flags: SpliceFlags,
        user_data: u64,
    ) -> Result<()> {
        let off = |o: Option<u64>| -> Result<i64> {
            o.map_or(Ok(-1), |o| {
                i64::try_from(o).map_err(|_| Error::InvalidArgument("offset out of range"))
            })
        };
        let entry = opcode::Splice::new(
            target(fd_in),
            off(off_in)?,
            target(fd_out),
            off(off_out)?,
            len,
        )
        .flags(flags.bits())
        .build();
        let at = OpFd::Raw(fd_in.as_raw_fd());
        self.push(
            entry,
            Slot::new(user_data, OpKind::Splice, Owned::Nothing).on(at),
        )
    }

    /// `IORING_OP_TEE`: duplicates up to `len` bytes from pipe `fd_in` into pipe `fd_out`
    /// without consuming them. See io_uring_prep_tee(3).
    pub fn tee(
        &mut self,
        fd_in: BorrowedFd<'_>,
        fd_out: BorrowedFd<'_>,
        len: u32,
        flags: SpliceFlags,
        user_data: u64,
    ) -> Result<()> {
        let entry = opcode::Tee::new(target(fd_in), target(fd_out), len)
            .flags(flags.bits())
            .build();
        let at = OpFd::Raw(fd_in.as_raw_fd());
        self.push(
            entry,
            Slot::new(user_data, OpKind::Tee, Owned::Nothing).on(at),
        )
    }

    /// `IORING_OP_SHUTDOWN`. See io_uring_prep_shutdown(3).
    pub fn shutdown<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        how: Shutdown,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        let how = match how {
            Shutdown::Read => libc::SHUT_RD,
            Shutdown::Write => libc::SHUT_WR,
            Shutdown::Both => libc::SHUT_RDWR,
        };
        let entry = opcode::Shutdown::new(fd, how).build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::Shutdown, Owned::Nothing).on(at),
        )
    }

    /// `IORING_OP_CLOSE`: the ring takes `fd` and closes it. If the op cannot be queued, the
    /// error comes back with the fd, still open; if it is cancelled before it runs (a failed
    /// link: `ECANCELED`), the ring closes the fd itself. See io_uring_prep_close(3).
    pub fn close_fd(
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

    /// `IORING_OP_POLL_ADD`: completes with the ready events (a `PollFlags` bit set) once
    /// `fd` has one of `events`; `multishot` keeps it armed (flag `MORE`).
    /// See io_uring_prep_poll_add(3), io_uring_prep_poll_multishot(3).
    pub fn poll_add<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        events: PollFlags,
        multishot: bool,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        let entry = opcode::PollAdd::new(fd, u32::from(events.bits()))
            .multi(multishot)
            .build();
        let slot = Slot::new(user_data, OpKind::PollAdd, Owned::Nothing).on(at);
        self.push_op(entry, slot, multishot)
    }

    /// `IORING_OP_TIMEOUT`: completes with `ETIME` after `duration`, or with 0 once `count`
    /// other completions were posted (`count` 0: time only). Cancel it with
    /// [`cancel`](Ring::cancel) (`ECANCELED`). See io_uring_prep_timeout(3).
    pub fn timeout(&mut self, duration: Duration, count: u32, user_data: u64) -> Result<()> {
        let ts = Box::new(types::Timespec::from(duration));
        let entry = opcode::Timeout::new(&*ts).count(count).build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::Timeout, Owned::Time(ts)),
        )
    }

    /// `IORING_OP_ASYNC_CANCEL` of every op in flight whose `user_data` is `target`. Its
    /// completion comes only after each target's last completion (which then usually says
    /// `ECANCELED`). Result 0 when every target was found; `ENOENT` when none was in flight
    /// (or had already finished); `EALREADY` when one was running and could not be stopped
    /// at once (it still completes first). See io_uring_prep_cancel(3).
    pub fn cancel(&mut self, target_user_data: u64, user_data: u64) -> Result<()> {
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

    /// `IORING_OP_ACCEPT` that also collects the peer's address (the completion's
    /// `address`). See io_uring_prep_accept(3).
    pub fn accept_with_address<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        // SAFETY: an all-zero sockaddr_storage is a valid value (family AF_UNSPEC).
        let mut addr: Box<(libc::sockaddr_storage, libc::socklen_t)> =
            Box::new((unsafe { std::mem::zeroed() }, 0));
        addr.1 = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let entry = opcode::Accept::new(fd, (&raw mut addr.0).cast(), &raw mut addr.1)
            .flags(libc::SOCK_CLOEXEC)
            .build();
        let slot = Slot::new(user_data, OpKind::Accept, Owned::PeerAddr(addr)).on(at);
        self.push(entry, slot)
    }

    /// `IORING_OP_LINK_TIMEOUT`: bounds the op queued just before it (which must have been
    /// queued with `LINK` or `HARDLINK`): if that op has not completed after `duration`, it
    /// is cancelled (its completion says `ECANCELED`, or `EINTR` for some) and this one
    /// completes with `ETIME`; if the op completes first, this one completes with
    /// `ECANCELED`. Queued with `LINK` itself, the chain goes on after the guarded op.
    /// See io_uring_prep_link_timeout(3).
    pub fn link_timeout(&mut self, duration: Duration, user_data: u64) -> Result<()> {
        let ts = Box::new(types::Timespec::from(duration));
        let entry = opcode::LinkTimeout::new(&*ts).build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::LinkTimeout, Owned::Time(ts)),
        )
    }

    /// `IORING_OP_OPENAT`: opens `path` (relative to `dir`, None: the working directory)
    /// with `flags` (always `O_CLOEXEC`) and `mode`; the completion owns the new fd.
    /// See io_uring_prep_openat(3).
    pub fn openat(
        &mut self,
        dir: Option<BorrowedFd<'_>>,
        path: std::ffi::CString,
        flags: i32,
        mode: u32,
        user_data: u64,
    ) -> Result<()> {
        let dirfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
        let entry = opcode::OpenAt::new(types::Fd(dirfd), path.as_ptr())
            .flags(flags | libc::O_CLOEXEC)
            .mode(mode)
            .build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::OpenAt, Owned::Path(path)),
        )
    }

    /// `IORING_OP_STATX` of `path` (relative to `dir`; with `AT_EMPTY_PATH` and an empty
    /// path, `dir` itself); `flags` are `AT_*`, `mask` the `STATX_*` fields wanted. The
    /// completion's `statx` has the answer. See io_uring_prep_statx(3), statx(2).
    pub fn statx(
        &mut self,
        dir: Option<BorrowedFd<'_>>,
        path: std::ffi::CString,
        flags: i32,
        mask: u32,
        user_data: u64,
    ) -> Result<()> {
        let dirfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
        // SAFETY: struct statx is plain integers; all zeroes is a valid value.
        let mut parts: Box<(std::ffi::CString, libc::statx)> =
            Box::new((path, unsafe { std::mem::zeroed() }));
        let buf: *mut libc::statx = &raw mut parts.1;
        let entry = opcode::Statx::new(types::Fd(dirfd), parts.0.as_ptr(), buf.cast())
            .flags(flags)
            .mask(mask)
            .build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::Statx, Owned::Statx(parts)),
        )
    }

    /// `IORING_OP_FSYNC` of `fd` (`datasync`: `IORING_FSYNC_DATASYNC`, as fdatasync(2)).
    /// See io_uring_prep_fsync(3).
    pub fn fsync<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        datasync: bool,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        let flags = if datasync {
            types::FsyncFlags::DATASYNC
        } else {
            types::FsyncFlags::empty()
        };
        let entry = opcode::Fsync::new(fd).flags(flags).build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::Fsync, Owned::Nothing).on(at),
        )
    }

    /// `IORING_OP_SENDMSG`: sends `buffers` as one message (to `addr` when given: a
    /// datagram's destination). The ring keeps the buffers, header and address until the
    /// completion. See io_uring_prep_sendmsg(3), sendmsg(2).
    pub fn sendmsg<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        buffers: Vec<Box<dyn AsRef<[u8]> + Send>>,
        addr: Option<&SocketAddrAny>,
        flags: SendFlags,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        if buffers.len() > 1024 {
            return Err(Error::InvalidArgument("at most 1024 buffers (IOV_MAX)"));
        }
        let mut parts = Box::new(MsgParts::new());
        parts.iov = buffers
            .iter()
            .map(|b| {
                let s = (**b).as_ref();
                libc::iovec {
                    iov_base: s.as_ptr() as *mut libc::c_void,
                    iov_len: s.len(),
                }
            })
            .collect();
        parts.data = buffers;
        if let Some(a) = addr {
            let len = a.addr_len() as usize;
            // SAFETY: `a` is valid for `addr_len()` bytes, which fit a sockaddr_storage.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    a.as_ptr().cast::<u8>(),
                    (&raw mut parts.addr).cast::<u8>(),
                    len,
                )
            };
            parts.hdr.msg_name = (&raw mut parts.addr).cast();
            parts.hdr.msg_namelen = len as libc::socklen_t;
        }
        parts.hdr.msg_iov = parts.iov.as_mut_ptr();
        parts.hdr.msg_iovlen = parts.iov.len() as _;
        let entry = opcode::SendMsg::new(fd, &raw const parts.hdr)
            .flags(flags.bits())
            .build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::SendMsg, Owned::Msg(parts)).on(at),
        )
    }

    /// `IORING_OP_RECVMSG` of up to `len` bytes: the completion carries the bytes and the
    /// sender's address (`address`, for sockets that report one). See
    /// io_uring_prep_recvmsg(3), recvmsg(2).
    pub fn recvmsg<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        len: usize,
        flags: RecvFlags,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        let mut parts = Box::new(MsgParts::new());
        parts.fill = fill_buffer(len)?;
        parts.iov = vec![libc::iovec {
            iov_base: parts.fill.as_mut_ptr().cast(),
            iov_len: len,
        }];
        parts.hdr.msg_iov = parts.iov.as_mut_ptr();
        parts.hdr.msg_iovlen = 1;
        parts.hdr.msg_name = (&raw mut parts.addr).cast();
        parts.hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as _;
        let entry = opcode::RecvMsg::new(fd, &raw mut parts.hdr)
            .flags(flags.bits())
            .build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::RecvMsg, Owned::Msg(parts)).on(at),
        )
    }

    /// `IORING_OP_READ_FIXED`: up to `len` bytes at `offset` (None: the file position) into
    /// registered buffer `index` ([`register_buffers`](Ring::register_buffers)); the
    /// completion carries a copy of the bytes read, which also stay in the buffer.
    /// See io_uring_prep_read_fixed(3).
    pub fn read_fixed<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        index: u16,
        len: usize,
        offset: Option<u64>,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        let ptr = self.fixed_ptr(index, len)?;
        let entry = opcode::ReadFixed::new(fd, ptr, len as u32, index)
            .offset(offset.unwrap_or(u64::MAX))
            .build();
        let slot = Slot::new(user_data, OpKind::ReadFixed, Owned::FixedBuf(index)).on(at);
        self.push(entry, slot)
    }

    /// `IORING_OP_WRITE_FIXED`: writes the first `len` bytes of registered buffer `index` at
    /// `offset` (None: the file position). Put bytes there with
    /// [`fill_fixed`](Ring::fill_fixed) first, or let a linked `read_fixed` fill it.
    /// See io_uring_prep_write_fixed(3).
    pub fn write_fixed<'a>(
        &mut self,
        fd: impl Into<Target<'a>>,
        index: u16,
        len: usize,
        offset: Option<u64>,
        user_data: u64,
    ) -> Result<()> {
        let (fd, at) = on(fd);
        let ptr = self.fixed_ptr(index, len)?;
        let entry = opcode::WriteFixed::new(fd, ptr, len as u32, index)
            .offset(offset.unwrap_or(u64::MAX))
            .build();
        let slot = Slot::new(user_data, OpKind::WriteFixed, Owned::FixedBuf(index)).on(at);
        self.push(entry, slot)
    }
}
