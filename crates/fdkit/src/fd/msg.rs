//! `sendmsg`/`recvmsg` with ancillary data, `SCM_RIGHTS` fd passing on top of them, and the
//! datagram pair `sendto`/`recvfrom`.
//!
//! Control messages travel as `(level, type, data)` triples, the shape Python's
//! `socket.sendmsg`/`socket.recvmsg` use: this module lays them out with the `CMSG_*` rules
//! (each header and its data aligned to the word size) and reads them back defensively (a
//! truncated buffer, `MSG_CTRUNC`, never makes it read past what the kernel filled).

use rustix::io::Errno;
use rustix::net::addr::SocketAddrStorage;
use rustix::net::{RecvFlags, SendFlags, SocketAddrAny};
use std::io::IoSlice;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// The largest control buffer [`recvmsg`] accepts (the kernel's own limit, `optmem_max`, is
/// far below it): a bound so that a caller's number can never ask for an absurd allocation.
pub const MAX_CONTROL_LEN: usize = 1 << 20;

/// At most this many fds travel in one `SCM_RIGHTS` message (Linux's `SCM_MAX_FD`).
pub const SCM_MAX_FD: usize = 253;

/// One control message: `cmsg_level`, `cmsg_type` and the data after the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlMessage {
    /// `cmsg_level` (`SOL_SOCKET`, `IPPROTO_IP`, …).
    pub level: i32,
    /// `cmsg_type` (`SCM_RIGHTS`, `SCM_CREDENTIALS`, …).
    pub kind: i32,
    /// The payload, as the kernel wrote it (cut short when `MSG_CTRUNC` is set).
    pub data: Vec<u8>,
}

/// What one [`recvmsg`] brought.
#[derive(Debug)]
pub struct Received {
    /// Bytes of data received (with `MSG_TRUNC` in the flags, a datagram was longer).
    pub bytes: usize,
    /// `msg_flags`: `MSG_TRUNC`, `MSG_CTRUNC`, `MSG_EOR`, `MSG_OOB`, `MSG_ERRQUEUE`.
    pub flags: i32,
    /// The sender's address; `None` when the kernel gave none (a connected stream socket).
    pub address: Option<SocketAddrAny>,
    /// The control messages, in the order they came.
    pub control: Vec<ControlMessage>,
}

/// `CMSG_LEN(n)`: a header plus `n` bytes of data, unpadded.
pub fn cmsg_len(n: usize) -> usize {
    // SAFETY: CMSG_LEN is arithmetic on its argument; it touches no memory.
    unsafe { libc::CMSG_LEN(n as u32) as usize }
}

/// `CMSG_SPACE(n)`: a header plus `n` bytes of data, padded to the next header.
pub fn cmsg_space(n: usize) -> usize {
    // SAFETY: CMSG_SPACE is arithmetic on its argument; it touches no memory.
    unsafe { libc::CMSG_SPACE(n as u32) as usize }
}

fn check(r: isize) -> Result<usize, Errno> {
    if r < 0 {
        Err(Errno::from_raw_os_error(super::fcntl::last_errno()))
    } else {
        Ok(r as usize)
    }
}

/// A zeroed buffer of at least `len` bytes, aligned for `cmsghdr` (8 bytes).
fn control_buffer(len: usize) -> Vec<u64> {
    vec![0u64; len.div_ceil(size_of::<u64>())]
}

