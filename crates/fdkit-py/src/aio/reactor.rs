//! `Reactor`: the core's [`fdkit::aio::Reactor`] for `fdkit.aio`'s io_uring engine, which
//! waits through the ring for the loop's epoll instance to become readable.
//!
//! The loop's thread is the only one that waits (asyncio loops are not thread-safe; other
//! threads reach the loop through `call_soon_threadsafe`, which writes to a socket the epoll
//! instance holds). A wait from a second thread while one waits is refused with
//! `RuntimeError`, never blocked on. `close()` from another thread while the loop waits neither
//! raises nor blocks: the reactor is marked closing (`closed` is then true, and every later
//! call raises the `ValueError` of a closed object, [`closed_error`]) and the waiting thread
//! closes the ring when its wait returns. Nothing here calls Python.

use super::loop_core::Events;
use crate::args::{Fd, Seconds};
use crate::closable::closed_error;
use crate::errors::core_error;
use crate::gil::without_gil;
use fdkit::aio::{Reactor, ReactorOptions};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// The io_uring engine's wait: `wait(epoll_fd, timeout)` sleeps in one io_uring_enter(2) until
/// the epoll instance `epoll_fd` becomes readable, and leaves nothing armed in the ring when it
/// returns. Private to `fdkit.aio`. See io_uring_enter(2), io_uring_setup(2).
#[pyclass(frozen, module = "fdkit._fdkit", name = "Reactor")]
pub struct PyReactor {
    inner: Mutex<Option<Reactor>>,
    /// `close()` was called (set first: a wait that holds the reactor then closes the ring
    /// when it ends).
    closing: AtomicBool,
    /// The core's [`Reactor::reads_epoll`], read once (it never changes).
    reads_epoll: bool,
}

impl PyReactor {
    /// The reactor, for one call; `RuntimeError` while another thread waits in it.
    fn lock(&self) -> PyResult<MutexGuard<'_, Option<Reactor>>> {
        match self.inner.try_lock() {
            Ok(g) => Ok(g),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(
                "the event loop's reactor is in use by another thread",
            )),
        }
    }

    /// Runs `f` on the open reactor, with the GIL released when `f` may sleep (`sleeps`),
    /// then carries out a `close()` that came meanwhile.
    fn with_reactor<T: Send>(
        &self,
        py: Python<'_>,
        sleeps: bool,
        f: impl FnOnce(&mut Reactor) -> fdkit::Result<T> + Send,
    ) -> PyResult<T> {
        let result = {
            let mut g = self.lock()?;
            if self.closing.load(SeqCst) {
                release(py, g.take());
                return Err(closed_error("Reactor"));
            }
            let Some(r) = g.as_mut() else {
                return Err(closed_error("Reactor"));
            };
            if r.forked() {
                return Err(forked_error());
            }
            if sleeps {
                without_gil(py, || f(r))
            } else {
                f(r)
            }
        };
        // Checked after unlocking: a close() whose try_lock found this call holding the lock
        // had marked the reactor closing before, so it is seen here.
        if self.closing.load(SeqCst) {
            self.close_if_free(py);
        }
        result.map_err(core_error)
    }

    /// Closes the ring unless another thread holds the reactor (that thread's call then
    /// closes it when it ends: see [`with_reactor`](PyReactor::with_reactor)).
    fn close_if_free(&self, py: Python<'_>) {
        match self.inner.try_lock() {
            Ok(mut g) => release(py, g.take()),
            Err(TryLockError::Poisoned(p)) => release(py, p.into_inner().take()),
            Err(TryLockError::WouldBlock) => {}
        }
    }

    /// Waits (the GIL released) until the epoll instance `epoll_fd` is readable or `timeout`
    /// passes (None: no limit), in one io_uring_enter(2); a signal ends the wait early
    /// (`false`), and the caller runs the signal handlers. Returns whether `epoll_fd` became
    /// readable. The io_uring engine's wait (`LoopCore`'s `ring_wait`).
    pub(crate) fn wait(
        &self,
        py: Python<'_>,
        epoll_fd: RawFd,
        timeout: Option<Duration>,
    ) -> PyResult<bool> {
        self.with_reactor(py, true, |r| {
            // SAFETY: the kernel only reads this number when the poll is submitted, inside
            // this call, and takes its own reference to the file then (the wait takes the
            // poll back before returning, which drops it). A number that is not open makes
            // the poll fail with EBADF; one since reused for another file is polled instead,
            // a spurious wake-up or a wait until the timeout, never memory unsafety.
            let fd = unsafe { BorrowedFd::borrow_raw(epoll_fd) };
            r.wait(fd, timeout)
        })
    }

    /// Whether [`epoll_wait`](PyReactor::epoll_wait) runs here (`IORING_OP_EPOLL_WAIT`).
    pub(crate) fn reads_epoll(&self) -> bool {
        self.reads_epoll
    }

    /// The core's [`Reactor::epoll_wait`] with the GIL released: up to `max_events` events of
    /// the epoll instance `epoll_fd` into `out`, waiting at most `timeout` (None: no limit)
    /// in one io_uring_enter(2); a signal ends the wait early (the caller runs the signal
    /// handlers). The io_uring engine's wait where the kernel runs the op.
    pub(crate) fn epoll_wait(
        &self,
        py: Python<'_>,
        epoll_fd: RawFd,
        out: &mut Events,
        max_events: usize,
        timeout: Option<Duration>,
    ) -> PyResult<usize> {
        self.with_reactor(py, true, move |r| {
            // The whole `Events` (Send) is captured, not its Vec.
            let out: &mut Events = out;
            // SAFETY: as in `wait`: the kernel takes its own reference to the file when the op
            // is submitted, inside this call, and the op is taken back before it returns.
            let fd = unsafe { BorrowedFd::borrow_raw(epoll_fd) };
            r.epoll_wait(fd, &mut out.0, max_events, timeout)
        })
    }
}

