//! `Ring`: the core's safe io_uring for Python. Thin glue: arguments are checked and turned
//! into Rust values with the GIL held; the ring sits in a [`Closable`] (the binding's one
//! locking model, shared with `AtomicPipe` and `Pipe`: a close from any thread ends a `wait()`
//! in another with ValueError within a slice, and frees the ring only once it has left) and,
//! inside it, behind a `std::sync::Mutex` that is only ever waited for with the GIL released
//! (a `try_lock` first, which never blocks); waits run with the GIL released in bounded
//! slices, with Python's signal handlers run and the closing flag checked in between.

use super::args::{send_data, user_data_arg};
use super::completion::PyCompletion;
use super::op_args::{kinds, Ctx, OpArg, Queued};
use crate::args::{u16_arg, u32_arg, Count, Seconds};
use crate::closable::{closed_error, Closable, Release, Use};
use crate::errors::core_error;
use crate::gil::without_gil;
use fdkit::fd::Errno;
use fdkit::uring::{Ring, RingOptions, SqeFlags};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::borrow::Cow;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Instant;

/// `ValueError("I/O operation on a closed Ring")`.
fn closed_ring() -> PyErr {
    closed_error("Ring")
}

/// An io_uring instance: queue ops (each with a `user_data` int you choose), `submit()`, and
/// `wait()` for their `Completion`s. A context manager; `close()` cancels what is in flight,
/// waits (bounded) for it, and frees everything. See io_uring(7).
///
/// The ring keeps every buffer an op uses until its last completion arrives: `bytes` handed
/// to `send`/`write` are referenced, other buffers copied; receive buffers are the ring's own.
/// With `defer_taskrun` (the default where the kernel supports it) only the thread that
/// created the ring may submit or wait; others get `OSError(EEXIST)` (and such a ring closed
/// or collected on another thread cannot reap: what its ops hold is leaked, never freed under
/// the kernel).
#[pyclass(frozen, module = "fdkit._fdkit", name = "Ring")]
pub struct PyRing {
    inner: Closable<RingCell>,
    defer_taskrun: bool,
    sq_entries: u32,
    cq_entries: u32,
}

/// What the [`Closable`] holds: the ring (None once torn down) and its fd number.
struct RingCell {
    ring: Mutex<Option<Ring>>,
    fd: AtomicI32,
}

impl RingCell {
    fn lock(&self) -> MutexGuard<'_, Option<Ring>> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Release for RingCell {
    /// Cancels what is in flight, reaps it (bounded) and closes the ring, with the GIL
    /// released.
    fn release(&mut self, py: Python<'_>, _deferred: bool) -> PyResult<()> {
        let ring = self
            .ring
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.fd.store(-1, Ordering::Relaxed);
        without_gil(py, move || drop(ring));
        Ok(())
    }

    fn is_released(&self) -> bool {
        self.lock().is_none()
    }
}

impl PyRing {
    /// Starts a use of the ring (see `closable`), or the closed error.
    fn enter<'py>(&self, py: Python<'py>) -> PyResult<Use<'_, 'py, RingCell>> {
        self.inner.enter(py).ok_or_else(closed_ring)
    }

    /// Runs `f` on the open ring. [`Gil::Keep`]: with the GIL held when the mutex is free,
    /// else released while waiting for it (a `wait()` holds it for one slice at most);
    /// [`Gil::Release`]: with the GIL released (calls that enter the kernel and may wait).
    fn with_ring<T: Send>(
        &self,
        py: Python<'_>,
        gil: Gil,
        f: impl FnOnce(&mut Ring) -> PyResult<T> + Send,
    ) -> PyResult<T> {
        let cell = self.enter(py)?;
        let cell: &RingCell = &cell;
        let result = match (gil, cell.ring.try_lock()) {
            (Gil::Keep, Ok(guard)) => on_open(guard, f),
            (Gil::Keep, Err(TryLockError::Poisoned(p))) => on_open(p.into_inner(), f),
            (_, held) => {
                drop(held);
                py.detach(|| on_open(cell.lock(), f))
            }
        };
        result
    }

    /// Queues one op with the SQE flags the keywords `sqe` ask for.
    fn queue_with(
        &self,
        py: Python<'_>,
        sqe: Option<&Bound<'_, PyDict>>,
        f: impl FnOnce(&mut Ring) -> fdkit::error::Result<()> + Send,
    ) -> PyResult<()> {
        let fl = sqe_flags(sqe)?;
        self.queue(py, move |r| r.with_flags(fl, f))
    }

    /// Queues one op (no kernel entry unless the submission queue is full).
    fn queue(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Ring) -> fdkit::error::Result<()> + Send,
    ) -> PyResult<()> {
        self.with_ring(py, Gil::Keep, |ring| f(ring).map_err(core_error))
    }
}

