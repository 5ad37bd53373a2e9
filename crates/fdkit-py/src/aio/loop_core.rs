//! `LoopCore`: the per-iteration path of `fdkit.aio`'s event loop, native, on asyncio's own
//! objects.
//!
//! asyncio's `BaseEventLoop._run_once`, `call_soon`, `call_at`, `call_later`, `time`,
//! `create_task`, `get_debug`, `_check_closed` and `_timer_handle_cancelled` do here what they
//! do in CPython's `base_events.py`, step for step, without a Python frame, on the loop's own
//! state: the ready queue is the loop's `collections.deque` (`loop._ready`), the timer heap its
//! `_scheduled` list in `heapq`'s order (`timer_heap`), with `_timer_cancelled_count` beside
//! it; the Handles are asyncio's `Handle`/`TimerHandle` (made through their slots), readiness
//! comes from the selector's own epoll instance and its own key map, and each Handle runs as
//! `Handle._run` runs it: in its context, its exception handed to the loop's exception handler
//! inside an `except` block, as asyncio's is (`fdkit.aio._native`).
//!
//! `loop_methods` puts these on the loop's class; `loop_rule` says when they may run. What is
//! rare takes asyncio's own Python path, so it behaves as asyncio's does by being asyncio's
//! code: debug mode (slow-callback warnings, source tracebacks), a patched `Handle._run`, a
//! Handle subclass, a timer whose `when` is not a finite number, a method a program changed.
//!
//! Nothing here holds a borrow of the core's state across a call into Python: a callback may
//! call back into the core (a `call_soon` from a callback is the common case).

use super::asyncio_objects::{self as aio, objects, AsyncioObjects};
use super::attrs;
use super::gil_cell::GilCell;
use super::loop_rule::{self, classes, Call, Method, RUN_ONCE_OWN};
use super::reactor::PyReactor;
use super::socket_transport;
use super::timer_heap::{self as heap, Order};
use crate::errors::os_error;
use crate::gil::without_gil;
use pyo3::exceptions::{PyAttributeError, PyKeyboardInterrupt, PyRuntimeError, PySystemExit};
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

/// Indexes of the loop attributes fdkit's `EventLoop` keeps in `__slots__`.
const READY: usize = 0;
const STOPPING: usize = 1;
const DEBUG: usize = 2;
const SELECTOR: usize = 3;
const SCHEDULED: usize = 4;
const CANCELLED_COUNT: usize = 5;
const LOOP_SLOTS: [&str; 6] = [
    "_ready",
    "_stopping",
    "_debug",
    "_selector",
    "_scheduled",
    "_timer_cancelled_count",
];

pub(super) struct State {
    events: Events,
    /// What the native read path receives into (the bytes `data_received` gets are copied
    /// out of it once).
    pub(super) recv_buf: Vec<u8>,
    /// The ready deque and its bound `append` and `popleft` (see `ready_methods`).
    ready_methods: Option<(Py<PyAny>, Py<PyAny>, Py<PyAny>)>,
    /// What asyncio's Handle classes were found to be, and their version tags then.
    handles: Option<((u32, u32), HandleClasses)>,
    /// `process_events`' buffers: the fds and events polled, the keys found for them.
    polled: Vec<(RawFd, u32)>,
    keys: Vec<(Py<PyTuple>, u32)>,
    /// Which methods may run natively, and what that answer depends on.
    world: Option<World>,
    /// Advanced by `changed()`: a watched name was set on (or deleted from) the loop.
    generation: u64,
    /// Whether the selector is as the native wait stands for, and what that depends on.
    selector_seen: Option<SelectorSeen>,
    /// The loop's bound methods of the native methods, by `Method` index, made on first use.
    bound: [Option<Py<PyAny>>; 9],
}

/// The answer of `loop_rule::native_mask` for the loop as it was: its type, that type's
/// version tag, and the instance's generation.
#[derive(Clone, Copy)]
struct World {
    tp: usize,
    tag: u32,
    generation: u64,
    mask: u16,
    /// `loop._clock_resolution` (None when it is not a float).
    clock_resolution: Option<f64>,
}

/// What asyncio's Handle classes hold now.
#[derive(Clone, Copy)]
struct HandleClasses {
    /// `Handle._run` or `TimerHandle._run` is not asyncio's: every Handle runs through it.
    run_patched: bool,
    /// `Handle.__init__` and `TimerHandle.__init__` are asyncio's: Handles may be made
    /// through their slots.
    init_own: bool,
    /// `TimerHandle.__lt__` is asyncio's: plain timers may be compared natively.
    lt_own: bool,
}

