//! Reading a streaming socket straight into a new `bytes`: what the reactor's provided
//! buffers cannot do (they cost a copy into the buffer, one out of it, one into `bytes`).
//! The reactor says when it is safe ([`fdkit::aio::Reactor::direct_read_fd`]); this is the
//! read, as CPython's `socket.recv` does it: allocate, recv(2) into it, shrink.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::os::fd::{BorrowedFd, RawFd};

extern "C" {
    // CPython's own (not in the limited API, which fdkit does not use): shrinks a `bytes`
    // that nobody else references yet, in place when it can. See Objects/bytesobject.c.
    fn _PyBytes_Resize(
        bytes: *mut *mut pyo3::ffi::PyObject,
        newsize: pyo3::ffi::Py_ssize_t,
    ) -> std::os::raw::c_int;
}

/// Up to `max` bytes from `fd` without waiting (`MSG_DONTWAIT`), as a new `bytes`; None when
/// nothing is there, or on EOF or an error (the multishot receive reports those, in order).
pub fn recv_bytes<'py>(
    py: Python<'py>,
    fd: RawFd,
    max: usize,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    // SAFETY: a NULL source makes CPython allocate `max` uninitialised bytes for us; the
    // object is ours alone until returned.
    let mut obj = unsafe {
        pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), max as pyo3::ffi::Py_ssize_t)
    };
    if obj.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `obj` is a fresh bytes object of `max` bytes; AsString points at its storage,
    // writable while nobody else holds a reference. `fd` is the reactor's stream, open for
    // the duration of this call (the caller holds the GIL, and closing goes through it).
    let got = unsafe {
        let buf =
            std::slice::from_raw_parts_mut(pyo3::ffi::PyBytes_AsString(obj).cast::<u8>(), max);
        rustix::net::recv(
            BorrowedFd::borrow_raw(fd),
            buf,
            rustix::net::RecvFlags::DONTWAIT,
        )
    };
    let n = match got {
        Ok((n, _)) if n > 0 => n,
        _ => {
            // SAFETY: we own the only reference.
            unsafe { pyo3::ffi::Py_DecRef(obj) };
            return Ok(None);
        }
    };
    if n < max {
        // SAFETY: `obj` is referenced by us only; on failure CPython frees it and sets NULL.
        if unsafe { _PyBytes_Resize(&mut obj, n as pyo3::ffi::Py_ssize_t) } != 0 {
            return Err(PyErr::fetch(py));
        }
    }
    // SAFETY: `obj` is a new (owned) reference to a bytes object.
    Ok(Some(unsafe {
        Bound::from_owned_ptr(py, obj).cast_into_unchecked()
    }))
}
