//! Argument extraction: fds, counts and paths, checked before any syscall.
//!
//! Every check here exists so that no Python value can crash the process: a negative fd would
//! trip `BorrowedFd`'s invariant, a huge count would abort on allocation.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::os::fd::{BorrowedFd, RawFd};

/// A file descriptor argument: a non-negative `int` that fits a C `int`.
#[derive(Clone, Copy)]
pub struct Fd(pub RawFd);

impl<'a, 'py> FromPyObject<'a, 'py> for Fd {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let v = int_arg(obj, "fd")?;
        if (0..=i64::from(i32::MAX)).contains(&v) {
            Ok(Fd(v as RawFd))
        } else {
            Err(PyValueError::new_err(format!(
                "fd must be a non-negative int, got {v}"
            )))
        }
    }
}

impl Fd {
    /// The fd as a borrow for one syscall.
    pub fn borrow(self) -> BorrowedFd<'static> {
        // SAFETY: `self.0` is in 0..=i32::MAX (checked at extraction), so it is never the -1
        // niche `BorrowedFd` forbids. Whether it names an open file is the kernel's to check:
        // a closed number gives EBADF, never memory unsafety. Like `os.read`, the fd's
        // ownership stays with the Python caller.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

/// A byte count or offset argument: a non-negative `int`.
#[derive(Clone, Copy)]
pub struct Count(pub u64);

impl<'a, 'py> FromPyObject<'a, 'py> for Count {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let v = int_arg(obj, "count")?;
        u64::try_from(v)
            .map(Count)
            .map_err(|_| PyValueError::new_err(format!("must be a non-negative int, got {v}")))
    }
}

impl Count {
    /// The count as `usize`, clamped to what one kernel call moves anyway.
    pub fn clamped(self) -> usize {
        self.0.min(fdkit::fd::MAX_RW_COUNT as u64) as usize
    }
}

/// Extracts an `int` (anything with `__index__`), turning overflow into `ValueError`.
fn int_arg(obj: Borrowed<'_, '_, PyAny>, what: &str) -> PyResult<i64> {
    obj.extract::<i64>().map_err(|e| {
        if e.is_instance_of::<PyOverflowError>(obj.py()) {
            PyValueError::new_err(format!(
                "{what} out of range: {}",
                obj.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        } else {
            e
        }
    })
}

/// A filesystem path: `str` (UTF-8 fast path, else the filesystem encoding with
/// surrogateescape, as `os.fsencode` does), `bytes`, or any `os.PathLike`.
///
/// Held as a C string borrowed from the Python object when it can be: CPython keeps a NUL
/// after the UTF-8 form of a `str` and after the data of a `bytes`, so the common case costs
/// one scan for interior NULs and no copy before the syscall.
pub struct PathArg<'a>(pub Cow<'a, CStr>);

impl<'a> PathArg<'a> {
    /// Extracts a path; an embedded NUL is a `ValueError`, as in `os.open`.
    pub fn extract(obj: &'a Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(s) = obj.cast::<PyString>() {
            if let Ok(utf8) = s.to_str() {
                // SAFETY: `to_str` uses PyUnicode_AsUTF8AndSize, whose buffer is documented to
                // carry a terminating NUL after its `len` bytes; the buffer lives as long as
                // the string object, which `obj` keeps alive for `'a`.
                let with_nul = unsafe { std::slice::from_raw_parts(utf8.as_ptr(), utf8.len() + 1) };
                return Self::borrowed(with_nul);
            }
            return Self::owned(fsencode(obj)?);
        }
        if let Ok(b) = obj.cast::<PyBytes>() {
            let data = b.as_bytes();
            // SAFETY: a `bytes` object's storage always has a NUL after its `len` bytes
            // (PyBytes_AsString's contract); it lives as long as `obj`, i.e. for `'a`.
            let with_nul = unsafe { std::slice::from_raw_parts(data.as_ptr(), data.len() + 1) };
            return Self::borrowed(with_nul);
        }
        let fspath = obj
            .py()
            .import("os")?
            .call_method1("fspath", (obj,))
            .map_err(|_| {
                PyTypeError::new_err(format!(
                    "path must be str, bytes or os.PathLike, not {}",
                    type_name(obj)
                ))
            })?;
        Ok(PathArg(Cow::Owned(
            PathArg::extract(&fspath)?.0.into_owned(),
        )))
    }

    fn borrowed(with_nul: &'a [u8]) -> PyResult<Self> {
        CStr::from_bytes_with_nul(with_nul)
            .map(|c| PathArg(Cow::Borrowed(c)))
            .map_err(|_| PyValueError::new_err("embedded null byte in path"))
    }

    fn owned(bytes: Vec<u8>) -> PyResult<Self> {
        CString::new(bytes)
            .map(|c| PathArg(Cow::Owned(c)))
            .map_err(|_| PyValueError::new_err("embedded null byte in path"))
    }

    /// The path's bytes, without the terminating NUL.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.to_bytes()
    }
}

/// The Python type name of `obj`, for error messages.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

fn fsencode(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let encoded = obj.py().import("os")?.call_method1("fsencode", (obj,))?;
    Ok(encoded.cast::<PyBytes>()?.as_bytes().to_vec())
}
