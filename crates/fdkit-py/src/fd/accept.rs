//! Accepting connections: `accept`, `accept4`, and `accept_many`, which drains a listener's
//! backlog in one call. See accept(2), accept4(2).

use super::addr;
use crate::args::{u32_arg, Fd};
use crate::errors::core_error;
use crate::gil::{blocking, other_threads_exist, without_gil};
use fdkit::fd::{self, SocketFlags};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::os::fd::{IntoRawFd, RawFd};

/// `accept_many`'s `max`: an int (`None`, meaning no limit, is the `Option` around it).
pub struct Max(i64);

impl<'a, 'py> FromPyObject<'a, 'py> for Max {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        crate::args::int_arg(obj, "max").map(Max)
    }
}

fn accepted<'py>(py: Python<'py>, (conn, peer): fd::Accepted) -> PyResult<Bound<'py, PyTuple>> {
    // Build the address first: if that failed after `into_raw_fd`, the fd would leak.
    let address = addr::to_py(py, peer.as_ref())?;
    PyTuple::new(
        py,
        [conn.into_raw_fd().into_pyobject(py)?.into_any(), address],
    )
}

/// `accept4(fd, SOCK_CLOEXEC)`: returns `(conn_fd, address)`, the new fd close-on-exec
/// unless `cloexec=False`. One syscall: no socket object, no `getsockname`. Releases the GIL;
/// Ctrl-C interrupts a blocking wait. See accept(2).
#[pyfunction]
#[pyo3(signature = (fd, *, cloexec=true))]
pub fn accept<'py>(py: Python<'py>, fd: Fd, cloexec: bool) -> PyResult<Bound<'py, PyTuple>> {
    let flags = if cloexec {
        SocketFlags::CLOEXEC
    } else {
        SocketFlags::empty()
    };
    let pair = blocking(py, || fd::accept4(fd.borrow(), flags))?;
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
/// connections (every pending one with `max=None`) from a non-blocking listener in one call.
/// The GIL is released once for the whole batch when other Python threads exist, and not at
/// all otherwise (the batch never waits, so nobody else could use it). Returns `[(conn_fd, address), …]`, `[]` when nothing is pending. Skips connections
/// the peer aborted; on `EMFILE`/`ENFILE` returns what it has and raises only when it has
/// nothing. A blocking listener raises `ValueError` rather than hanging. See accept4(2).
#[pyfunction]
#[pyo3(
    signature = (fd, max=Some(Max(64)), flags=0o4000 | 0o2000000, *, cloexec=true),
    text_signature = "(fd, max=64, flags=..., *, cloexec=True)"
)]
pub fn accept_many<'py>(
    py: Python<'py>,
    fd: Fd,
    max: Option<Max>,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
    cloexec: bool,
) -> PyResult<Bound<'py, PyList>> {
    let max = match max {
        None => usize::MAX,
        Some(Max(m)) => usize::try_from(m)
            .ok()
            .filter(|&m| m >= 1)
            .ok_or_else(|| PyValueError::new_err(format!("max must be at least 1, got {m}")))?,
    };
    let mut flags = SocketFlags::from_bits_retain(flags);
    if cloexec {
        flags |= SocketFlags::CLOEXEC;
    }
    // The listener is non-blocking (the core checks), so the batch never waits: like `fs_call`,
    // release the GIL only when another thread could use it.
    let batch = if other_threads_exist(py) {
        without_gil(py, || fd::accept_many(fd.borrow(), max, flags))
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
                        let _ = super::files::close(py, Fd(raw));
                    }
                }
                drop(batch);
                return Err(e);
            }
        }
    }
    Ok(out)
}
