//! `LoopCore`: the per-iteration path of `fdkit.aio`'s event loop, native, on asyncio's own
//! objects.
//!
//! asyncio's `BaseEventLoop._run_once`, `call_soon`, `call_at`, `call_later`, `time` and
//! `_timer_handle_cancelled` do here what they do in CPython's `base_events.py`, step for step,
//! without a Python frame: the ready queue stays the loop's own `collections.deque`
//! (`loop._ready`), the Handles are asyncio's `Handle`/`TimerHandle` (made through their slots),
//! the timer heap pops in `heapq`'s order ([`fdkit::aio::TimerHeap`]), readiness comes from the
//! selector's own epoll instance and its own key map, and each Handle runs as `Handle._run`
//! runs it: in its context, its exception handed to the loop's exception handler.
//!
//! What is rare takes asyncio's own Python path, so it behaves as asyncio's does by being
//! asyncio's code: debug mode (slow-callback warnings, source tracebacks), a patched
//! `Handle._run`, a Handle subclass, a `when` or `delay` that is not a plain number, a loop
//! subclass that overrides one of these methods (the Python side then leaves that method alone).
//!
//! Nothing here holds a borrow of the core's state across a call into Python: a callback may
//! call back into the core (a `call_soon` from a callback is the common case).

use super::asyncio_objects::{self as aio, objects, AsyncioObjects};
use super::attrs;
use super::gil_cell::GilCell;
use super::reactor::PyReactor;
use super::socket_transport;
use crate::errors::os_error;
use crate::gil::without_gil;
use fdkit::aio::TimerHeap;
use pyo3::exceptions::{
    PyAttributeError, PyKeyboardInterrupt, PyRuntimeError, PySystemExit, PyTypeError,
};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};
use rustix::event::epoll;
use rustix::io::Errno;
use std::os::fd::{BorrowedFd, RawFd};
use std::time::Duration;

/// asyncio's `MAXIMUM_SELECT_TIMEOUT` (`base_events.py`).
const MAXIMUM_SELECT_TIMEOUT: f64 = 24.0 * 3600.0;
/// asyncio's `_MIN_SCHEDULED_TIMER_HANDLES` and `_MIN_CANCELLED_TIMER_HANDLES_FRACTION`.
const MIN_SCHEDULED_TIMER_HANDLES: usize = 100;
const MIN_CANCELLED_TIMER_HANDLES_FRACTION: f64 = 0.5;
/// `selectors.EVENT_READ` and `selectors.EVENT_WRITE`.
const EVENT_READ: u32 = 1;
const EVENT_WRITE: u32 = 2;

pub(super) struct State {
    timers: TimerHeap<Py<PyAny>>,
    /// asyncio's `_timer_cancelled_count`.
    cancelled: usize,
    events: Events,
    /// What the native read path receives into (the bytes `data_received` gets are copied
    /// out of it once).
    pub(super) recv_buf: Vec<u8>,
    /// The ready deque and its bound `append` and `popleft` (see `ready_methods`).
    ready_methods: Option<(Py<PyAny>, Py<PyAny>, Py<PyAny>)>,
    /// The version tags of `Handle` and `TimerHandle` when `_run` was last looked up, and
    /// whether it was patched then.
    run_patched: Option<((u32, u32), bool)>,
    /// `process_events`' buffers: the fds and events polled, the keys found for them.
    polled: Vec<(RawFd, u32)>,
    keys: Vec<(Py<PyTuple>, u32)>,
    /// The loop as `seal()` found it once the native methods were in place.
    sealed: Option<Sealed>,
}

/// What the loop looked like once its native methods were installed: while its dict and its
/// selector's keep their sizes and `loop.time` is the core's, no method `_run_once` calls was
/// replaced on the instance (mock.patch.object and the like add or replace dict entries).
struct Sealed {
    loop_dict_len: usize,
    time: Py<PyAny>,
    /// The loop's `_run_once` (this core's `run_once`, bound), None when it had another.
    run_once: Option<Py<PyAny>>,
    selector: Py<PyAny>,
    selector_dict_len: usize,
}

/// Which of the methods asyncio's `_run_once` calls a program replaced on the instance.
#[derive(Default, Clone, Copy)]
struct Replaced {
    time: bool,
    select: bool,
    process_events: bool,
}

/// epoll_wait(2)'s buffer (also filled by the ring: [`PyReactor::epoll_wait`]).
pub(crate) struct Events(pub(crate) Vec<epoll::Event>);

// SAFETY: an `epoll::Event` is plain data (its `data` field may be read as a pointer, which
// nothing here does); the buffer moves with the core, never shared.
unsafe impl Send for Events {}

/// The Python functions the rare paths call (`fdkit.aio._native`).
struct Support {
    /// `report_error(handle, exc)`: what `Handle._run` does with an exception.
    report_error: Py<PyAny>,
    /// `run_debug(loop, handle)`: `_run_once`'s debug-mode run of one Handle.
    run_debug: Py<PyAny>,
    /// asyncio's `BaseEventLoop.call_soon`, `.call_later` and fdkit's `EventLoop.call_at`.
    call_soon: Py<PyAny>,
    call_later: Py<PyAny>,
    call_at: Py<PyAny>,
    /// asyncio's `BaseEventLoop.create_task`.
    create_task: Py<PyAny>,
    /// The socket transport class whose reads run natively.
    transport_type: Py<PyAny>,
    /// `read_error(transport, exc, in_recv)`: asyncio's handling of a read path's exception.
    pub(super) read_error: Py<PyAny>,
    /// The code of asyncio's `BaseEventLoop.run_forever`, whose loop calls `_run_once` until
    /// `_stopping` is set (None when it is not a Python function).
    run_forever_code: Option<Py<PyAny>>,
}

