//! `loop_method`: the type of the loop methods the core runs natively, a method descriptor
//! that binds as a Python function binds.
//!
//! CPython's own `method_descriptor` (what `PyDescr_NewMethod` makes) is one C call per
//! `loop.call_soon(cb)`, but `loop.call_soon` then reads as a built-in of the loop's class
//! (`EpollEventLoop.call_soon`), where asyncio's reads `BaseEventLoop.call_soon`: the name
//! asyncio puts in Handle reprs and "Exception in callback" messages. This type keeps the
//! call (CPython calls it unbound, the loop first, through vectorcall, as it calls a method
//! descriptor: `Py_TPFLAGS_METHOD_DESCRIPTOR`) and, where a program takes the attribute
//! itself, binds as a function does: `loop.call_soon` is a `types.MethodType` whose
//! `__qualname__`, `__name__` and `__self__` are asyncio's.

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyType};
use std::os::raw::{c_char, c_int, c_void};
use std::ptr;

unsafe extern "C" {
    /// `PyMethod_New(func, self)`: a new bound method (`types.MethodType`), a stable function of
    /// CPython's C API that pyo3-ffi does not declare.
    fn PyMethod_New(func: *mut ffi::PyObject, slf: *mut ffi::PyObject) -> *mut ffi::PyObject;
}

/// The C function one method runs: `(self, args, nargs, kwnames)`, `self` being the loop.
pub(super) type FastCall = unsafe extern "C" fn(
    *mut ffi::PyObject,
    *const *mut ffi::PyObject,
    ffi::Py_ssize_t,
    *mut ffi::PyObject,
) -> *mut ffi::PyObject;