/// `sendmsg(fd, {addr, bufs, control}, flags)`: gathers `bufs` into one message, with the
/// control messages `control` (`(level, type, data)`) and, on an unconnected socket, the
/// destination `addr`. Returns the bytes sent. Add `SendFlags::NOSIGNAL` to get `EPIPE`
/// rather than `SIGPIPE` on a stream whose peer is gone. See sendmsg(2), cmsg(3).
pub fn sendmsg(
    fd: BorrowedFd<'_>,
    bufs: &[IoSlice<'_>],
    control: &[(i32, i32, &[u8])],
    flags: SendFlags,
    addr: Option<&SocketAddrAny>,
) -> Result<usize, Errno> {
    let total: usize = control.iter().map(|(_, _, d)| cmsg_space(d.len())).sum();
    let mut buf = control_buffer(total);
    let base = buf.as_mut_ptr().cast::<u8>();
    let mut off = 0;
    for (level, kind, data) in control {
        // SAFETY: an all-zero cmsghdr is valid (it is plain integers and padding).
        let mut hdr: libc::cmsghdr = unsafe { std::mem::zeroed() };
        hdr.cmsg_len = cmsg_len(data.len()) as _;
        hdr.cmsg_level = *level;
        hdr.cmsg_type = *kind;
        // SAFETY: `off + cmsg_space(len) <= total <= buf`'s size in bytes, so the header at
        // `off` and the data at `off + CMSG_LEN(0)` both lie inside the buffer; the buffer is
        // 8-byte aligned and every CMSG_SPACE a multiple of 8, so the header is aligned too.
        unsafe {
            base.add(off).cast::<libc::cmsghdr>().write(hdr);
            std::ptr::copy_nonoverlapping(data.as_ptr(), base.add(off + cmsg_len(0)), data.len());
        }
        off += cmsg_space(data.len());
    }
    // SAFETY: an all-zero msghdr is the empty message (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    if let Some(a) = addr {
        msg.msg_name = a.as_ptr().cast_mut().cast();
        msg.msg_namelen = a.addr_len();
    }
    // IoSlice is ABI-compatible with iovec on Unix (std documents it); the kernel only reads.
    msg.msg_iov = bufs.as_ptr().cast_mut().cast();
    msg.msg_iovlen = bufs.len() as _;
    if total > 0 {
        msg.msg_control = base.cast();
        msg.msg_controllen = total as _;
    }
    // SAFETY: every pointer in `msg` addresses live memory of the stated length (the address,
    // the caller's slices, the control buffer), which the kernel only reads.
    check(unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, flags.bits() as i32) })
}

/// `recvmsg(fd, {addr, buf, control}, flags)`: one message into `buf`, with room for
/// `control_len` bytes of control messages (at most [`MAX_CONTROL_LEN`]) and the sender's
/// address. Pass `RecvFlags::CMSG_CLOEXEC` so that fds arriving by `SCM_RIGHTS` are
/// close-on-exec from birth (their numbers are then in the `SCM_RIGHTS` data: the caller owns
/// them; [`recv_fds`] takes them as `OwnedFd`). See recvmsg(2), cmsg(3), unix(7).
#[allow(clippy::unnecessary_cast)] // msghdr's lengths differ in type between C libraries
pub fn recvmsg(
    fd: BorrowedFd<'_>,
    buf: &mut [MaybeUninit<u8>],
    control_len: usize,
    flags: RecvFlags,
) -> Result<Received, Errno> {
    if control_len > MAX_CONTROL_LEN {
        return Err(Errno::NOBUFS);
    }
    let mut control = control_buffer(control_len);
    let mut name = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is the empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = name.as_mut_ptr().cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as _;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if control_len > 0 {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control_len as _;
    }
    // SAFETY: the name, the one iovec (the caller's writable buffer) and the control buffer
    // are live and writable for the lengths given; the kernel writes at most those.
    let bytes = check(unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, flags.bits() as i32) })?;
    let namelen = (msg.msg_namelen as usize).min(size_of::<libc::sockaddr_storage>());
    let address = if namelen >= size_of::<libc::sa_family_t>() {
        // SAFETY: the kernel initialised `namelen` bytes of `name` (at least the family, and
        // at most the storage's size); SocketAddrStorage is sockaddr_storage.
        Some(unsafe {
            SocketAddrAny::read(name.as_ptr().cast::<SocketAddrStorage>(), namelen as _)
        })
    } else {
        None
    };
    let filled = (msg.msg_controllen as usize).min(control_len);
    // SAFETY: the kernel initialised the first `filled` bytes of the zeroed buffer (and the
    // rest are zeros): all of it is readable as bytes.
    let raw = unsafe { std::slice::from_raw_parts(control.as_ptr().cast::<u8>(), filled) };
    Ok(Received {
        bytes,
        flags: msg.msg_flags,
        address,
        control: parse_control(raw),
    })
}

/// Splits a filled control buffer into messages, never reading past its end: a header whose
/// length runs past the end (a truncated last message) keeps only the bytes present.
#[allow(clippy::unnecessary_cast)] // cmsg_len is size_t on glibc, socklen_t on musl
fn parse_control(raw: &[u8]) -> Vec<ControlMessage> {
    let mut out = Vec::new();
    let head = cmsg_len(0);
    let mut off = 0;
    while off + size_of::<libc::cmsghdr>() <= raw.len() {
        // SAFETY: the header lies inside `raw` (checked above); read_unaligned needs no
        // alignment, and cmsghdr is plain integers, valid for any bytes.
        let hdr = unsafe {
            raw.as_ptr()
                .add(off)
                .cast::<libc::cmsghdr>()
                .read_unaligned()
        };
        let len = hdr.cmsg_len as usize;
        if len < head {
            break;
        }
        let end = (off + len).min(raw.len());
        out.push(ControlMessage {
            level: hdr.cmsg_level,
            kind: hdr.cmsg_type,
            data: raw[off + head..end].to_vec(),
        });
        // The next header starts at the next word boundary after this message.
        let step = len.next_multiple_of(size_of::<usize>());
        off = match off.checked_add(step) {
            Some(next) => next,
            None => break,
        };
    }
    out
}

