//! The loop methods the core runs natively, as method descriptors on fdkit's `EventLoop` class.
//!
//! Each is a `native_method` of asyncio's `BaseEventLoop`: `loop.call_soon(cb)` is one C call
//! with the loop as `self` (no bound object, no reference from the loop to its core's
//! methods), and the method reads as asyncio's does (`loop.call_soon` is a bound method whose
//! `__qualname__` is `BaseEventLoop.call_soon`, its `__self__` the loop). Being
//! class attributes, they are what a subclass's `super()` reaches and what a patch of the
//! loop's class replaces, as asyncio's functions are. Each call runs the core's version where
//! `loop_rule` lets it, asyncio's otherwise.

use super::attrs;
use super::loop_core::LoopCore;
use super::loop_rule::{
    classes, delegate, Call, LoopClasses, Method, CACHED_ATTRS, CLASSES, WATCHED,
};
use super::native_method::{self, FastCall};
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple, PyType};

/// The core of `lp` when it is an fdkit loop whose core is installed.
fn core_of<'py>(
    py: Python<'py>,
    c: &LoopClasses,
    lp: &Bound<'py, PyAny>,
) -> Option<Bound<'py, LoopCore>> {
    // SAFETY: the subtype check (or the type last proven by it, kept alive by `last_type` so
    // that its address names it) proves `lp` has fdkit's EventLoop layout, whose `_core` slot
    // lives at `core_offset`; the value is borrowed from it.
    unsafe {
        let tp = ffi::Py_TYPE(lp.as_ptr());
        let known = c
            .last_type
            .with(py, |t| t.as_ref().is_some_and(|t| t.as_ptr() == tp.cast()));
        if !known {
            if ffi::PyType_IsSubtype(tp, c.event_loop.as_ptr().cast()) == 0 {
                return None;
            }
            let new = Some(lp.get_type().unbind());
            let old = c.last_type.with(py, |t| std::mem::replace(t, new));
            drop(old);
        }
        let core = super::asyncio_objects::slot(lp.as_ptr(), c.core_offset);
        if core.is_null() {
            return None;
        }
        Bound::from_borrowed_ptr(py, core)
            .cast_into::<LoopCore>()
            .ok()
    }
}

/// `loop.<method>` for the `index`th method: the bound method `lp`'s core keeps (made once; a
/// program taking `loop.call_soon`, as asyncio's C Task does before each call with a
/// `context`, gets it without an allocation), or null, no error set, for another object.
///
/// # Safety
/// The GIL is held; `descr` and `obj` are live objects.
unsafe fn bind(
    py: Python<'_>,
    descr: *mut ffi::PyObject,
    obj: *mut ffi::PyObject,
    index: usize,
) -> *mut ffi::PyObject {
    // SAFETY: the contract above.
    let (descr, lp) = unsafe {
        (
            Bound::from_borrowed_ptr(py, descr),
            Bound::from_borrowed_ptr(py, obj),
        )
    };
    let Some(c) = classes(py) else {
        return std::ptr::null_mut();
    };
    let Some(core) = core_of(py, c, &lp) else {
        return std::ptr::null_mut();
    };
    match core.get().bound(py, index, &descr, &lp) {
        Ok(Some(m)) => m.into_ptr(),
        Ok(None) => std::ptr::null_mut(),
        Err(e) => {
            e.restore(py);
            std::ptr::null_mut()
        }
    }
}

/// One native method's call: the core's version when the rule lets it run and it takes the
/// arguments given, asyncio's otherwise. Called through pyo3's fastcall trampoline, which
/// catches panics and tells pyo3 the thread is attached (so that a `Py` dropped here is
/// released at once, not queued).
///
/// # Safety
/// CPython's `METH_FASTCALL | METH_KEYWORDS` contract: `slf` is the object the descriptor
/// checked, `args` holds `nargs` positional values then one per name in `kwnames` (a tuple, or
/// null).
unsafe fn dispatch(
    py: Python<'_>,
    m: Method,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    let nargs = nargs as usize;
    // SAFETY: the contract above.
    let (lp, kwnames) = unsafe {
        (
            Bound::from_borrowed_ptr(py, slf),
            (!kwnames.is_null())
                .then(|| Bound::from_borrowed_ptr(py, kwnames).cast_into_unchecked::<PyTuple>()),
        )
    };
    let nkw = kwnames.as_ref().map_or(0, |k| k.len());
    let args: &[*mut ffi::PyObject] = if nargs + nkw == 0 {
        &[]
    } else {
        // SAFETY: `nargs + len(kwnames)` values, by the contract.
        unsafe { std::slice::from_raw_parts(args, nargs + nkw) }
    };
    let call = Call {
        lp,
        args,
        nargs,
        kwnames,
    };
    if let Some(c) = classes(py) {
        if let Some(core) = core_of(py, c, &call.lp) {
            if let Some(result) = core.get().native_call(py, m, &call)? {
                return Ok(result.into_ptr());
            }
        }
    }
    delegate(py, m, &call).map(Py::into_ptr)
}

