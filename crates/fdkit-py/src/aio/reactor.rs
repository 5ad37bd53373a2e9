//! `Reactor`: the core's [`fdkit::aio::Reactor`] for `fdkit.aio`'s event loop. The loop's
//! thread is the only caller (asyncio loops are not thread-safe; other threads reach the loop
//! through `call_soon_threadsafe`, which writes to a socket the loop watches). The wait
//! releases the GIL; a call from a second thread while one waits is refused (`RuntimeError`, as
//! asyncio refuses a loop's use from another thread), never blocked on. Once closed, every call
//! raises the `ValueError` every fd-owning object raises then ([`closed_error`]).
//! Nothing here calls Python: `poll()` says what is ready, the loop's callbacks take it. What
//! `poll()` reports for a stream, a listener or an fd is an object the loop registered for it
//! (its selector's `(key, mask)` pair), so the list it returns is the selector's answer as is.

use crate::args::{Fd, Seconds};
use crate::closable::closed_error;
use crate::errors::{core_error, os_error};
use crate::gil::without_gil;
use fdkit::aio::{Interest, Reactor, ReactorOptions, Ready, Received};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use pyo3::{PyTraverseError, PyVisit};
use rustc_hash::FxHashMap as HashMap;
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

/// The reactor and what `poll()` reports for each thing it watches.
struct Engine {
    reactor: Reactor,
    /// By stream or listener id.
    reports: HashMap<u64, Py<PyAny>>,
    /// By readiness fd.
    fd_reports: HashMap<RawFd, Py<PyAny>>,
}

/// The io_uring engine of `fdkit.aio`: readiness (level-triggered, from one-shot polls),
/// streams (multishot receive on provided buffers) and listeners (multishot accept), one
/// io_uring_enter(2) per `poll()`. Private to `fdkit.aio`. See io_uring(7).
#[pyclass(frozen, module = "fdkit._fdkit", name = "Reactor")]
pub struct PyReactor {
    inner: Mutex<Option<Engine>>,
}

impl PyReactor {
    fn lock(&self) -> PyResult<MutexGuard<'_, Option<Engine>>> {
        match self.inner.try_lock() {
            Ok(g) => Ok(g),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(
                "the event loop's reactor is in use by another thread",
            )),
        }
    }

    fn with_engine<T>(&self, f: impl FnOnce(&mut Engine) -> T) -> PyResult<T> {
        let mut g = self.lock()?;
        match g.as_mut() {
            Some(e) if e.reactor.forked() => Err(forked_error()),
            Some(e) => Ok(f(e)),
            None => Err(closed_error("Reactor")),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Reactor) -> T) -> PyResult<T> {
        self.with_engine(|e| f(&mut e.reactor))
    }
}

impl PyReactor {
    /// Waits (the GIL released) until the ring reports something or `timeout` passes: the
    /// io_uring engine's wait for its epoll instance, whose readiness the loop then reads.
    pub(crate) fn wait(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<()> {
        let mut g = self.lock()?;
        let Some(e) = g.as_mut() else {
            return Err(closed_error("Reactor"));
        };
        if e.reactor.forked() {
            return Err(forked_error());
        }
        let r = &mut e.reactor;
        without_gil(py, || r.poll(timeout)).map_err(core_error)?;
        Ok(())
    }
}

impl Drop for PyReactor {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = inner.take() {
            if e.reactor.forked() {
                // A forked child's copy collected without close(): see close().
                std::mem::forget(e.reactor);
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

fn mask_arg(mask: u32) -> PyResult<Interest> {
    if mask & !3 != 0 {
        return Err(PyValueError::new_err(format!(
            "invalid events mask: {mask:#x} (EVENT_READ=1, EVENT_WRITE=2)"
        )));
    }
    Ok(Interest::from_mask(mask))
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
            inner: Mutex::new(Some(Engine {
                reactor: r,
                reports: HashMap::default(),
                fd_reports: HashMap::default(),
            })),
        })
    }

    /// Watch `fd` for `mask` (1 read, 2 write, 3 both; 0 stops); `poll()` reports `report`
    /// while it holds (level-triggered). Effective at the next poll.
    fn set_interest(&self, fd: Fd, mask: u32, report: Py<PyAny>) -> PyResult<()> {
        let interest = mask_arg(mask)?;
        self.with_engine(|e| {
            e.reactor.set_interest(fd.0, interest);
            if interest.is_empty() {
                e.fd_reports.remove(&fd.0)
            } else {
                e.fd_reports.insert(fd.0, report)
            }
        })
        .map(drop)
    }

    /// Stop watching `fd`.
    fn remove_interest(&self, fd: Fd) -> PyResult<()> {
        self.with_engine(|e| {
            e.reactor.remove_interest(fd.0);
            e.fd_reports.remove(&fd.0)
        })
        .map(drop)
    }

    /// What `poll()` reports for stream or listener `id` while it has something to take
    /// (nothing until this is set).
    fn report(&self, id: u64, report: Py<PyAny>) -> PyResult<()> {
        self.with_engine(|e| e.reports.insert(id, report)).map(drop)
    }

    /// Track the connected socket `fd` as a stream (paused); returns its id.
    fn open_stream(&self, fd: Fd) -> PyResult<u64> {
        self.with(|r| r.open_stream(fd.0))
    }

    /// Receive on stream `id` (what arrived while paused is reported by the next poll).
    fn resume(&self, id: u64) -> PyResult<()> {
        self.with(|r| r.resume(id))
    }

