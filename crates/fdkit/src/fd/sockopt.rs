//! `getsockopt`/`setsockopt` for any level and option, as an int or as raw bytes.
//!
//! rustix types the common options one by one; these reach the rest (a Python caller passes
//! `socket.SOL_*`/`socket.SO_*` numbers, like `socket.socket.getsockopt`).

use rustix::io::Errno;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The largest option buffer accepted, as Python's `socket.getsockopt` does.
pub const MAX_SOCKOPT_LEN: usize = 1024;

fn check(r: i32) -> Result<(), Errno> {
    if r < 0 {
        Err(Errno::from_raw_os_error(super::fcntl::last_errno()))
    } else {
        Ok(())
    }
}

/// `getsockopt(fd, level, name, &int, &len)`: an integer option. See getsockopt(2).
pub fn getsockopt_int(fd: BorrowedFd<'_>, level: i32, name: i32) -> Result<i32, Errno> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals and `len` is exactly `value`'s size, so the
    // kernel writes at most that many bytes into it.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw mut value).cast(),
            &mut len,
        )
    })?;
    Ok(value)
}

/// `getsockopt(fd, level, name, buf, &len)`: an option as bytes; returns the length the kernel
/// filled in. See getsockopt(2).
pub fn getsockopt_raw(
    fd: BorrowedFd<'_>,
    level: i32,
    name: i32,
    buf: &mut [u8],
) -> Result<usize, Errno> {
    if buf.len() > MAX_SOCKOPT_LEN {
        return Err(Errno::INVAL);
    }
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is a live, writable slice of `len` bytes; the kernel writes at most `len`.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    Ok((len as usize).min(buf.len()))
}

/// `setsockopt(fd, level, name, &int, sizeof int)`: an integer option. See setsockopt(2).
pub fn setsockopt_int(fd: BorrowedFd<'_>, level: i32, name: i32, value: i32) -> Result<(), Errno> {
    let value: libc::c_int = value;
    // SAFETY: the kernel reads `sizeof(int)` bytes from a live local of that size.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
}

/// `setsockopt(fd, level, name, buf, len)`: an option given as bytes. See setsockopt(2).
pub fn setsockopt_raw(
    fd: BorrowedFd<'_>,
    level: i32,
    name: i32,
    value: &[u8],
) -> Result<(), Errno> {
    if value.len() > MAX_SOCKOPT_LEN {
        return Err(Errno::INVAL);
    }
    // SAFETY: the kernel only reads `value.len()` bytes from the live slice.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    })
}

/// `setsockopt(SO_LINGER, {l_onoff = 1, l_linger = 0})`: the next `close(2)` of this TCP
/// socket is abortive. The kernel drops whatever is still unsent and sends a RST, so the peer's
/// next read fails with `ECONNRESET` instead of returning a clean end of file. A proxy uses it
/// to pass a reset on: a FIN would make a cut stream look complete. See socket(7) (`SO_LINGER`).
pub fn set_linger_zero(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    rustix::net::sockopt::set_socket_linger(fd, Some(std::time::Duration::ZERO))
}

/// `ioctl(SIOCOUTQ)`: the bytes in a socket's send queue, for TCP those not yet acknowledged by
/// the peer (unsent plus in flight). Zero means everything written has reached the peer's
/// kernel; an abortive close before that would discard the rest. See tcp(7) (`SIOCOUTQ`).
pub fn siocoutq(fd: BorrowedFd<'_>) -> Result<usize, Errno> {
    // SAFETY: SIOCOUTQ (the same number as TIOCOUTQ) writes one `int`, the getter's output type.
    let n = unsafe {
        rustix::ioctl::ioctl(
            fd,
            rustix::ioctl::Getter::<{ libc::TIOCOUTQ as rustix::ioctl::Opcode }, libc::c_int>::new(
            ),
        )
    }?;
    Ok(n.max(0) as usize)
}

/// Resets a connected TCP socket now, while the caller keeps its fd: `SO_LINGER {1, 0}` (so a
/// later `close(2)` is abortive too), then `connect(2)` with `AF_UNSPEC`, which disconnects
/// the socket and sends the peer a RST (from ESTABLISHED, CLOSE_WAIT, FIN_WAIT1/2; unsent bytes
/// are dropped, as with a lingerless close). The fd stays open and unconnected. Unix stream
/// sockets have no reset: they fail with `EINVAL` and are left as they are (their peer sees the
/// end of file when the socket is closed). See connect(2) (`AF_UNSPEC`), socket(7).
pub fn reset_connection(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    set_linger_zero(fd)?;
    rustix::net::connect_unspec(fd)
}

/// `tcpi_state` for `TCP_CLOSE`: a socket that was reset (or never connected).
pub const TCP_CLOSE: u8 = 7;

/// `getsockopt(IPPROTO_TCP, TCP_INFO)`'s first field, `tcpi_state` (`TCP_ESTABLISHED` = 1 …
/// [`TCP_CLOSE`] = 7): whether a connection is still alive after an error that does not say
/// which end failed. Not a TCP socket: `EOPNOTSUPP`/`ENOPROTOOPT`. See tcp(7) (`TCP_INFO`).
pub fn tcp_state(fd: BorrowedFd<'_>) -> Result<u8, Errno> {
    let mut info = [0u8; 8];
    getsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut info)?;
    Ok(info[0])
}
