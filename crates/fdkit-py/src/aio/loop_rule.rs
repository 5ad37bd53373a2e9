//! When a loop method may run natively: the rule, and asyncio's own methods it compares with.
//!
//! The rule (`docs/aio.md`, "What a program may change"): a native method runs only while
//! nothing it stands for was changed, that is while asyncio's own code would call exactly what
//! the native code does. A method "stands for" itself and the loop methods asyncio's version
//! calls ([`Method::deps`]); each must resolve, on the loop's class, to asyncio's own function
//! (or, for one of these natives, to this descriptor with asyncio's own function behind it in
//! the MRO), and none may be set on the loop instance. Otherwise asyncio's method runs: the
//! one `super(EventLoop, loop)` finds, so a patch of `BaseEventLoop.time` runs as on asyncio's
//! loop. What the answer depends on is watched cheaply: the loop's type and its version tag
//! (CPython gives a class a new tag whenever an attribute of it or of a base changes), and a
//! generation the loop's `__setattr__`/`__delattr__` advance when one of these names is set on
//! the instance. Calls with arguments the native code does not take (an unknown keyword, too
//! few arguments) also run asyncio's method, which raises what it raises.

use super::attrs;
use super::gil_cell::GilCell;
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple, PyType};

/// The methods the core runs natively, in the order of their bits in a mask.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Method {
    RunOnce = 0,
    CallSoon,
    CallAt,
    CallLater,
    Time,
    TimerHandleCancelled,
    CreateTask,
    GetDebug,
    CheckClosed,
}

impl Method {
    pub const ALL: [Method; 9] = [
        Method::RunOnce,
        Method::CallSoon,
        Method::CallAt,
        Method::CallLater,
        Method::Time,
        Method::TimerHandleCancelled,
        Method::CreateTask,
        Method::GetDebug,
        Method::CheckClosed,
    ];

    /// The attribute asyncio gives it.
    pub fn name(self) -> &'static str {
        match self {
            Method::RunOnce => "_run_once",
            Method::CallSoon => "call_soon",
            Method::CallAt => "call_at",
            Method::CallLater => "call_later",
            Method::Time => "time",
            Method::TimerHandleCancelled => "_timer_handle_cancelled",
            Method::CreateTask => "create_task",
            Method::GetDebug => "get_debug",
            Method::CheckClosed => "_check_closed",
        }
    }

    /// The loop methods asyncio's version calls (CPython 3.11-3.15's `base_events.py` and
    /// `selector_events.py`) that the native version does itself instead of calling.
    pub fn deps(self) -> &'static [&'static str] {
        match self {
            Method::RunOnce => &[
                "time",
                "_process_events",
                "_add_callback",
                "_remove_reader",
                "_remove_writer",
            ],
            // `Handle.__init__` asks `loop.get_debug()`.
            Method::CallSoon => &["_call_soon", "_check_closed", "get_debug"],
            Method::CallAt => &["_check_closed", "get_debug"],
            Method::CallLater => &["call_at", "time", "_check_closed", "get_debug"],
            Method::CreateTask => &["_check_closed"],
            Method::Time
            | Method::TimerHandleCancelled
            | Method::GetDebug
            | Method::CheckClosed => &[],
        }
    }

    pub fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// Every name a native method stands for: the natives, then the methods they call.
pub(super) const WATCHED: [&str; 14] = [
    "_run_once",
    "call_soon",
    "call_at",
    "call_later",
    "time",
    "_timer_handle_cancelled",
    "create_task",
    "get_debug",
    "_check_closed",
    "_call_soon",
    "_process_events",
    "_add_callback",
    "_remove_reader",
    "_remove_writer",
];

/// What the core reads once per change of the loop rather than once per iteration (asyncio
/// reads it in every `_run_once`).
pub(super) const CACHED_ATTRS: [&str; 1] = ["_clock_resolution"];

