//! `Reactor`: the core's [`fdkit::aio::Reactor`] for `fdkit.aio`'s event loop. The loop's
//! thread is the only caller (asyncio loops are not thread-safe; other threads reach the loop
//! through `call_soon_threadsafe`, which writes to a socket the reactor watches). The waits
//! release the GIL; a call from a second thread while one waits is refused, never blocked on.

use crate::args::Fd;
use crate::errors::core_error;
use crate::gil::without_gil;
use fdkit::aio::{Event, Interest, Reactor, ReactorOptions};
use pyo3::exceptions::{
    PyKeyboardInterrupt, PyRuntimeError, PySystemExit, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::collections::HashMap;
use std::os::fd::IntoRawFd;
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

/// The event kinds in `poll()`'s list: `(READY, fd, mask)`, `(EOF, stream, None)`, `(ERROR, stream, errno)`, `(ACCEPTED, listener, fd)` (the caller
/// owns `fd`), `(ACCEPT_ERROR, listener, errno)`.
const READY: u8 = 0;
const EOF: u8 = 2;
const ERROR: u8 = 3;
const ACCEPTED: u8 = 4;
const ACCEPT_ERROR: u8 = 5;
const SINK_ERROR: u8 = 6;
/// The most bytes one `data_received` call gets (asyncio's own `max_size` per read).
const COALESCE: usize = 256 * 1024;

/// The io_uring engine of `fdkit.aio`: selector interest (level-triggered, from one-shot
/// polls) and streams (multishot receive on provided buffers), one io_uring_enter(2) per
/// `poll()`. Private to `fdkit.aio`. See io_uring(7).
#[pyclass(frozen, module = "fdkit._fdkit", name = "Reactor")]
pub struct PyReactor {
    inner: Mutex<Option<Reactor>>,
    /// Each stream's sink: called with the bytes it receives (a protocol's `data_received`).
    sinks: Mutex<HashMap<u64, Py<PyAny>>>,
}

impl PyReactor {
    fn lock(&self) -> PyResult<MutexGuard<'_, Option<Reactor>>> {
        match self.inner.try_lock() {
            Ok(g) => Ok(g),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(
                "the event loop's reactor is in use by another thread",
            )),
        }
    }

    /// Hands `data` of `stream` to its sink, with the bytes right behind it in the stream's
    /// inbox in the same `bytes` (up to [`COALESCE`]); the vectors go back to the ring for
    /// reuse. Returns the sink's exception (for the transport's `_fatal_error`);
    /// `KeyboardInterrupt` and `SystemExit` propagate, the reactor keeping what was not handed
    /// over for the next poll.
    fn hand_over(&self, py: Python<'_>, stream: u64, data: Vec<u8>) -> PyResult<Option<PyErr>> {
        let sink = self
            .sinks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&stream)
            .map(|s| s.clone_ref(py));
        let Some(sink) = sink else {
            self.with(|r| r.recycle(data))?;
            return Ok(None);
        };
        let more = self.with(|r| r.take_more_data(stream, COALESCE))?;
        let total = data.len() + more.iter().map(Vec::len).sum::<usize>();
        let chunk = PyBytes::new_with(py, total, |buf| {
            let mut at = 0;
            for d in std::iter::once(&data).chain(&more) {
                buf[at..at + d.len()].copy_from_slice(d);
                at += d.len();
            }
            Ok(())
        })?;
        self.with(|r| std::iter::once(data).chain(more).for_each(|d| r.recycle(d)))?;
        match sink.call1(py, (chunk,)) {
            Ok(_) => Ok(None),
            Err(err)
                if err.is_instance_of::<PyKeyboardInterrupt>(py)
                    || err.is_instance_of::<PySystemExit>(py) =>
            {
                Err(err)
            }
            Err(err) => Ok(Some(err)),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Reactor) -> T) -> PyResult<T> {
        let mut g = self.lock()?;
        match g.as_mut() {
            Some(r) if r.forked() => Err(forked_error()),
            Some(r) => Ok(f(r)),
            None => Err(PyRuntimeError::new_err("the reactor is closed")),
        }
    }
}

