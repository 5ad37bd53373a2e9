//! Mapping errors to Python, and running blocking calls with the GIL released.
//!
//! A kernel errno becomes `OSError(errno, strerror)` built explicitly: Python's `OSError`
//! constructor then picks the subclass (`BlockingIOError`, `BrokenPipeError`, …) and sets
//! `.errno`. Misuse the kernel cannot report becomes `ValueError`.

use fdkit::error::strerror;
use fdkit::fd::Errno;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// `OSError(errno, strerror)`: Python chooses the subclass from the errno.
pub fn os_error(e: Errno) -> PyErr {
    PyOSError::new_err((e.raw_os_error(), strerror(e)))
}

/// Maps the core's error type: errno to `OSError`, misuse to `ValueError`.
pub fn core_error(e: fdkit::Error) -> PyErr {
    match e {
        fdkit::Error::Os(errno) => os_error(errno),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// Runs one syscall with the GIL released, retrying after `EINTR` once Python's signal
/// handlers have run (PEP 475): a handler that raises (Ctrl-C) ends the call with its exception.
pub fn blocking<T, F>(py: Python<'_>, mut call: F) -> PyResult<T>
where
    T: Send,
    F: FnMut() -> Result<T, Errno> + Send,
{
    loop {
        match py.detach(&mut call) {
            Err(Errno::INTR) => py.check_signals()?,
            other => return other.map_err(os_error),
        }
    }
}

/// The checkpoint handed to the core's long loops: between syscalls, with the GIL released,
/// it takes the GIL back for a moment to run signal handlers. A handler's exception is kept
/// here and stops the loop; [`Signals::finish`] hands it to Python.
#[derive(Default)]
pub struct Signals {
    raised: Option<PyErr>,
}

impl Signals {
    /// The closure the core calls after `EINTR` or a short transfer.
    pub fn checkpoint(&mut self) -> impl FnMut() -> Result<(), Errno> + Send + '_ {
        move || match Python::attach(|py| py.check_signals()) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.raised = Some(e);
                Err(Errno::INTR)
            }
        }
    }

    /// The call's result for Python: a signal handler's exception wins over the `EINTR` it
    /// caused.
    pub fn finish<T>(self, result: Result<T, Errno>) -> PyResult<T> {
        match (result, self.raised) {
            (Err(_), Some(raised)) => Err(raised),
            (result, _) => result.map_err(os_error),
        }
    }
}
