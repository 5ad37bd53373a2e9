//! asyncio's own objects, as the native loop uses them: the `Handle` and `TimerHandle` classes
//! (made and read through their slots, as their `__init__` and methods would), the functions a
//! program may patch (`Handle._run`), the socket transport's read path, and the bound-method
//! layout that says which callback a reader Handle holds.
//!
//! Everything is looked up once per process from the running interpreter's `asyncio`, and
//! checked: where a Python version lays a class out otherwise than this file expects (another
//! slot, a slot of another kind), [`AsyncioObjects::slots`] is None and the loop makes Handles
//! by calling the class, as asyncio does, at Python's speed.

use super::attrs::Names;
pub use super::attrs::{set_slot, slot};
use super::gil_cell::GilCell;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyInt, PyModule, PyString, PyTuple, PyType};
use std::os::fd::RawFd;

/// The slots of `Handle` and `TimerHandle` (CPython 3.11-3.13's `events.py`), by byte offset in
/// the object: `PyMemberDef` offsets of `T_OBJECT_EX` members.
#[derive(Clone, Copy)]
pub struct Slots {
    pub callback: isize,
    pub args: isize,
    pub cancelled: isize,
    pub loop_: isize,
    pub source_traceback: isize,
    pub repr: isize,
    pub context: isize,
    pub scheduled: isize,
    pub when: isize,
}

/// `PyMethodObject` of CPython's `Include/cpython/classobject.h` (unchanged since 3.8): a bound
/// method, read to tell which function a reader Handle calls on which object.
#[repr(C)]
struct PyMethodObject {
    ob_base: ffi::PyObject,
    im_func: *mut ffi::PyObject,
    im_self: *mut ffi::PyObject,
}

/// The objects, once per process.
pub struct AsyncioObjects {
    pub handle_type: Py<PyType>,
    pub timer_type: Py<PyType>,
    /// `Handle._run` as asyncio defines it: when the class attribute is another object, a
    /// program patched it (slow-callback detectors do) and every Handle runs through it. None
    /// when it was patched before fdkit first looked (its code is not asyncio's): every Handle
    /// then runs through whatever `_run` is.
    pub handle_run: Option<Py<PyAny>>,
    /// `Handle.__init__`, `TimerHandle.__init__` and `TimerHandle.__lt__` as asyncio defines
    /// them (None when replaced before fdkit looked): while the classes hold these, Handles
    /// are made through their slots and timers compared by their `_when`.
    pub handle_init: Option<Py<PyAny>>,
    pub timer_init: Option<Py<PyAny>>,
    pub timer_lt: Option<Py<PyAny>>,
    /// `types.MethodType`.
    method_type: Py<PyType>,
    /// `_SelectorSocketTransport._read_ready` and `._read_ready__data_received`.
    pub read_ready: Py<PyAny>,
    pub read_ready_data: Py<PyAny>,
    /// `_SelectorSocketTransport.write`: what the native write falls back to.
    pub transport_write: Py<PyAny>,
    /// `socket.socket`: a transport's socket of exactly this class is read and written with
    /// recv(2)/send(2) directly; a subclass's own `recv`/`send` are called, as asyncio calls them.
    pub socket_type: Py<PyType>,
    pub slots: Option<Slots>,
    /// Where `_socket.socket` keeps its fd and its timeout, when this interpreter's layout was
    /// proven at load (see [`read_sock_layout`]).
    pub sock_layout: Option<SockLayout>,
    /// The attribute names the native paths read.
    pub names: Names,
    /// The socket transport class whose `write` is native, and how its instances' attributes
    /// are read (see `attrs`): set by `install_write`.
    pub transport_class: PyOnceLock<TransportClass>,
}

/// Byte offsets in `_socket.socket`'s C struct (`PySocketSockObject`: `sock_fd`, then family,
/// type and proto, then `sock_timeout` in nanoseconds, -1 for blocking).
#[derive(Clone, Copy)]
pub struct SockLayout {
    fd: isize,
    timeout: isize,
}