/// Whether a call on the ring keeps the GIL ([`PyRing::with_ring`]).
#[derive(Clone, Copy)]
enum Gil {
    /// Never blocks in the kernel: queueing, reading a registered buffer.
    Keep,
    /// May enter the kernel and wait: submitting, registering.
    Release,
}

/// Runs `f` on the ring `guard` holds, or the closed error once it was torn down.
fn on_open<T>(
    mut guard: MutexGuard<'_, Option<Ring>>,
    f: impl FnOnce(&mut Ring) -> PyResult<T>,
) -> PyResult<T> {
    match guard.as_mut() {
        Some(ring) => f(ring),
        None => Err(closed_ring()),
    }
}

/// The SQE flags every op takes as keywords (`ring.nop(1, link=True)`), each a bool: the one
/// list of their names (the stub's is `fdkit.types.SqeFlags`). `async_` is `IOSQE_ASYNC`,
/// `skip_success` `IOSQE_CQE_SKIP_SUCCESS`.
const SQE_KEYWORDS: [(&str, SqeFlags); 5] = [
    ("link", SqeFlags::IO_LINK),
    ("hardlink", SqeFlags::IO_HARDLINK),
    ("drain", SqeFlags::IO_DRAIN),
    ("async_", SqeFlags::ASYNC),
    ("skip_success", SqeFlags::SKIP_SUCCESS),
];

/// The SQE flags an op's `**sqe` keywords ask for: each of [`SQE_KEYWORDS`] a bool
/// (`TypeError` otherwise, as for any bool argument), any other keyword a `TypeError`.
fn sqe_flags(sqe: Option<&Bound<'_, PyDict>>) -> PyResult<SqeFlags> {
    let mut flags = SqeFlags::empty();
    let Some(sqe) = sqe else {
        return Ok(flags);
    };
    for (key, value) in sqe.iter() {
        let name = key.extract::<String>()?;
        let Some((_, flag)) = SQE_KEYWORDS.iter().find(|(n, _)| *n == name) else {
            let known: Vec<&str> = SQE_KEYWORDS.iter().map(|(n, _)| *n).collect();
            return Err(PyTypeError::new_err(format!(
                "got an unexpected keyword argument '{name}' (the SQE flags are {})",
                known.join(", ")
            )));
        };
        let on = value.extract::<bool>().map_err(|_| {
            PyTypeError::new_err(format!(
                "argument '{name}': '{}' object cannot be converted to 'bool'",
                crate::args::type_name(&value)
            ))
        })?;
        flags.set(*flag, on);
    }
    Ok(flags)
}

