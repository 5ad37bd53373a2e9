//! Sockets on plain fds: `socket`, `socketpair`, `bind`, `listen`, `accept`, `accept4`,
//! `accept_many`, `connect`, `shutdown`, `getsockname`, `getpeername`, socket options.

use crate::addr;
use crate::args::{i32_arg, i64_arg, u32_arg, Count, Fd, RawBuffer};
use crate::errors::{blocking, core_error, os_error, Signals};
use fdkit::fd::{self, AddressFamily, Protocol, Shutdown, SocketFlags, SocketType};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use std::os::fd::{IntoRawFd, RawFd};

/// `socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC`: the flag bits allowed in a socket type.
const TYPE_FLAGS: u32 = 0o4000 | 0o2000000;

fn split_type(ty: u32, cloexec: bool) -> (SocketType, SocketFlags) {
    let mut flags = SocketFlags::from_bits_retain(ty & TYPE_FLAGS);
    if cloexec {
        flags |= SocketFlags::CLOEXEC;
    }
    (SocketType::from_raw(ty & !TYPE_FLAGS), flags)
}

fn protocol(raw: u32) -> Option<Protocol> {
    std::num::NonZeroU32::new(raw).map(Protocol::from_raw)
}

fn family(raw: u32) -> PyResult<AddressFamily> {
    u16::try_from(raw)
        .map(AddressFamily::from_raw)
        .map_err(|_| PyValueError::new_err(format!("invalid address family {raw}")))
}

/// `socket(family=AF_INET, type=SOCK_STREAM, proto=0)`: a new socket fd, close-on-exec unless
/// `cloexec=False`. `type` may include `SOCK_NONBLOCK`. See socket(2).
#[pyfunction]
#[pyo3(signature = (family=2, r#type=1, proto=0, *, cloexec=true))]
pub fn socket(
    #[pyo3(from_py_with = u32_arg)] family: u32,
    #[pyo3(from_py_with = u32_arg)] r#type: u32,
    #[pyo3(from_py_with = u32_arg)] proto: u32,
    cloexec: bool,
) -> PyResult<RawFd> {
    let (ty, flags) = split_type(r#type, cloexec);
    fd::socket(self::family(family)?, ty, flags, protocol(proto))
        .map(IntoRawFd::into_raw_fd)
        .map_err(os_error)
}

/// `socketpair(family=AF_UNIX, type=SOCK_STREAM, proto=0)`: two connected socket fds,
/// close-on-exec unless `cloexec=False`. See socketpair(2).
#[pyfunction]
#[pyo3(signature = (family=1, r#type=1, proto=0, *, cloexec=true))]
pub fn socketpair(
    #[pyo3(from_py_with = u32_arg)] family: u32,
    #[pyo3(from_py_with = u32_arg)] r#type: u32,
    #[pyo3(from_py_with = u32_arg)] proto: u32,
    cloexec: bool,
) -> PyResult<(RawFd, RawFd)> {
    let (ty, flags) = split_type(r#type, cloexec);
    let (a, b) =
        fd::socketpair(self::family(family)?, ty, flags, protocol(proto)).map_err(os_error)?;
    Ok((a.into_raw_fd(), b.into_raw_fd()))
}

/// `bind(fd, address)`. See bind(2).
#[pyfunction]
pub fn bind(fd: Fd, address: &Bound<'_, PyAny>) -> PyResult<()> {
    let addr = addr::from_py(address, fd.borrow())?;
    fd::bind(fd.borrow(), &addr).map_err(os_error)
}

/// `listen(fd, backlog=4096)`: the kernel caps `backlog` at `net.core.somaxconn`.
/// See listen(2).
#[pyfunction]
#[pyo3(signature = (fd, backlog=4096))]
pub fn listen(fd: Fd, #[pyo3(from_py_with = i32_arg)] backlog: i32) -> PyResult<()> {
    fd::listen(fd.borrow(), backlog).map_err(os_error)
}

/// `connect(fd, address)`: releases the GIL; a signal during a blocking connect lets the
/// connection finish instead of failing with `EALREADY` on retry (PEP 475). A non-blocking
/// socket raises `BlockingIOError` (`EINPROGRESS`): poll for writability, then read
/// `SO_ERROR`. See connect(2).
#[pyfunction]
pub fn connect(py: Python<'_>, fd: Fd, address: &Bound<'_, PyAny>) -> PyResult<()> {
    let addr = addr::from_py(address, fd.borrow())?;
    let mut signals = Signals::default();
    let result = py.detach(|| fd::connect(fd.borrow(), &addr, signals.checkpoint()));
    signals.finish(result)
}

fn accepted<'py>(py: Python<'py>, (conn, peer): fd::Accepted) -> PyResult<Bound<'py, PyTuple>> {
    // Build the address first: if that failed after `into_raw_fd`, the fd would leak.
    let address = addr::to_py(py, peer.as_ref())?;
    PyTuple::new(
        py,
        [conn.into_raw_fd().into_pyobject(py)?.into_any(), address],
    )
}