impl SockLayout {
    /// The fd a socket's `recv` and `send` would use (-1 once closed) when the socket is in
    /// non-blocking mode (timeout 0.0); None when it waits (asyncio's Python path then runs,
    /// with the socket's own timeout handling).
    pub fn nonblocking_fd(&self, sock: &Bound<'_, PyAny>) -> Option<RawFd> {
        // SAFETY: `sock` is an instance of `socket.socket` (the caller checked its class), a
        // `PySocketSockObject` whose fields sit at the offsets `read_sock_layout` proved.
        unsafe {
            let p = sock.as_ptr().cast::<u8>();
            let timeout = *p.offset(self.timeout).cast::<i64>();
            (timeout == 0).then(|| *p.offset(self.fd).cast::<i32>())
        }
    }
}

/// Finds `sock_fd` and `sock_timeout` in `_socket.socket`'s struct, and proves them on a real
/// socket: its fd right after the object header (where every CPython since 3.0 has it), and the
/// one 8-byte field after family, type and proto that reads 0, then 1.5 s in nanoseconds, then
/// a negative time as the timeout is set to 0.0, 1.5 and None (CPython 3.11 has an error-handler pointer
/// before it). None where any of it does not hold: the attribute path is then taken.
fn read_sock_layout(py: Python<'_>) -> PyResult<Option<SockLayout>> {
    let socket = py.import("socket")?;
    let sock = socket
        .getattr("socket")?
        .call1((socket.getattr("AF_INET")?, socket.getattr("SOCK_STREAM")?))?;
    let head = std::mem::size_of::<ffi::PyObject>() as isize;
    // SAFETY: reading the type's basic size.
    let basic = unsafe { (*sock.get_type().as_type_ptr()).tp_basicsize };
    let read_i64 = |off: isize| -> i64 {
        // SAFETY: `off + 8 <= tp_basicsize` of this live object (the loop below bounds it).
        unsafe { *sock.as_ptr().cast::<u8>().offset(off).cast::<i64>() }
    };
    let fd: i32 = sock.call_method0("fileno")?.extract()?;
    // SAFETY: the header is followed by at least the fd (`basic` is checked first).
    let fd_ok = basic >= head + 4
        && unsafe { *sock.as_ptr().cast::<u8>().offset(head).cast::<i32>() } == fd;
    let mut found = None;
    if fd_ok {
        let mut candidates: Vec<isize> = (head + 16..=basic - 8).step_by(8).collect();
        // None (blocking) is stored as a negative time (-1 s in CPython 3.11-3.13).
        type Check = fn(i64) -> bool;
        let checks: [(Option<f64>, Check); 3] = [
            (Some(0.0), |v| v == 0),
            (Some(1.5), |v| v == 1_500_000_000),
            (None, |v| v < 0),
        ];
        for (secs, holds) in checks {
            sock.call_method1("settimeout", (secs,))?;
            candidates.retain(|&off| holds(read_i64(off)));
        }
        if let [off] = candidates[..] {
            found = Some(SockLayout {
                fd: head,
                timeout: off,
            });
        }
    }
    sock.call_method0("close")?;
    Ok(found)
}

static OBJECTS: PyOnceLock<AsyncioObjects> = PyOnceLock::new();

/// The objects (looked up on first use).
pub fn objects(py: Python<'_>) -> PyResult<&AsyncioObjects> {
    OBJECTS.get_or_try_init(py, || AsyncioObjects::load(py))
}