macro_rules! native_methods {
    ($($method:ident => $tramp:ident, $doc:literal;)*) => {
        $(
            /// # Safety
            /// As [`dispatch`].
            unsafe fn $tramp(
                py: Python<'_>,
                slf: *mut ffi::PyObject,
                args: *const *mut ffi::PyObject,
                nargs: ffi::Py_ssize_t,
                kwnames: *mut ffi::PyObject,
            ) -> PyResult<*mut ffi::PyObject> {
                // SAFETY: pyo3's trampoline calls it as CPython called the method.
                unsafe { dispatch(py, Method::$method, slf, args, nargs, kwnames) }
            }
        )*

        /// Each method's doc and entry point (pyo3's fastcall trampoline around it), in
        /// [`Method::ALL`]'s order.
        const ENTRIES: [(&std::ffi::CStr, FastCall); 9] = [$(
            (
                $doc,
                pyo3::impl_::trampoline::get_trampoline_function!(
                    fastcall_cfunction_with_keywords,
                    $tramp
                ),
            ),
        )*];
    };
}

native_methods! {
    RunOnce => run_once_tramp,
        c"Run one full iteration of the event loop (asyncio's BaseEventLoop._run_once).";
    CallSoon => call_soon_tramp,
        c"Arrange for a callback to be called as soon as possible (asyncio's).";
    CallAt => call_at_tramp,
        c"Like call_later(), but uses an absolute time (asyncio's).";
    CallLater => call_later_tramp,
        c"Arrange for a callback to be called at a given time (asyncio's).";
    Time => time_tramp,
        c"Return the time according to the event loop's clock (asyncio's: time.monotonic()).";
    TimerHandleCancelled => timer_handle_cancelled_tramp,
        c"Notification that a TimerHandle has been cancelled (asyncio's).";
    CreateTask => create_task_tramp,
        c"Schedule a coroutine object; return a task object (asyncio's).";
    GetDebug => get_debug_tramp,
        c"Whether the loop runs in debug mode (asyncio's).";
    CheckClosed => check_closed_tramp,
        c"Raise RuntimeError if the loop is closed (asyncio's).";
}

/// Installs the native methods on ``event_loop`` (fdkit's ``EventLoop``, whose ``__slots__``
/// hold ``_core``), each a method descriptor of asyncio's ``BaseEventLoop``. Returns the
/// attribute names whose setting on a loop instance the loop must report to its core
/// (``LoopCore.changed``).
#[pyfunction]
pub fn install_loop_methods<'py>(event_loop: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyTuple>> {
    let py = event_loop.py();
    let base = py
        .import("asyncio.base_events")?
        .getattr("BaseEventLoop")?
        .cast_into::<PyType>()?;
    let Some([core_offset]) = attrs::slot_offsets(event_loop, event_loop, ["_core"])? else {
        return Err(PyTypeError::new_err(
            "EventLoop must keep _core in __slots__",
        ));
    };
    // asyncio's own functions, read before the descriptors shadow them, each proven asyncio's
    // by where its code lives (a patch made before fdkit was imported is not taken for it).
    let asyncio_dir = py
        .import("os.path")?
        .call_method1("dirname", (py.import("asyncio")?.getattr("__file__")?,))?;
    let mut asyncio = Vec::new();
    for name in WATCHED {
        let f = event_loop.getattr(name)?;
        let own = f
            .getattr("__code__")
            .and_then(|c| c.getattr("co_filename"))
            .and_then(|file| {
                let dir = py.import("os.path")?.call_method1("dirname", (file,))?;
                dir.eq(&asyncio_dir)
            })
            .unwrap_or(false)
            && f.getattr("__name__")
                .is_ok_and(|n| n.eq(name).unwrap_or(false));
        asyncio.push((PyString::intern(py, name).unbind(), own.then(|| f.unbind())));
    }
    let mut descriptors = Vec::new();
    for (i, (m, (doc, entry))) in Method::ALL.iter().zip(ENTRIES).enumerate() {
        let d = native_method::new(&base, m.name(), doc, entry, Some(bind), i)?;
        event_loop.setattr(m.name(), &d)?;
        descriptors.push(d.unbind());
    }
    let classes = LoopClasses {
        event_loop: event_loop.clone().unbind(),
        descriptors,
        core_offset,
        asyncio,
        last_type: super::gil_cell::GilCell::new(None),
    };
    if CLASSES.set(py, classes).is_err() {
        return Err(PyTypeError::new_err(
            "the loop methods are installed on one class only",
        ));
    }
    PyTuple::new(py, [&WATCHED[..], &CACHED_ATTRS[..]].concat())
}