/// `accept4(fd, SOCK_CLOEXEC)`: returns `(conn_fd, address)`. One syscall: no socket object,
/// no `getsockname`. Releases the GIL; Ctrl-C interrupts a blocking wait. See accept(2).
#[pyfunction]
pub fn accept<'py>(py: Python<'py>, fd: Fd) -> PyResult<Bound<'py, PyTuple>> {
    let pair = blocking(py, || fd::accept4(fd.borrow(), SocketFlags::CLOEXEC))?;
    accepted(py, pair)
}

/// `accept4(fd, flags)`: like `accept` with `SOCK_NONBLOCK` and friends in `flags`;
/// `SOCK_CLOEXEC` is added unless `cloexec=False`. See accept4(2).
#[pyfunction]
#[pyo3(signature = (fd, flags=0, *, cloexec=true))]
pub fn accept4<'py>(
    py: Python<'py>,
    fd: Fd,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
    cloexec: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let mut flags = SocketFlags::from_bits_retain(flags);
    if cloexec {
        flags |= SocketFlags::CLOEXEC;
    }
    let pair = blocking(py, || fd::accept4(fd.borrow(), flags))?;
    accepted(py, pair)
}

/// `accept_many(fd, max=64, flags=SOCK_NONBLOCK|SOCK_CLOEXEC)`: drains up to `max` pending
/// connections from a non-blocking listener in one call, the GIL released once for the whole
/// batch. Returns `[(conn_fd, address), …]`, `[]` when nothing is pending. Skips connections
/// the peer aborted; on `EMFILE`/`ENFILE` returns what it has and raises only when it has
/// nothing. A blocking listener raises `ValueError` rather than hanging. See accept4(2).
#[pyfunction]
#[pyo3(signature = (fd, max=64, flags=0o4000 | 0o2000000, *, cloexec=true))]
pub fn accept_many<'py>(
    py: Python<'py>,
    fd: Fd,
    #[pyo3(from_py_with = i64_arg)] max: i64,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
    cloexec: bool,
) -> PyResult<Bound<'py, PyList>> {
    let max = usize::try_from(max)
        .ok()
        .filter(|&m| m >= 1)
        .ok_or_else(|| PyValueError::new_err(format!("max must be at least 1, got {max}")))?;
    let mut flags = SocketFlags::from_bits_retain(flags);
    if cloexec {
        flags |= SocketFlags::CLOEXEC;
    }
    // The listener is non-blocking (the core checks), so the batch never waits: like `fs_call`,
    // release the GIL only when another thread could use it.
    let batch = if crate::errors::other_threads_exist(py) {
        crate::errors::without_gil(py, || fd::accept_many(fd.borrow(), max, flags))
    } else {
        fd::accept_many(fd.borrow(), max, flags)
    }
    .map_err(core_error)?;
    let out = PyList::empty(py);
    let mut batch = batch.into_iter();
    while let Some(pair) = batch.next() {
        match accepted(py, pair) {
            Ok(t) => out.append(t)?,
            Err(e) => {
                // Converting failed (out of memory): close what Python will never see, and
                // what it already holds, so no fd leaks behind the exception.
                for t in out.iter() {
                    if let Ok(raw) = t.get_item(0).and_then(|v| v.extract::<RawFd>()) {
                        let _ = crate::files::close(py, Fd(raw));
                    }
                }
                drop(batch);
                return Err(e);
            }
        }
    }
    Ok(out)
}