impl AsyncioObjects {
    fn load(py: Python<'_>) -> PyResult<Self> {
        let events = py.import("asyncio.events")?;
        let handle_type = events.getattr("Handle")?.cast_into::<PyType>()?;
        let timer_type = events.getattr("TimerHandle")?.cast_into::<PyType>()?;
        let selector_events = py.import("asyncio.selector_events")?;
        let transport = selector_events
            .getattr("_SelectorSocketTransport")?
            .cast_into::<PyType>()?;
        // asyncio's own functions (a replacement made before fdkit looked is not taken for
        // one: None then, which no callable is, so the native path never stands for it).
        let own_transport = |name: &str| -> PyResult<Py<PyAny>> {
            Ok(asyncios_own(
                &selector_events,
                &transport,
                "_SelectorSocketTransport",
                name,
            )?
            .unwrap_or_else(|| py.None()))
        };
        let slots = read_slots(&handle_type, &timer_type)?;
        Ok(AsyncioObjects {
            handle_run: asyncios_own(&events, &handle_type, "Handle", "_run")?,
            handle_init: asyncios_own(&events, &handle_type, "Handle", "__init__")?,
            timer_init: asyncios_own(&events, &timer_type, "TimerHandle", "__init__")?,
            timer_lt: asyncios_own(&events, &timer_type, "TimerHandle", "__lt__")?,
            handle_type: handle_type.unbind(),
            timer_type: timer_type.unbind(),
            method_type: py
                .import("types")?
                .getattr("MethodType")?
                .cast_into::<PyType>()?
                .unbind(),
            read_ready: own_transport("_read_ready")?,
            read_ready_data: own_transport("_read_ready__data_received")?,
            transport_write: own_transport("write")?,
            socket_type: py
                .import("socket")?
                .getattr("socket")?
                .cast_into::<PyType>()?
                .unbind(),
            slots,
            sock_layout: read_sock_layout(py)?,
            names: Names::new(py),
            transport_class: PyOnceLock::new(),
        })
    }

    /// `(function, self)` of a bound method; None for any other callable.
    pub fn bound_method(
        &self,
        obj: &Bound<'_, PyAny>,
    ) -> Option<(*mut ffi::PyObject, *mut ffi::PyObject)> {
        if !obj.get_type().is(self.method_type.bind(obj.py())) {
            return None;
        }
        // SAFETY: `obj` is exactly `types.MethodType`, whose instances are `PyMethodObject`s;
        // the pointers are borrowed from it and used while `obj` is alive.
        let m = unsafe { &*obj.as_ptr().cast::<PyMethodObject>() };
        Some((m.im_func, m.im_self))
    }
}

/// `cls.__dict__[name]` when it is asyncio's own function (its code from `module`'s file,
/// named `{cls_name}.{name}`), not a replacement a program installed before fdkit looked.
fn asyncios_own(
    module: &Bound<'_, PyModule>,
    cls: &Bound<'_, PyType>,
    cls_name: &str,
    name: &str,
) -> PyResult<Option<Py<PyAny>>> {
    let Ok(f) = cls.getattr("__dict__")?.get_item(name) else {
        return Ok(None);
    };
    let code = match f.getattr("__code__") {
        Ok(c) => c,
        Err(_) => return Ok(None),
    };
    let file: String = code.getattr("co_filename")?.extract()?;
    let qualname: String = code.getattr("co_qualname")?.extract()?;
    let module_file: String = module.getattr("__file__")?.extract()?;
    Ok((file == module_file && qualname == format!("{cls_name}.{name}")).then(|| f.unbind()))
}

