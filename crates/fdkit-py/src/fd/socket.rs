//! Sockets on plain fds: `socket`, `socketpair`, `bind`, `listen`, `connect`, `shutdown`,
//! `getsockname`, `getpeername`. Accepting is in `accept`, options in `sockopt`.

use super::addr;
use crate::args::{i32_arg, u32_arg, Fd};
use crate::errors::os_error;
use crate::gil::with_signals;
use fdkit::fd::{self, AddressFamily, Protocol, Shutdown, SocketFlags, SocketType};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
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
    with_signals(py, |checkpoint| fd::connect(fd.borrow(), &addr, checkpoint))
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
