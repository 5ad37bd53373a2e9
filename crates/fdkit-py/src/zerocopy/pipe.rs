//! `zerocopy.Pipe`: a pipe pair as an object (`read_from`, `write_to`, `tee`, its size),
//! closable from any thread (see `closable`). See pipe(7), splice(2), tee(2).

use crate::args::{Count, Fd};
use crate::closable::{Closable, Release, Use};
use crate::errors::os_error;
use crate::gil::{interrupted, retry_eintr};
use crate::pipe_size::pipe_size;
use fdkit::fd::Errno;
use fdkit::zerocopy::{self, Pipe};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rustix::pipe::{PipeFlags, SpliceFlags};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;

/// A pipe pair as an object: `read_from`, `write_to`, `tee`, sizes. A context manager; after
/// `close()` every method raises `ValueError`. Closable from any thread (the binding's one
/// locking model, see `closable`): a call waiting in another thread ends with ValueError within
/// 20 ms, and the fds are closed once it has left.
#[pyclass(module = "fdkit._fdkit", name = "Pipe", frozen)]
pub struct PyPipe {
    pipe: Closable<Option<Pipe>>,
}

impl Release for Option<Pipe> {
    fn release(&mut self, _py: Python<'_>, _deferred: bool) -> PyResult<()> {
        drop(self.take());
        Ok(())
    }

    fn is_released(&self) -> bool {
        self.is_none()
    }
}

fn closed_pipe() -> PyErr {
    PyValueError::new_err("I/O operation on a closed Pipe")
}

/// Runs a cancellable splice/tee with the GIL released; after `EINTR` runs Python's signal
/// handlers and tries again (nothing moved); `ECANCELED` (a close from another thread) is the
/// closed error.
fn splice_call(
    py: Python<'_>,
    mut call: impl FnMut(&mut dyn FnMut() -> Result<(), Errno>) -> Result<usize, Errno> + Send,
) -> PyResult<usize> {
    match retry_eintr(py, || call(&mut interrupted))? {
        Err(Errno::CANCELED) => Err(closed_pipe()),
        other => other.map_err(os_error),
    }
}

impl PyPipe {
    /// Starts a use (see `closable`) of the open pipe, or the closed error.
    fn enter<'py>(&self, py: Python<'py>) -> PyResult<Use<'_, 'py, Option<Pipe>>> {
        self.pipe
            .enter(py)
            .filter(|p| p.is_some())
            .ok_or_else(closed_pipe)
    }

    /// Runs `f` on the open pipe.
    fn with<T>(&self, py: Python<'_>, f: impl FnOnce(&Pipe) -> PyResult<T>) -> PyResult<T> {
        let pipe = self.enter(py)?;
        f(pipe.as_ref().expect("enter checked"))
    }
}

#[pymethods]
impl PyPipe {
    /// `Pipe(size=None, *, nonblocking=False)`: `pipe2(O_CLOEXEC)`, resized to `size` bytes
    /// when given.
    #[new]
    #[pyo3(signature = (size=None, *, nonblocking=false))]
    fn new(size: Option<Count>, nonblocking: bool) -> PyResult<Self> {
        let flags = if nonblocking {
            PipeFlags::NONBLOCK
        } else {
            PipeFlags::empty()
        };
        let pipe = Pipe::new(flags).map_err(os_error)?;
        if let Some(size) = size {
            pipe.resize(size.clamped()).map_err(os_error)?;
        }
        Ok(PyPipe {
            pipe: Closable::new(Some(pipe)),
        })
    }

    /// `splice(fd → pipe)`: up to `n` bytes from `fd` (at `offset` when given); 0 at EOF.
    #[pyo3(signature = (fd, n, *, offset=None))]
    fn read_from(
        &self,
        py: Python<'_>,
        fd: Fd,
        n: Count,
        offset: Option<Count>,
    ) -> PyResult<usize> {
        let closing: &AtomicBool = self.pipe.closing_flag();
        self.with(py, |pipe| {
            let mut off = offset.map(|o| o.0);
            splice_call(py, |cp| {
                let flags = SpliceFlags::MOVE;
                pipe.read_from_cancellable(
                    fd.borrow(),
                    off.as_mut(),
                    n.clamped(),
                    flags,
                    &[closing],
                    cp,
                )
            })
        })
    }

