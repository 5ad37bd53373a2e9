//! Files, pipes and fd housekeeping: `open`, `close`, `pipe`, `dup`, `dup2`, `fcntl` (record
//! locks included), `ioctl` for int-argument requests, and
//! the blocking and close-on-exec flags.

use crate::args::{i32_arg, i64_arg, u32_arg, Fd, PathArg};
use crate::errors::os_error;
use crate::gil::{blocking, fs_call};
use fdkit::fd::{self, DupFlags, FcntlCmd, Flock, LockCmd, Mode, OFlags, PipeFlags};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
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

/// `dup2(fd, fd2)`: makes `fd2` a copy of `fd` (closing what `fd2` held) and returns `fd2`.
/// Like `os.dup2`, the copy is inheritable by default (`dup2(w, 1)` before an exec is how a
/// child gets its stdout); `cloexec=True` makes it close-on-exec atomically (`dup3` with
/// `O_CLOEXEC`). `fd == fd2` returns `fd2`, as dup2 does. See dup2(2).
#[pyfunction]
#[pyo3(signature = (fd, fd2, *, cloexec=false))]
pub fn dup2(fd: Fd, fd2: Fd, cloexec: bool) -> PyResult<RawFd> {
    let flags = if cloexec {
        DupFlags::CLOEXEC
    } else {
        DupFlags::empty()
    };
    fd::dup3(fd.borrow(), fd2.0, flags).map_err(os_error)
}

/// `fcntl(fd, cmd, arg=0)` for the commands that take and return an int (`F_GETFL`,
/// `F_SETFL`, `F_GETFD`, `F_SETFD`, `F_DUPFD_CLOEXEC`, `F_GETPIPE_SZ`, `F_SETPIPE_SZ`, …), and
/// the record-lock commands (`F_GETLK`, `F_SETLK`, `F_SETLKW`, `F_OFD_*`), whose `arg` is a
/// `(type, whence, start, len, pid)` tuple and whose result is that struct as the kernel left
/// it (`fdkit.fd.fcntl` makes it a `Lock`). Other pointer-taking commands raise
/// `ValueError`: an int would become an address the kernel writes to. The waiting lock
/// commands release the GIL. See fcntl(2).
#[pyfunction]
#[pyo3(signature = (fd, cmd, arg=None))]
pub fn fcntl<'py>(
    py: Python<'py>,
    fd: Fd,
    #[pyo3(from_py_with = i32_arg)] cmd: i32,
    arg: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(lock_cmd) = LockCmd::from_raw(cmd) {
        let Some(lock) = arg.filter(|a| a.is_instance_of::<PyTuple>()) else {
            return Err(PyValueError::new_err(format!(
                "fcntl command {cmd} takes a lock (type, whence, start, len, pid), not {}",
                arg.map_or_else(|| "nothing".to_string(), crate::args::type_name)
            )));
        };
        let lock = flock_arg(lock)?;
        let got = blocking(py, || fd::fcntl_lock(fd.borrow(), lock_cmd, &lock))?;
        return (got.kind, got.whence, got.start, got.len, got.pid)
            .into_pyobject(py)
            .map(Bound::into_any);
    }
    let cmd = FcntlCmd::from_raw(cmd).ok_or_else(|| {
        PyValueError::new_err(format!(
            "fcntl command {cmd} is not supported (only commands with an int argument and the \
             record-lock commands are)"
        ))
    })?;
    let arg = match arg {
        None => 0,
        Some(a) => i32_arg(a)?,
    };
    let r = fd::fcntl_int(fd.borrow(), cmd, arg).map_err(os_error)?;
    Ok(r.into_pyobject(py)?.into_any())
}

/// A `(type, whence, start, len, pid)` tuple as a `struct flock`.
fn flock_arg(t: &Bound<'_, PyAny>) -> PyResult<Flock> {
    let t = t.cast::<PyTuple>()?;
    if t.len() != 5 {
        return Err(PyValueError::new_err(format!(
            "a lock is (type, whence, start, len, pid): 5 items, got {}",
            t.len()
        )));
    }
    let small = |i: usize, what: &str| -> PyResult<i16> {
        let v = i64_arg(&t.get_item(i)?)?;
        i16::try_from(v)
            .map_err(|_| PyValueError::new_err(format!("lock {what} out of range: {v}")))
    };
    let pid = i64_arg(&t.get_item(4)?)?;
    Ok(Flock {
        kind: small(0, "type")?,
        whence: small(1, "whence")?,
        start: i64_arg(&t.get_item(2)?)?,
        len: i64_arg(&t.get_item(3)?)?,
        pid: i32::try_from(pid)
            .map_err(|_| PyValueError::new_err(format!("lock pid out of range: {pid}")))?,
    })
}

/// `ioctl(fd, request, arg=0)` for the requests whose argument is an int or nothing
/// (`FIONREAD`/`SIOCINQ`, `TIOCOUTQ`/`SIOCOUTQ`, `SIOCOUTQNSD`, `FIONBIO`, `FIOASYNC`,
/// `FIOCLEX`, `TCSBRK`, …): returns the int the kernel wrote for the getters, else the call's
/// result. Any other request raises `ValueError` naming it: most take a pointer to a struct,
/// which an int cannot stand for safely. Releases the GIL. See ioctl(2).
#[pyfunction]
#[pyo3(signature = (fd, request, arg=0))]
pub fn ioctl(
    py: Python<'_>,
    fd: Fd,
    #[pyo3(from_py_with = i64_arg)] request: i64,
    #[pyo3(from_py_with = i32_arg)] arg: i32,
) -> PyResult<i32> {
    let refuse = || {
        let name = libc::Ioctl::try_from(request)
            .ok()
            .and_then(fd::struct_request_name)
            .map(|n| format!(" ({n}, which takes a pointer to a struct)"))
            .unwrap_or_default();
        PyValueError::new_err(format!(
            "ioctl request {request:#x}{name} is not supported: only requests with an int \
             argument are (FIONREAD, TIOCOUTQ, FIONBIO, …)"
        ))
    };
    let request = libc::Ioctl::try_from(request).map_err(|_| refuse())?;
    if fd::int_request(request).is_none() {
        return Err(refuse());
    }
    blocking(py, || {
        fd::ioctl_int(fd.borrow(), request, arg).unwrap_or(Err(fd::Errno::INVAL))
    })
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