/// The selector as the last check found it.
#[derive(Clone, Copy)]
struct SelectorSeen {
    selector: usize,
    tp: usize,
    tag: u32,
    dict_len: usize,
    ok: bool,
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
    /// The socket transport class whose reads run natively.
    transport_type: Py<PyAny>,
    /// `read_error(transport, exc, in_recv)`: asyncio's handling of a read path's exception.
    pub(super) read_error: Py<PyAny>,
    /// The code of asyncio's `BaseEventLoop.run_forever`, whose loop calls `_run_once` until
    /// `_stopping` is set (None when it is not a Python function).
    run_forever_code: Option<Py<PyAny>>,
    /// `passing(exc, handle_ran)`: the traceback entries of asyncio's `_run_once` for what a
    /// callback lets through.
    passing: Py<PyAny>,
    /// `(class, function)` pairs: the selector's `select` the native wait stands for is each
    /// class's `select` being that function.
    selects: Vec<(Py<PyAny>, Py<PyAny>)>,
}

/// The native iteration of one event loop. Private to `fdkit.aio`.
#[pyclass(frozen, module = "fdkit._fdkit", name = "LoopCore")]
pub struct LoopCore {
    loop_: Py<PyAny>,
    support: Support,
    /// The selector the core waits for, its epoll instance and its `_fd_to_key` dict (owned
    /// by the selector).
    selector: Py<PyAny>,
    epfd: RawFd,
    fd_to_key: Py<PyDict>,
    /// The io_uring engine's ring, which waits while the epoll instance has nothing.
    ring: Option<Py<PyReactor>>,
    /// Whether the loop's class lets its `__dict__` answer first (see `attrs`).
    loop_dict_ok: bool,
    /// Offsets of [`LOOP_SLOTS`], which fdkit's EventLoop keeps in `__slots__` (None for a
    /// subclass that redefines one of them).
    loop_slots: Option<[isize; 6]>,
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

/// The version tag of `tp` (0: none now).
fn version_tag(tp: *mut ffi::PyTypeObject) -> u32 {
    // SAFETY: reading a field of a live type object.
    unsafe { (*tp).tp_version_tag }
}

impl LoopCore {
    /// Which methods may run natively on the loop now (`loop_rule`), and
    /// `_clock_resolution`: computed again only when the loop's type, its version tag or its
    /// generation moved.
    fn world(&self, py: Python<'_>, lp: &Bound<'_, PyAny>) -> PyResult<(u16, Option<f64>)> {
        // SAFETY: the type of a live object.
        let tp = unsafe { ffi::Py_TYPE(lp.as_ptr()) };
        let tag = version_tag(tp);
        let seen = self.state.with(py, |s| {
            s.world.filter(|w| {
                tag != 0 && w.tp == tp as usize && w.tag == tag && w.generation == s.generation
            })
        });
        if let Some(w) = seen {
            return Ok((w.mask, w.clock_resolution));
        }
        let generation = self.state.with(py, |s| s.generation);
        let mask = match classes(py) {
            Some(c) => loop_rule::native_mask(py, c, lp)?,
            None => 0,
        };
        let clock_resolution = lp
            .getattr(intern!(py, "_clock_resolution"))
            .ok()
            .filter(|v| v.is_exact_instance_of::<PyFloat>())
            .and_then(|v| v.extract::<f64>().ok());
        // The lookups gave the type a tag if it had none (0: tags ran out; nothing is kept).
        let tag = version_tag(tp);
        let world = World {
            tp: tp as usize,
            tag,
            generation,
            mask,
            clock_resolution,
        };
        self.state
            .with(py, |s| s.world = (tag != 0).then_some(world));
        Ok((mask, clock_resolution))
    }

    /// Whether method `m` may run natively now.
    fn allowed(&self, py: Python<'_>, lp: &Bound<'_, PyAny>, m: Method) -> PyResult<bool> {
        Ok(self.world(py, lp)?.0 & m.bit() != 0)
    }