/// Writes `Ring`'s `#[pymethods]` from the core's op table (`fdkit::ring_ops!`): the methods
/// in the braces as they are, then one method per row. A row's arguments become the
/// positional parameters (then `user_data`), its defaulted ones keyword-only parameters with
/// the table's defaults, then `fixed=False` where the row says `[fixed]` and the SQE flags
/// (`**sqe`). Each argument is read as its kind says (`op_args`), and the op is queued by the
/// core's method of the same name.
macro_rules! py_ring_methods {
    ({ $($methods:tt)* } [$ring:ident, $user_data:ident] $(
        $name:ident [$(#[$doc:meta])*] ($($arg:ident $kind:ident)*)
        ($(* $($kw:ident $kw_kind:ident $default:tt)*)?) ($($fixed:ident)?) ($($ret:ty)?) $body:block
    )*) => {
        #[pymethods]
        #[allow(clippy::too_many_arguments)]
        impl PyRing {
            $($methods)*

            $(
                $(#[$doc])*
                #[pyo3(signature = (
                    $($arg,)* user_data $(, * $(, $kw = $default)*)? $(, $fixed = false)?, **sqe
                ))]
                fn $name(
                    &self,
                    py: Python<'_>,
                    $(
                        #[pyo3(from_py_with = <kinds::$kind as OpArg>::extract)]
                        $arg: <kinds::$kind as OpArg>::Py,
                    )*
                    #[pyo3(from_py_with = user_data_arg)] user_data: u64,
                    $($(
                        #[pyo3(from_py_with = <kinds::$kw_kind as OpArg>::extract)]
                        $kw: <kinds::$kw_kind as OpArg>::Py,
                    )*)?
                    $($fixed: bool,)?
                    sqe: Option<&Bound<'_, PyDict>>,
                ) -> PyResult<()> {
                    #[allow(unused_variables)] // an op without arguments reads none
                    let ctx = Ctx {
                        py,
                        fd: None $(.or(<kinds::$kind as OpArg>::fd(&$arg)))*,
                        fixed: false $(|| $fixed)?,
                    };
                    $(let $arg = <kinds::$kind as OpArg>::core($arg, &ctx)?;)*
                    $($(let $kw = <kinds::$kw_kind as OpArg>::core($kw, &ctx)?;)*)?
                    self.queue_with(py, sqe, move |r| {
                        r.$name(
                            $(<kinds::$kind as OpArg>::arg($arg),)*
                            $($(<kinds::$kw_kind as OpArg>::arg($kw),)*)?
                            user_data,
                        )
                        .queued()
                    })
                }
            )*
        }
    };
}