impl Drop for PyReactor {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = inner.take() {
            if r.forked() {
                // A forked child's copy collected without close(): see close().
                std::mem::forget(r);
            }
        }
    }
}

fn forked_error() -> PyErr {
    PyRuntimeError::new_err(
        "this event loop belongs to the parent process (it was forked): \
         create a new loop in the child",
    )
}

fn check_callable(sink: &Bound<'_, PyAny>) -> PyResult<()> {
    if sink.is_callable() {
        Ok(())
    } else {
        Err(PyTypeError::new_err(format!(
            "a stream's sink must be callable, not {}",
            crate::args::type_name(sink)
        )))
    }
}

fn mask_arg(mask: u32) -> PyResult<Interest> {
    if mask & !3 != 0 {
        return Err(PyValueError::new_err(format!(
            "invalid events mask: {mask:#x} (EVENT_READ=1, EVENT_WRITE=2)"
        )));
    }
    Ok(Interest::from_mask(mask))
}

/// A selector timeout: None waits without limit; negative or zero only looks; anything
/// beyond what the kernel's timespec holds waits without limit.
fn timeout_arg(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_nan() => Err(PyValueError::new_err("timeout must not be NaN")),
        Some(t) if t <= 0.0 => Ok(Some(Duration::ZERO)),
        Some(t) => Ok(Duration::try_from_secs_f64(t)
            .ok()
            .filter(|d| d.as_secs() < i64::MAX as u64 / 2)),
    }
}

#[pymethods]
impl PyReactor {
    #[new]
    #[pyo3(signature = (*, entries = 1024, buffers = 256, buffer_size = 16384))]
    fn new(entries: u32, buffers: u16, buffer_size: u32) -> PyResult<Self> {
        let r = Reactor::new(ReactorOptions {
            entries,
            buffers,
            buffer_size,
        })
        .map_err(core_error)?;
        Ok(PyReactor {
            inner: Mutex::new(Some(r)),
            sinks: Mutex::new(HashMap::new()),
        })
    }

    /// Watch `fd` for `mask` (1 read, 2 write, 3 both; 0 stops). Effective at the next poll.
    fn set_interest(&self, fd: Fd, mask: u32) -> PyResult<()> {
        let interest = mask_arg(mask)?;
        self.with(|r| r.set_interest(fd.0, interest))
    }

    /// Stop watching `fd`.
    fn remove_interest(&self, fd: Fd) -> PyResult<()> {
        self.with(|r| r.remove_interest(fd.0))
    }