/// The native iteration of one event loop. Private to `fdkit.aio`.
#[pyclass(frozen, module = "fdkit._fdkit", name = "LoopCore")]
pub struct LoopCore {
    loop_: Py<PyAny>,
    support: Support,
    /// The selector's epoll instance and its `_fd_to_key` dict (owned by the selector).
    epfd: RawFd,
    fd_to_key: Py<PyDict>,
    /// The io_uring engine's ring, which waits while the epoll instance has nothing.
    ring: Option<Py<PyReactor>>,
    /// Whether `loop.time()` is asyncio's (`time.monotonic()`), read here without a call.
    native_time: bool,
    /// Whether the loop's class lets its `__dict__` answer first (see `attrs`).
    loop_dict_ok: bool,
    /// Offsets of `_ready`, `_stopping`, `_debug` and `_selector`, which fdkit's EventLoop keeps in
    /// `__slots__` (None for a subclass that redefines one of them).
    loop_slots: Option<[isize; 4]>,
    clock_resolution: f64,
    /// Whether asyncio's `_run_once` takes the timers due before `now + max(clock_resolution,
    /// math.ulp(now))` (3.15) rather than `now + clock_resolution`: `support.END_TIME_ULP`.
    end_time_ulp: bool,
    state: GilCell<State>,
}

/// `math.ulp(x)` for a finite `x`: the gap from `|x|` to the next larger double.
fn ulp(x: f64) -> f64 {
    let a = x.abs();
    f64::from_bits(a.to_bits() + 1) - a
}

/// `time.monotonic()`, to the same double (`_PyTime_AsSecondsDouble`): CLOCK_MONOTONIC
/// through the C library, as Python reads it (its vDSO; rustix's own vDSO lookup parses the
/// auxiliary vector, which tools such as valgrind lay out otherwise).
fn monotonic() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let ns = ts.tv_sec * 1_000_000_000 + ts.tv_nsec;
    if ns % 1_000_000_000 == 0 {
        (ns / 1_000_000_000) as f64
    } else {
        ns as f64 / 1e9
    }
}

/// Whether an error is one `Handle._run` lets through (`SystemExit`, `KeyboardInterrupt`).
pub(super) fn passes_through(py: Python<'_>, e: &PyErr) -> bool {
    e.is_instance_of::<PySystemExit>(py) || e.is_instance_of::<PyKeyboardInterrupt>(py)
}

/// A plain number `when`/`delay`: an exact `float` or `int` (anything else takes asyncio's path).
fn plain_number(v: &Bound<'_, PyAny>) -> Option<f64> {
    if v.is_exact_instance_of::<PyFloat>() || v.is_exact_instance_of::<PyInt>() {
        v.extract::<f64>().ok()
    } else {
        None
    }
}

impl LoopCore {
    fn time_of(&self, lp: &Bound<'_, PyAny>) -> PyResult<f64> {
        if self.native_time {
            Ok(monotonic())
        } else {
            lp.call_method0(intern!(lp.py(), "time"))?.extract()
        }
    }

    /// What a program replaced on the loop instance (or its selector) of the methods asyncio's
    /// `_run_once` calls: those are then called, as asyncio calls them.
    fn replaced(&self, py: Python<'_>, lp: &Bound<'_, PyAny>) -> PyResult<Replaced> {
        let o = objects(py)?;
        let all = Replaced {
            time: true,
            select: true,
            process_events: true,
        };
        let Some(ld) = attrs::instance_dict(lp) else {
            return Ok(all);
        };
        let selector = self.loop_slot(lp, 3, &o.names._selector)?;
        let sd = attrs::instance_dict(&selector);
        let sealed = self.state.with(py, |s| {
            s.sealed.as_ref().map(|z| {
                (
                    z.loop_dict_len,
                    z.time.clone_ref(py),
                    z.selector.clone_ref(py),
                    z.selector_dict_len,
                )
            })
        });
        let Some((len, time, sel, sel_len)) = sealed else {
            return Ok(all);
        };
        let time_ours = ld
            .get_item(o.names.time.bind(py))?
            .is_some_and(|t| t.is(&time));
        let same_selector = selector.is(&sel);
        let sel_len_now = sd.as_ref().map_or(usize::MAX, |d| d.len());
        if ld.len() == len && time_ours && same_selector && sel_len_now == sel_len {
            return Ok(Replaced::default());
        }
        let mut process_events = false;
        for name in [
            &o.names._process_events,
            &o.names._add_callback,
            &o.names._remove_reader,
            &o.names._remove_writer,
        ] {
            process_events |= ld.contains(name.bind(py))?;
        }
        let select = !same_selector
            || match &sd {
                Some(d) => d.contains(o.names.select.bind(py))?,
                None => true,
            };
        Ok(Replaced {
            time: !time_ours,
            select,
            process_events,
        })
    }

    /// `loop.time()`: the core's clock, or the method a program put in its place.
    fn now(&self, lp: &Bound<'_, PyAny>, r: Replaced) -> PyResult<f64> {
        if r.time {
            lp.call_method0(intern!(lp.py(), "time"))?.extract()
        } else {
            self.time_of(lp)
        }
    }