    /// `splice(pipe → fd)`: up to `n` bytes out of the pipe into `fd` (at `offset` when given).
    #[pyo3(signature = (fd, n, *, offset=None))]
    fn write_to(&self, py: Python<'_>, fd: Fd, n: Count, offset: Option<Count>) -> PyResult<usize> {
        let closing: &AtomicBool = self.pipe.closing_flag();
        self.with(py, |pipe| {
            let mut off = offset.map(|o| o.0);
            splice_call(py, |cp| {
                let flags = SpliceFlags::MOVE;
                pipe.write_to_cancellable(
                    fd.borrow(),
                    off.as_mut(),
                    n.clamped(),
                    flags,
                    &[closing],
                    cp,
                )
            })
        })
    }

    /// `tee(pipe → other)`: duplicates up to `n` bytes into `other` without consuming them.
    fn tee(&self, py: Python<'_>, other: PyRef<'_, PyPipe>, n: Count) -> PyResult<usize> {
        let flags: [&AtomicBool; 2] = [self.pipe.closing_flag(), other.pipe.closing_flag()];
        let other_use = other.enter(py)?;
        let other_pipe = other_use.as_ref().expect("enter checked");
        self.with(py, |pipe| {
            splice_call(py, |cp| {
                pipe.tee_cancellable(other_pipe, n.clamped(), SpliceFlags::empty(), &flags, cp)
            })
        })
    }

    /// The capacity in bytes (`F_GETPIPE_SZ`). An int; calling it (`size()`, as
    /// `AtomicPipe` once spelled it) gives the same number.
    #[getter]
    fn size<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let n = self.with(py, |p| p.size().map_err(os_error))?;
        pipe_size(py, n)
    }

    /// Resizes to at least `size` bytes (`F_SETPIPE_SZ`); returns the size set.
    fn resize(&self, py: Python<'_>, size: Count) -> PyResult<usize> {
        self.with(py, |p| p.resize(size.clamped()).map_err(os_error))
    }

    /// `/proc/sys/fs/pipe-max-size`: the most an unprivileged process may ask for (an int,
    /// callable like `size`).
    #[getter]
    fn max_size<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let n = self.with(py, |_| zerocopy::pipe_max_size().map_err(os_error))?;
        pipe_size(py, n)
    }

    /// Resizes to `size`, or to `max_size` when `size` is not allowed; returns the size set.
    fn resize_or_max(&self, py: Python<'_>, size: Count) -> PyResult<usize> {
        self.with(py, |p| p.resize_or_max(size.clamped()).map_err(os_error))
    }

    /// Bytes waiting in the pipe (`FIONREAD`).
    #[getter]
    fn pending(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |p| p.pending().map_err(os_error))
    }

    /// `(read_fd, write_fd)`; the Pipe still owns them.
    #[getter]
    fn fds(&self, py: Python<'_>) -> PyResult<(i32, i32)> {
        self.with(py, |p| {
            Ok((p.read_end().as_raw_fd(), p.write_end().as_raw_fd()))
        })
    }

    /// The read end's fd (what `select`/`poll` watch for bytes to take out), or -1 once
    /// closed, as `Ring.fileno()` and `AtomicPipe.fileno()`; `fds` gives both ends. The Pipe
    /// still owns it.
    fn fileno(&self, py: Python<'_>) -> i32 {
        self.fds(py).map_or(-1, |(r, _)| r)
    }

    /// Whether `close()` was called (in any thread).
    #[getter]
    fn closed(&self) -> bool {
        self.pipe.is_closed()
    }

    /// Closes both ends, from any thread; closing twice is harmless.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.pipe.close(py)
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Closes the pipe; returns None, so an exception in the block propagates.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.fds(py) {
            Ok((r, w)) => format!("<Pipe read={r} write={w}>"),
            Err(_) => "<Pipe closed>".into(),
        }
    }
}