/// The member offsets of Handle's and TimerHandle's slots, or None where the classes are not
/// laid out as this file expects.
fn read_slots(handle: &Bound<'_, PyType>, timer: &Bound<'_, PyType>) -> PyResult<Option<Slots>> {
    const HANDLE: [&str; 7] = [
        "_callback",
        "_args",
        "_cancelled",
        "_loop",
        "_source_traceback",
        "_repr",
        "_context",
    ];
    const TIMER: [&str; 2] = ["_scheduled", "_when"];
    let names = |cls: &Bound<'_, PyType>| -> PyResult<Vec<String>> {
        let mut v: Vec<String> = cls
            .getattr("__slots__")?
            .try_iter()?
            .map(|s| s?.extract())
            .collect::<PyResult<_>>()?;
        v.retain(|s| s != "__weakref__");
        v.sort();
        Ok(v)
    };
    let mut want: Vec<String> = HANDLE.iter().map(|s| (*s).to_owned()).collect();
    want.sort();
    let mut want_timer: Vec<String> = TIMER.iter().map(|s| (*s).to_owned()).collect();
    want_timer.sort();
    if names(handle)? != want || names(timer)? != want_timer {
        return Ok(None);
    }
    let (Some(h), Some(t)) = (
        super::attrs::slot_offsets(handle, handle, HANDLE)?,
        super::attrs::slot_offsets(timer, timer, TIMER)?,
    ) else {
        return Ok(None);
    };
    let got = [h[0], h[1], h[2], h[3], h[4], h[5], h[6], t[0], t[1]];
    Ok(Some(Slots {
        callback: got[0],
        args: got[1],
        cancelled: got[2],
        loop_: got[3],
        source_traceback: got[4],
        repr: got[5],
        context: got[6],
        scheduled: got[7],
        when: got[8],
    }))
}

/// The largest `max_size` the native read takes: asyncio's default (`256 * 1024`). A larger
/// one is read by asyncio's `recv`, which allocates what it asks for, as on asyncio's loop.
pub const NATIVE_MAX_SIZE: usize = 256 * 1024;

/// The native transport class and what is known of its layout.
pub struct TransportClass {
    pub cls: Py<PyType>,
    /// Offsets of the attributes the hot paths read, in [`TransportAttr`] order, when the
    /// class keeps them in `__slots__`.
    pub slots: Option<[isize; 7]>,
    /// Whether its instances' `__dict__` may answer first (see `attrs::dict_first_ok`).
    pub dict_ok: bool,
    /// Whether an instance's own `max_size` (in its `__dict__`) is what `tr.max_size` reads
    /// first: no class of the MRO makes `max_size` a data descriptor.
    max_size_own_first: bool,
    /// The class's `max_size` (an exact int, as a size) and the class's version tag when it
    /// was read: CPython gives a class a new tag whenever an attribute of it or of a base
    /// changes, so while the tag holds, so does the value.
    max_size: GilCell<Option<(u32, usize)>>,
    /// Whether the `write` behind the native one (what `super(cls, tr).write` finds) is
    /// asyncio's own, and the class's version tag when it was looked up.
    write_behind: GilCell<Option<(u32, bool)>>,
}

/// The transport attributes the hot paths read, by index into [`TransportClass::slots`].
#[derive(Clone, Copy)]
pub enum TransportAttr {
    Sock = 0,
    Protocol,
    ConnLost,
    Eof,
    EmptyWaiter,
    Buffer,
    ReadReadyCb,
}

impl TransportClass {
    pub fn new(cls: &Bound<'_, PyType>, names: &Names) -> PyResult<Self> {
        // In `TransportAttr` order.
        let order = [
            "_sock",
            "_protocol",
            "_conn_lost",
            "_eof",
            "_empty_waiter",
            "_buffer",
            "_read_ready_cb",
        ];
        Ok(TransportClass {
            cls: cls.clone().unbind(),
            slots: super::attrs::slot_offsets(cls, cls, order)?,
            dict_ok: super::attrs::dict_first_ok(cls, &names.all())?,
            max_size_own_first: super::attrs::dict_first_ok(cls, &[&names.max_size])?,
            max_size: GilCell::new(None),
            write_behind: GilCell::new(None),
        })
    }

