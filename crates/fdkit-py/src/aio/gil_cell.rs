//! `GilCell`: state of the native loop that only calls made with the GIL held touch, each in a
//! scope that runs no Python, so a `&mut` to it is never shared (pyo3's `frozen` classes hold
//! their mutable parts this way; the module is not free-threaded).

use pyo3::Python;
use std::cell::UnsafeCell;

/// State only the loop's own calls touch, each in a scope that calls no Python.
pub struct GilCell<T>(pub(super) UnsafeCell<T>);

// SAFETY: the module is not free-threaded (`gil_used` stays true), every access is made with
// the GIL held (a `Python` token is required), and no access spans a call into Python (which
// could release the GIL or re-enter): two accesses never overlap.
unsafe impl<T: Send> Sync for GilCell<T> {}

impl<T> GilCell<T> {
    pub const fn new(v: T) -> Self {
        GilCell(UnsafeCell::new(v))
    }

    /// Runs `f` on the state. `f` must not call Python (nor drop a Python object: a finalizer
    /// is Python).
    pub fn with<R>(&self, _py: Python<'_>, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: see the `Sync` impl: the GIL is held and `f` does not re-enter.
        f(unsafe { &mut *self.0.get() })
    }
}
