//! The built-in `write` methods fdkit puts on asyncio's transport classes (the socket
//! transport's, the TLS app transport's): their `PyMethodDef`, installing one as a method
//! descriptor, entering one from CPython, and handing a call the native path does not take to
//! the `write` behind it.

use pyo3::ffi;
use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple, PyType};
use std::cell::UnsafeCell;

/// A `PyMethodDef` in a static.
pub(super) struct MethodDef(pub(super) UnsafeCell<ffi::PyMethodDef>);

// SAFETY: CPython only reads the definition; it is never written after its static
// initialisation.
unsafe impl Sync for MethodDef {}

/// A method's body: CPython's `METH_FASTCALL | METH_KEYWORDS` arguments, `self` first.
pub(super) type Body = unsafe fn(
    Python<'_>,
    *mut ffi::PyObject,
    *const *mut ffi::PyObject,
    ffi::Py_ssize_t,
    *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject>;

/// Runs `body` for CPython: an error restored as the raised exception, a panic as a
/// `PanicException` naming `what`.
///
/// Entered with `assume_attached`, not pyo3's trampoline (which also flushes pyo3's queue of
/// deferred releases on entry): the bodies drop no `Py`, only `Bound`s, which release at once.
///
/// # Safety
/// CPython's `METH_FASTCALL | METH_KEYWORDS` contract, passed on to `body`.
pub(super) unsafe fn enter(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
    body: Body,
    what: &'static str,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls a METH_FASTCALL function with the GIL held.
    let py = unsafe { Python::assume_attached() };
    // SAFETY: the caller's contract, passed on.
    let run = || unsafe { body(py, slf, args, nargs, kwnames) };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(obj)) => obj,
        Ok(Err(e)) => {
            e.restore(py);
            std::ptr::null_mut()
        }
        Err(_) => {
            PanicException::new_err(format!("{what} panicked")).restore(py);
            std::ptr::null_mut()
        }
    }
}

/// `func`, the class attribute behind the native method, called as the method would have
/// been, with the call's own arguments (see `attrs::call_as_method`).
///
/// # Safety
/// CPython's contract: `kwnames` is a tuple or null; `args` holds `nargs` values then one per
/// keyword name.
pub(super) unsafe fn call_behind(
    obj: &Bound<'_, PyAny>,
    func: &Bound<'_, PyAny>,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    let py = obj.py();
    // SAFETY: the caller's contract.
    let (kwnames, args) = unsafe {
        let kwnames = (!kwnames.is_null())
            .then(|| Bound::from_borrowed_ptr(py, kwnames).cast_into_unchecked::<PyTuple>());
        let n = nargs as usize + kwnames.as_ref().map_or(0, |k| k.len());
        let args: &[*mut ffi::PyObject] = if n == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(args, n)
        };
        (kwnames, args)
    };
    super::attrs::call_as_method(obj, func, args, nargs as usize, kwnames.as_ref())
        .map(Bound::into_ptr)
}

/// Defines `$def`, the `MethodDef` of a built-in `write(data)` whose docstring is `$doc`, and
/// `$trampoline`, its C entry, which runs `$body` (a [`Body`]) through [`enter`], a panic
/// named after `$what`.
macro_rules! write_method_def {
    ($def:ident, $trampoline:ident, $body:path, $what:literal, $doc:expr) => {
        static $def: $crate::aio::fastcall::MethodDef =
            $crate::aio::fastcall::MethodDef(std::cell::UnsafeCell::new(pyo3::ffi::PyMethodDef {
                ml_name: c"write".as_ptr() as *const std::os::raw::c_char,
                ml_meth: pyo3::ffi::PyMethodDefPointer {
                    PyCFunctionFastWithKeywords: $trampoline,
                },
                ml_flags: pyo3::ffi::METH_FASTCALL | pyo3::ffi::METH_KEYWORDS,
                ml_doc: $doc.as_ptr() as *const std::os::raw::c_char,
            }));

        unsafe extern "C" fn $trampoline(
            slf: *mut pyo3::ffi::PyObject,
            args: *const *mut pyo3::ffi::PyObject,
            nargs: pyo3::ffi::Py_ssize_t,
            kwnames: *mut pyo3::ffi::PyObject,
        ) -> *mut pyo3::ffi::PyObject {
            // SAFETY: CPython's METH_FASTCALL | METH_KEYWORDS contract, passed on.
            unsafe { $crate::aio::fastcall::enter(slf, args, nargs, kwnames, $body, $what) }
        }
    };
}
pub(super) use write_method_def;

/// Makes `cls.<name>` the built-in `def` defines: a method descriptor, as `list.append` is, so
/// that `obj.name(...)` is one C call and the object holds no reference to itself.
pub(super) fn install(
    cls: &Bound<'_, PyType>,
    name: &Bound<'_, PyString>,
    def: &'static MethodDef,
) -> PyResult<()> {
    // SAFETY: `def` is a static, valid for the life of the process; `cls` is a type, which the
    // descriptor keeps a reference to and checks each `self` against.
    let descr = unsafe {
        Bound::from_owned_ptr_or_err(
            cls.py(),
            ffi::PyDescr_NewMethod(cls.as_type_ptr(), def.0.get()),
        )?
    };
    cls.setattr(name, descr)
}