/// How a method binds to an instance, when its owner keeps bound methods: a new reference to
/// the bound method for `obj` (the method's `index` given back), or null, without an error set,
/// to have a new one made.
pub(super) type Bind =
    unsafe fn(Python<'_>, *mut ffi::PyObject, *mut ffi::PyObject, usize) -> *mut ffi::PyObject;

/// One native method's object.
#[repr(C)]
struct LoopMethod {
    ob_base: ffi::PyObject,
    /// This object's vectorcall entry (`__vectorcalloffset__` points here).
    vectorcall: Option<ffi::vectorcallfunc>,
    /// What a call with the loop first runs (set once the object is made).
    call: Option<FastCall>,
    /// The class `self` must be an instance of (asyncio's `BaseEventLoop`).
    objclass: *mut ffi::PyObject,
    name: *mut ffi::PyObject,
    qualname: *mut ffi::PyObject,
    doc: *const c_char,
    /// Where a bound method may come from before one is made (`Bind`), and this method's
    /// index there.
    bind: Option<Bind>,
    index: usize,
}

/// `method(self, *args, **kwargs)`: the loop first, as CPython calls a method descriptor.
unsafe extern "C" fn vectorcall(
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls vectorcall with the GIL held and `callable` one of this type's
    // objects; `args` holds `nargs` positional values then one per name in `kwnames`.
    unsafe {
        let m = &*callable.cast::<LoopMethod>();
        let nargs = ffi::PyVectorcall_NARGS(nargsf);
        if nargs < 1 || ffi::PyObject_TypeCheck(*args, m.objclass.cast()) == 0 {
            let py = Python::assume_attached();
            let name = Bound::from_borrowed_ptr(py, m.name);
            let cls = Bound::from_borrowed_ptr(py, m.objclass).cast_into_unchecked::<PyType>();
            let got = if nargs < 1 {
                "nothing".to_owned()
            } else {
                let t = Bound::from_borrowed_ptr(py, *args).get_type();
                format!(
                    "a '{}' object",
                    t.name().map(|n| n.to_string()).unwrap_or_default()
                )
            };
            let cls = cls.name().map(|n| n.to_string()).unwrap_or_default();
            PyTypeError::new_err(format!(
                "descriptor '{name}' for '{cls}' objects doesn't apply to {got}"
            ))
            .restore(py);
            return ptr::null_mut();
        }
        match m.call {
            Some(f) => f(*args, args.add(1), nargs - 1, kwnames),
            None => ptr::null_mut(),
        }
    }
}

/// `tp_call`: the same as a vectorcall.
unsafe extern "C" fn call(
    callable: *mut ffi::PyObject,
    args: *mut ffi::PyObject,
    kwargs: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython's tp_call contract; PyVectorcall_Call reads this type's vectorcall.
    unsafe { ffi::PyVectorcall_Call(callable, args, kwargs) }
}

/// `__get__`: the method itself from the class, a bound method from an instance.
unsafe extern "C" fn descr_get(
    descr: *mut ffi::PyObject,
    obj: *mut ffi::PyObject,
    _tp: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython's tp_descr_get contract: `descr` is this type's object, `obj` the
    // instance (null or None from the class); PyMethod_New takes its own references.
    unsafe {
        if obj.is_null() || obj == ffi::Py_None() {
            ffi::Py_INCREF(descr);
            return descr;
        }
        let m = &*descr.cast::<LoopMethod>();
        if let Some(bind) = m.bind {
            let bound = bind(Python::assume_attached(), descr, obj, m.index);
            if !bound.is_null() || !ffi::PyErr_Occurred().is_null() {
                return bound;
            }
        }
        PyMethod_New(descr, obj)
    }
}

unsafe extern "C" fn dealloc(obj: *mut ffi::PyObject) {
    // SAFETY: the object is being freed: its references are released, then its memory by
    // its type's tp_free; the heap type's reference held by the object is released last.
    unsafe {
        let m = &*obj.cast::<LoopMethod>();
        ffi::Py_XDECREF(m.objclass);
        ffi::Py_XDECREF(m.name);
        ffi::Py_XDECREF(m.qualname);
        let tp = ffi::Py_TYPE(obj);
        if let Some(free) = (*tp).tp_free {
            free(obj.cast::<c_void>());
        }
        ffi::Py_DECREF(tp.cast());
    }
}

unsafe extern "C" fn repr(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: `obj` is this type's object; the result is a new reference or null.
    unsafe {
        let m = &*obj.cast::<LoopMethod>();
        ffi::PyUnicode_FromFormat(
            c"<method '%U' of '%s' objects>".as_ptr(),
            m.name,
            (*m.objclass.cast::<ffi::PyTypeObject>()).tp_name,
        )
    }
}

unsafe extern "C" fn get_name(obj: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    // SAFETY: `obj` is this type's object; a new reference to its name.
    unsafe {
        let m = &*obj.cast::<LoopMethod>();
        ffi::Py_INCREF(m.name);
        m.name
    }
}

unsafe extern "C" fn get_qualname(obj: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    // SAFETY: as `get_name`.
    unsafe {
        let m = &*obj.cast::<LoopMethod>();
        ffi::Py_INCREF(m.qualname);
        m.qualname
    }
}

unsafe extern "C" fn get_doc(obj: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    // SAFETY: `obj` is this type's object; its doc is a static C string.
    unsafe {
        let m = &*obj.cast::<LoopMethod>();
        ffi::PyUnicode_FromString(m.doc)
    }
}

unsafe extern "C" fn get_objclass(obj: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    // SAFETY: as `get_name`.
    unsafe {
        let m = &*obj.cast::<LoopMethod>();
        ffi::Py_INCREF(m.objclass);
        m.objclass
    }
}

/// The type, made once per process.
static TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn method_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    TYPE.get_or_try_init(py, || {
        let members = Box::leak(Box::new([
            ffi::PyMemberDef {
                name: c"__vectorcalloffset__".as_ptr(),
                type_code: ffi::Py_T_PYSSIZET,
                offset: std::mem::offset_of!(LoopMethod, vectorcall) as ffi::Py_ssize_t,
                flags: ffi::Py_READONLY,
                doc: ptr::null(),
            },
            // SAFETY: an all-zero PyMemberDef ends the table.
            unsafe { std::mem::zeroed() },
        ]));
        let getset = |name: &'static std::ffi::CStr,
                      get: unsafe extern "C" fn(
            *mut ffi::PyObject,
            *mut c_void,
        ) -> *mut ffi::PyObject| {
            ffi::PyGetSetDef {
                name: name.as_ptr(),
                get: Some(get),
                set: None,
                doc: ptr::null(),
                closure: ptr::null_mut(),
            }
        };
        let getsets = Box::leak(Box::new([
            getset(c"__name__", get_name),
            getset(c"__qualname__", get_qualname),
            getset(c"__doc__", get_doc),
            getset(c"__objclass__", get_objclass),
            // SAFETY: an all-zero PyGetSetDef ends the table.
            unsafe { std::mem::zeroed() },
        ]));
        let slots = Box::leak(Box::new([
            ffi::PyType_Slot {
                slot: ffi::Py_tp_dealloc,
                pfunc: dealloc as *mut c_void,
            },
            ffi::PyType_Slot {
                slot: ffi::Py_tp_call,
                pfunc: call as *mut c_void,
            },
            ffi::PyType_Slot {
                slot: ffi::Py_tp_descr_get,
                pfunc: descr_get as *mut c_void,
            },
            ffi::PyType_Slot {
                slot: ffi::Py_tp_repr,
                pfunc: repr as *mut c_void,
            },
            ffi::PyType_Slot {
                slot: ffi::Py_tp_members,
                pfunc: members.as_mut_ptr().cast(),
            },
            ffi::PyType_Slot {
                slot: ffi::Py_tp_getset,
                pfunc: getsets.as_mut_ptr().cast(),
            },
            ffi::PyType_Slot {
                slot: 0,
                pfunc: ptr::null_mut(),
            },
        ]));
        let spec = Box::leak(Box::new(ffi::PyType_Spec {
            name: c"fdkit._fdkit.loop_method".as_ptr(),
            basicsize: std::mem::size_of::<LoopMethod>() as c_int,
            itemsize: 0,
            flags: (ffi::Py_TPFLAGS_DEFAULT
                | ffi::Py_TPFLAGS_METHOD_DESCRIPTOR
                | ffi::Py_TPFLAGS_HAVE_VECTORCALL
                | ffi::Py_TPFLAGS_IMMUTABLETYPE) as _,
            slots: slots.as_mut_ptr(),
        }));
        // SAFETY: the spec and its tables are leaked (static for the process), as CPython
        // requires of them; the result is a new reference or null with an error set.
        let tp = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(spec))? };
        let tp = tp.cast_into::<PyType>()?;
        // SAFETY: a type just made, not yet used: CPython before 3.12 does not take
        // Py_TPFLAGS_HAVE_VECTORCALL from a spec, so the flag is set here, with the offset
        // the `__vectorcalloffset__` member gave.
        unsafe {
            let t = tp.as_type_ptr();
            (*t).tp_flags |= ffi::Py_TPFLAGS_HAVE_VECTORCALL;
            (*t).tp_vectorcall_offset = std::mem::offset_of!(LoopMethod, vectorcall) as _;
        }
        Ok(tp.unbind())
    })
    .map(|t| t.bind(py))
}