    /// Whether `loop._selector` is still the selector the core waits for, its class's `select`
    /// (and its bases') asyncio's, and its instance without a `select` of its own.
    fn selector_ok(&self, py: Python<'_>, selector: &Bound<'_, PyAny>) -> PyResult<bool> {
        if !selector.is(self.selector.bind(py)) {
            return Ok(false);
        }
        let tp = selector.get_type().as_type_ptr();
        let tag = version_tag(tp);
        let dict = attrs::instance_dict(selector);
        let dict_len = dict.as_ref().map_or(usize::MAX, |d| d.len());
        let seen = self.state.with(py, |s| {
            s.selector_seen.filter(|z| {
                tag != 0
                    && z.selector == selector.as_ptr() as usize
                    && z.tp == tp as usize
                    && z.tag == tag
                    && z.dict_len == dict_len
            })
        });
        if let Some(z) = seen {
            return Ok(z.ok);
        }
        let name = intern!(py, "select");
        let mut ok = match &dict {
            Some(d) => attrs::dict_get(d, name.as_any())?.is_none(),
            None => false,
        };
        for (cls, f) in &self.support.selects {
            ok &= cls.bind(py).getattr(name)?.is(f.bind(py));
        }
        ok &= !self.support.selects.is_empty();
        let z = SelectorSeen {
            selector: selector.as_ptr() as usize,
            tp: tp as usize,
            tag: version_tag(tp),
            dict_len,
            ok,
        };
        self.state.with(py, |s| s.selector_seen = Some(z));
        Ok(ok)
    }

    /// What asyncio's Handle classes hold now, looked at again only when either class changed
    /// since the last look (a class's version tag changes with any of its attributes).
    fn handle_classes(&self, py: Python<'_>, o: &AsyncioObjects) -> PyResult<HandleClasses> {
        let handle_type = o.handle_type.bind(py);
        let timer_type = o.timer_type.bind(py);
        let tags = || {
            (
                version_tag(handle_type.as_type_ptr()),
                version_tag(timer_type.as_type_ptr()),
            )
        };
        let now = tags();
        if now.0 != 0 && now.1 != 0 {
            if let Some((t, h)) = self.state.with(py, |s| s.handles) {
                if t == now {
                    return Ok(h);
                }
            }
        }
        let is = |cls: &Bound<'_, PyType>, name: &Bound<'_, PyString>, own: &Option<Py<PyAny>>| {
            PyResult::Ok(match own {
                Some(own) => cls.getattr(name)?.is(own.bind(py)),
                None => false,
            })
        };
        let run = o.names._run.bind(py);
        let init = intern!(py, "__init__");
        let lt = intern!(py, "__lt__");
        let h = HandleClasses {
            run_patched: !(is(handle_type, run, &o.handle_run)?
                && is(timer_type, run, &o.handle_run)?),
            init_own: is(handle_type, init, &o.handle_init)?
                && is(timer_type, init, &o.timer_init)?,
            lt_own: is(timer_type, lt, &o.timer_lt)?,
        };
        // The lookups gave both classes a tag if they had none.
        let tags = tags();
        self.state.with(py, |s| s.handles = Some((tags, h)));
        Ok(h)
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

    /// `loop.<LOOP_SLOTS[i]>`: its slot, or the long way.
    fn loop_slot<'py>(&self, lp: &Bound<'py, PyAny>, i: usize) -> PyResult<Bound<'py, PyAny>> {
        let py = lp.py();
        if let Some(v) = self.raw_slot(lp, i).filter(|v| !v.is_null()) {
            // SAFETY: a live object borrowed from the loop's slot, taken as a new reference.
            return Ok(unsafe { Bound::from_borrowed_ptr(py, v) });
        }
        let n = &objects(py)?.names;
        let name = [
            &n._ready,
            &n._stopping,
            &n._debug,
            &n._selector,
            &n._scheduled,
            &n._timer_cancelled_count,
        ][i];
        lp.getattr(name.bind(py))
    }

    /// What `loop.<LOOP_SLOTS[i]>`'s slot holds (null: unset), without a reference; None when
    /// the loop's class does not keep it in that slot.
    fn raw_slot(&self, lp: &Bound<'_, PyAny>, i: usize) -> Option<*mut ffi::PyObject> {
        let offsets = self.loop_slots?;
        // SAFETY: the offset is a `PyObject *` slot of the loop's class (slot_offsets).
        Some(unsafe { aio::slot(lp.as_ptr(), offsets[i]) })
    }

    /// `loop.<LOOP_SLOTS[i]> = value`.
    fn set_loop_slot(
        &self,
        lp: &Bound<'_, PyAny>,
        i: usize,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        match self.loop_slots {
            // SAFETY: the offset is a `PyObject *` slot of the loop's class (slot_offsets).
            Some(offsets) => unsafe {
                aio::set_slot(lp.as_ptr(), offsets[i], value.as_ptr());
                Ok(())
            },
            None => lp.setattr(LOOP_SLOTS[i], value),
        }
    }