    /// Track the connected socket `fd` as a stream (paused); returns its id. `sink` is called
    /// with each chunk of bytes received, in order, from within `poll()`.
    fn open_stream(&self, fd: Fd, sink: Bound<'_, PyAny>) -> PyResult<u64> {
        check_callable(&sink)?;
        let id = self.with(|r| r.open_stream(fd.0))?;
        self.sinks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, sink.unbind());
        Ok(id)
    }

    /// Replace stream `id`'s sink (a transport whose protocol changed).
    fn set_sink(&self, id: u64, sink: Bound<'_, PyAny>) -> PyResult<()> {
        check_callable(&sink)?;
        let mut sinks = self.sinks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = sinks.get_mut(&id) {
            *slot = sink.unbind();
        }
        Ok(())
    }

    /// Receive on stream `id` (bytes held while paused come at the next poll).
    fn resume(&self, id: u64) -> PyResult<()> {
        self.with(|r| r.resume(id))
    }

    /// Stop receiving on stream `id` (what is still on its way is held).
    fn pause(&self, id: u64) -> PyResult<()> {
        self.with(|r| r.pause(id))
    }

    /// Forget stream `id` (its receive is cancelled; the fd may be closed right after).
    fn close_stream(&self, id: u64) -> PyResult<()> {
        let sink = self
            .sinks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        drop(sink);
        self.with(|r| r.close_stream(id))
    }

    /// Accept on listening socket `fd` (multishot) until `stop_listening`; returns its id.
    fn listen(&self, fd: Fd) -> PyResult<u64> {
        self.with(|r| r.listen(fd.0))
    }

    /// Stop accepting on listener `id` (connections still on their way are closed).
    fn stop_listening(&self, id: u64) -> PyResult<()> {
        self.with(|r| r.stop_listening(id))
    }

    /// Ops queued or in flight.
    fn in_flight(&self) -> PyResult<usize> {
        self.with(|r| r.in_flight())
    }

    /// The ring's fd (for repr and tests).
    fn fileno(&self) -> PyResult<i32> {
        self.with(|r| r.ring_fd())
    }

    /// Submit, wait up to `timeout` seconds (None: no limit), hand each stream's bytes to its
    /// sink (see `open_stream`), and return the rest of what happened as a list of
    /// `(kind, key, value)` tuples (see the module constants; a sink that raised comes back
    /// as `(SINK_ERROR, stream, exception)`). The GIL is released while waiting; a signal
    /// ends the wait early with a shorter (maybe empty) list. A sink raising `SystemExit` or
    /// `KeyboardInterrupt` ends the call with it; the events not yet handed over wait for
    /// the next poll.
    #[pyo3(signature = (timeout = None))]
    fn poll<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyList>> {
        let timeout = timeout_arg(timeout)?;
        let result = {
            let mut g = self.lock()?;
            let Some(r) = g.as_mut() else {
                return Err(PyRuntimeError::new_err("the reactor is closed"));
            };
            if r.forked() {
                return Err(forked_error());
            }
            if timeout == Some(Duration::ZERO) {
                r.poll(timeout)
            } else {
                without_gil(py, || r.poll(timeout))
            }
        };
        result.map_err(core_error)?;
        let list = PyList::empty(py);
        // One event at a time, the lock released in between: a sink runs user code, which
        // may pause, resume or close any stream (and the reactor then holds back the rest).
        while let Some(e) = self.with(|r| r.next_event())? {
            let item = match e {
                Event::Ready { fd, ready } => (READY, fd, ready.mask()).into_pyobject(py)?,
                Event::Data { stream, data } => match self.hand_over(py, stream, data)? {
                    Some(err) => (SINK_ERROR, stream, err.into_value(py)).into_pyobject(py)?,
                    None => continue,
                },
                Event::Eof { stream } => (EOF, stream, py.None()).into_pyobject(py)?,
                Event::Error { stream, errno } => {
                    (ERROR, stream, errno.raw_os_error()).into_pyobject(py)?
                }
                Event::Accepted { listener, fd } => {
                    (ACCEPTED, listener, fd.into_raw_fd()).into_pyobject(py)?
                }
                Event::AcceptError { listener, errno } => {
                    (ACCEPT_ERROR, listener, errno.raw_os_error()).into_pyobject(py)?
                }
            };
            list.append(item)?;
        }
        Ok(list)
    }

    /// Cancel everything in flight, wait (bounded) for it, free the ring. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let r = self.lock()?.take();
        let sinks = std::mem::take(&mut *self.sinks.lock().unwrap_or_else(|p| p.into_inner()));
        drop(sinks);
        if let Some(r) = r {
            if r.forked() {
                // The parent's ring: cancelling or reaping here would take its work away.
                // This process's mappings and fd go when it exits.
                std::mem::forget(r);
            } else {
                without_gil(py, move || drop(r));
            }
        }
        Ok(())
    }

    /// Whether `close()` ran (or this is a forked child's copy, which must not be used).
    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(self.lock()?.as_ref().map_or(true, |r| r.forked()))
    }
}