/// `types.MethodType(method, obj)`: what a method binds to when its owner keeps none.
pub(super) fn bound_method<'py>(
    method: &Bound<'py, PyAny>,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: two live objects; a new reference, or null with an error set.
    unsafe {
        Bound::from_owned_ptr_or_err(method.py(), PyMethod_New(method.as_ptr(), obj.as_ptr()))
    }
}

/// A new method object: `name` (a method of `objclass`, whose name makes its `__qualname__`),
/// running `call` with the loop first; an instance's bound method is asked of `bind` first
/// (given `index`).
pub(super) fn new<'py>(
    objclass: &Bound<'py, PyType>,
    name: &str,
    doc: &'static std::ffi::CStr,
    call: FastCall,
    bind: Option<Bind>,
    index: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let py = objclass.py();
    let tp = method_type(py)?;
    let qualname = format!("{}.{name}", objclass.qualname()?);
    // SAFETY: tp_alloc of a heap type allocates a zeroed object holding a reference to its
    // type (a new reference, or null with an error set); each field is set before the object
    // is seen by Python.
    unsafe {
        let t = tp.as_type_ptr();
        let alloc = (*t).tp_alloc.unwrap_or(ffi::PyType_GenericAlloc);
        let obj = Bound::from_owned_ptr_or_err(py, alloc(t, 0))?;
        let m = &mut *obj.as_ptr().cast::<LoopMethod>();
        m.vectorcall = Some(vectorcall);
        m.call = Some(call);
        m.objclass = objclass.clone().into_ptr();
        m.name = PyString::intern(py, name).into_ptr();
        m.qualname = PyString::new(py, &qualname).into_ptr();
        m.doc = doc.as_ptr();
        m.bind = bind;
        m.index = index;
        Ok(obj)
    }
}