    /// The `write` the classes after the native transport class in `tp`'s MRO define (asyncio's
    /// own, or what a program put on asyncio's class).
    pub fn write_behind<'py>(
        &self,
        tp: &Bound<'py, PyType>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = tp.py();
        let name = pyo3::intern!(py, "write");
        super::attrs::after_in_mro(tp, self.cls.bind(py), name)
    }

    /// Whether the `write` behind the native one is asyncio's own (`own`), looked up again only
    /// when the class changed (for a subclass of the native class, at every call).
    pub fn write_is_own(&self, tp: &Bound<'_, PyType>, own: &Py<PyAny>) -> PyResult<bool> {
        let py = tp.py();
        let cls = self.cls.bind(py);
        let exact = tp.is(cls);
        // SAFETY: reading the version tag of a live type object.
        let tag = || unsafe { (*cls.as_type_ptr()).tp_version_tag };
        if exact {
            let now = tag();
            if let Some((t, is_own)) = self.write_behind.with(py, |w| *w) {
                if t != 0 && t == now {
                    return Ok(is_own);
                }
            }
        }
        let is_own = self.write_behind(tp)?.is_some_and(|f| f.is(own.bind(py)));
        if exact {
            // The lookup gave the class a tag if it had none.
            let _ = cls.getattr(pyo3::intern!(py, "write"))?;
            let t = tag();
            self.write_behind
                .with(py, |w| *w = (t != 0).then_some((t, is_own)));
        }
        Ok(is_own)
    }

    /// `cls.max_size` as a size, read again only when the class changed since the last read;
    /// None when it is not an exact int (then `tr.max_size` is read the long way).
    fn class_max_size(&self, py: Python<'_>, name: &Py<PyString>) -> PyResult<Option<usize>> {
        let cls = self.cls.bind(py);
        // SAFETY: reading the version tag of a live type object.
        let tag = || unsafe { (*cls.as_type_ptr()).tp_version_tag };
        let now = tag();
        if let Some((t, size)) = self.max_size.with(py, |m| *m) {
            if t != 0 && t == now {
                return Ok(Some(size));
            }
        }
        let value = cls.getattr(name.bind(py))?;
        if !value.is_exact_instance_of::<PyInt>() {
            return Ok(None);
        }
        let size: usize = value.extract()?;
        // The lookup gave the class a tag if it had none (0: tags ran out, nothing is kept).
        let t = tag();
        self.max_size
            .with(py, |m| *m = (t != 0).then_some((t, size)));
        Ok(Some(size))
    }
}

/// How to read one transport's attributes: through its class's slots, its dict, or the long
/// way (an object of another class).
pub enum TransportAttrs<'py> {
    Slots(&'py Bound<'py, PyAny>, [isize; 7]),
    Dict(&'py Bound<'py, PyAny>, Option<Bound<'py, PyDict>>),
}

impl<'py> TransportAttrs<'py> {
    pub fn of(o: &AsyncioObjects, tr: &'py Bound<'py, PyAny>) -> Self {
        match o.transport_class.get(tr.py()) {
            Some(c) if tr.get_type().is(c.cls.bind(tr.py())) => match c.slots {
                Some(slots) => TransportAttrs::Slots(tr, slots),
                None if c.dict_ok => TransportAttrs::Dict(tr, super::attrs::instance_dict(tr)),
                None => TransportAttrs::Dict(tr, None),
            },
            _ => TransportAttrs::Dict(tr, None),
        }
    }