    /// Stop receiving on stream `id` (what is still on its way is held).
    fn pause(&self, id: u64) -> PyResult<()> {
        self.with(|r| r.pause(id))
    }

    /// What stream `id` received, as `socket.recv(max_size)` answers: up to `max_size` bytes,
    /// `b""` at EOF, `OSError` for a receive error (each once, after every byte); None when
    /// nothing waits (where a socket would raise `BlockingIOError`).
    fn recv<'py>(
        &self,
        py: Python<'py>,
        id: u64,
        max_size: usize,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let got = self.with(|r| r.recv(id, max_size))?;
        match got {
            None => Ok(None),
            Some(Received::Eof) => Ok(Some(PyBytes::new(py, b""))),
            Some(Received::Error(errno)) => Err(os_error(errno)),
            Some(Received::Data(chunks)) => {
                let bytes = if chunks.len() == 1 {
                    PyBytes::new(py, &chunks[0])
                } else {
                    let total = chunks.iter().map(Vec::len).sum();
                    PyBytes::new_with(py, total, |buf| {
                        let mut at = 0;
                        for c in &chunks {
                            buf[at..at + c.len()].copy_from_slice(c);
                            at += c.len();
                        }
                        Ok(())
                    })?
                };
                self.with(|r| chunks.into_iter().for_each(|c| r.recycle(c)))?;
                Ok(Some(bytes))
            }
        }
    }

    /// Forget stream `id` (its receive is cancelled; the fd may be closed right after).
    fn close_stream(&self, id: u64) -> PyResult<()> {
        self.with_engine(|e| {
            e.reactor.close_stream(id);
            e.reports.remove(&id)
        })
        .map(drop)
    }

    /// Accept on listening socket `fd` (multishot) until `stop_listening`; returns its id.
    fn listen(&self, fd: Fd) -> PyResult<u64> {
        self.with(|r| r.listen(fd.0))
    }

    /// The oldest connection listener `id` accepted (an fd the caller now owns, blocking,
    /// close-on-exec), as `socket.accept()` would give it; `OSError` for the error that
    /// stopped accepting; None when nothing waits.
    fn accept(&self, id: u64) -> PyResult<Option<i32>> {
        match self.with(|r| r.accept(id))? {
            None => Ok(None),
            Some(Ok(fd)) => Ok(Some(fd.into_raw_fd())),
            Some(Err(errno)) => Err(os_error(errno)),
        }
    }

    /// Stop accepting on listener `id` (connections it queued are closed).
    fn stop_listening(&self, id: u64) -> PyResult<()> {
        self.with_engine(|e| {
            e.reactor.stop_listening(id);
            e.reports.remove(&id)
        })
        .map(drop)
    }

    /// Ops queued or in flight.
    fn in_flight(&self) -> PyResult<usize> {
        self.with(|r| r.in_flight())
    }

    /// The ring's fd (for repr and tests).
    fn fileno(&self) -> PyResult<i32> {
        self.with(|r| r.ring_fd())
    }

    /// Submit, wait up to `timeout` seconds (None: no limit; 0: just look), and return what
    /// is ready: the report objects registered for it (`set_interest`, `report`), readiness
    /// first, then listeners, then streams. Calls no Python code. The GIL is released while
    /// waiting; a signal ends the wait early with a shorter (maybe empty) list.
    #[pyo3(signature = (timeout = None))]
    fn poll<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyList>> {
        let timeout = Seconds::wait_or_forever("timeout")
            .of_opt(timeout)?
            .filter(|d| *d != Duration::MAX);
        let mut g = self.lock()?;
        let Some(e) = g.as_mut() else {
            return Err(closed_error("Reactor"));
        };
        if e.reactor.forked() {
            return Err(forked_error());
        }
        let r = &mut e.reactor;
        let ready = if timeout == Some(Duration::ZERO) {
            r.poll(timeout)
        } else {
            without_gil(py, || r.poll(timeout))
        }
        .map_err(core_error)?;
        let found = ready.iter().filter_map(|item| match item {
            Ready::Fd { fd, .. } => e.fd_reports.get(fd),
            Ready::Stream(id) | Ready::Listener(id) => e.reports.get(id),
        });
        PyList::new(py, found.map(|o| o.bind(py)))
    }

    /// Cancel everything in flight, wait (bounded) for it, free the ring. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let e = self.lock()?.take();
        if let Some(Engine {
            reactor,
            reports,
            fd_reports,
        }) = e
        {
            drop((reports, fd_reports));
            if reactor.forked() {
                // The parent's ring: cancelling or reaping here would take its work away.
                // This process's mappings and fd go when it exits.
                std::mem::forget(reactor);
            } else {
                without_gil(py, move || drop(reactor));
            }
        }
        Ok(())
    }

    /// The report objects, for the cycle collector (a report holds a Handle, which holds the
    /// loop, which holds this reactor).
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        let Ok(g) = self.inner.try_lock() else {
            return Ok(()); // in use by a poll: not garbage
        };
        if let Some(e) = g.as_ref() {
            for o in e.reports.values().chain(e.fd_reports.values()) {
                visit.call(o)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        if let Ok(mut g) = self.inner.try_lock() {
            if let Some(e) = g.as_mut() {
                e.reports.clear();
                e.fd_reports.clear();
            }
        }
    }

    /// Whether `close()` ran (or this is a forked child's copy, which must not be used).
    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(self.lock()?.as_ref().is_none_or(|e| e.reactor.forked()))
    }
}