    /// `EpollSelector.select`'s answer for the `n` events polled: `[(key, mask), ...]`.
    fn event_list<'py>(&self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyList>> {
        let mut keys = Vec::new();
        self.select_keys(py, n, &mut keys)?;
        PyList::new(py, keys)
    }

    /// `EpollSelector.select` for the `n` events polled: the key of each registered fd and the
    /// mask of what is ready of what it asked for, appended to `keys`.
    fn select_keys(
        &self,
        py: Python<'_>,
        n: usize,
        keys: &mut Vec<(Py<PyTuple>, u32)>,
    ) -> PyResult<()> {
        // The buffer is kept in the state between iterations (no allocation per iteration) and
        // is out of it while Python runs.
        let polled = self.state.with(py, |s| {
            let mut polled = std::mem::take(&mut s.polled);
            polled.clear();
            polled.extend(s.events.0[..n].iter().map(|e| {
                let e = *e;
                // Python's epoll stores the fd in `data.fd`, the low 32 bits.
                ({ e.data }.u64() as u32 as i32, { e.flags }.bits())
            }));
            polled
        });
        let map = self.fd_to_key.bind(py);
        let found = polled.iter().try_for_each(|&(fd, flags)| {
            let mut mask = 0;
            if flags & !(libc_epollin()) != 0 {
                mask |= EVENT_WRITE;
            }
            if flags & !(libc_epollout()) != 0 {
                mask |= EVENT_READ;
            }
            if let Some(key) = map.get_item(fd)? {
                // A SelectorKey is a namedtuple: (fileobj, fd, events, data).
                let key = key.cast_into::<PyTuple>()?;
                if !key.is_empty() {
                    let want: u32 = key.get_item(2)?.extract()?;
                    keys.push((key.unbind(), mask & want));
                }
            }
            Ok::<(), PyErr>(())
        });
        self.state.with(py, |s| s.polled = polled);
        found
    }

    /// Drops Python objects outside any state scope (their finalizers may call back in).
    fn release<T>(_py: Python<'_>, objs: T) {
        drop(objs);
    }

    /// asyncio's clean-up of cancelled timers at the start of `_run_once`.
    fn clean_timers(&self, py: Python<'_>, o: &AsyncioObjects) -> PyResult<()> {
        let cancelled_of = |h: &Py<PyAny>| -> PyResult<bool> { is_cancelled(o, h.bind(py)) };
        let (len, cancelled) = self.state.with(py, |s| (s.timers.len(), s.cancelled));
        let mut removed: Vec<Py<PyAny>> = Vec::new();
        if len > MIN_SCHEDULED_TIMER_HANDLES
            && cancelled as f64 / len as f64 > MIN_CANCELLED_TIMER_HANDLES_FRACTION
        {
            // Reading `_cancelled` calls no Python for plain TimerHandles; a subclass's is read
            // through getattr, before the state is touched.
            let flags: Vec<bool> = self
                .state
                .with(py, |s| {
                    s.timers
                        .iter()
                        .map(|(_, h)| h.clone_ref(py))
                        .collect::<Vec<_>>()
                })
                .iter()
                .map(cancelled_of)
                .collect::<PyResult<_>>()?;
            let mut i = 0;
            self.state.with(py, |s| {
                if s.timers.len() != flags.len() {
                    return; // a `__bool__` changed the heap: clean up at the next iteration
                }
                s.timers.retain_heapify(
                    |_| {
                        let keep = !flags[i];
                        i += 1;
                        keep
                    },
                    |h| removed.push(h),
                );
                s.cancelled = 0;
            });
        } else {
            loop {
                let head = self
                    .state
                    .with(py, |s| s.timers.peek().map(|(_, h)| h.clone_ref(py)));
                let cancelled = match &head {
                    Some(h) => cancelled_of(h)?,
                    None => false,
                };
                match head {
                    Some(h) if cancelled => {
                        let popped = self.state.with(py, |s| {
                            s.cancelled = s.cancelled.saturating_sub(1);
                            s.timers.pop()
                        });
                        Self::release(py, h);
                        if let Some((_, h)) = popped {
                            removed.push(h);
                        }
                    }
                    other => {
                        Self::release(py, other);
                        break;
                    }
                }
            }
        }
        for h in &removed {
            set_scheduled(o, h.bind(py), false)?;
        }
        Self::release(py, removed);
        Ok(())
    }

    /// epoll_wait(2) on the selector's instance, as `select.epoll.poll` makes it (the timeout
    /// rounded up to milliseconds, `EINTR` retried after the signal handlers, PEP 475).
    fn epoll_wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<usize> {
        let maxevents = self.max_events(py);
        let deadline = timeout.map(|t| monotonic() + t.max(0.0));
        let mut events = self.take_events(py);
        events.0.clear();
        events.0.reserve(maxevents);
        let result = loop {
            let ms: i64 = match deadline {
                None => -1,
                Some(d) => ((d - monotonic()).max(0.0) * 1e3).ceil() as i64,
            };
            let ts = (ms >= 0).then(|| rustix::event::Timespec {
                tv_sec: ms / 1000,
                tv_nsec: (ms % 1000) * 1_000_000,
            });
            let epfd = self.epfd;
            let buf = &mut events;
            let mut wait = move || {
                // SAFETY: the selector owns `epfd` and closes it only in `close()`, after which
                // the loop runs no iteration (asyncio refuses to run a closed loop).
                let fd = unsafe { BorrowedFd::borrow_raw(epfd) };
                // Exactly `maxevents` ([`LoopCore::max_events`]).
                let spare = &mut buf.0.spare_capacity_mut()[..maxevents];
                let n = epoll::wait(fd, spare, ts.as_ref()).map(|(init, _)| init.len())?;
                // SAFETY: epoll_wait initialised the first `n` entries.
                unsafe { buf.0.set_len(n) };
                Ok(n)
            };
            // A wait of 0 ms returns at once: the GIL is released only for one that may wait.
            let r = if ms == 0 {
                wait()
            } else {
                without_gil(py, &mut wait)
            };
            match r {
                Ok(n) => break Ok(n),
                Err(Errno::INTR) => {
                    if let Err(e) = py.check_signals() {
                        break Err(e);
                    }
                }
                Err(e) => break Err(os_error(e)),
            }
        };
        self.state.with(py, |s| s.events = events);
        result
    }

    /// The `maxevents` of a wait, as Python's `select.epoll.poll` asks it: one per registered
    /// fd (fewer or more would split the ready fds between iterations otherwise than asyncio's
    /// loop does).
    fn max_events(&self, py: Python<'_>) -> usize {
        self.fd_to_key.bind(py).len().max(1)
    }

    /// The events buffer, out of the state while a wait fills it (no allocation per
    /// iteration); the wait puts it back.
    fn take_events(&self, py: Python<'_>) -> Events {
        self.state
            .with(py, |s| std::mem::replace(&mut s.events, Events(Vec::new())))
    }

    /// The io_uring engine's wait. Where the kernel runs `IORING_OP_EPOLL_WAIT`, the ring
    /// reads the epoll instance itself (one io_uring_enter(2), whether events are there, come,
    /// or the timeout passes); an iteration that must not wait looks with epoll_wait(2).
    /// Otherwise epoll first (what is ready costs one epoll_wait(2)); when nothing is and the
    /// iteration may wait, the ring waits for the epoll instance to become readable.
    fn ring_wait(
        &self,
        py: Python<'_>,
        ring: &Py<PyReactor>,
        timeout: Option<f64>,
    ) -> PyResult<usize> {
        let reactor = ring.get();
        if reactor.reads_epoll() && timeout != Some(0.0) {
            let limit = timeout.map(|t| Duration::from_secs_f64(t.max(0.0)));
            let mut events = self.take_events(py);
            let n = reactor.epoll_wait(py, self.epfd, &mut events, self.max_events(py), limit);
            self.state.with(py, |s| s.events = events);
            let n = n?;
            py.check_signals()?;
            return Ok(n);
        }
        let n = self.epoll_wait(py, Some(0.0))?;
        if n > 0 || timeout == Some(0.0) {
            return Ok(n);
        }
        let limit = timeout.map(|t| Duration::from_secs_f64(t.max(0.0)));
        ring.get().wait(py, self.epfd, limit)?;
        py.check_signals()?;
        self.epoll_wait(py, Some(0.0))
    }

    /// `EpollSelector.select`'s keys and masks, then `_process_events`: the Handles of what is
    /// ready go on the ready queue (a cancelled one is removed, as asyncio removes it).
    fn process_events(
        &self,
        py: Python<'_>,
        lp: &Bound<'_, PyAny>,
        ready: &Bound<'_, PyAny>,
        n: usize,
    ) -> PyResult<()> {
        if n == 0 {
            return Ok(());
        }
        // The keys and masks first, as `select()` returns them, then the Handles: a reader
        // removed while the Handles are queued does not change which keys were ready. The
        // buffer is kept in the state between iterations and is out of it while Python runs.
        let mut keys = self.state.with(py, |s| std::mem::take(&mut s.keys));
        let result = self
            .select_keys(py, n, &mut keys)
            .and_then(|()| self.queue_handles(py, lp, ready, &keys));
        // The keys are out of the state here: dropping them may run Python.
        keys.clear();
        self.state.with(py, |s| s.keys = keys);
        result
    }

    /// `_process_events` for the keys and masks `select()` found.
    fn queue_handles(
        &self,
        py: Python<'_>,
        lp: &Bound<'_, PyAny>,
        ready: &Bound<'_, PyAny>,
        keys: &[(Py<PyTuple>, u32)],
    ) -> PyResult<()> {
        let (append, _) = self.ready_methods(ready)?;
        let o = objects(py)?;
        for (key, mask) in keys {
            let (key, mask) = (key.bind(py), *mask);
            let data = key.get_item(3)?.cast_into::<PyTuple>()?;
            let (reader, writer) = (data.get_item(0)?, data.get_item(1)?);
            if mask & EVENT_READ != 0 && !reader.is_none() {
                if is_cancelled(o, &reader)? {
                    lp.call_method1(intern!(py, "_remove_reader"), (key.get_item(0)?,))?;
                } else {
                    append.call1((&reader,))?;
                }
            }
            if mask & EVENT_WRITE != 0 && !writer.is_none() {
                if is_cancelled(o, &writer)? {
                    lp.call_method1(intern!(py, "_remove_writer"), (key.get_item(0)?,))?;
                } else {
                    append.call1((&writer,))?;
                }
            }
        }
        Ok(())
    }

    /// Runs one Handle as `Handle._run` does; `Err` only for what `_run` lets through.
    fn run_handle(&self, py: Python<'_>, o: &AsyncioObjects, h: &Bound<'_, PyAny>) -> PyResult<()> {
        let Some(s) = o.slots.filter(|_| aio::is_plain_handle(o, h)) else {
            h.call_method0(intern!(py, "_run"))?;
            return Ok(());
        };
        // SAFETY: `h` is exactly Handle or TimerHandle, whose slots `s` describes; each
        // pointer is taken as a new reference before any Python runs (the callback may cancel
        // its own Handle, which clears these slots).
        let (ctx, cb, args) = unsafe {
            let p = h.as_ptr();
            let (c, f, a) = (
                aio::slot(p, s.context),
                aio::slot(p, s.callback),
                aio::slot(p, s.args),
            );
            if c.is_null()
                || f.is_null()
                || a.is_null()
                || ffi::PyContext_CheckExact(c) == 0
                || ffi::PyTuple_CheckExact(a) == 0
            {
                drop(h.call_method0(intern!(py, "_run"))?);
                return Ok(());
            }
            (
                Bound::from_borrowed_ptr(py, c),
                Bound::from_borrowed_ptr(py, f),
                Bound::from_borrowed_ptr(py, a).cast_into_unchecked::<PyTuple>(),
            )
        };
        let result = in_context(py, &ctx, || {
            if let Some(tr) = self.native_reader(o, &cb) {
                socket_transport::read_ready(
                    py,
                    o,
                    &self.state,
                    self.support.read_error.bind(py),
                    &tr,
                )
            } else {
                cb.call1(&args).map(drop)
            }
        });
        match result {
            Ok(()) => Ok(()),
            Err(e) if passes_through(py, &e) => Err(e),
            Err(e) => {
                let exc = e.into_value(py);
                self.support.report_error.bind(py).call1((h, exc))?;
                Ok(())
            }
        }
    }

    /// The transport whose `_read_ready` `cb` is, when it is one of fdkit's socket transports
    /// (exactly its class: a subclass may override the read path).
    fn native_reader<'py>(
        &self,
        o: &AsyncioObjects,
        cb: &Bound<'py, PyAny>,
    ) -> Option<Bound<'py, PyAny>> {
        let (func, slf) = o.bound_method(cb)?;
        if func != o.read_ready.as_ptr() {
            return None;
        }
        // SAFETY: `slf` is the bound method's `__self__`, alive while `cb` is.
        let tr = unsafe { Bound::from_borrowed_ptr(cb.py(), slf) };
        tr.get_type()
            .is(self.support.transport_type.bind(cb.py()))
            .then_some(tr)
    }

    /// The loop's `__dict__`, to read its attributes from first (see `attrs`).
    fn loop_dict<'py>(&self, lp: &Bound<'py, PyAny>) -> Option<Bound<'py, PyDict>> {
        if self.loop_dict_ok {
            attrs::instance_dict(lp)
        } else {
            None
        }
    }

    /// `loop.name`, from its dict first.
    fn loop_attr<'py>(
        &self,
        lp: &Bound<'py, PyAny>,
        name: &Py<PyString>,
    ) -> PyResult<Bound<'py, PyAny>> {
        attrs::attr(lp, self.loop_dict(lp).as_ref(), name)
    }

    /// `loop.<name>` for the `i`th of `_ready`, `_stopping`, `_debug`, `_selector`: its slot, or
    /// the long way.
    fn loop_slot<'py>(
        &self,
        lp: &Bound<'py, PyAny>,
        i: usize,
        name: &Py<PyString>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self.loop_slots {
            Some(offsets) => attrs::slot_attr(lp, offsets[i], name),
            None => lp.getattr(name.bind(lp.py())),
        }
    }

    fn closed_check(&self, o: &AsyncioObjects, lp: &Bound<'_, PyAny>) -> PyResult<()> {
        if truthy(&self.loop_attr(lp, &o.names._closed)?)? {
            return Err(PyRuntimeError::new_err("Event loop is closed"));
        }
        Ok(())
    }

    fn debug(&self, o: &AsyncioObjects, lp: &Bound<'_, PyAny>) -> PyResult<bool> {
        truthy(&self.loop_slot(lp, 2, &o.names._debug)?)
    }

    /// The `append` and `popleft` of the loop's ready deque `ready`, bound once for as long as
    /// `loop._ready` is that deque.
    fn ready_methods<'py>(
        &self,
        ready: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let py = ready.py();
        let cached = self.state.with(py, |s| match &s.ready_methods {
            Some((r, a, p)) if r.as_ptr() == ready.as_ptr() => {
                Some((a.clone_ref(py), p.clone_ref(py)))
            }
            _ => None,
        });
        if let Some((a, p)) = cached {
            return Ok((a.into_bound(py), p.into_bound(py)));
        }
        let o = objects(py)?;
        let append = ready.getattr(o.names.append.bind(py))?;
        let popleft = ready.getattr(o.names.popleft.bind(py))?;
        let new = Some((
            ready.clone().unbind(),
            append.clone().unbind(),
            popleft.clone().unbind(),
        ));
        let old = self
            .state
            .with(py, |s| std::mem::replace(&mut s.ready_methods, new));
        Self::release(py, old);
        Ok((append, popleft))
    }

    fn schedule<'py>(
        &self,
        py: Python<'py>,
        when: f64,
        when_obj: &Bound<'py, PyAny>,
        callback: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        context: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let lp = self.loop_.bind(py);
        let o = objects(py)?;
        let timer = aio::new_handle(py, o, callback, args, lp, context, Some(when_obj))?;
        let t = timer.clone().unbind();
        self.state.with(py, |s| s.timers.push(when, t));
        set_scheduled(o, &timer, true)?;
        Ok(timer)
    }

    /// One iteration of asyncio's `_run_once`.
    fn iteration(&self, py: Python<'_>) -> PyResult<()> {
        let o = objects(py)?;
        let lp = self.loop_.bind(py);
        self.clean_timers(py, o)?;

        let replaced = self.replaced(py, lp)?;
        let ready = self.loop_slot(lp, 0, &o.names._ready)?;
        let head = self.state.with(py, |s| s.timers.peek().map(|(w, _)| *w));
        let timeout = if ready.len()? > 0 || truthy(&self.loop_slot(lp, 1, &o.names._stopping)?)? {
            Some(0.0)
        } else if let Some(when) = head {
            Some((when - self.now(lp, replaced)?).clamp(0.0, MAXIMUM_SELECT_TIMEOUT))
        } else {
            None
        };

        // A closed loop's selector is gone (asyncio's close() sets it to None), and with it the
        // epoll fd this core would wait on: fail as asyncio's `self._selector.select` fails.
        let selector = self.loop_slot(lp, 3, &o.names._selector)?;
        if selector.is_none() {
            return Err(PyAttributeError::new_err(
                "'NoneType' object has no attribute 'select'",
            ));
        }
        if replaced.select || replaced.process_events {
            // A program replaced the selector, its select() or a method _process_events calls:
            // asyncio's steps, each looked up on the instance.
            let events = if replaced.select {
                selector.call_method1(o.names.select.bind(py), (timeout,))?
            } else {
                let n = match &self.ring {
                    Some(ring) => self.ring_wait(py, ring, timeout)?,
                    None => self.epoll_wait(py, timeout)?,
                };
                self.event_list(py, n)?.into_any()
            };
            lp.call_method1(o.names._process_events.bind(py), (events,))?;
        } else {
            let n = match &self.ring {
                Some(ring) => self.ring_wait(py, ring, timeout)?,
                None => self.epoll_wait(py, timeout)?,
            };
            self.process_events(py, lp, &ready, n)?;
        }

        // 'later' callbacks that are due.
        let now = self.now(lp, replaced)?;
        let end_time = now
            + if self.end_time_ulp {
                self.clock_resolution.max(ulp(now))
            } else {
                self.clock_resolution
            };
        let (append, popleft) = self.ready_methods(&ready)?;
        loop {
            let due = self.state.with(py, |s| match s.timers.peek() {
                Some((w, _)) if *w < end_time => s.timers.pop().map(|(_, h)| h),
                _ => None,
            });
            let Some(h) = due else { break };
            let h = h.into_bound(py);
            set_scheduled(o, &h, false)?;
            append.call1((&h,))?;
        }

        // This is the only place where callbacks are called; those they schedule run at the
        // next iteration.
        let ntodo = ready.len()?;
        if ntodo == 0 {
            return Ok(());
        }
        let handle_type = o.handle_type.bind(py);
        let timer_type = o.timer_type.bind(py);
        let run_name = o.names._run.bind(py);
        // Whether `_run` was patched: looked up again only when either class changed since
        // the last look (a class's version tag changes with any of its attributes).
        // SAFETY: reading the version tags of two live type objects.
        let tags = unsafe {
            (
                (*handle_type.as_type_ptr()).tp_version_tag,
                (*timer_type.as_type_ptr()).tp_version_tag,
            )
        };
        let known = self.state.with(py, |s| {
            s.run_patched
                .filter(|(t, _)| t.0 != 0 && t.1 != 0 && *t == tags)
        });
        let patched = match (known, &o.handle_run) {
            (Some((_, p)), _) => p,
            (None, None) => true,
            (None, Some(own)) => {
                let p = !handle_type.getattr(run_name)?.is(own.bind(py))
                    || !timer_type.getattr(run_name)?.is(own.bind(py));
                // SAFETY: as above; the lookups gave both classes a tag if they had none.
                let tags = unsafe {
                    (
                        (*handle_type.as_type_ptr()).tp_version_tag,
                        (*timer_type.as_type_ptr()).tp_version_tag,
                    )
                };
                self.state.with(py, |s| s.run_patched = Some((tags, p)));
                p
            }
        };
        for _ in 0..ntodo {
            let h = popleft.call0()?;
            if is_cancelled(o, &h)? {
                continue;
            }
            if truthy(&self.loop_slot(lp, 2, &o.names._debug)?)? {
                self.support.run_debug.bind(py).call1((lp, &h))?;
            } else if patched {
                h.call_method0(run_name)?;
            } else {
                self.run_handle(py, o, &h)?;
            }
        }
        Ok(())
    }

    /// Whether `run_once` runs another iteration before it returns: it was called by asyncio's
    /// `run_forever` (whose loop does nothing between iterations but read `_stopping`), the
    /// loop is not stopping, and `_run_once` is still this core's (a program may replace it
    /// from a callback; `run_forever` then calls the replacement). Anything else, a test's own
    /// call of `loop._run_once()` included, gets exactly one iteration. Pending signal handlers
    /// run here as Python runs them between the calls of `run_forever`'s loop.
    fn goes_on(&self, py: Python<'_>) -> PyResult<bool> {
        let o = objects(py)?;
        let lp = self.loop_.bind(py);
        if truthy(&self.loop_slot(lp, 1, &o.names._stopping)?)? {
            return Ok(false);
        }
        let Some(code) = &self.support.run_forever_code else {
            return Ok(false);
        };
        // SAFETY: PyEval_GetFrame returns the calling Python frame, borrowed (null when none);
        // PyFrame_GetCode returns a new reference to its code, released here.
        let called_by_run_forever = unsafe {
            let frame = ffi::PyEval_GetFrame();
            !frame.is_null() && {
                let c = ffi::PyFrame_GetCode(frame).cast::<ffi::PyObject>();
                let same = c == code.as_ptr();
                ffi::Py_DECREF(c);
                same
            }
        };
        if !called_by_run_forever {
            return Ok(false);
        }
        let ours = self.state.with(py, |s| {
            s.sealed
                .as_ref()
                .and_then(|z| z.run_once.as_ref().map(|m| m.as_ptr()))
        });
        let Some(ours) = ours else {
            return Ok(false);
        };
        let Some(ld) = attrs::instance_dict(lp) else {
            return Ok(false);
        };
        match attrs::dict_get(&ld, o.names._run_once.bind(py).as_any())? {
            Some(m) if m.as_ptr() == ours => {}
            _ => return Ok(false),
        }
        py.check_signals()?;
        Ok(true)
    }
}

