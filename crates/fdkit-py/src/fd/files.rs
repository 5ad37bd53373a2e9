//! Files, pipes and fd housekeeping: `open`, `close`, `pipe`, `dup`, `dup2`, `fcntl`, and
//! the blocking and close-on-exec flags.

use crate::args::{i32_arg, u32_arg, Fd, PathArg};
use crate::errors::os_error;
use crate::gil::fs_call;
use fdkit::fd::{self, DupFlags, FcntlCmd, Mode, OFlags, PipeFlags};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::ffi::CStr;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};

/// `open(path, flags, mode=0o777)`: returns a new fd, close-on-exec unless `cloexec=False`.
/// Releases the GIL when other threads exist (opening a FIFO or a file on a slow filesystem
/// can block). See open(2).
#[pyfunction]
#[pyo3(signature = (path, flags, mode=0o777, *, cloexec=true))]
pub fn open(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = i32_arg)] flags: i32,
    #[pyo3(from_py_with = u32_arg)] mode: u32,
    cloexec: bool,
) -> PyResult<RawFd> {
    let path_obj = path;
    let path = PathArg::extract(path)?;
    let mut flags = OFlags::from_bits_retain(flags as u32);
    if cloexec {
        flags |= OFlags::CLOEXEC;
    }
    let mode = Mode::from_bits_retain(mode);
    let path: &CStr = &path.0;
    fs_call(py, || fd::open(path, flags, mode))
        .map(IntoRawFd::into_raw_fd)
        .map_err(|e| e.with_path(path_obj))
}

/// `close(fd)`: raises `OSError(EBADF)` for an fd that is not open. Releases the GIL when
/// other threads exist (a socket with `SO_LINGER` can block in close). See close(2).
#[pyfunction]
pub fn close(py: Python<'_>, fd: Fd) -> PyResult<()> {
    // SAFETY: the Python caller hands over ownership of `fd`, as with `os.close`; `fd.0` is
    // non-negative (checked at extraction). A number that is not open gives EBADF.
    let owned = unsafe { OwnedFd::from_raw_fd(fd.0) };
    let mut owned = Some(owned);
    // `close` is attempted once: `take` leaves nothing for an `EINTR` retry, which could close
    // an fd another thread was just given (the core already maps `EINTR` to success).
    Ok(fs_call(py, || owned.take().map_or(Ok(()), fd::close))?)
}

/// `pipe2(flags)`: returns `(read_fd, write_fd)`, both close-on-exec unless `cloexec=False`.
/// `flags` may add `os.O_NONBLOCK` and `os.O_DIRECT`. See pipe(2).
#[pyfunction]
#[pyo3(signature = (flags=0, *, cloexec=true))]
pub fn pipe(#[pyo3(from_py_with = u32_arg)] flags: u32, cloexec: bool) -> PyResult<(RawFd, RawFd)> {
    let mut flags = PipeFlags::from_bits_retain(flags);
    if cloexec {
        flags |= PipeFlags::CLOEXEC;
    }
    let (r, w) = fd::pipe2(flags).map_err(os_error)?;
    Ok((r.into_raw_fd(), w.into_raw_fd()))
}

/// `dup(fd)`: a new fd for the same file, close-on-exec unless `cloexec=False`. See dup(2).
#[pyfunction]
#[pyo3(signature = (fd, *, cloexec=true))]
pub fn dup(fd: Fd, cloexec: bool) -> PyResult<RawFd> {
    fd::dup(fd.borrow(), cloexec)
        .map(IntoRawFd::into_raw_fd)
        .map_err(os_error)
}

/// `dup3(fd, fd2, flags)`: makes `fd2` a copy of `fd` (closing what `fd2` held) and returns
/// `fd2`; close-on-exec unless `cloexec=False`. `fd == fd2` returns `fd2`, as dup2 does.
/// See dup2(2).
#[pyfunction]
#[pyo3(signature = (fd, fd2, *, cloexec=true))]
pub fn dup2(fd: Fd, fd2: Fd, cloexec: bool) -> PyResult<RawFd> {
    let flags = if cloexec {
        DupFlags::CLOEXEC
    } else {
        DupFlags::empty()
    };
    fd::dup3(fd.borrow(), fd2.0, flags).map_err(os_error)
}

/// `fcntl(fd, cmd, arg=0)` for the commands that take and return an int (`F_GETFL`,
/// `F_SETFL`, `F_GETFD`, `F_SETFD`, `F_DUPFD_CLOEXEC`, `F_GETPIPE_SZ`, `F_SETPIPE_SZ`, …).
/// Pointer-taking commands raise `ValueError`: an int would become an address the kernel
/// writes to. See fcntl(2).
#[pyfunction]
#[pyo3(signature = (fd, cmd, arg=0))]
pub fn fcntl(
    fd: Fd,
    #[pyo3(from_py_with = i32_arg)] cmd: i32,
    #[pyo3(from_py_with = i32_arg)] arg: i32,
) -> PyResult<i32> {
    let cmd = FcntlCmd::from_raw(cmd).ok_or_else(|| {
        PyValueError::new_err(format!(
            "fcntl command {cmd} is not supported (only commands with an int argument are)"
        ))
    })?;
    fd::fcntl_int(fd.borrow(), cmd, arg).map_err(os_error)
}

/// Whether `fd` is in blocking mode (`O_NONBLOCK` clear). See fcntl(2).
#[pyfunction]
pub fn get_blocking(fd: Fd) -> PyResult<bool> {
    fd::get_blocking(fd.borrow()).map_err(os_error)
}

/// Sets or clears `O_NONBLOCK`. See fcntl(2).
#[pyfunction]
pub fn set_blocking(fd: Fd, blocking: bool) -> PyResult<()> {
    fd::set_blocking(fd.borrow(), blocking).map_err(os_error)
}

/// Whether `fd` is close-on-exec. See fcntl(2).
#[pyfunction]
pub fn get_cloexec(fd: Fd) -> PyResult<bool> {
    fd::get_cloexec(fd.borrow()).map_err(os_error)
}

/// Sets or clears `FD_CLOEXEC` (for fds fdkit did not create). See fcntl(2).
#[pyfunction]
#[pyo3(signature = (fd, cloexec=true))]
pub fn set_cloexec(fd: Fd, cloexec: bool) -> PyResult<()> {
    fd::set_cloexec(fd.borrow(), cloexec).map_err(os_error)
}
