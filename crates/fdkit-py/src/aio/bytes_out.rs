//! A `bytes` object filled in place before any Python code sees it.
//!
//! The TLS record path hands the app protocol one `bytes` per read and the socket transport one
//! per flush of the outgoing BIO. Decrypting into scratch space and then copying into a new
//! `bytes` (or letting pyo3's `PyBytes::new_with` zero it first) touches every byte twice;
//! here OpenSSL writes straight into the object's own storage, which is then cut to what was
//! written. The object is reachable from nothing but this value until [`BytesOut::finish`]
//! gives it away, so its storage may be written through a `&mut [u8]` and an unfilled tail
//! is never read (`PyBytes_FromStringAndSize(NULL, n)`, `_PyBytes_Resize`: the C API's way to
//! build a `bytes` in place).

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

extern "C" {
    // Part of CPython's C API (Include/cpython/bytesobject.h) that pyo3-ffi does not export:
    // resizes a `bytes` object no other code holds yet, in place where the allocator can.
    fn _PyBytes_Resize(bytes: *mut *mut ffi::PyObject, newsize: ffi::Py_ssize_t) -> i32;
}

/// A `bytes` object of `capacity` bytes under construction, owned here alone (the GIL held
/// for as long as it lives: `'py`).
pub struct BytesOut<'py> {
    py: Python<'py>,
    obj: *mut ffi::PyObject,
    capacity: usize,
}

impl<'py> BytesOut<'py> {
    /// A new object of `capacity` bytes (at least one), their content unset.
    pub fn new(py: Python<'py>, capacity: usize) -> PyResult<Self> {
        let capacity = capacity.clamp(1, isize::MAX as usize);
        // SAFETY: with a NULL source, `PyBytes_FromStringAndSize` allocates `capacity`
        // bytes (the GIL is held: `py`); NULL means an exception is set.
        let obj = unsafe {
            ffi::PyBytes_FromStringAndSize(std::ptr::null(), capacity as ffi::Py_ssize_t)
        };
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        Ok(BytesOut { py, obj, capacity })
    }

    /// How many bytes the object holds now.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The object's storage, `len` bytes long, grown first if it is shorter (its first bytes
    /// kept).
    pub fn room(&mut self, len: usize) -> PyResult<&mut [u8]> {
        if len > self.capacity {
            let grown = len.max(self.capacity.saturating_mul(2));
            self.resize(grown)?;
        }
        // SAFETY: `obj` is a live `bytes` of `capacity >= len` bytes that no other code holds,
        // so nothing else reads or writes its storage while the slice lives. Its bytes past
        // what was written are unset: the slice goes only to code that writes before it reads
        // (OpenSSL's `SSL_read_ex` and `BIO_read`, `_ssl`'s `read` into a memoryview), and
        // `finish` keeps only the written prefix. (A `MaybeUninit` slice would say so in the
        // type; the callers' signatures take `&mut [u8]`.)
        Ok(unsafe {
            std::slice::from_raw_parts_mut(ffi::PyBytes_AsString(self.obj).cast::<u8>(), len)
        })
    }

    /// The object cut to its first `len` bytes (every one of which was written), or None for
    /// none.
    pub fn finish(mut self, len: usize) -> PyResult<Option<Bound<'py, PyBytes>>> {
        if len == 0 {
            return Ok(None);
        }
        assert!(len <= self.capacity, "more bytes than the object holds");
        if len < self.capacity {
            self.resize(len)?;
        }
        let obj = std::mem::replace(&mut self.obj, std::ptr::null_mut());
        // SAFETY: `obj` is a new reference to a `bytes` object, owned here and given away.
        Ok(Some(unsafe {
            Bound::from_owned_ptr(self.py, obj).cast_into_unchecked::<PyBytes>()
        }))
    }

    fn resize(&mut self, len: usize) -> PyResult<()> {
        // SAFETY: `obj` is a `bytes` of reference count 1 (no other code holds it), as
        // `_PyBytes_Resize` requires; on failure it releases the object, sets NULL and raises.
        if unsafe { _PyBytes_Resize(&mut self.obj, len as ffi::Py_ssize_t) } < 0 {
            self.obj = std::ptr::null_mut();
            return Err(PyErr::fetch(self.py));
        }
        self.capacity = len;
        Ok(())
    }
}

impl Drop for BytesOut<'_> {
    fn drop(&mut self) {
        if !self.obj.is_null() {
            // SAFETY: an object never given away, released with the GIL held (`'py`); its
            // unset bytes are not read.
            unsafe { ffi::Py_DECREF(self.obj) };
        }
    }
}