#[pymethods]
impl LoopCore {
    /// The core of ``loop``: ``selector`` is the loop's epoll selector, ``ring`` the io_uring
    /// engine's reactor (None on epoll), ``support`` the module with the Python paths,
    /// ``owner`` the class whose ``__slots__`` hold ``_ready``, ``_stopping`` and ``_debug``.
    #[new]
    #[pyo3(signature = (loop_, selector, ring, support, owner))]
    fn new(
        py: Python<'_>,
        loop_: &Bound<'_, PyAny>,
        selector: &Bound<'_, PyAny>,
        ring: Option<Py<PyReactor>>,
        support: &Bound<'_, PyAny>,
        owner: &Bound<'_, PyType>,
    ) -> PyResult<Self> {
        objects(py)?;
        let epfd: RawFd = selector
            .getattr("_selector")?
            .call_method0("fileno")?
            .extract()?;
        let fd_to_key = selector
            .getattr("_fd_to_key")?
            .cast_into::<PyDict>()?
            .unbind();
        let base = py.import("asyncio.base_events")?.getattr("BaseEventLoop")?;
        let native_time = loop_.get_type().getattr("time")?.is(&base.getattr("time")?);
        let names = &objects(py)?.names;
        let loop_dict_ok =
            attrs::dict_first_ok(&loop_.get_type(), &[&names._closed, &names._task_factory])?;
        let loop_slots = attrs::slot_offsets(
            &loop_.get_type(),
            owner,
            ["_ready", "_stopping", "_debug", "_selector"],
        )?;
        Ok(LoopCore {
            loop_: loop_.clone().unbind(),
            support: Support {
                report_error: support.getattr("report_error")?.unbind(),
                run_debug: support.getattr("run_debug")?.unbind(),
                call_soon: base.getattr("call_soon")?.unbind(),
                call_later: base.getattr("call_later")?.unbind(),
                call_at: support.getattr("python_call_at")?.unbind(),
                create_task: base.getattr("create_task")?.unbind(),
                transport_type: support.getattr("SocketTransport")?.unbind(),
                read_error: support.getattr("read_error")?.unbind(),
                run_forever_code: base
                    .getattr("run_forever")?
                    .getattr("__code__")
                    .ok()
                    .map(Bound::unbind),
            },
            epfd,
            fd_to_key,
            ring,
            native_time,
            loop_dict_ok,
            loop_slots,
            clock_resolution: loop_.getattr("_clock_resolution")?.extract()?,
            end_time_ulp: support.getattr("END_TIME_ULP")?.extract()?,
            state: GilCell::new(State {
                timers: TimerHeap::new(),
                cancelled: 0,
                events: Events(Vec::new()),
                recv_buf: Vec::new(),
                ready_methods: None,
                run_patched: None,
                polled: Vec::new(),
                keys: Vec::new(),
                sealed: None,
            }),
        })
    }