fdkit::ring_ops!(py_ring_methods, {
    /// `Ring(entries=256, *, defer_taskrun=None, cq_entries=None)`: io_uring_setup(2) with
    /// `entries` submission entries (1..=32768) and `cq_entries` completion entries (default
    /// twice as many). `defer_taskrun`: True requires `SINGLE_ISSUER|DEFER_TASKRUN`, False
    /// refuses it, None uses it when the kernel can.
    #[new]
    #[pyo3(signature = (entries=256, *, defer_taskrun=None, cq_entries=None))]
    fn new(
        py: Python<'_>,
        #[pyo3(from_py_with = u32_arg)] entries: u32,
        defer_taskrun: Option<bool>,
        cq_entries: Option<Count>,
    ) -> PyResult<Self> {
        let cq_entries =
            match cq_entries {
                None => None,
                Some(c) => Some(u32::try_from(c.0).map_err(|_| {
                    PyValueError::new_err(format!("cq_entries out of range: {}", c.0))
                })?),
            };
        let options = RingOptions {
            entries,
            cq_entries,
            defer_taskrun,
        };
        let ring = py
            .detach(|| Ring::with_options(options))
            .map_err(core_error)?;
        Ok(PyRing {
            defer_taskrun: ring.defer_taskrun(),
            sq_entries: ring.sq_entries(),
            cq_entries: ring.cq_entries(),
            inner: Closable::new(RingCell {
                fd: AtomicI32::new(ring.as_raw_fd()),
                ring: Mutex::new(Some(ring)),
            }),
        })
    }

    /// `provide_buffers(group, count, size)`: registers a provided-buffer ring of `count`
    /// buffers (a power of two up to 32768) of `size` bytes as group `group`
    /// (0..65535), at most 1 GiB in all. io_uring_register_buf_ring(3).
    fn provide_buffers(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = u16_arg)] group: u16,
        #[pyo3(from_py_with = u32_arg)] count: u32,
        #[pyo3(from_py_with = u32_arg)] size: u32,
    ) -> PyResult<()> {
        let count = u16::try_from(count)
            .ok()
            .filter(|c| c.is_power_of_two() && *c <= fdkit::uring::MAX_BUFFERS)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "count must be a power of two in 1..=32768, got {count}"
                ))
            })?;
        if size == 0 || size > 1 << 24 {
            return Err(PyValueError::new_err(format!(
                "size must be in 1..=16777216, got {size}"
            )));
        }
        if u64::from(count) * u64::from(size) > 1 << 30 {
            return Err(PyValueError::new_err("count * size must be at most 1 GiB"));
        }
        self.with_ring(py, Gil::Release, |r| {
            r.provide_buffers(group, count, size).map_err(core_error)
        })
    }

    /// `register_files(fds)`: registers the fds (a sequence of ints; -1 leaves a slot empty)
    /// so ops can take `fixed=True` with an index into it as their fd. The kernel keeps its
    /// own reference: closing an fd later does not unregister it.
    /// io_uring_register_files(3).
    fn register_files(&self, py: Python<'_>, fds: Vec<i32>) -> PyResult<()> {
        self.with_ring(py, Gil::Release, move |r| {
            r.register_files(&fds).map_err(core_error)
        })
    }

    /// `unregister_files()`: drops the registered files (ops in flight keep theirs).
    /// io_uring_unregister_files(3).
    fn unregister_files(&self, py: Python<'_>) -> PyResult<()> {
        self.with_ring(py, Gil::Release, |r| {
            r.unregister_files().map_err(core_error)
        })
    }

    /// `register_buffers(count, size)`: `count` zeroed buffers of `size` bytes owned by the
    /// ring (at most 1 GiB in all) for `read_fixed`/`write_fixed`. Python never sees their
    /// memory: bytes are copied in (`fill_buffer`, `write_fixed(data=bytes)`) and out
    /// (`buffer_bytes`, a `read_fixed` completion's `data`). io_uring_register_buffers(3).
    fn register_buffers(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = u32_arg)] count: u32,
        #[pyo3(from_py_with = u32_arg)] size: u32,
    ) -> PyResult<()> {
        let count = u16::try_from(count)
            .ok()
            .filter(|&c| c > 0 && c <= 16384)
            .ok_or_else(|| {
                PyValueError::new_err(format!("count must be in 1..=16384, got {count}"))
            })?;
        self.with_ring(py, Gil::Release, move |r| {
            r.register_buffers(count, size).map_err(core_error)
        })
    }

    /// `unregister_buffers()`: unregisters and frees the buffers; `OSError(EBUSY)` while an
    /// op using one is in flight. io_uring_unregister_buffers(3).
    fn unregister_buffers(&self, py: Python<'_>) -> PyResult<()> {
        self.with_ring(py, Gil::Release, |r| {
            r.unregister_buffers().map_err(core_error)
        })
    }

    /// `fill_buffer(index, data, *, offset=0)`: copies `data` into registered buffer
    /// `index`; `OSError(EBUSY)` while an op using it is in flight.
    #[pyo3(signature = (index, data, *, offset=0))]
    fn fill_buffer(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = u16_arg)] index: u16,
        data: &Bound<'_, PyAny>,
        offset: usize,
    ) -> PyResult<()> {
        let data = send_data(data)?;
        let at = offset;
        self.queue(py, move |r| r.fill_fixed(index, at, data.as_ref()))
    }

    /// `buffer_bytes(index, nbytes=None, *, offset=0)`: a copy of registered buffer
    /// `index` (`nbytes` from `offset`; None: to its end); `OSError(EBUSY)` while an op
    /// using it is in flight.
    #[pyo3(signature = (index, nbytes=None, *, offset=0))]
    fn buffer_bytes(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = u16_arg)] index: u16,
        nbytes: Option<Count>,
        offset: usize,
    ) -> PyResult<Cow<'static, [u8]>> {
        let start = offset;
        let n = nbytes.map(|n| usize::try_from(n.0).unwrap_or(usize::MAX));
        self.with_ring(py, Gil::Keep, move |r| {
            let size = r.registered_buffers().map_or(0, |(_, s)| s as usize);
            let end = n.map_or(size, |n| start.saturating_add(n));
            let bytes = r.fixed_bytes(index, start..end.max(start));
            bytes.map(Cow::Owned).map_err(core_error)
        })
    }

    /// `submit()`: hands the queued ops to the kernel; returns how many it took.
    /// io_uring_submit(3).
    fn submit(&self, py: Python<'_>) -> PyResult<usize> {
        self.with_ring(py, Gil::Release, |r| r.submit().map_err(core_error))
    }

    /// `wait(min_complete=1, timeout=None)`: submits what is queued, then waits until at least
    /// `min_complete` completions arrived, `timeout` seconds passed, or nothing is left in
    /// flight; returns every completion ready (maybe none: then `in_flight` tells whether
    /// the timeout passed or nothing was left to wait for; with `timeout_error=True` a timeout
    /// with nothing ready raises `TimeoutError` instead, so `[]` only ever means "nothing in
    /// flight"). The GIL is released while
    /// waiting; signal handlers run every 20 ms at most (Ctrl-C raises; completions already
    /// reaped stay for the next call). io_uring_submit_and_wait_timeout(3).
    #[pyo3(signature = (min_complete=1, timeout=None, *, timeout_error=false))]
    fn wait<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = u32_arg)] min_complete: u32,
        timeout: Option<f64>,
        timeout_error: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let min = min_complete as usize;
        let deadline = match timeout {
            None => None,
            Some(t) => Some(Instant::now() + Seconds::wait("timeout").of(t)?),
        };
        // One use for the whole wait: a close() from another thread is seen between slices.
        let cell = self.enter(py)?;
        let cell: &RingCell = &cell;
        loop {
            let slice = match deadline {
                // The closable model's slice (at most 20 ms): then the signal handlers run
                // and the closing flag is looked at.
                None => fdkit::fd::cancel_slice(),
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .min(fdkit::fd::cancel_slice()),
            };
            let closing = self.inner.closing_flag();
            let (ready, in_flight) = py.detach(|| {
                let mut guard = cell.lock();
                let Some(r) = guard.as_mut() else {
                    return Err(closed_ring());
                };
                if closing.load(Ordering::SeqCst) {
                    // Closed from another thread. With DEFER_TASKRUN only this thread (the
                    // issuer) can reap: tear the ring down here, properly, before leaving.
                    if r.defer_taskrun() {
                        drop(guard.take());
                    }
                    return Err(closed_ring());
                }
                match r.wait_ready(min, Some(slice)) {
                    Ok(n) => Ok((n, r.in_flight())),
                    Err(fdkit::Error::Os(Errno::INTR)) => Ok((r.ready(), r.in_flight())),
                    Err(e) => Err(core_error(e)),
                }
            })?;
            let expired = deadline.is_some_and(|d| Instant::now() >= d);
            if ready >= min || in_flight == 0 || expired {
                break;
            }
            py.check_signals()?;
        }
        let (done, in_flight) = match cell.lock().as_mut() {
            Some(r) => (r.take_ready(), r.in_flight()),
            None => return Err(closed_ring()),
        };
        if timeout_error && done.is_empty() && in_flight > 0 {
            return Err(pyo3::exceptions::PyTimeoutError::new_err(format!(
                "no completion within the timeout ({in_flight} ops in flight)"
            )));
        }
        let list = PyList::empty(py);
        for c in done {
            list.append(PyCompletion::from_core(py, c)?)?;
        }
        Ok(list)
    }

    /// The ring's fd (-1 once closed), as `Pipe.fileno()` and `AtomicPipe.fileno()`.
    fn fileno(&self, py: Python<'_>) -> i32 {
        self.inner
            .enter(py)
            .map_or(-1, |cell| cell.fd.load(Ordering::Relaxed))
    }

    /// The ring's fd: the older spelling of `fileno()`, kept as an alias.
    #[getter]
    fn fd(&self, py: Python<'_>) -> i32 {
        self.fileno(py)
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Whether the ring runs with `SINGLE_ISSUER|DEFER_TASKRUN`.
    #[getter]
    fn defer_taskrun(&self) -> bool {
        self.defer_taskrun
    }

    /// Submission queue size (as the kernel rounded it).
    #[getter]
    fn sq_entries(&self) -> u32 {
        self.sq_entries
    }

    /// Completion queue size (as the kernel rounded it).
    #[getter]
    fn cq_entries(&self) -> u32 {
        self.cq_entries
    }

    /// Ops queued or in flight whose last completion has not been reaped (0 once closed).
    #[getter]
    fn in_flight(&self, py: Python<'_>) -> usize {
        self.with_ring(py, Gil::Keep, |r| Ok(r.in_flight()))
            .unwrap_or(0)
    }

    /// `close()`: cancels the ops in flight, waits (at most 2 s) for their completions,
    /// frees their buffers and closes the ring. From any thread: a `wait()` in another thread
    /// ends with ValueError within 20 ms, and the ring is freed once it has left. Closing
    /// twice is harmless.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.inner.close(py)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Closes the ring; returns None, so an exception in the block propagates.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.fileno(py) {
            -1 => "<Ring closed>".into(),
            fd => format!(
                "<Ring fd={fd} sq_entries={} cq_entries={} defer_taskrun={}>",
                self.sq_entries,
                self.cq_entries,
                if self.defer_taskrun { "True" } else { "False" }
            ),
        }
    }
});