    /// `loop._scheduled` when it is a list (the heap the native code keeps), else None.
    fn scheduled<'py>(&self, lp: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyList>>> {
        Ok(self
            .loop_slot(lp, SCHEDULED)?
            .cast_into_exact::<PyList>()
            .ok())
    }

    fn closed_check(&self, o: &AsyncioObjects, lp: &Bound<'_, PyAny>) -> PyResult<()> {
        if truthy(&self.loop_attr(lp, &o.names._closed)?)? {
            return Err(PyRuntimeError::new_err("Event loop is closed"));
        }
        Ok(())
    }

    fn debug(&self, lp: &Bound<'_, PyAny>) -> PyResult<bool> {
        // SAFETY: comparing with the interpreter's singleton.
        if self.raw_slot(lp, DEBUG) == Some(unsafe { ffi::Py_False() }) {
            return Ok(false);
        }
        truthy(&self.loop_slot(lp, DEBUG)?)
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

    /// Drops Python objects outside any state scope (their finalizers may call back in).
    fn release<T>(_py: Python<'_>, objs: T) {
        drop(objs);
    }

    /// asyncio's own `_run_once`, for one iteration the native code does not run.
    fn python_run_once(&self, py: Python<'_>, lp: &Bound<'_, PyAny>) -> PyResult<()> {
        let call = Call {
            lp: lp.clone(),
            args: &[],
            nargs: 0,
            kwnames: None,
        };
        loop_rule::delegate(py, Method::RunOnce, &call).map(drop)
    }

    /// asyncio's clean-up of cancelled timers at the start of `_run_once`, on the loop's
    /// `_scheduled` list and `_timer_cancelled_count`. False when a value is not what the
    /// native code reads (the iteration is then asyncio's).
    fn clean_timers(
        &self,
        py: Python<'_>,
        o: &AsyncioObjects,
        lp: &Bound<'_, PyAny>,
        order: Order<'_>,
    ) -> PyResult<bool> {
        let Some(timers) = self.scheduled(lp)? else {
            return Ok(false);
        };
        let Ok(cancelled) = self.loop_slot(lp, CANCELLED_COUNT)?.extract::<i64>() else {
            return Ok(false);
        };
        let len = timers.len();
        if len > MIN_SCHEDULED_TIMER_HANDLES
            && cancelled as f64 / len as f64 > MIN_CANCELLED_TIMER_HANDLES_FRACTION
        {
            let kept = PyList::empty(py);
            for h in timers.iter() {
                if is_cancelled(o, &h)? {
                    set_scheduled(o, &h, false)?;
                } else {
                    kept.append(h)?;
                }
            }
            heap::heapify(&kept, order)?;
            self.set_loop_slot(lp, SCHEDULED, &kept)?;
            self.set_loop_slot(lp, CANCELLED_COUNT, 0i64.into_pyobject(py)?.as_any())?;
            return Ok(true);
        }
        loop {
            let Some(timers) = self.scheduled(lp)? else {
                return Ok(false);
            };
            let Some(head) = heap::peek(&timers) else {
                break;
            };
            if !is_cancelled(o, &head)? {
                break;
            }
            let count = self.loop_slot(lp, CANCELLED_COUNT)?;
            let less = count.sub(1)?;
            self.set_loop_slot(lp, CANCELLED_COUNT, &less)?;
            let h = heap::pop(&timers, order)?;
            set_scheduled(o, &h, false)?;
        }
        Ok(true)
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
    /// iteration may wait, the ring waits for the epoll instance to become readable. A wait a
    /// signal ends early is resumed, after the signal handlers ran, for the time left, as
    /// `select.epoll.poll` resumes (PEP 475).
    fn ring_wait(
        &self,
        py: Python<'_>,
        ring: &Py<PyReactor>,
        timeout: Option<f64>,
    ) -> PyResult<usize> {
        if timeout == Some(0.0) {
            return self.epoll_wait(py, Some(0.0));
        }
        let reactor = ring.get();
        let deadline = timeout.map(|t| monotonic() + t.max(0.0));
        loop {
            let limit = deadline.map(|d| Duration::from_secs_f64((d - monotonic()).max(0.0)));
            let n = if reactor.reads_epoll() {
                let mut events = self.take_events(py);
                let n = reactor.epoll_wait(py, self.epfd, &mut events, self.max_events(py), limit);
                self.state.with(py, |s| s.events = events);
                n?
            } else {
                let n = self.epoll_wait(py, Some(0.0))?;
                if n > 0 {
                    return Ok(n);
                }
                reactor.wait(py, self.epfd, limit)?;
                self.epoll_wait(py, Some(0.0))?
            };
            py.check_signals()?;
            if n > 0 || deadline.is_some_and(|d| monotonic() >= d) {
                return Ok(n);
            }
        }
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

    /// One iteration of asyncio's `_run_once`, or asyncio's own `_run_once` where the
    /// native one would not do what it does.
    fn iteration(&self, py: Python<'_>) -> PyResult<()> {
        let o = objects(py)?;
        let lp = self.loop_.bind(py);
        let (mask, clock_resolution) = self.world(py, lp)?;
        let selector = self.loop_slot(lp, SELECTOR)?;
        let Some(clock_resolution) = clock_resolution else {
            return self.python_run_once(py, lp);
        };
        if mask & Method::RunOnce.bit() == 0
            || (!selector.is_none() && !self.selector_ok(py, &selector)?)
        {
            return self.python_run_once(py, lp);
        }
        let classes = self.handle_classes(py, o)?;
        let order = Order {
            o,
            native_lt: classes.lt_own,
        };
        if !self.clean_timers(py, o, lp, order)? {
            return self.python_run_once(py, lp);
        }
        let Some(timers) = self.scheduled(lp)? else {
            return self.python_run_once(py, lp);
        };
        let ready = self.loop_slot(lp, READY)?;
        let timeout = if truthy(&ready)? || truthy(&self.loop_slot(lp, STOPPING)?)? {
            Some(0.0)
        } else if let Some(head) = heap::peek(&timers) {
            // A `when` that is not a finite number (NaN, infinities, a Decimal...) gets
            // asyncio's arithmetic, which differs between versions.
            match heap::plain_when(o, head.as_ptr()) {
                Some(when) if when.is_finite() => {
                    Some((when - monotonic()).clamp(0.0, MAXIMUM_SELECT_TIMEOUT))
                }
                _ => return self.python_run_once(py, lp),
            }
        } else {
            None
        };
        drop(timers);

        // A closed loop's selector is gone (asyncio's close() sets it to None), and with it the
        // epoll fd this core would wait on: fail as asyncio's `self._selector.select` fails.
        if selector.is_none() {
            return Err(PyAttributeError::new_err(
                "'NoneType' object has no attribute 'select'",
            ));
        }
        let n = match &self.ring {
            Some(ring) => self.ring_wait(py, ring, timeout)?,
            None => self.epoll_wait(py, timeout)?,
        };
        self.process_events(py, lp, &ready, n)?;

        // 'later' callbacks that are due.
        let now = monotonic();
        let end_time = now
            + if self.end_time_ulp {
                clock_resolution.max(ulp(now))
            } else {
                clock_resolution
            };
        let mut end: Option<Bound<'_, PyFloat>> = None;
        loop {
            // asyncio reads `self._scheduled` again for each timer.
            let Some(timers) = self.scheduled(lp)? else {
                return Err(PyRuntimeError::new_err(
                    "loop._scheduled is no longer a list",
                ));
            };
            let Some(head) = heap::peek(&timers) else {
                break;
            };
            let not_due = match heap::plain_when(o, head.as_ptr()) {
                Some(when) => when >= end_time,
                None => {
                    let end = end.get_or_insert_with(|| PyFloat::new(py, end_time));
                    head.getattr(o.names._when.bind(py))?.ge(&*end)?
                }
            };
            if not_due {
                break;
            }
            let h = heap::pop(&timers, order)?;
            set_scheduled(o, &h, false)?;
            let ready = self.loop_slot(lp, READY)?;
            self.ready_methods(&ready)?.0.call1((&h,))?;
        }

        // This is the only place where callbacks are called; those they schedule run at the
        // next iteration. asyncio reads `self._ready` for each one (a callback may replace
        // it) and runs the signal handlers between two callbacks.
        let ready = self.loop_slot(lp, READY)?;
        let ntodo = ready.len()?;
        let (mut ready_ptr, mut popleft) = (ready.as_ptr(), self.ready_methods(&ready)?.1);
        drop(ready);
        for i in 0..ntodo {
            if i > 0 {
                check_signals(py).map_err(|e| self.passing(py, e, false))?;
            }
            // `popleft` holds the deque it was bound to, so a pointer equal to it is that
            // deque still.
            if self.raw_slot(lp, READY) != Some(ready_ptr) {
                let ready = self.loop_slot(lp, READY)?;
                ready_ptr = ready.as_ptr();
                popleft = self.ready_methods(&ready)?.1;
            }
            let h = popleft.call0()?;
            if is_cancelled(o, &h)? {
                continue;
            }
            // What a callback lets through leaves with asyncio's traceback entries.
            if self.debug(lp)? {
                let ran = self.support.run_debug.bind(py).call1((lp, &h));
                ran.map_err(|e| self.passing(py, e, false))?;
            } else if classes.run_patched {
                let ran = h.call_method0(o.names._run.bind(py));
                ran.map_err(|e| self.passing(py, e, false))?;
            } else {
                self.run_handle(py, o, &h)
                    .map_err(|e| self.passing(py, e, true))?;
            }
        }
        Ok(())
    }

    /// `e` (SystemExit or KeyboardInterrupt leaving the iteration) with the traceback entries
    /// asyncio's `_run_once` (and `Handle._run`, where `handle_ran`) would have given it.
    fn passing(&self, py: Python<'_>, e: PyErr, handle_ran: bool) -> PyErr {
        let exc = e.into_value(py);
        if let Err(other) = self.support.passing.bind(py).call1((&exc, handle_ran)) {
            return other;
        }
        PyErr::from_value(exc.into_bound(py).into_any())
    }

    /// Whether `run_once` runs another iteration before it returns: it was called by asyncio's
    /// `run_forever` (whose loop does nothing between iterations but read `_stopping`), the
    /// loop is not stopping, and `_run_once` is still the native one, with nothing it stands
    /// for changed (a program may patch the class from a callback; `run_forever` then calls
    /// the replacement). Anything else, a test's own call of `loop._run_once()` included, gets
    /// exactly one iteration. Pending signal handlers run here as Python runs them between
    /// the calls of `run_forever`'s loop.
    fn goes_on(&self, py: Python<'_>) -> PyResult<bool> {
        let lp = self.loop_.bind(py);
        if truthy(&self.loop_slot(lp, STOPPING)?)? {
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
        let mask = self.world(py, lp)?.0;
        if mask & Method::RunOnce.bit() == 0 || mask & RUN_ONCE_OWN == 0 {
            return Ok(false);
        }
        py.check_signals()?;
        Ok(true)
    }

    /// asyncio's `_run_once`: one full iteration; called by asyncio's `run_forever`, the
    /// iterations until `_stopping` is set (see `goes_on`).
    fn run_once(&self, py: Python<'_>) -> PyResult<()> {
        loop {
            self.iteration(py)?;
            if !self.goes_on(py)? {
                return Ok(());
            }
        }
    }

    /// A new TimerHandle for `callback(*args)` at `when` (the object a program gave, or the
    /// float `call_later` computed), pushed on the heap as `call_at` pushes it; None where
    /// asyncio's `call_at` must run instead.
    #[allow(clippy::too_many_arguments)]
    fn schedule<'py>(
        &self,
        py: Python<'py>,
        o: &AsyncioObjects,
        classes: HandleClasses,
        when: &Bound<'py, PyAny>,
        callback: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        context: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let lp = self.loop_.bind(py);
        let Some(timers) = self.scheduled(lp)? else {
            return Ok(None);
        };
        let timer = aio::new_handle(py, o, callback, args, lp, context, Some(when))?;
        let order = Order {
            o,
            native_lt: classes.lt_own,
        };
        heap::push(&timers, order, &timer)?;
        set_scheduled(o, &timer, true)?;
        Ok(Some(timer))
    }

    /// asyncio's `call_soon`, `call_at` or `call_later` (`m`) with the call's arguments;
    /// None where asyncio's own must run.
    fn call_method<'py>(
        &self,
        py: Python<'py>,
        m: Method,
        call: &Call<'_, 'py>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let first = if m == Method::CallSoon { 1 } else { 2 };
        if call.nargs < first {
            return Ok(None);
        }
        let o = objects(py)?;
        let Ok(context) = call.keyword(&o.names.context, &[&o.names.context]) else {
            return Ok(None);
        };
        let context = context.filter(|c| !c.is_none());
        let lp = &call.lp;
        // asyncio checks that the loop is open first, then looks at debug mode.
        self.closed_check(o, lp)?;
        if self.debug(lp)? {
            return Ok(None);
        }
        let classes = self.handle_classes(py, o)?;
        if !classes.init_own {
            return Ok(None);
        }
        let callback = call.arg(first - 1);
        let args = call.rest(first)?;
        match m {
            Method::CallSoon => {
                let handle = aio::new_handle(py, o, &callback, &args, lp, context.as_ref(), None)?;
                let ready = self.loop_slot(lp, READY)?;
                self.ready_methods(&ready)?.0.call1((&handle,))?;
                Ok(Some(handle))
            }
            Method::CallAt => {
                let when = call.arg(0);
                if when.is_none() || plain_number(&when).is_none() {
                    return Ok(None);
                }
                self.schedule(py, o, classes, &when, &callback, &args, context.as_ref())
            }
            _ => {
                let delay = call.arg(0);
                let Some(d) = plain_number(&delay) else {
                    return Ok(None);
                };
                let when = PyFloat::new(py, monotonic() + d);
                self.schedule(
                    py,
                    o,
                    classes,
                    when.as_any(),
                    &callback,
                    &args,
                    context.as_ref(),
                )
            }
        }
    }

    /// asyncio's `create_task`: a `Task` of `asyncio.tasks`; None (asyncio's own) for a task
    /// factory, debug mode (a source traceback to trim) or other keywords (3.14's
    /// `eager_start`, whatever a task factory takes).
    fn create_task<'py>(
        &self,
        py: Python<'py>,
        call: &Call<'_, 'py>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        if call.nargs != 1 {
            return Ok(None);
        }
        let o = objects(py)?;
        let known = [&o.names.name, &o.names.context];
        let (Ok(name), Ok(context)) = (
            call.keyword(&o.names.name, &known),
            call.keyword(&o.names.context, &known),
        ) else {
            return Ok(None);
        };
        let lp = &call.lp;
        self.closed_check(o, lp)?;
        let factory = self.loop_attr(lp, &o.names._task_factory)?;
        if !factory.is_none() || self.debug(lp)? {
            return Ok(None);
        }
        let kw = PyDict::new(py);
        kw.set_item(o.names.loop_.bind(py), lp)?;
        kw.set_item(o.names.name.bind(py), name)?;
        kw.set_item(o.names.context.bind(py), context)?;
        let task = py
            .import(intern!(py, "asyncio.tasks"))?
            .getattr(o.names.Task.bind(py))?;
        task.call((call.arg(0),), Some(&kw)).map(Some)
    }

    /// asyncio's `_timer_handle_cancelled(handle)`.
    fn timer_handle_cancelled(
        &self,
        py: Python<'_>,
        lp: &Bound<'_, PyAny>,
        handle: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        if handle.getattr(intern!(py, "_scheduled"))?.is_truthy()? {
            let count = self.loop_slot(lp, CANCELLED_COUNT)?;
            let more = count.add(1)?;
            self.set_loop_slot(lp, CANCELLED_COUNT, &more)?;
        }
        Ok(())
    }

    /// `loop.<method>` for the `index`th native method `descr`: one bound method per loop,
    /// kept (None for another object than this core's loop).
    pub(super) fn bound<'py>(
        &self,
        py: Python<'py>,
        index: usize,
        descr: &Bound<'py, PyAny>,
        lp: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        if !lp.is(self.loop_.bind(py)) || index >= 9 {
            return Ok(None);
        }
        let kept = self
            .state
            .with(py, |s| s.bound[index].as_ref().map(|m| m.clone_ref(py)));
        if let Some(m) = kept {
            return Ok(Some(m.into_bound(py)));
        }
        let m = super::native_method::bound_method(descr, lp)?;
        let new = Some(m.clone().unbind());
        let old = self
            .state
            .with(py, |s| std::mem::replace(&mut s.bound[index], new));
        Self::release(py, old);
        Ok(Some(m))
    }

    /// Method `m` called as `call` says, natively: its result, or None where asyncio's must
    /// run (`loop_rule`, arguments the native one does not take, a rare path).
    pub(super) fn native_call(
        &self,
        py: Python<'_>,
        m: Method,
        call: &Call<'_, '_>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let lp = &call.lp;
        if !lp.is(self.loop_.bind(py)) || !self.allowed(py, lp, m)? {
            return Ok(None);
        }
        let bare = call.nargs == 0 && call.no_keywords();
        let out: Option<Bound<'_, PyAny>> = match m {
            Method::CallSoon | Method::CallAt | Method::CallLater => {
                self.call_method(py, m, call)?
            }
            Method::Time if bare => Some(PyFloat::new(py, monotonic()).into_any()),
            Method::RunOnce if bare => {
                self.run_once(py)?;
                Some(py.None().into_bound(py))
            }
            Method::GetDebug if bare => Some(self.loop_slot(lp, DEBUG)?),
            Method::CheckClosed if bare => {
                self.closed_check(objects(py)?, lp)?;
                Some(py.None().into_bound(py))
            }
            Method::TimerHandleCancelled if call.nargs == 1 && call.no_keywords() => {
                self.timer_handle_cancelled(py, lp, &call.arg(0))?;
                Some(py.None().into_bound(py))
            }
            Method::CreateTask => self.create_task(py, call)?,
            _ => None,
        };
        Ok(out.map(Bound::unbind))
    }
}