    /// asyncio's `BaseEventLoop.call_soon`.
    #[pyo3(signature = (callback, *args, context = None))]
    fn call_soon<'py>(
        &self,
        py: Python<'py>,
        callback: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        context: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let lp = self.loop_.bind(py);
        let o = objects(py)?;
        self.closed_check(o, lp)?;
        if self.debug(o, lp)? {
            return python_path(
                &self.support.call_soon,
                &[lp.as_any(), callback],
                args,
                context,
            );
        }
        let handle = aio::new_handle(py, o, callback, args, lp, context, None)?;
        let ready = self.loop_slot(lp, 0, &o.names._ready)?;
        self.ready_methods(&ready)?.0.call1((&handle,))?;
        Ok(handle)
    }

    /// asyncio's `BaseEventLoop.call_at`.
    #[pyo3(signature = (when, callback, *args, context = None))]
    fn call_at<'py>(
        &self,
        py: Python<'py>,
        when: &Bound<'py, PyAny>,
        callback: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        context: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let lp = self.loop_.bind(py);
        let o = objects(py)?;
        match plain_number(when) {
            Some(w) if !self.debug(o, lp)? => {
                self.closed_check(o, lp)?;
                self.schedule(py, w, when, callback, args, context)
            }
            _ => python_path(
                &self.support.call_at,
                &[lp.as_any(), when, callback],
                args,
                context,
            ),
        }
    }

    /// asyncio's `BaseEventLoop.call_later`.
    #[pyo3(signature = (delay, callback, *args, context = None))]
    fn call_later<'py>(
        &self,
        py: Python<'py>,
        delay: &Bound<'py, PyAny>,
        callback: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        context: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let lp = self.loop_.bind(py);
        let o = objects(py)?;
        if delay.is_none() {
            return Err(PyTypeError::new_err("delay must not be None"));
        }
        match plain_number(delay) {
            Some(d)
                if self.native_time && !self.replaced(py, lp)?.time && !self.debug(o, lp)? =>
            {
                let when = monotonic() + d;
                self.closed_check(o, lp)?;
                self.schedule(
                    py,
                    when,
                    PyFloat::new(py, when).as_any(),
                    callback,
                    args,
                    context,
                )
            }
            _ => python_path(
                &self.support.call_later,
                &[lp.as_any(), delay, callback],
                args,
                context,
            ),
        }
    }

    /// asyncio's `BaseEventLoop.create_task`: a `Task` of `asyncio.tasks`, or the task factory's.
    /// Keywords other than `name` and `context` (3.14's `eager_start`, whatever a task factory
    /// takes) go to asyncio's own method, which passes them on or refuses them as it does.
    #[pyo3(signature = (coro, *, name = None, context = None, **kwargs))]
    fn create_task<'py>(
        &self,
        py: Python<'py>,
        coro: &Bound<'py, PyAny>,
        name: Option<&Bound<'py, PyAny>>,
        context: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let lp = self.loop_.bind(py);
        let o = objects(py)?;
        self.closed_check(o, lp)?;
        let factory = self.loop_attr(lp, &o.names._task_factory)?;
        let more = kwargs.is_some_and(|k| !k.is_empty());
        if more || !factory.is_none() || self.debug(o, lp)? {
            // Other keywords, a task factory, or debug mode (a source traceback to trim):
            // asyncio's own.
            let kw = kwargs.cloned().unwrap_or_else(|| PyDict::new(py));
            if let Some(c) = context {
                kw.set_item(o.names.context.bind(py), c)?;
            }
            if let Some(n) = name {
                kw.set_item(o.names.name.bind(py), n)?;
            }
            return self
                .support
                .create_task
                .bind(py)
                .call((lp, coro), Some(&kw));
        }
        let kw = PyDict::new(py);
        kw.set_item(o.names.loop_.bind(py), lp)?;
        kw.set_item(o.names.name.bind(py), name)?;
        kw.set_item(o.names.context.bind(py), context)?;
        let task = py
            .import(intern!(py, "asyncio.tasks"))?
            .getattr(o.names.Task.bind(py))?;
        task.call((coro,), Some(&kw))
    }

    /// asyncio's `BaseEventLoop.get_debug`.
    fn get_debug(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let o = objects(py)?;
        Ok(self
            .loop_slot(self.loop_.bind(py), 2, &o.names._debug)?
            .unbind())
    }

    /// asyncio's `BaseEventLoop._check_closed`.
    fn check_closed(&self, py: Python<'_>) -> PyResult<()> {
        self.closed_check(objects(py)?, self.loop_.bind(py))
    }

    /// asyncio's `BaseEventLoop.time`: `time.monotonic()`.
    fn time(&self) -> f64 {
        monotonic()
    }

    /// asyncio's `BaseEventLoop._timer_handle_cancelled`.
    fn timer_handle_cancelled(&self, py: Python<'_>, handle: &Bound<'_, PyAny>) -> PyResult<()> {
        if handle.getattr(intern!(py, "_scheduled"))?.is_truthy()? {
            self.state.with(py, |s| s.cancelled += 1);
        }
        Ok(())
    }

    /// Puts a TimerHandle made by asyncio's Python path in the heap (the caller sets its
    /// `_scheduled`, as `call_at` does after `heappush`).
    fn push_timer(&self, py: Python<'_>, timer: &Bound<'_, PyAny>) -> PyResult<()> {
        let when: f64 = timer
            .getattr(intern!(py, "_when"))?
            .call_method0("__float__")?
            .extract()?;
        let t = timer.clone().unbind();
        self.state.with(py, |s| s.timers.push(when, t));
        Ok(())
    }

    /// The heap as asyncio's `_scheduled` list would hold it.
    fn scheduled<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items: Vec<Py<PyAny>> = self.state.with(py, |s| {
            s.timers.iter().map(|(_, h)| h.clone_ref(py)).collect()
        });
        PyList::new(py, items)
    }

    /// Replaces the heap with ``timers`` (asyncio's `__init__` and `close` set the list).
    fn set_scheduled(&self, py: Python<'_>, timers: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut new = TimerHeap::new();
        for t in timers.try_iter()? {
            let t = t?;
            let when: f64 = t
                .getattr(intern!(py, "_when"))?
                .call_method0("__float__")?
                .extract()?;
            new.push(when, t.unbind());
        }
        let old = self
            .state
            .with(py, |s| std::mem::replace(&mut s.timers, new));
        Self::release(py, old);
        Ok(())
    }

    /// Notes the loop as it is once its native methods are in place (see `Sealed`).
    fn seal(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let o = objects(py)?;
        let lp = this.loop_.bind(py);
        let ld = attrs::instance_dict(lp)
            .ok_or_else(|| PyTypeError::new_err("an fdkit loop has a __dict__"))?;
        let time = ld
            .get_item(o.names.time.bind(py))?
            .unwrap_or_else(|| py.None().into_bound(py));
        let selector = this.loop_slot(lp, 3, &o.names._selector)?;
        let selector_dict_len = attrs::instance_dict(&selector).map_or(usize::MAX, |d| d.len());
        // `_run_once` is this core's when install() put it there: a built-in method whose
        // `__self__` is the core.
        let mut run_once = None;
        if let Some(m) = ld.get_item(o.names._run_once.bind(py))? {
            let ours = m.getattr(intern!(py, "__self__")).is_ok_and(|s| s.is(slf))
                && m.getattr(intern!(py, "__name__"))
                    .is_ok_and(|n| n.eq("run_once").unwrap_or(false));
            if ours {
                run_once = Some(m);
            }
        }
        let sealed = Sealed {
            loop_dict_len: ld.len(),
            time: time.unbind(),
            run_once: run_once.map(Bound::unbind),
            selector: selector.unbind(),
            selector_dict_len,
        };
        let old = this.state.with(py, |s| s.sealed.replace(sealed));
        Self::release(py, old);
        Ok(())
    }

    /// asyncio's `_timer_cancelled_count`.
    #[getter]
    fn get_cancelled_count(&self, py: Python<'_>) -> usize {
        self.state.with(py, |s| s.cancelled)
    }

    #[setter]
    fn set_cancelled_count(&self, py: Python<'_>, value: usize) {
        self.state.with(py, |s| s.cancelled = value);
    }

    /// asyncio's `BaseEventLoop._run_once`: one full iteration; called by asyncio's
    /// `run_forever`, the iterations until `_stopping` is set (see `goes_on`).
    fn run_once(&self, py: Python<'_>) -> PyResult<()> {
        loop {
            self.iteration(py)?;
            if !self.goes_on(py)? {
                return Ok(());
            }
        }
    }

    /// Takes every timer out (asyncio's `close()` clears its list).
    fn clear(&self, py: Python<'_>) {
        let old = self.state.with(py, |s| s.timers.drain());
        Self::release(py, old);
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.loop_)?;
        visit.call(&self.fd_to_key)?;
        let s = &self.support;
        for f in [
            &s.report_error,
            &s.run_debug,
            &s.call_soon,
            &s.call_later,
            &s.call_at,
            &s.transport_type,
            &s.read_error,
        ] {
            visit.call(f)?;
        }
        if let Some(r) = &self.ring {
            visit.call(r)?;
        }
        // SAFETY: the collector runs with the GIL held and never inside a state scope (those
        // call no Python, so nothing in them can start a collection).
        let st = unsafe { &*self.state.0.get() };
        for (_, h) in st.timers.iter() {
            visit.call(h)?;
        }
        if let Some(z) = &st.sealed {
            visit.call(&z.time)?;
            visit.call(&z.selector)?;
            if let Some(m) = &z.run_once {
                visit.call(m)?;
            }
        }
        if let Some((r, a, p)) = &st.ready_methods {
            visit.call(r)?;
            visit.call(a)?;
            visit.call(p)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        // The timers hold the loop; the loop's dict (cleared by the collector) holds this.
        // SAFETY: as in __traverse__; the Handles are dropped after the state is left.
        let (old, methods) = unsafe {
            let st = &mut *self.state.0.get();
            (
                st.timers.drain(),
                (st.ready_methods.take(), st.sealed.take()),
            )
        };
        drop((old, methods));
    }
}