    /// `tr.max_size`, the most bytes one read asks for: the instance's own value, or the
    /// class's as last read while the class is unchanged; None when it is not an int from 1
    /// to [`NATIVE_MAX_SIZE`] (asyncio's default), which the native read does not take.
    pub fn max_size(&self, o: &AsyncioObjects) -> PyResult<Option<usize>> {
        let name = &o.names.max_size;
        let in_range = |v: &Bound<'_, PyAny>| -> Option<usize> {
            if !v.is_exact_instance_of::<PyInt>() {
                return None;
            }
            v.extract::<usize>()
                .ok()
                .filter(|n| (1..=NATIVE_MAX_SIZE).contains(n))
        };
        let (tr, dict) = match self {
            TransportAttrs::Slots(tr, _) => (*tr, None),
            TransportAttrs::Dict(tr, Some(d)) => (*tr, Some(d.clone())),
            TransportAttrs::Dict(tr, None) => {
                return Ok(in_range(&tr.getattr(name.bind(tr.py()))?))
            }
        };
        let py = tr.py();
        match o.transport_class.get(py) {
            Some(c) if c.max_size_own_first => {
                let dict = dict.or_else(|| super::attrs::instance_dict(tr));
                let own = match &dict {
                    Some(d) => d.get_item(name.bind(py))?,
                    None => None,
                };
                match own {
                    Some(v) => return Ok(in_range(&v)),
                    None => {
                        if let Some(size) = c.class_max_size(py, name)? {
                            return Ok(Some(size).filter(|n| (1..=NATIVE_MAX_SIZE).contains(n)));
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(in_range(&tr.getattr(name.bind(py))?))
    }

    /// `tr.<name>`, `which` naming the same attribute.
    pub fn get(&self, which: TransportAttr, name: &Py<PyString>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            TransportAttrs::Slots(tr, slots) => {
                super::attrs::slot_attr(tr, slots[which as usize], name)
            }
            TransportAttrs::Dict(tr, d) => super::attrs::attr(tr, d.as_ref(), name),
        }
    }
}

/// Whether `obj` is exactly `Handle` or `TimerHandle` (not a subclass, whose methods may differ).
pub fn is_plain_handle(o: &AsyncioObjects, obj: &Bound<'_, PyAny>) -> bool {
    let t = obj.get_type();
    t.is(o.handle_type.bind(obj.py())) || t.is(o.timer_type.bind(obj.py()))
}

/// A new `Handle` (or, with `when`, a `TimerHandle`) as `Handle.__init__` makes it outside debug
/// mode: `context` or a copy of the current one, no source traceback, not cancelled. A
/// TimerHandle's `_scheduled` is set by the caller once it is in the heap (as `call_at` does).
pub fn new_handle<'py>(
    py: Python<'py>,
    o: &AsyncioObjects,
    callback: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    loop_: &Bound<'py, PyAny>,
    context: Option<&Bound<'py, PyAny>>,
    when: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let context = match context {
        Some(c) if !c.is_none() => c.clone(),
        // SAFETY: PyContext_CopyCurrent returns a new reference or null with an error set.
        _ => unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyContext_CopyCurrent())? },
    };
    let Some(s) = o.slots else {
        return match when {
            None => o
                .handle_type
                .bind(py)
                .call1((callback, args, loop_, context)),
            Some(w) => o
                .timer_type
                .bind(py)
                .call1((w, callback, args, loop_, context)),
        };
    };
    let cls = if when.is_some() {
        &o.timer_type
    } else {
        &o.handle_type
    };
    let tp = cls.bind(py).as_type_ptr();
    // SAFETY: tp_alloc of a heap class allocates a zeroed, tracked instance (a new reference or
    // null with an error set); the slots it has are the ones `read_slots` checked, and each is
    // given a value here before the object is seen by any Python code.
    unsafe {
        let alloc = (*tp).tp_alloc.unwrap_or(ffi::PyType_GenericAlloc);
        let obj = Bound::from_owned_ptr_or_err(py, alloc(tp, 0))?;
        let p = obj.as_ptr();
        let none = py.None().into_ptr();
        set_slot(p, s.context, context.as_ptr());
        set_slot(p, s.loop_, loop_.as_ptr());
        set_slot(p, s.callback, callback.as_ptr());
        set_slot(p, s.args, args.as_ptr());
        set_slot(p, s.cancelled, ffi::Py_False());
        set_slot(p, s.repr, none);
        set_slot(p, s.source_traceback, none);
        ffi::Py_DECREF(none);
        if let Some(w) = when {
            set_slot(p, s.when, w.as_ptr());
            set_slot(p, s.scheduled, ffi::Py_False());
        }
        Ok(obj)
    }
}