#[pymethods]
impl LoopCore {
    /// The core of ``loop``: ``selector`` is the loop's epoll selector, ``ring`` the io_uring
    /// engine's reactor (None on epoll), ``support`` the module with the Python paths,
    /// ``owner`` the class whose ``__slots__`` hold the attributes the iteration reads,
    /// ``selects`` the ``(class, function)`` pairs the native wait stands for (each class's
    /// ``select`` must be that function).
    #[new]
    #[pyo3(signature = (loop_, selector, ring, support, owner, selects))]
    fn new(
        py: Python<'_>,
        loop_: &Bound<'_, PyAny>,
        selector: &Bound<'_, PyAny>,
        ring: Option<Py<PyReactor>>,
        support: &Bound<'_, PyAny>,
        owner: &Bound<'_, PyType>,
        selects: Vec<(Py<PyAny>, Py<PyAny>)>,
    ) -> PyResult<Self> {
        objects(py)?;
        // A selector the core cannot wait on (not an epoll selector: `selects` is then empty and
        // each iteration is asyncio's) has no epoll fd to read.
        let epfd: RawFd = match selector.getattr("_selector") {
            Ok(ep) if !selects.is_empty() => ep.call_method0("fileno")?.extract()?,
            _ => -1,
        };
        let fd_to_key = match selector.getattr("_fd_to_key") {
            Ok(map) if !selects.is_empty() => map.cast_into::<PyDict>()?.unbind(),
            _ => PyDict::new(py).unbind(),
        };
        let base = py.import("asyncio.base_events")?.getattr("BaseEventLoop")?;
        let names = &objects(py)?.names;
        let loop_dict_ok =
            attrs::dict_first_ok(&loop_.get_type(), &[&names._closed, &names._task_factory])?;
        let loop_slots = attrs::slot_offsets(&loop_.get_type(), owner, LOOP_SLOTS)?;
        Ok(LoopCore {
            loop_: loop_.clone().unbind(),
            support: Support {
                report_error: support.getattr("report_error")?.unbind(),
                run_debug: support.getattr("run_debug")?.unbind(),
                passing: support.getattr("passing")?.unbind(),
                transport_type: support.getattr("SocketTransport")?.unbind(),
                read_error: support.getattr("read_error")?.unbind(),
                run_forever_code: base
                    .getattr("run_forever")?
                    .getattr("__code__")
                    .ok()
                    .map(Bound::unbind),
                selects,
            },
            selector: selector.clone().unbind(),
            epfd,
            fd_to_key,
            ring,
            loop_dict_ok,
            loop_slots,
            end_time_ulp: support.getattr("END_TIME_ULP")?.extract()?,
            state: GilCell::new(State {
                events: Events(Vec::new()),
                recv_buf: Vec::new(),
                ready_methods: None,
                handles: None,
                polled: Vec::new(),
                keys: Vec::new(),
                world: None,
                generation: 0,
                selector_seen: None,
                bound: Default::default(),
            }),
        })
    }