/// `shutdown(fd, how)`: `how` is `socket.SHUT_RD`, `SHUT_WR` or `SHUT_RDWR`. See shutdown(2).
#[pyfunction]
pub fn shutdown(fd: Fd, #[pyo3(from_py_with = i32_arg)] how: i32) -> PyResult<()> {
    let how = match how {
        0 => Shutdown::Read,
        1 => Shutdown::Write,
        2 => Shutdown::Both,
        _ => return Err(PyValueError::new_err(format!("invalid shutdown how {how}"))),
    };
    fd::shutdown(fd.borrow(), how).map_err(os_error)
}

/// `getsockname(fd)`: the socket's own address. See getsockname(2).
#[pyfunction]
pub fn getsockname<'py>(py: Python<'py>, fd: Fd) -> PyResult<Bound<'py, PyAny>> {
    let a = fd::getsockname(fd.borrow()).map_err(os_error)?;
    addr::to_py(py, Some(&a))
}

/// `getpeername(fd)`: the connected peer's address. See getpeername(2).
#[pyfunction]
pub fn getpeername<'py>(py: Python<'py>, fd: Fd) -> PyResult<Bound<'py, PyAny>> {
    let a = fd::getpeername(fd.borrow()).map_err(os_error)?;
    addr::to_py(py, a.as_ref())
}

/// `getsockopt(fd, level, optname, buflen=None)`: an int when `buflen` is None, else up to
/// `buflen` bytes (at most 1024). See getsockopt(2).
#[pyfunction]
#[pyo3(signature = (fd, level, optname, buflen=None))]
pub fn getsockopt<'py>(
    py: Python<'py>,
    fd: Fd,
    #[pyo3(from_py_with = i32_arg)] level: i32,
    #[pyo3(from_py_with = i32_arg)] optname: i32,
    buflen: Option<Count>,
) -> PyResult<Bound<'py, PyAny>> {
    match buflen {
        None => {
            let v = fd::getsockopt_int(fd.borrow(), level, optname).map_err(os_error)?;
            Ok(v.into_pyobject(py)?.into_any())
        }
        Some(Count(n)) => {
            if n == 0 || n > fd::MAX_SOCKOPT_LEN as u64 {
                return Err(PyValueError::new_err(format!(
                    "buflen must be 1..={}, got {n}",
                    fd::MAX_SOCKOPT_LEN
                )));
            }
            let mut buf = vec![0u8; n as usize];
            let got =
                fd::getsockopt_raw(fd.borrow(), level, optname, &mut buf).map_err(os_error)?;
            Ok(PyBytes::new(py, &buf[..got]).into_any())
        }
    }
}

/// `setsockopt(fd, level, optname, value)`: `value` is an int or a bytes-like object (at most
/// 1024 bytes). See setsockopt(2).
#[pyfunction]
pub fn setsockopt(
    fd: Fd,
    #[pyo3(from_py_with = i32_arg)] level: i32,
    #[pyo3(from_py_with = i32_arg)] optname: i32,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    if value.is_instance_of::<pyo3::types::PyInt>() {
        let v = i32_arg(value)?;
        return fd::setsockopt_int(fd.borrow(), level, optname, v).map_err(os_error);
    }
    let buf = RawBuffer::get(value, false)
        .map_err(|_| PyTypeError::new_err("option value must be an int or bytes-like"))?;
    let bytes = buf.as_slice();
    if bytes.len() > fd::MAX_SOCKOPT_LEN {
        return Err(PyValueError::new_err(format!(
            "option value is {} bytes; at most {} allowed",
            bytes.len(),
            fd::MAX_SOCKOPT_LEN
        )));
    }
    fd::setsockopt_raw(fd.borrow(), level, optname, bytes).map_err(os_error)
}