/// The fds in `SCM_RIGHTS` messages among `control`, taken as `OwnedFd` (so none leaks).
pub fn take_fds(control: &[ControlMessage]) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    for m in control {
        if m.level == libc::SOL_SOCKET && m.kind == libc::SCM_RIGHTS {
            for chunk in m.data.chunks_exact(size_of::<RawFd>()) {
                let raw = RawFd::from_ne_bytes(chunk.try_into().unwrap_or_default());
                if raw >= 0 {
                    // SAFETY: the kernel installed this fd in our table for this message
                    // only; nothing else refers to it, so taking ownership is sound.
                    fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
                }
            }
        }
    }
    fds
}

/// `sendmsg` with one `SCM_RIGHTS` message carrying `fds`: `socket.send_fds` on an fd.
/// The receiver gets new fds for the same open files. See unix(7) (`SCM_RIGHTS`).
pub fn send_fds(
    fd: BorrowedFd<'_>,
    bufs: &[IoSlice<'_>],
    fds: &[BorrowedFd<'_>],
    flags: SendFlags,
    addr: Option<&SocketAddrAny>,
) -> Result<usize, Errno> {
    let data: Vec<u8> = fds
        .iter()
        .flat_map(|f| f.as_raw_fd().to_ne_bytes())
        .collect();
    if fds.is_empty() {
        return sendmsg(fd, bufs, &[], flags, addr);
    }
    sendmsg(
        fd,
        bufs,
        &[(libc::SOL_SOCKET, libc::SCM_RIGHTS, &data)],
        flags,
        addr,
    )
}

/// What [`recv_fds`] received: bytes, the fds, `msg_flags`, the sender's address.
pub type ReceivedFds = (usize, Vec<OwnedFd>, i32, Option<SocketAddrAny>);

/// `recvmsg` with room for `maxfds` fds (`CMSG_LEN(maxfds * sizeof(int))`, as
/// `socket.recv_fds` sizes it): `socket.recv_fds` on an fd. More fds than that, or a control
/// message that does not fit, sets `MSG_CTRUNC` in the flags (the kernel closes what it could
/// not deliver). Pass `RecvFlags::CMSG_CLOEXEC` for close-on-exec fds. See unix(7).
pub fn recv_fds(
    fd: BorrowedFd<'_>,
    buf: &mut [MaybeUninit<u8>],
    maxfds: usize,
    flags: RecvFlags,
) -> Result<ReceivedFds, Errno> {
    let want = maxfds
        .checked_mul(size_of::<RawFd>())
        .map(cmsg_len)
        .filter(|&n| n <= MAX_CONTROL_LEN)
        .ok_or(Errno::NOBUFS)?;
    let got = recvmsg(fd, buf, if maxfds == 0 { 0 } else { want }, flags)?;
    let fds = take_fds(&got.control);
    Ok((got.bytes, fds, got.flags, got.address))
}

/// `sendto(fd, buf, flags, addr)`: one datagram to `addr` (or, with `None`, `send`). Add
/// `SendFlags::NOSIGNAL` to turn `SIGPIPE` into `EPIPE`. See sendto(2).
pub fn sendto(
    fd: BorrowedFd<'_>,
    buf: &[u8],
    flags: SendFlags,
    addr: Option<&SocketAddrAny>,
) -> Result<usize, Errno> {
    match addr {
        Some(a) => rustix::net::sendto(fd, buf, flags, a),
        None => rustix::net::send(fd, buf, flags),
    }
}

/// `recvfrom(fd, buf, flags, &addr)`: one datagram and its sender. Returns the kernel's count
/// (with `MSG_TRUNC` in `flags`, the datagram's full length, possibly more than `buf`) and the
/// address, `None` when the kernel gave none. See recvfrom(2).
pub fn recvfrom(
    fd: BorrowedFd<'_>,
    buf: &mut [MaybeUninit<u8>],
    flags: RecvFlags,
) -> Result<(usize, Option<SocketAddrAny>), Errno> {
    let got = recvmsg(fd, buf, 0, flags)?;
    Ok((got.bytes, got.address))
}
