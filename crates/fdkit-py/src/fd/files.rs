//! Files, pipes and fd housekeeping: `open`, `close`, `pipe`, `dup`, `dup2`, `fcntl`,
//! blocking and cloexec flags, `mkstemp`, `mkdtemp`, `stat`, `poll`.

use crate::args::{i32_arg, u32_arg, Fd, PathArg};
use crate::errors::{fs_call, os_error, Signals};
use fdkit::fd::{self, DupFlags, FcntlCmd, FileStat, Mode, OFlags, PipeFlags};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use rustix::event::{PollFd, PollFlags};
use std::ffi::{CStr, OsStr};
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

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

fn temp_dir(dir: Option<&Bound<'_, PyAny>>) -> PyResult<std::path::PathBuf> {
    match dir {
        Some(d) => Ok(Path::new(OsStr::from_bytes(PathArg::extract(d)?.as_bytes())).to_path_buf()),
        None => Ok(std::env::temp_dir()),
    }
}

/// A temporary-name failure names the directory it was made in, as `tempfile` does.
fn in_dir(
    e: crate::errors::FsError,
    py: Python<'_>,
    dir: Option<&Bound<'_, PyAny>>,
    dir_path: &Path,
) -> PyErr {
    match dir {
        Some(d) => e.with_path(d),
        None => match dir_path.as_os_str().into_pyobject(py) {
            Ok(p) => e.with_path(&p.into_any()),
            Err(never) => match never {},
        },
    }
}

fn name_part(part: &Bound<'_, PyAny>) -> PyResult<std::ffi::OsString> {
    let bytes = PathArg::extract(part)?;
    Ok(OsStr::from_bytes(bytes.as_bytes()).to_os_string())
}

/// `mkstemp(suffix="", prefix="tmp", dir=None)`: creates a new file with a random name, mode
/// 0600, opened read-write and close-on-exec; returns `(fd, path)`. `dir` defaults to
/// `$TMPDIR` or `/tmp`. See mkstemp(3).
#[pyfunction]
#[pyo3(signature = (suffix=None, prefix=None, dir=None, *, cloexec=true))]
pub fn mkstemp(
    py: Python<'_>,
    suffix: Option<&Bound<'_, PyAny>>,
    prefix: Option<&Bound<'_, PyAny>>,
    dir: Option<&Bound<'_, PyAny>>,
    cloexec: bool,
) -> PyResult<(RawFd, Py<PyAny>)> {
    let dir_path = temp_dir(dir)?;
    let suffix = suffix.map(name_part).transpose()?.unwrap_or_default();
    let prefix = prefix
        .map(name_part)
        .transpose()?
        .unwrap_or_else(|| "tmp".into());
    let (fd, path) = fs_call(py, || fd::mkstemp(&dir_path, &prefix, &suffix, cloexec))
        .map_err(|e| in_dir(e, py, dir, &dir_path))?;
    let fd = fd.into_raw_fd();
    Ok((
        fd,
        path.into_os_string().into_pyobject(py)?.into_any().unbind(),
    ))
}

/// `mkdtemp(suffix="", prefix="tmp", dir=None)`: creates a new directory with a random name,
/// mode 0700; returns its path. See mkdtemp(3).
#[pyfunction]
#[pyo3(signature = (suffix=None, prefix=None, dir=None))]
pub fn mkdtemp(
    py: Python<'_>,
    suffix: Option<&Bound<'_, PyAny>>,
    prefix: Option<&Bound<'_, PyAny>>,
    dir: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let dir_path = temp_dir(dir)?;
    let suffix = suffix.map(name_part).transpose()?.unwrap_or_default();
    let prefix = prefix
        .map(name_part)
        .transpose()?
        .unwrap_or_else(|| "tmp".into());
    let path = fs_call(py, || fd::mkdtemp(&dir_path, &prefix, &suffix))
        .map_err(|e| in_dir(e, py, dir, &dir_path))?;
    Ok(path.into_os_string().into_pyobject(py)?.into_any().unbind())
}

