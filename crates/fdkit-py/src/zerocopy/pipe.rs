//! Python glue for `fdkit::zerocopy`: `transfer`, `transfer_stats`, `Pipe`, `proxy`, `relay`.

use crate::args::{Count, Fd};
use crate::closable::{Closable, Release, Use};
use crate::errors::{os_error, without_gil, Signals};
use fdkit::fd::Errno;
use fdkit::zerocopy::{self, Pipe, TransferStats};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rustix::pipe::{PipeFlags, SpliceFlags};
use std::cell::RefCell;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;

thread_local! {
    /// The calling thread's last transfer, for `transfer_stats()`.
    static LAST: RefCell<Option<TransferStats>> = const { RefCell::new(None) };
}

/// Runs a core loop with the GIL released and signal handlers run at its checkpoints.
fn with_signals<T: Send>(
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

/// `transfer(src_fd, dst_fd, count=None, *, src_offset=None, dst_offset=None)`: moves up to
/// `count` bytes (until the source ends when None) by the best kernel path for the two fds,
/// falling back until one works. Returns the bytes moved; `transfer_stats()` says how.
#[pyfunction]
#[pyo3(signature = (src_fd, dst_fd, count=None, *, src_offset=None, dst_offset=None))]
pub fn transfer(
    py: Python<'_>,
    src_fd: Fd,
    dst_fd: Fd,
    count: Option<Count>,
    src_offset: Option<Count>,
    dst_offset: Option<Count>,
) -> PyResult<u64> {
    let mut src_off = src_offset.map(|c| c.0);
    let mut dst_off = dst_offset.map(|c| c.0);
    let mut signals = Signals::default();
    let (result, stats) = py.detach(|| {
        let mut checkpoint = signals.checkpoint();
        zerocopy::transfer(
            src_fd.borrow(),
            dst_fd.borrow(),
            count.map(|c| c.0),
            src_off.as_mut(),
            dst_off.as_mut(),
            &mut checkpoint,
        )
    });
    LAST.with(|l| *l.borrow_mut() = Some(stats));
    signals.finish(result)
}

/// `transfer_stats()`: the calling thread's last `transfer`: `{"path", "bytes", "fallbacks":
/// [{"from", "to", "errno", "reason"}], "remembered"}`, or None before any transfer.
#[pyfunction]
pub fn transfer_stats(py: Python<'_>) -> PyResult<Option<Bound<'_, PyDict>>> {
    LAST.with(|l| {
        let Some(stats) = l.borrow().clone() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("path", stats.path.name())?;
        d.set_item("bytes", stats.bytes)?;
        d.set_item("remembered", stats.remembered)?;
        let fallbacks = PyList::empty(py);
        for f in &stats.fallbacks {
            let fd = PyDict::new(py);
            fd.set_item("from", f.from.name())?;
            fd.set_item("to", f.to.name())?;
            fd.set_item("errno", f.errno.map(|e| e.raw_os_error()))?;
            fd.set_item("reason", f.reason)?;
            fallbacks.append(fd)?;
        }
        d.set_item("fallbacks", fallbacks)?;
        Ok(Some(d))
    })
}

/// `proxy(a_fd, b_fd, *, idle_timeout=None)`: relays both directions between two connected
/// stream sockets until both end, passing half-closes on; returns `(a_to_b, b_to_a)`. A reset
/// on one side is passed on as a reset to the other (after the bytes before it), then raised.
#[pyfunction]
#[pyo3(signature = (a_fd, b_fd, *, idle_timeout=None))]
pub fn proxy(
    py: Python<'_>,
    a_fd: Fd,
    b_fd: Fd,
    idle_timeout: Option<f64>,
) -> PyResult<(u64, u64)> {
    let idle = idle_timeout
        .map(|t| crate::args::seconds(t, "idle_timeout", false))
        .transpose()?;
    with_signals(py, |cp| {
        zerocopy::proxy(a_fd.borrow(), b_fd.borrow(), idle, cp)
    })
}

/// `relay(src_fd, dst_fd, *, record_fd=None)`: everything from `src_fd` to `dst_fd` until
/// the source ends, teed to `record_fd` when given; returns the bytes relayed. A reset of
/// either TCP side is passed on as a reset to the other, then raised.
#[pyfunction]
#[pyo3(signature = (src_fd, dst_fd, *, record_fd=None))]
pub fn relay(py: Python<'_>, src_fd: Fd, dst_fd: Fd, record_fd: Option<Fd>) -> PyResult<u64> {
    with_signals(py, |cp| {
        zerocopy::relay(
            src_fd.borrow(),
            dst_fd.borrow(),
            record_fd.map(Fd::borrow),
            cp,
        )
    })
}

/// `pipe_pool_clear()`: closes the idle internal pipes `transfer` keeps for reuse (at most
/// 16 pairs); returns how many pairs it closed.
#[pyfunction]
pub fn pipe_pool_clear() -> usize {
    zerocopy::pool_clear()
}

/// `pipe_pool_idle()`: how many idle internal pipe pairs the pool holds.
#[pyfunction]
pub fn pipe_pool_idle() -> usize {
    zerocopy::pool_idle()
}

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

/// A checkpoint that only reports the interruption; [`splice_call`] runs the handlers.
fn interrupted() -> Result<(), Errno> {
    Err(Errno::INTR)
}

/// Runs a cancellable splice/tee with the GIL released; after `EINTR` runs Python's signal
/// handlers and tries again (nothing moved); `ECANCELED` (a close from another thread) is the
/// closed error.
fn splice_call(
    py: Python<'_>,
    mut call: impl FnMut(&mut dyn FnMut() -> Result<(), Errno>) -> Result<usize, Errno> + Send,
) -> PyResult<usize> {
    loop {
        match without_gil(py, || call(&mut interrupted)) {
            Err(Errno::INTR) => py.check_signals()?,
            Err(Errno::CANCELED) => return Err(closed_pipe()),
            other => return other.map_err(os_error),
        }
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

    /// The capacity in bytes (`F_GETPIPE_SZ`).
    #[getter]
    fn size(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |p| p.size().map_err(os_error))
    }

    /// Resizes to at least `size` bytes (`F_SETPIPE_SZ`); returns the size set.
    fn resize(&self, py: Python<'_>, size: Count) -> PyResult<usize> {
        self.with(py, |p| p.resize(size.clamped()).map_err(os_error))
    }

    /// `/proc/sys/fs/pipe-max-size`: the most an unprivileged process may ask for.
    #[getter]
    fn max_size(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |_| zerocopy::pipe_max_size().map_err(os_error))
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

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.fds(py) {
            Ok((r, w)) => format!("<Pipe read={r} write={w}>"),
            Err(_) => "<Pipe closed>".into(),
        }
    }
}

/// Adds this family's functions and classes to the native module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(transfer, m)?)?;
    m.add_function(wrap_pyfunction!(transfer_stats, m)?)?;
    m.add_function(wrap_pyfunction!(proxy, m)?)?;
    m.add_function(wrap_pyfunction!(relay, m)?)?;
    m.add_function(wrap_pyfunction!(pipe_pool_clear, m)?)?;
    m.add_function(wrap_pyfunction!(pipe_pool_idle, m)?)?;
    m.add_class::<PyPipe>()?;
    Ok(())
}
