//! asyncio's timer heap, native: `heapq`'s `heappush`, `heappop` and `heapify` on the loop's
//! own `_scheduled` list, so that asyncio's Python (a loop subclass's `_run_once`,
//! nest_asyncio's) and the native iteration share one heap, in one order.
//!
//! The sifts are CPython's `Modules/_heapqmodule.c`, step for step: the same comparisons in
//! the same order give the same list, NaN `when`s included (every comparison with NaN is
//! false, to both). What differs is the comparison: two plain `TimerHandle`s whose `_when` is
//! a float (or an int a double holds exactly) are compared as `TimerHandle.__lt__` compares
//! them, `self._when < other._when`, without its Python frame; anything else through
//! `PyObject_RichCompareBool(a, b, Py_LT)`, as heapq does. As in heapq, a comparison that
//! changes the list's size fails with `RuntimeError`.

use super::asyncio_objects::{self as aio, AsyncioObjects};
use pyo3::exceptions::{PyIndexError, PyRuntimeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyList;

/// Largest magnitude of an int whose double is exact, as Python's int/float comparison is.
const EXACT_INT: i64 = 1 << 53;

/// How two heap entries are ordered.
#[derive(Clone, Copy)]
pub(super) struct Order<'a> {
    pub o: &'a AsyncioObjects,
    /// Whether `TimerHandle.__lt__` is asyncio's own (else every comparison calls it).
    pub native_lt: bool,
}

/// `_when` of `h` as a double when `h` is exactly a TimerHandle and `_when` is a float or an
/// int whose double is exact; None otherwise.
pub(super) fn plain_when(o: &AsyncioObjects, h: *mut ffi::PyObject) -> Option<f64> {
    let s = o.slots?;
    // SAFETY: `h` is a live object (an item of the heap, or a Handle the caller holds); its
    // type is read, and its `_when` slot only when the type is exactly TimerHandle, laid out
    // as `s` says.
    unsafe {
        if ffi::Py_TYPE(h) != o.timer_type.as_ptr().cast() {
            return None;
        }
        number(aio::slot(h, s.when))
    }
}

/// A float's value, or an exact int's when a double holds it exactly.
///
/// # Safety
/// `v` is null or a live object.
unsafe fn number(v: *mut ffi::PyObject) -> Option<f64> {
    // SAFETY: the caller's contract; the type checks come before each read.
    unsafe {
        if v.is_null() {
            return None;
        }
        if ffi::PyFloat_CheckExact(v) != 0 {
            return Some(ffi::PyFloat_AS_DOUBLE(v));
        }
        if ffi::PyLong_CheckExact(v) != 0 {
            let mut overflow = 0;
            let i = ffi::PyLong_AsLongLongAndOverflow(v, &mut overflow);
            if overflow == 0 && (-EXACT_INT..=EXACT_INT).contains(&i) {
                return Some(i as f64);
            }
        }
        None
    }
}

impl Order<'_> {
    /// `a < b`, as heapq asks it.
    fn lt(&self, py: Python<'_>, a: *mut ffi::PyObject, b: *mut ffi::PyObject) -> PyResult<bool> {
        if self.native_lt {
            if let (Some(x), Some(y)) = (plain_when(self.o, a), plain_when(self.o, b)) {
                return Ok(x < y);
            }
        }
        // SAFETY: both are live items of the heap; heapq holds a reference to each across the
        // comparison (its `__lt__` may change the list), and so does this.
        unsafe {
            let (a, b) = (
                Bound::from_borrowed_ptr(py, a),
                Bound::from_borrowed_ptr(py, b),
            );
            match ffi::PyObject_RichCompareBool(a.as_ptr(), b.as_ptr(), ffi::Py_LT) {
                -1 => Err(PyErr::fetch(py)),
                r => Ok(r == 1),
            }
        }
    }
}

fn items(heap: &Bound<'_, PyList>) -> *mut *mut ffi::PyObject {
    // SAFETY: `heap` is a list; `ob_item` is its items array (valid until it is resized).
    unsafe { (*heap.as_ptr().cast::<ffi::PyListObject>()).ob_item }
}

fn changed_size() -> PyErr {
    PyRuntimeError::new_err("list changed size during iteration")
}