/// The 13 fields in `fdkit.fd.StatResult`'s order.
fn stat_tuple(py: Python<'_>, s: FileStat) -> PyResult<Bound<'_, PyTuple>> {
    let head = (s.dev, s.ino, s.mode, s.nlink, s.uid, s.gid, s.rdev).into_pyobject(py)?;
    let tail = (
        s.size, s.blksize, s.blocks, s.atime_ns, s.mtime_ns, s.ctime_ns,
    )
        .into_pyobject(py)?;
    let fields: Vec<Bound<'_, PyAny>> = head.iter().chain(tail.iter()).collect();
    PyTuple::new(py, fields)
}

/// `stat(path)` as a plain tuple; `fdkit.fd.stat` wraps it in a `StatResult`. See stat(2).
#[pyfunction]
pub fn stat<'py>(py: Python<'py>, path: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
    let c_path = PathArg::extract(path)?;
    let c: &CStr = &c_path.0;
    stat_tuple(
        py,
        fs_call(py, || fd::stat(c)).map_err(|e| e.with_path(path))?,
    )
}

/// `lstat(path)` as a plain tuple (a symlink itself). See stat(2).
#[pyfunction]
pub fn lstat<'py>(py: Python<'py>, path: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
    let c_path = PathArg::extract(path)?;
    let c: &CStr = &c_path.0;
    stat_tuple(
        py,
        fs_call(py, || fd::lstat(c)).map_err(|e| e.with_path(path))?,
    )
}

/// `fstat(fd)` as a plain tuple. See stat(2).
#[pyfunction]
pub fn fstat(py: Python<'_>, fd: Fd) -> PyResult<Bound<'_, PyTuple>> {
    stat_tuple(py, fd::fstat(fd.borrow()).map_err(os_error)?)
}

/// `poll(fds, timeout=None)`: `fds` is an iterable of `(fd, events)` pairs (events from
/// `select.POLLIN`, …); waits up to `timeout` seconds (`None` forever, 0 not at all) and
/// returns `[(fd, revents), …]` for the fds with events, `[]` on timeout. Keeps its deadline
/// across signals; Ctrl-C interrupts it. See poll(2).
#[pyfunction]
#[pyo3(signature = (fds, timeout=None))]
pub fn poll<'py>(
    py: Python<'py>,
    fds: &Bound<'py, PyAny>,
    timeout: Option<f64>,
) -> PyResult<Bound<'py, PyList>> {
    let timeout = match timeout {
        None => None,
        Some(t) if t.is_nan() => return Err(PyValueError::new_err("timeout must not be NaN")),
        Some(t) if t < 0.0 => {
            return Err(PyValueError::new_err(
                "timeout must be >= 0 (None waits forever)",
            ))
        }
        Some(t) => Some(Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX)),
    };
    let mut wanted: Vec<(Fd, u16)> = Vec::new();
    for item in fds.try_iter()? {
        let item = item?;
        let pair = item
            .cast::<PyTuple>()
            .map_err(|_| PyTypeError::new_err("poll() wants (fd, events) pairs"))?;
        if pair.len() != 2 {
            return Err(PyTypeError::new_err("poll() wants (fd, events) pairs"));
        }
        let fd: Fd = pair.get_item(0)?.extract()?;
        let events_obj = pair.get_item(1)?;
        let events: u16 = events_obj.extract().map_err(|e: PyErr| {
            // An int out of u16's range overflows; anything else is the wrong type.
            if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(py) {
                PyValueError::new_err(format!(
                    "poll() events must be in 0..=65535, got {}",
                    events_obj.repr().map(|r| r.to_string()).unwrap_or_default()
                ))
            } else {
                PyTypeError::new_err(format!(
                    "poll() events must be an int, not {}",
                    crate::args::type_name(&events_obj)
                ))
            }
        })?;
        wanted.push((fd, events));
    }
    let mut pollfds: Vec<PollFd<'_>> = wanted
        .iter()
        .map(|(fd, ev)| PollFd::from_borrowed_fd(fd.borrow(), PollFlags::from_bits_retain(*ev)))
        .collect();
    let mut signals = Signals::default();
    let result = py.detach(|| fd::poll(&mut pollfds, timeout, signals.checkpoint()));
    signals.finish(result)?;
    let ready = PyList::empty(py);
    for (pfd, (fd, _)) in pollfds.iter().zip(&wanted) {
        let revents = pfd.revents().bits();
        if revents != 0 {
            ready.append((fd.0, revents))?;
        }
    }
    Ok(ready)
}
