//! Reading the instance attributes asyncio's code reads (`self._ready`, `self._conn_lost`, ...)
//! the short way: from the object's `__dict__`, with names interned once.
//!
//! `obj.name` first asks the class's whole MRO whether `name` is a data descriptor, then looks
//! in the instance; asyncio's loop and transport classes have long MROs, and those lookups were
//! the largest user-space cost of the native path. Where no class of the object's MRO defines
//! `name` as a data descriptor (checked once per class, [`dict_first_ok`]), the instance's
//! `__dict__` answers first and gives what `obj.name` would; a name missing from it is looked
//! up the long way (a class attribute such as `max_size`, or the `AttributeError` Python would
//! raise).

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple, PyType};

macro_rules! names {
    ($($field:ident),* $(,)?) => {
        /// The attribute names the native paths read, interned once.
        #[allow(non_snake_case)]
        pub struct Names {
            $(pub $field: Py<PyString>,)*
            /// `loop` (a keyword; not a Rust identifier).
            pub loop_: Py<PyString>,
        }

        impl Names {
            pub fn new(py: Python<'_>) -> Self {
                Names {
                    $($field: PyString::intern(py, stringify!($field)).unbind(),)*
                    loop_: PyString::intern(py, "loop").unbind(),
                }
            }

            /// Every name, for [`dict_first_ok`].
            pub fn all(&self) -> Vec<&Py<PyString>> {
                vec![$(&self.$field,)*]
            }
        }
    };
}

names!(
    _ready,
    _stopping,
    _debug,
    _scheduled,
    _timer_cancelled_count,
    _when,
    _closed,
    _read_ready_cb,
    _conn_lost,
    _sock,
    _protocol,
    _eof,
    _empty_waiter,
    _buffer,
    max_size,
    append,
    popleft,
    data_received,
    _run,
    _run_once,
    _task_factory,
    name,
    context,
    Task,
    _selector,
    time,
    select,
    _process_events,
    _add_callback,
    _remove_reader,
    _remove_writer,
);

