//! File status as plain tuples: `stat`, `lstat`, `fstat` (`fdkit.fd` wraps them in a
//! `StatResult`). See stat(2).

use crate::args::{Fd, PathArg};
use crate::errors::os_error;
use crate::gil::fs_call;
use fdkit::fd::{self, FileStat};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::ffi::CStr;

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