/// heapq's `siftdown(heap, startpos, pos)`.
fn siftdown(
    heap: &Bound<'_, PyList>,
    order: Order<'_>,
    startpos: usize,
    mut pos: usize,
) -> PyResult<()> {
    let py = heap.py();
    let size = heap.len();
    if pos >= size {
        return Err(PyIndexError::new_err("index out of range"));
    }
    while pos > startpos {
        let parentpos = (pos - 1) >> 1;
        // SAFETY: `pos` and `parentpos` are below `size`, which is the list's size (checked
        // after every comparison).
        let (newitem, parent) = unsafe {
            let arr = items(heap);
            (*arr.add(pos), *arr.add(parentpos))
        };
        let lt = order.lt(py, newitem, parent)?;
        if size != heap.len() {
            return Err(changed_size());
        }
        if !lt {
            break;
        }
        // SAFETY: as above; the comparison may have moved the items, so they are read again
        // and swapped in place (the list keeps its one reference to each).
        unsafe {
            let arr = items(heap);
            let (parent, newitem) = (*arr.add(parentpos), *arr.add(pos));
            *arr.add(parentpos) = newitem;
            *arr.add(pos) = parent;
        }
        pos = parentpos;
    }
    Ok(())
}

/// heapq's `siftup(heap, pos)`.
fn siftup(heap: &Bound<'_, PyList>, order: Order<'_>, mut pos: usize) -> PyResult<()> {
    let py = heap.py();
    let endpos = heap.len();
    let startpos = pos;
    if pos >= endpos {
        return Err(PyIndexError::new_err("index out of range"));
    }
    let limit = endpos >> 1;
    while pos < limit {
        let mut childpos = 2 * pos + 1;
        if childpos + 1 < endpos {
            // SAFETY: both positions are below `endpos`, the list's size.
            let (a, b) = unsafe {
                let arr = items(heap);
                (*arr.add(childpos), *arr.add(childpos + 1))
            };
            let lt = order.lt(py, a, b)?;
            if !lt {
                childpos += 1;
            }
            if endpos != heap.len() {
                return Err(changed_size());
            }
        }
        // SAFETY: as above, the items read again after the comparison and swapped in place.
        unsafe {
            let arr = items(heap);
            let (child, cur) = (*arr.add(childpos), *arr.add(pos));
            *arr.add(childpos) = cur;
            *arr.add(pos) = child;
        }
        pos = childpos;
    }
    siftdown(heap, order, startpos, pos)
}

/// `heapq.heappush(heap, item)`.
pub(super) fn push(
    heap: &Bound<'_, PyList>,
    order: Order<'_>,
    item: &Bound<'_, PyAny>,
) -> PyResult<()> {
    heap.append(item)?;
    siftdown(heap, order, 0, heap.len() - 1)
}

/// `heapq.heappop(heap)`.
pub(super) fn pop<'py>(heap: &Bound<'py, PyList>, order: Order<'_>) -> PyResult<Bound<'py, PyAny>> {
    let py = heap.py();
    let n = heap.len();
    if n == 0 {
        return Err(PyIndexError::new_err("index out of range"));
    }
    let last = heap.get_item(n - 1)?;
    heap.del_slice(n - 1, n)?;
    if n == 1 {
        return Ok(last);
    }
    let first = heap.get_item(0)?;
    // SAFETY: the list is not empty; `PyList_SetItem` steals the new reference given and
    // releases the old item, of which `first` holds its own reference.
    unsafe {
        if ffi::PyList_SetItem(heap.as_ptr(), 0, last.into_ptr()) < 0 {
            return Err(PyErr::fetch(py));
        }
    }
    siftup(heap, order, 0)?;
    Ok(first)
}

/// `heapq.heapify(heap)` (CPython's cache-friendly order for large lists sifts the same
/// subtrees to the same result).
pub(super) fn heapify(heap: &Bound<'_, PyList>, order: Order<'_>) -> PyResult<()> {
    let n = heap.len();
    for i in (0..n / 2).rev() {
        siftup(heap, order, i)?;
    }
    Ok(())
}

/// The first item of the heap, when it has one.
pub(super) fn peek<'py>(heap: &Bound<'py, PyList>) -> Option<Bound<'py, PyAny>> {
    if heap.is_empty() {
        return None;
    }
    heap.get_item(0).ok()
}
