//! `Completion`: one io_uring completion as a frozen Python object.

use crate::errors::os_error;
use fdkit::uring::Completion;
use fdkit::uring::OpFd;
use pyo3::exceptions::PyBaseException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::os::fd::IntoRawFd;

/// One completion: `user_data`, `result` (bytes moved, a new fd, 0, or `-errno`), `error` (an
/// `OSError` of the right subclass, or None), `more` (more completions of this op will follow),
/// `notif` (a zero-copy send's notification), `buffer_id` (the provided buffer used, if any),
/// `data` (the bytes a `recv`, `recv_multishot`, `read`, `read_fixed` or `recvmsg`
/// produced, else None), `op` (the name of the `Ring` method that queued it), `fd` (the fd
/// the op was on, or its registered-file index when `fixed`; None for ops on no fd),
/// `address` (the peer of an `accept(address=True)`, the sender of a `recvmsg`) and `statx`
/// (a `statx` op's answer, a dict).
///
/// For `socket`, `accept` and `openat` the new fd (in `result`) belongs to the caller, as
/// with `os.open`.
#[pyclass(frozen, module = "fdkit._fdkit", name = "Completion")]
pub struct PyCompletion {
    #[pyo3(get)]
    user_data: u64,
    #[pyo3(get)]
    result: i32,
    #[pyo3(get)]
    error: Option<Py<PyBaseException>>,
    #[pyo3(get)]
    more: bool,
    #[pyo3(get)]
    notif: bool,
    #[pyo3(get)]
    buffer_id: Option<u16>,
    #[pyo3(get)]
    data: Option<Py<PyBytes>>,
    #[pyo3(get)]
    op: &'static str,
    #[pyo3(get)]
    fd: Option<i32>,
    #[pyo3(get)]
    fixed: bool,
    #[pyo3(get)]
    address: Option<Py<PyAny>>,
    #[pyo3(get)]
    statx: Option<Py<PyDict>>,
}

impl PyCompletion {
    /// Converts a core completion; a new fd's ownership passes to Python (as its number).
    pub fn from_core(py: Python<'_>, mut c: Completion) -> PyResult<Py<PyCompletion>> {
        if let Some(fd) = c.take_fd() {
            // The number is `c.result`; from here on the Python caller owns it.
            let _ = fd.into_raw_fd();
        }
        let error = c.error().map(|e| os_error(e).into_value(py));
        let data = c.data.as_deref().map(|d| PyBytes::new(py, d).unbind());
        let (fd, fixed) = match c.target {
            None => (None, false),
            Some(OpFd::Raw(fd)) => (Some(fd), false),
            Some(OpFd::Fixed(i)) => (Some(i as i32), true),
        };
        let address = match &c.address {
            Some(a) => Some(crate::fd::addr::to_py(py, Some(a))?.unbind()),
            None => None,
        };
        let statx = match &c.statx {
            Some(st) => {
                let d = PyDict::new(py);
                d.set_item("mask", st.mask)?;
                d.set_item("mode", st.mode)?;
                d.set_item("ino", st.ino)?;
                d.set_item("nlink", st.nlink)?;
                d.set_item("uid", st.uid)?;
                d.set_item("gid", st.gid)?;
                d.set_item("size", st.size)?;
                d.set_item("blksize", st.blksize)?;
                d.set_item("blocks", st.blocks)?;
                d.set_item("atime_ns", st.atime_ns)?;
                d.set_item("mtime_ns", st.mtime_ns)?;
                d.set_item("ctime_ns", st.ctime_ns)?;
                d.set_item("btime_ns", st.btime_ns)?;
                d.set_item("dev", st.dev)?;
                d.set_item("rdev", st.rdev)?;
                Some(d.unbind())
            }
            None => None,
        };
        Py::new(
            py,
            PyCompletion {
                user_data: c.user_data,
                result: c.result,
                error,
                more: c.more(),
                notif: c.notif(),
                buffer_id: c.buffer_id,
                data,
                op: c.op.name(),
                fd,
                fixed,
                address,
                statx,
            },
        )
    }
}

#[pymethods]
impl PyCompletion {
    fn __repr__(&self, py: Python<'_>) -> String {
        let mut s = format!(
            "<Completion op={} user_data={} result={}",
            self.op, self.user_data, self.result
        );
        if let Some(e) = &self.error {
            let text = e.bind(py).repr().map(|r| r.to_string()).unwrap_or_default();
            s.push_str(&format!(" error={text}"));
        }
        if self.more {
            s.push_str(" more");
        }
        if self.notif {
            s.push_str(" notif");
        }
        if let Some(fd) = self.fd {
            s.push_str(&format!(" fd={fd}"));
            if self.fixed {
                s.push_str(" fixed");
            }
        }
        if let Some(b) = self.buffer_id {
            s.push_str(&format!(" buffer_id={b}"));
        }
        if let Some(d) = &self.data {
            s.push_str(&format!(" data=<{} bytes>", d.bind(py).as_bytes().len()));
        }
        s.push('>');
        s
    }
}