/// Whether `cls` lets `__dict__` answer first for each of `names`: no class in its MRO defines
/// one of them as a data descriptor (a property, a slot), which would take precedence over the
/// instance's dict.
pub fn dict_first_ok(cls: &Bound<'_, PyType>, names: &[&Py<PyString>]) -> PyResult<bool> {
    let py = cls.py();
    for klass in cls.getattr("__mro__")?.try_iter()? {
        let dict = klass?.getattr("__dict__")?;
        for name in names {
            if let Ok(found) = dict.get_item(name.bind(py)) {
                let kind = found.get_type();
                if kind.hasattr("__set__")? || kind.hasattr("__delete__")? {
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

/// The `__dict__` of `obj` (None when it has none, or it cannot be had).
pub fn instance_dict<'py>(obj: &Bound<'py, PyAny>) -> Option<Bound<'py, PyDict>> {
    // SAFETY: PyObject_GenericGetDict returns a new reference to the instance's dict (made on
    // first use) or null with an error set, which is cleared here: the caller then reads the
    // long way, which raises what Python would.
    unsafe {
        let d = ffi::PyObject_GenericGetDict(obj.as_ptr(), std::ptr::null_mut());
        if d.is_null() {
            ffi::PyErr_Clear();
            return None;
        }
        Bound::from_owned_ptr(obj.py(), d)
            .cast_into::<PyDict>()
            .ok()
    }
}

/// `dict.get(key)`, one C call: the value (None when `key` is missing), or the error of a
/// key whose `__eq__` or `__hash__` raised.
pub fn dict_get<'py>(
    dict: &Bound<'py, PyDict>,
    key: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = dict.py();
    // SAFETY: PyDict_GetItemWithError returns a borrowed reference (taken here as a new one)
    // or null, with an error set only when the lookup itself failed.
    unsafe {
        let v = ffi::PyDict_GetItemWithError(dict.as_ptr(), key.as_ptr());
        if !v.is_null() {
            return Ok(Some(Bound::from_borrowed_ptr(py, v)));
        }
        if !ffi::PyErr_Occurred().is_null() {
            return Err(PyErr::fetch(py));
        }
    }
    Ok(None)
}

/// `obj.name`, from `dict` (the object's `__dict__`, when [`dict_first_ok`] holds for its
/// class) first.
pub fn attr<'py>(
    obj: &Bound<'py, PyAny>,
    dict: Option<&Bound<'py, PyDict>>,
    name: &Py<PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    if let Some(d) = dict {
        // SAFETY: PyDict_GetItemWithError returns a borrowed reference (taken here as a new
        // one) or null, with an error set only when the lookup itself failed.
        unsafe {
            let v = ffi::PyDict_GetItemWithError(d.as_ptr(), name.as_ptr());
            if !v.is_null() {
                return Ok(Bound::from_borrowed_ptr(py, v));
            }
            if !ffi::PyErr_Occurred().is_null() {
                return Err(PyErr::fetch(py));
            }
        }
    }
    obj.getattr(name.bind(py))
}

/// Byte offsets of `names` in instances of `cls`: each must be a `__slots__` member of `owner`
/// (a class of `cls`'s MRO) that `cls` does not override, so `obj.name` is exactly that slot.
/// None when any is not.
pub fn slot_offsets<const N: usize>(
    cls: &Bound<'_, PyType>,
    owner: &Bound<'_, PyType>,
    names: [&str; N],
) -> PyResult<Option<[isize; N]>> {
    let py = cls.py();
    let member_type = py.import("types")?.getattr("MemberDescriptorType")?;
    let owned = owner.getattr("__dict__")?;
    let mut out = [0isize; N];
    for (i, name) in names.iter().enumerate() {
        let Ok(desc) = owned.get_item(*name) else {
            return Ok(None);
        };
        if !desc.get_type().is(&member_type) || !cls.getattr(*name)?.is(&desc) {
            return Ok(None);
        }
        // SAFETY: `desc` is exactly `types.MemberDescriptorType`, a `PyMemberDescrObject`
        // whose `d_member` points at the owner's `PyMemberDef`, alive as long as the class.
        let def = unsafe { &*(*desc.as_ptr().cast::<ffi::PyMemberDescrObject>()).d_member };
        if def.type_code != ffi::Py_T_OBJECT_EX {
            return Ok(None);
        }
        out[i] = def.offset;
    }
    Ok(Some(out))
}

/// `obj.name` where `name` is the slot at `offset` (see [`slot_offsets`]): the slot's value,
/// or, when it is unset, the long way (which raises Python's `AttributeError`).
pub fn slot_attr<'py>(
    obj: &Bound<'py, PyAny>,
    offset: isize,
    name: &Py<PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: the caller proved (slot_offsets, and `obj`'s class) that a `PyObject *` member
    // lives at `offset`; the value is taken as a new reference.
    unsafe {
        let v = slot(obj.as_ptr(), offset);
        if !v.is_null() {
            return Ok(Bound::from_borrowed_ptr(obj.py(), v));
        }
    }
    obj.getattr(name.bind(obj.py()))
}

/// `name` as the classes after `owner` in `tp`'s MRO define it: what `super(owner, obj).name`
/// finds for an instance `obj` of `tp` (the raw class attribute, not bound); None when no
/// class after `owner` defines it, or `owner` is not in the MRO.
pub fn after_in_mro<'py>(
    tp: &Bound<'py, PyType>,
    owner: &Bound<'py, PyType>,
    name: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = tp.py();
    let mro = tp.mro();
    let Some(start) = mro.iter().position(|k| k.is(owner)) else {
        return Ok(None);
    };
    for klass in mro.iter().skip(start + 1) {
        // SAFETY: `klass` is a type of the MRO, alive while `mro` is; `tp_dict` is its dict
        // (null only for the static built-in types of 3.12 on, such as `object`, which
        // define none of the names looked up here).
        let dict = unsafe { (*klass.as_ptr().cast::<ffi::PyTypeObject>()).tp_dict };
        if dict.is_null() {
            continue;
        }
        // SAFETY: a live dict, borrowed from the class.
        let dict = unsafe { Bound::from_borrowed_ptr(py, dict).cast_into_unchecked::<PyDict>() };
        if let Some(v) = dict_get(&dict, name.as_any())? {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// `func`, a class attribute, called as the method `obj.name(*args)` would call it: a Python
/// function with `obj` first, anything else bound by its `__get__` (if it has one) and called
/// with the arguments alone. `args` holds `nargs` positional values, then one per name in
/// `kwnames`: a vectorcall's arguments, passed on.
pub fn call_as_method<'py>(
    obj: &Bound<'py, PyAny>,
    func: &Bound<'py, PyAny>,
    args: &[*mut ffi::PyObject],
    nargs: usize,
    kwnames: Option<&Bound<'py, PyTuple>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let nkw = kwnames.map_or(0, |k| k.len());
    let kwnames = kwnames.map_or(std::ptr::null_mut(), |k| k.as_ptr());
    let args = &args[..nargs + nkw];
    // SAFETY: `func` and `obj` are live objects; the argument arrays hold borrowed references,
    // alive for the call; the result is a new reference or null with an error set.
    unsafe {
        let f = func.as_ptr();
        let result = if ffi::PyFunction_Check(f) != 0 {
            let mut all: Vec<*mut ffi::PyObject> = Vec::with_capacity(1 + args.len());
            all.push(obj.as_ptr());
            all.extend_from_slice(args);
            ffi::PyObject_Vectorcall(f, all.as_ptr(), 1 + nargs, kwnames)
        } else {
            let bound = match (*ffi::Py_TYPE(f)).tp_descr_get {
                Some(get) => Bound::from_owned_ptr_or_err(
                    py,
                    get(f, obj.as_ptr(), ffi::Py_TYPE(obj.as_ptr()).cast()),
                )?,
                None => func.clone(),
            };
            ffi::PyObject_Vectorcall(bound.as_ptr(), args.as_ptr(), nargs, kwnames)
        };
        Bound::from_owned_ptr_or_err(py, result)
    }
}

/// The object in slot `offset` of `obj` (a borrowed pointer; null when the slot is unset).
///
/// # Safety
/// `obj` is an instance of a class whose `T_OBJECT_EX` member lives at `offset`.
pub unsafe fn slot(obj: *mut ffi::PyObject, offset: isize) -> *mut ffi::PyObject {
    // SAFETY: the caller's contract: the member is a `PyObject *` at that offset.
    unsafe { *obj.cast::<u8>().offset(offset).cast::<*mut ffi::PyObject>() }
}

/// Stores `value` (a new reference is taken) in slot `offset` of `obj`, releasing the old one,
/// as a `T_OBJECT_EX` member's setter does.
///
/// # Safety
/// As [`slot`]; the GIL is held.
pub unsafe fn set_slot(obj: *mut ffi::PyObject, offset: isize, value: *mut ffi::PyObject) {
    // SAFETY: the caller's contract; the old value is released after the new one is in place,
    // so a finalizer it runs sees the object already updated.
    unsafe {
        let field = obj.cast::<u8>().offset(offset).cast::<*mut ffi::PyObject>();
        let old = *field;
        ffi::Py_INCREF(value);
        *field = value;
        ffi::Py_XDECREF(old);
    }
}