/// `bool(v)`, with the answers for `True`, `False` and `None` read off the object.
pub(super) fn truthy(v: &Bound<'_, PyAny>) -> PyResult<bool> {
    let p = v.as_ptr();
    // SAFETY: comparing with the interpreter's singletons, then PyObject_IsTrue on a live
    // object (-1 with an error set on failure).
    unsafe {
        if p == ffi::Py_True() {
            return Ok(true);
        }
        if p == ffi::Py_False() || p == ffi::Py_None() {
            return Ok(false);
        }
        match ffi::PyObject_IsTrue(p) {
            -1 => Err(PyErr::fetch(v.py())),
            r => Ok(r != 0),
        }
    }
}

/// `handle._cancelled`, through the slot for plain Handles (asyncio keeps a bool there; any
/// other value is asked for its truth, as `if handle._cancelled:` does).
fn is_cancelled(o: &AsyncioObjects, h: &Bound<'_, PyAny>) -> PyResult<bool> {
    if let Some(s) = o.slots.filter(|_| aio::is_plain_handle(o, h)) {
        // SAFETY: `h` is exactly Handle or TimerHandle, laid out as `s` says; the value is
        // borrowed from it (taken as a new reference before any Python runs).
        let v = unsafe { aio::slot(h.as_ptr(), s.cancelled) };
        if !v.is_null() {
            // SAFETY: a live object borrowed from the slot.
            let v = unsafe { Bound::from_borrowed_ptr(h.py(), v) };
            return truthy(&v);
        }
    }
    h.getattr(intern!(h.py(), "_cancelled"))?.is_truthy()
}

