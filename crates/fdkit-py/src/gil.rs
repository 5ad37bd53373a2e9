//! Running calls with the GIL released, and Python's signal handlers between them.
//!
//! Three shapes, from cheapest to most general:
//!
//! * [`without_gil`]: one bare syscall, the GIL released with the C API (no Python inside).
//! * [`retry_interrupted`] (and [`blocking`], [`fs_call`] on top): a syscall that may wait;
//!   after `EINTR` the signal handlers run with the GIL back and the call is made again
//!   (PEP 475). A handler that raises (Ctrl-C) ends the call with its exception.
//! * [`with_signals`]: a core loop with its own checkpoint closure, run under `py.detach`;
//!   the checkpoint takes the GIL back for a moment to run the handlers ([`Signals`]).
//!
//! Waits that could last are bounded (the core's slices) so that the handlers run often
//! enough for Ctrl-C to feel immediate. See signal(7) on `EINTR`.

use crate::errors::{os_error, FsError};
use fdkit::fd::Errno;
use pyo3::prelude::*;

/// Releases the GIL around `f` with the bare C API (`PyEval_SaveThread`/`RestoreThread`).
///
/// Why not `py.detach`: for a single syscall of a microsecond or two, PyO3's bookkeeping
/// around the release (its thread-local GIL count, reached through `__tls_get_addr` in a
/// shared library) measurably slowed `open`+`close` against `os.open`, which releases the GIL
/// the bare way. The price is that `f` must not enter Python at all, which the private callers
/// here guarantee: they pass plain syscalls. Loops that call back into Python between
/// syscalls (the [`Signals`] checkpoint) keep using `py.detach`.
pub fn without_gil<T>(_py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    struct Reacquire(*mut pyo3::ffi::PyThreadState);
    impl Drop for Reacquire {
        fn drop(&mut self) {
            // SAFETY: `self.0` is the thread state `PyEval_SaveThread` returned on this thread
            // just before; restoring it once (even while unwinding) retakes the GIL.
            unsafe { pyo3::ffi::PyEval_RestoreThread(self.0) };
        }
    }
    // SAFETY: holding `_py` proves this thread holds the GIL, which SaveThread requires.
    // Nothing in `f` touches Python (see above), and the guard retakes the GIL before any
    // Python object is used again, even if `f` panics.
    let _gil = Reacquire(unsafe { pyo3::ffi::PyEval_SaveThread() });
    f()
}

/// Runs `call` with the GIL released (by [`without_gil`]); each time it fails with an
/// interruption (`is_intr`), runs Python's signal handlers with the GIL back and calls it
/// again. A handler's exception is the outer `Err`; the call's own result is the inner one.
///
/// `call` must be resumable (calling it again after an interruption continues the same
/// operation) and must not touch Python (it is `Send`: no `Python` token, no `Bound`).
pub fn retry_interrupted<T: Send, E: Send>(
    py: Python<'_>,
    mut call: impl FnMut() -> Result<T, E> + Send,
    is_intr: impl Fn(&E) -> bool,
) -> PyResult<Result<T, E>> {
    loop {
        match without_gil(py, &mut call) {
            Err(e) if is_intr(&e) => py.check_signals()?,
            other => return Ok(other),
        }
    }
}

/// The checkpoint handed to a core call run by [`retry_interrupted`]: it only reports the
/// interruption (`EINTR`); the handlers then run there, with the GIL back, and the call resumes.
pub fn interrupted() -> Result<(), Errno> {
    Err(Errno::INTR)
}

/// [`retry_interrupted`] for a bare syscall: retried after `EINTR`, other errnos returned.
pub fn retry_eintr<T: Send>(
    py: Python<'_>,
    call: impl FnMut() -> Result<T, Errno> + Send,
) -> PyResult<Result<T, Errno>> {
    retry_interrupted(py, call, |e| *e == Errno::INTR)
}

/// Runs one syscall with the GIL released, retrying after `EINTR` once Python's signal
/// handlers have run (PEP 475); an errno becomes `OSError`.
pub fn blocking<T: Send>(
    py: Python<'_>,
    call: impl FnMut() -> Result<T, Errno> + Send,
) -> PyResult<T> {
    retry_eintr(py, call)?.map_err(os_error)
}

/// Like [`blocking`], for calls whose wait depends on the filesystem, never on another party
/// in this process (`open`, `close`, `stat`, creating temporaries): the GIL is released only
/// when another thread could want it.
///
/// Releasing and retaking an uncontended GIL costs about 350 instructions (a mutex, a
/// condition variable, the thread-state swap): a sixth of an `open`+`close` pair on a cached
/// file. In a process with a single Python thread nobody can be waiting for the GIL, and no new
/// Python thread can start while we hold it, so the dance buys nothing. With other threads it
/// is done as always. (A C thread entering Python for the first time during the call waits
/// for it to return, as it would behind any running Python code.)
pub fn fs_call<T, F>(py: Python<'_>, mut call: F) -> Result<T, FsError>
where
    T: Send,
    F: FnMut() -> Result<T, Errno> + Send,
{
    if other_threads_exist(py) {
        return match retry_eintr(py, call) {
            Ok(result) => result.map_err(FsError::Os),
            Err(raised) => Err(FsError::Python(raised)),
        };
    }
    loop {
        match call() {
            Err(Errno::INTR) => py.check_signals().map_err(FsError::Python)?,
            other => return other.map_err(FsError::Os),
        }
    }
}

/// Whether any thread state other than ours exists, in any interpreter (they share the GIL).
pub fn other_threads_exist(_py: Python<'_>) -> bool {
    use pyo3::ffi;
    // SAFETY: holding `_py` proves we hold the GIL, under which the interpreter and thread
    // state lists may be walked with these accessors; we only compare pointers.
    unsafe {
        let me = ffi::PyThreadState_Get();
        let interp = ffi::PyThreadState_GetInterpreter(me);
        let head = ffi::PyInterpreterState_ThreadHead(interp);
        head != me
            || !ffi::PyThreadState_Next(head).is_null()
            || !ffi::PyInterpreterState_Next(ffi::PyInterpreterState_Head()).is_null()
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

    /// The exception a signal handler raised, if any (taken out).
    pub fn take_raised(&mut self) -> Option<PyErr> {
        self.raised.take()
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

/// Runs a core loop with the GIL released, handing it a [`Signals`] checkpoint; a signal
/// handler's exception wins over the `EINTR` it caused, an errno becomes `OSError`.
pub fn with_signals<T: Send>(
    py: Python<'_>,
    f: impl FnOnce(&mut dyn FnMut() -> Result<(), Errno>) -> Result<T, Errno> + Send,
) -> PyResult<T> {
    let mut signals = Signals::default();
    let result = py.detach(|| {
        let mut checkpoint = signals.checkpoint();
        f(&mut checkpoint)
    });
    signals.finish(result)
}
