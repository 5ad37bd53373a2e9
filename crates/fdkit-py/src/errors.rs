//! Mapping errors to Python: the one place a kernel error becomes an exception.
//!
//! A kernel errno becomes `OSError(errno, strerror[, filename])` built explicitly: Python's
//! `OSError` constructor then picks the subclass (`BlockingIOError`, `BrokenPipeError`,
//! `FileNotFoundError`, …) and sets `.errno` (and `.filename`). PyO3's blanket
//! `From<io::Error>` is not used: it loses the errno of some errors and never names a file.
//! Misuse the kernel cannot report becomes `ValueError`. See errno(3), strerror(3).

use fdkit::error::strerror;
use fdkit::fd::Errno;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use std::io;

/// `OSError(errno, strerror, filename)`, or `OSError(errno, strerror)` without a filename:
/// the one constructor every kernel error goes through. `filename` is what the user gave
/// (a path object, an address as they spelled it) and shows in the message as `os.open`
/// shows it: `[Errno 2] No such file or directory: 'x'`.
pub fn os_error_named<F>(e: Errno, filename: Option<F>) -> PyErr
where
    F: for<'py> IntoPyObject<'py> + Send + Sync + 'static,
{
    let (errno, text) = (e.raw_os_error(), strerror(e));
    match filename {
        Some(name) => PyOSError::new_err((errno, text, name)),
        // Not `(errno, text, None)`: that would show a third item in `args`.
        None => PyOSError::new_err((errno, text)),
    }
}

/// `OSError(errno, strerror)`: Python chooses the subclass from the errno.
pub fn os_error(e: Errno) -> PyErr {
    os_error_named(e, None::<()>)
}

/// `OSError(errno, strerror, filename)`: as `os.open` raises it, naming the path object.
pub fn os_error_with_path(e: Errno, path: &Bound<'_, PyAny>) -> PyErr {
    os_error_named(e, Some(path.clone().unbind()))
}

/// An `io::Error` from the core: one with an errno as [`os_error_named`]; one without (the
/// core's own refusals) as `ValueError` when it is a bad input, else `OSError(message)`.
pub fn io_error_named<F>(e: &io::Error, filename: Option<F>) -> PyErr
where
    F: for<'py> IntoPyObject<'py> + Send + Sync + 'static,
{
    match e.raw_os_error() {
        Some(n) => os_error_named(Errno::from_raw_os_error(n), filename),
        None if e.kind() == io::ErrorKind::InvalidInput => PyValueError::new_err(e.to_string()),
        None => PyOSError::new_err(e.to_string()),
    }
}

/// [`io_error_named`] without a filename.
pub fn io_error(e: &io::Error) -> PyErr {
    io_error_named(e, None::<()>)
}

/// Maps the core's error type: errno to `OSError`, misuse to `ValueError`.
pub fn core_error(e: fdkit::Error) -> PyErr {
    match e {
        fdkit::Error::Os(errno) => os_error(errno),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// Why a [`crate::gil::fs_call`] failed: the kernel's errno (the caller adds the path to the
/// `OSError`), or a signal handler's exception.
pub enum FsError {
    /// The syscall's errno.
    Os(Errno),
    /// An exception raised by a signal handler while the call was retried.
    Python(PyErr),
}

impl FsError {
    /// The Python exception, naming `path` when the kernel refused.
    pub fn with_path(self, path: &Bound<'_, PyAny>) -> PyErr {
        match self {
            FsError::Os(e) => os_error_with_path(e, path),
            FsError::Python(e) => e,
        }
    }
}

impl From<FsError> for PyErr {
    fn from(e: FsError) -> PyErr {
        match e {
            FsError::Os(e) => os_error(e),
            FsError::Python(e) => e,
        }
    }
}
