//! Argument extraction for `Ring`'s methods: `user_data`, byte counts, and the
//! data of sends and writes (a `bytes` object kept by reference, anything else copied).

use crate::args::{Count, RawBuffer};
use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// `user_data`: an int in 0..=2**64-1 (`ValueError` otherwise, `TypeError` for a non-int).
pub fn user_data_arg(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    obj.extract::<u64>().map_err(|e| {
        if e.is_instance_of::<PyOverflowError>(obj.py()) {
            PyValueError::new_err(format!(
                "user_data must be an int in 0..2**64-1, got {}",
                obj.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        } else {
            e
        }
    })
}

/// `bytes` the kernel reads in place: the object is immutable and this reference keeps it
/// alive until the op's completion (no copy).
pub struct SharedBytes {
    _owner: Py<PyBytes>,
    ptr: *const u8,
    len: usize,
}

// SAFETY: `ptr`/`len` point into the storage of an immutable `bytes` object kept alive by
// `_owner`; reading it needs no GIL, and `Py` itself is `Send` (dropping it without the GIL
// defers the decref to PyO3's pool).
unsafe impl Send for SharedBytes {}

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: see the `Send` impl: the bytes object lives as long as `self` and never
        // changes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// The bytes for a send or write: a `bytes` object is kept by reference; any other
/// bytes-like object is copied (it could change or resize before the kernel reads it).
pub enum SendData {
    Shared(SharedBytes),
    Copied(Vec<u8>),
}

impl AsRef<[u8]> for SendData {
    fn as_ref(&self) -> &[u8] {
        match self {
            SendData::Shared(s) => s.as_ref(),
            SendData::Copied(v) => v,
        }
    }
}

pub fn send_data(obj: &Bound<'_, PyAny>) -> PyResult<SendData> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        let s = b.as_bytes();
        return Ok(SendData::Shared(SharedBytes {
            ptr: s.as_ptr(),
            len: s.len(),
            _owner: b.clone().unbind(),
        }));
    }
    Ok(SendData::Copied(
        RawBuffer::get(obj, false)?.as_slice().to_vec(),
    ))
}

/// A byte count for a receive or read (`ValueError` past what one call moves).
pub fn nbytes(n: Count) -> PyResult<usize> {
    usize::try_from(n.0)
        .ok()
        .filter(|&n| n <= fdkit::fd::MAX_RW_COUNT)
        .ok_or_else(|| {
            PyValueError::new_err(format!("nbytes must be in 0..=0x7ffff000, got {}", n.0))
        })
}
