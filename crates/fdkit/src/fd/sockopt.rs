//! `getsockopt`/`setsockopt` for any level and option, as an int or as raw bytes.
//!
//! rustix types the common options one by one; these reach the rest (a Python caller passes
//! `socket.SOL_*`/`socket.SO_*` numbers, like `socket.socket.getsockopt`).

use rustix::io::Errno;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The largest option buffer accepted, as Python's `socket.getsockopt` does.
pub const MAX_SOCKOPT_LEN: usize = 1024;

fn check(r: i32) -> rustix::io::Result<()> {
    if r < 0 {
        Err(Errno::from_raw_os_error(super::fcntl::last_errno()))
    } else {
        Ok(())
    }
}

/// `getsockopt(fd, level, name, &int, &len)`: an integer option. See getsockopt(2).
pub fn getsockopt_int(fd: BorrowedFd<'_>, level: i32, name: i32) -> rustix::io::Result<i32> {
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
) -> rustix::io::Result<usize> {
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
pub fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: i32,
    name: i32,
    value: i32,
) -> rustix::io::Result<()> {
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
) -> rustix::io::Result<()> {
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