/// `timer._scheduled = value`.
fn set_scheduled(o: &AsyncioObjects, h: &Bound<'_, PyAny>, value: bool) -> PyResult<()> {
    if let Some(s) = o
        .slots
        .filter(|_| h.get_type().is(o.timer_type.bind(h.py())))
    {
        // SAFETY: `h` is exactly TimerHandle, laid out as `s` says; the GIL is held.
        unsafe {
            let v = if value {
                ffi::Py_True()
            } else {
                ffi::Py_False()
            };
            aio::set_slot(h.as_ptr(), s.scheduled, v);
        }
        return Ok(());
    }
    h.setattr(intern!(h.py(), "_scheduled"), value)
}

/// Runs `f` inside `ctx` as `Context.run` does (entered, then exited whatever `f` returns).
fn in_context(
    py: Python<'_>,
    ctx: &Bound<'_, PyAny>,
    f: impl FnOnce() -> PyResult<()>,
) -> PyResult<()> {
    // SAFETY: `ctx` is exactly a `contextvars.Context` (checked by the caller), alive for the
    // call; Enter fails (an error set) when the context is already entered, as `run` does.
    if unsafe { ffi::PyContext_Enter(ctx.as_ptr()) } < 0 {
        return Err(PyErr::fetch(py));
    }
    let r = f();
    // SAFETY: exits the context entered above, on this thread.
    if unsafe { ffi::PyContext_Exit(ctx.as_ptr()) } < 0 {
        let e = PyErr::fetch(py);
        return r.and(Err(e));
    }
    r
}

/// `method(*first, *rest, context=context)`: asyncio's own Python method, called with the
/// arguments the native one was given.
fn python_path<'py>(
    method: &Py<PyAny>,
    first: &[&Bound<'py, PyAny>],
    rest: &Bound<'py, PyTuple>,
    context: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = rest.py();
    let mut all: Vec<Bound<'py, PyAny>> = first.iter().map(|b| (*b).clone()).collect();
    all.extend(rest.iter());
    let kwargs = aio::context_kwargs(py, context)?;
    method.bind(py).call(PyTuple::new(py, all)?, Some(&kwargs))
}

fn libc_epollin() -> u32 {
    epoll::EventFlags::IN.bits()
}

fn libc_epollout() -> u32 {
    epoll::EventFlags::OUT.bits()
}