    /// Tells the core that a name it watches was set on or deleted from the loop instance
    /// (the loop's ``__setattr__`` and ``__delattr__`` call this).
    fn changed(&self, py: Python<'_>) {
        self.state.with(py, |s| s.generation += 1);
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.loop_)?;
        visit.call(&self.fd_to_key)?;
        visit.call(&self.selector)?;
        let s = &self.support;
        for f in [
            &s.report_error,
            &s.run_debug,
            &s.passing,
            &s.transport_type,
            &s.read_error,
        ] {
            visit.call(f)?;
        }
        for (c, f) in &s.selects {
            visit.call(c)?;
            visit.call(f)?;
        }
        if let Some(r) = &self.ring {
            visit.call(r)?;
        }
        // SAFETY: the collector runs with the GIL held and never inside a state scope (those
        // call no Python, so nothing in them can start a collection).
        let st = unsafe { &*self.state.0.get() };
        if let Some((r, a, p)) = &st.ready_methods {
            visit.call(r)?;
            visit.call(a)?;
            visit.call(p)?;
        }
        for m in st.bound.iter().flatten() {
            visit.call(m)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        // SAFETY: as in __traverse__; the objects are dropped after the state is left.
        let (methods, bound) = unsafe {
            let st = &mut *self.state.0.get();
            (st.ready_methods.take(), std::mem::take(&mut st.bound))
        };
        drop((methods, bound));
    }
}

/// `PyErr_CheckSignals()`: the pending signal handlers run, the first exception one raised.
fn check_signals(py: Python<'_>) -> PyResult<()> {
    // SAFETY: called with the GIL held; -1 with an error set when a handler raised.
    if unsafe { ffi::PyErr_CheckSignals() } < 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(())
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

fn libc_epollin() -> u32 {
    epoll::EventFlags::IN.bits()
}

fn libc_epollout() -> u32 {
    epoll::EventFlags::OUT.bits()
}