/// What the descriptors were installed on, once per process.
pub(super) struct LoopClasses {
    /// fdkit's `EventLoop`: the class whose dict holds the descriptors.
    pub event_loop: Py<PyType>,
    /// The descriptors, by [`Method`].
    pub descriptors: Vec<Py<PyAny>>,
    /// Offset of `EventLoop`'s `_core` slot.
    pub core_offset: isize,
    /// asyncio's own function for each watched name (None where the class attribute was not
    /// asyncio's when fdkit looked: that method never runs natively).
    pub asyncio: Vec<(Py<PyString>, Option<Py<PyAny>>)>,
    /// The last loop type found to be a subclass of `event_loop` (held, so that its address
    /// stays its own).
    pub last_type: GilCell<Option<Py<PyType>>>,
}

pub(super) static CLASSES: PyOnceLock<LoopClasses> = PyOnceLock::new();

pub(super) fn classes(py: Python<'_>) -> Option<&LoopClasses> {
    CLASSES.get(py)
}

impl LoopClasses {
    /// asyncio's own function for `name` (a watched name).
    pub fn asyncio_fn<'py>(&self, py: Python<'py>, name: &str) -> Option<&Bound<'py, PyAny>> {
        self.asyncio
            .iter()
            .find(|(n, _)| n.bind(py).to_str().is_ok_and(|s| s == name))
            .and_then(|(_, f)| f.as_ref().map(|f| f.bind(py)))
    }

    /// The descriptor of the native method named `name`, if it is one.
    pub fn descriptor<'py>(&self, py: Python<'py>, name: &str) -> Option<&Bound<'py, PyAny>> {
        Method::ALL
            .iter()
            .position(|m| m.name() == name)
            .map(|i| self.descriptors[i].bind(py))
    }
}

/// `name` as the classes after fdkit's `EventLoop` in `tp`'s MRO define it (what
/// `super(EventLoop, loop).name` finds), or asyncio's own where `EventLoop` is not in it.
pub(super) fn after_event_loop<'py>(
    py: Python<'py>,
    c: &LoopClasses,
    tp: &Bound<'py, PyType>,
    name: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let el = c.event_loop.bind(py);
    if !tp.is_subclass(el)? {
        return Ok(c.asyncio_fn(py, name.to_str()?).cloned());
    }
    attrs::after_in_mro(tp, el, name)
}

/// The last one-keyword names tuple a call was found to pass `name` with: `(tuple, name, the
/// reference that keeps the tuple alive)`, the two first as addresses.
static KWNAMES: GilCell<(usize, usize, Option<Py<PyTuple>>)> = GilCell::new((0, 0, None));

/// A call of one of the methods: the loop, the positional arguments, and the keywords
/// (their names, and their values, which follow the positional ones).
pub(super) struct Call<'a, 'py> {
    pub lp: Bound<'py, PyAny>,
    pub args: &'a [*mut ffi::PyObject],
    pub nargs: usize,
    pub kwnames: Option<Bound<'py, PyTuple>>,
}

impl<'py> Call<'_, 'py> {
    /// The `i`th positional argument.
    pub fn arg(&self, i: usize) -> Bound<'py, PyAny> {
        // SAFETY: `i < nargs`, checked by the caller; the arguments are borrowed references
        // alive for the call.
        unsafe { Bound::from_borrowed_ptr(self.lp.py(), self.args[i]) }
    }

    /// The positional arguments from `i` on, as a tuple.
    pub fn rest(&self, i: usize) -> PyResult<Bound<'py, PyTuple>> {
        let py = self.lp.py();
        PyTuple::new(py, (i..self.nargs).map(|k| self.arg(k)))
    }

    /// The value of the keyword `name`: `Ok(None)` when absent, `Err(())` when another keyword
    /// than those in `known` was given (the native method then does not run). Names are
    /// compared by identity first (CPython interns keyword names), then by value.
    pub fn keyword(
        &self,
        name: &Py<PyString>,
        known: &[&Py<PyString>],
    ) -> Result<Option<Bound<'py, PyAny>>, ()> {
        let Some(names) = &self.kwnames else {
            return Ok(None);
        };
        let py = self.lp.py();
        let value = |i: usize| {
            // SAFETY: the keyword values follow the `nargs` positional ones.
            unsafe { Bound::from_borrowed_ptr(py, self.args[self.nargs + i]) }
        };
        // asyncio's C Task passes `context=` with the same names tuple every time.
        if names.len() == 1
            && KWNAMES.with(py, |k| {
                k.0 == names.as_ptr() as usize && k.1 == name.as_ptr() as usize
            })
        {
            return Ok(Some(value(0)));
        }
        let mut found = None;
        for (i, k) in names.iter().enumerate() {
            let Some(n) = known
                .iter()
                .find(|n| k.as_ptr() == n.as_ptr())
                .or_else(|| known.iter().find(|n| k.eq(n.bind(py)).unwrap_or(false)))
            else {
                return Err(());
            };
            if n.as_ptr() == name.as_ptr() {
                found = Some(value(i));
            }
        }
        if names.len() == 1 && found.is_some() {
            // Kept alive by the cache, the tuple's address names it until it is replaced.
            let old = KWNAMES.with(py, |k| {
                std::mem::replace(
                    k,
                    (
                        names.as_ptr() as usize,
                        name.as_ptr() as usize,
                        Some(names.clone().unbind()),
                    ),
                )
            });
            drop(old);
        }
        Ok(found)
    }

    /// Whether the call has no keyword arguments.
    pub fn no_keywords(&self) -> bool {
        self.kwnames.as_ref().is_none_or(|k| k.is_empty())
    }
}