/// Closes the ring with the GIL released (nothing is in flight between waits, so at once),
/// or, in a forked child's copy, leaves it alone: the core's drop leaks the parent's ring.
fn release(py: Python<'_>, reactor: Option<Reactor>) {
    if let Some(r) = reactor {
        if r.forked() {
            drop(r);
        } else {
            without_gil(py, move || drop(r));
        }
    }
}

/// The core's [`ReactorOptions::DEFAULT`] as the dict `_fdkit.REACTOR_DEFAULTS`, keyed by
/// argument name.
pub fn defaults_dict(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("entries", ReactorOptions::DEFAULT.entries)?;
    d.set_item("epoll_wait", ReactorOptions::DEFAULT.epoll_wait)?;
    Ok(d)
}

fn forked_error() -> PyErr {
    PyRuntimeError::new_err(
        "this event loop belongs to the parent process (it was forked): \
         create a new loop in the child",
    )
}

#[pymethods]
impl PyReactor {
    /// A reactor with a ring of `entries` submission entries, proven usable (set up, a no-op
    /// submitted and reaped): `OSError` with the kernel's errno (`ENOSYS`, `EPERM`) where
    /// io_uring is missing or denied. With `epoll_wait` (the default) the loop's waits read
    /// the epoll instance through the ring where the kernel runs `IORING_OP_EPOLL_WAIT`
    /// (`reads_epoll`). See io_uring_setup(2).
    #[new]
    #[pyo3(
        signature = (
            *,
            entries = ReactorOptions::DEFAULT.entries,
            epoll_wait = ReactorOptions::DEFAULT.epoll_wait,
        ),
        // A literal (PyO3 takes no constants here) that tests/test_aio_reactor_defaults.py
        // holds to `REACTOR_DEFAULTS`.
        text_signature = "(*, entries=8, epoll_wait=True)"
    )]
    fn new(entries: u32, epoll_wait: bool) -> PyResult<Self> {
        let r = Reactor::new(ReactorOptions {
            entries,
            epoll_wait,
        })
        .map_err(core_error)?;
        Ok(PyReactor {
            reads_epoll: r.reads_epoll(),
            inner: Mutex::new(Some(r)),
            closing: AtomicBool::new(false),
        })
    }

    /// Whether the loop's waits read the epoll instance through the ring
    /// (`IORING_OP_EPOLL_WAIT`, Linux 6.15: one io_uring_enter(2) per wait); if not, the ring
    /// polls the epoll fd and epoll_wait(2) reads the events.
    #[getter(reads_epoll)]
    fn py_reads_epoll(&self) -> bool {
        self.reads_epoll
    }

    /// `wait(epoll_fd, timeout=None)`: waits (the GIL released) until `epoll_fd` (any fd;
    /// the loop passes its epoll instance) is readable or `timeout` seconds pass (None: no
    /// limit; 0: just look); returns whether it became readable. A signal ends the kernel's
    /// wait; the signal handlers then run and, unless one raises, the wait goes on for what is
    /// left of `timeout` (PEP 475). Nothing is left armed in the ring when this returns.
    /// See io_uring_enter(2).
    #[pyo3(name = "wait", signature = (epoll_fd, timeout = None))]
    fn py_wait(&self, py: Python<'_>, epoll_fd: Fd, timeout: Option<f64>) -> PyResult<bool> {
        let timeout = Seconds::wait_or_forever("timeout")
            .of_opt(timeout)?
            .filter(|d| *d != Duration::MAX);
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if self.wait(py, epoll_fd.0, left)? {
                return Ok(true);
            }
            py.check_signals()?;
            let over =
                left.is_some_and(|l| l.is_zero()) || deadline.is_some_and(|d| Instant::now() >= d);
            if over || self.closing.load(SeqCst) {
                return Ok(false);
            }
        }
    }

    /// Ops queued or in flight in the ring: 0 whenever no wait runs.
    fn in_flight(&self, py: Python<'_>) -> PyResult<usize> {
        self.with_reactor(py, false, |r| Ok(r.in_flight()))
    }

    /// The ring's fd (for repr and tests).
    fn fileno(&self, py: Python<'_>) -> PyResult<i32> {
        self.with_reactor(py, false, |r| Ok(r.ring_fd()))
    }

    /// Closes the ring. Idempotent. While another thread waits in the reactor, marks it
    /// closing and returns at once: that wait closes the ring when it ends.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        // Marked first: a wait that holds the reactor now sees the mark once it unlocks.
        self.closing.store(true, SeqCst);
        self.close_if_free(py);
        Ok(())
    }

    /// Whether `close()` was called (or this is a forked child's copy, which must not be used).
    #[getter]
    fn closed(&self) -> bool {
        if self.closing.load(SeqCst) {
            return true;
        }
        match self.inner.try_lock() {
            Ok(g) => g.as_ref().is_none_or(Reactor::forked),
            Err(TryLockError::Poisoned(p)) => p.get_ref().as_ref().is_none_or(Reactor::forked),
            Err(TryLockError::WouldBlock) => false, // a wait holds it: open
        }
    }
}