impl Drop for PyRing {
    fn drop(&mut self) {
        // Garbage collection of an unclosed ring: the same bounded cancel-and-reap as close()
        // (no lock to wait for: we are the last reference).
        let ring = self
            .inner
            .get_mut()
            .ring
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(ring);
    }
}

/// `_fdkit.RING_OPS`: the core's op table ([`fdkit::uring::OPS`]) for Python, one
/// `(name, args, keywords, fixed)` per op: the positional parameters (`user_data` last), the
/// keyword parameters with their defaults, and whether `fixed=True` is offered. The test that
/// holds `Ring`'s methods and the stub to the table reads it.
pub fn ring_ops_table(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let table = PyList::empty(py);
    for op in fdkit::uring::OPS {
        let name = |n: &str| n.trim_start_matches("r#").to_owned();
        let args: Vec<String> = op.args.iter().map(|a| name(a)).collect();
        let keywords = PyDict::new(py);
        for (kw, default) in op.keywords {
            keywords.set_item(name(kw), default_value(py, default)?)?;
        }
        table.append((op.name, PyTuple::new(py, args)?, keywords, op.fixed))?;
    }
    Ok(table)
}

/// A default as the table writes it (`None`, `false`, `0`, `0o777`, `0x7ff`), as Python's.
fn default_value<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let int = |digits: &str, radix| {
        i64::from_str_radix(digits, radix)
            .map_err(|_| PyValueError::new_err(format!("not a default: {text}")))
    };
    Ok(match text {
        "None" => py.None().into_bound(py),
        "false" | "true" => (text == "true").into_pyobject(py)?.to_owned().into_any(),
        _ => match text.get(..2) {
            Some("0o") => int(&text[2..], 8)?,
            Some("0x") => int(&text[2..], 16)?,
            _ => int(text, 10)?,
        }
        .into_pyobject(py)?
        .into_any(),
    })
}