/// asyncio's method `m` called as the program called the native one: the method the loop's
/// MRO has after fdkit's `EventLoop` (bound to the loop as Python binds it).
pub(super) fn delegate(py: Python<'_>, m: Method, call: &Call<'_, '_>) -> PyResult<Py<PyAny>> {
    let c = classes(py)
        .ok_or_else(|| PyTypeError::new_err("fdkit.aio's loop methods are not installed"))?;
    let name = PyString::intern(py, m.name());
    let tp = call.lp.get_type();
    let Some(func) = after_event_loop(py, c, &tp, &name)? else {
        return Err(pyo3::exceptions::PyAttributeError::new_err(format!(
            "'{}' object has no attribute '{}'",
            tp.name()?,
            m.name()
        )));
    };
    attrs::call_as_method(
        &call.lp,
        &func,
        call.args,
        call.nargs,
        call.kwnames.as_ref(),
    )
    .map(Bound::unbind)
}

/// Set in a mask beside the methods' bits: `type(loop)._run_once` is the native one itself (not
/// a subclass's override calling it), so one call may run the iterations of `run_forever`.
pub(super) const RUN_ONCE_OWN: u16 = 1 << 15;

/// Which methods may run natively on `lp` now, as a mask of [`Method::bit`]s (and
/// [`RUN_ONCE_OWN`]).
pub(super) fn native_mask(py: Python<'_>, c: &LoopClasses, lp: &Bound<'_, PyAny>) -> PyResult<u16> {
    let tp = lp.get_type();
    let dict = attrs::instance_dict(lp);
    let on_instance = |name: &Bound<'_, PyString>| -> PyResult<bool> {
        match &dict {
            Some(d) => Ok(attrs::dict_get(d, name.as_any())?.is_some()),
            None => Ok(false),
        }
    };
    // Whether asyncio's code, calling `self.<name>`, would reach what the native code does:
    // the class resolves it to asyncio's function (or to the native descriptor with asyncio's
    // function behind it) and the instance does not shadow it.
    let mut intact = [false; WATCHED.len()];
    let mut behind = [false; WATCHED.len()];
    for (i, name) in WATCHED.iter().enumerate() {
        let Some(own) = c.asyncio_fn(py, name) else {
            continue;
        };
        let n = PyString::intern(py, name);
        behind[i] = after_event_loop(py, c, &tp, &n)?.is_some_and(|f| f.is(own));
        let top = tp.getattr(&n)?;
        let resolves = match c.descriptor(py, name) {
            Some(d) => top.is(d) && behind[i],
            None => top.is(own),
        };
        intact[i] = resolves && !on_instance(&n)?;
    }
    let index = |name: &str| WATCHED.iter().position(|w| *w == name);
    let mut mask = 0;
    for m in Method::ALL {
        let Some(i) = index(m.name()) else { continue };
        let n = PyString::intern(py, m.name());
        let ok = behind[i]
            && !on_instance(&n)?
            && m.deps().iter().all(|d| index(d).is_some_and(|j| intact[j]));
        if ok {
            mask |= m.bit();
            if m == Method::RunOnce && intact[i] {
                mask |= RUN_ONCE_OWN;
            }
        }
    }
    Ok(mask)
}
