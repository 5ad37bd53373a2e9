//! `PipeSize`: the int that `Pipe.size`, `AtomicPipe.size` (and `max_size`) return.
//!
//! Both objects now spell a pipe's capacity as a property, as `Pipe` always did; `AtomicPipe`
//! spelled it as a method, `size()`. So that code written either way keeps working, the
//! property's value is an `int` subclass whose call returns the same number as a plain `int`:
//! `p.size == 65536` and `p.size() == 65536` both hold. It is an `int` in every other respect
//! (arithmetic gives plain ints, `json` writes it as a number). See fcntl(2) `F_GETPIPE_SZ`.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

static PIPE_SIZE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The `PipeSize` class, made once: `class PipeSize(int): __call__ = int.__int__`.
pub fn pipe_size_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    PIPE_SIZE
        .get_or_try_init(py, || {
            let builtins = py.import("builtins")?;
            let int = builtins.getattr("int")?;
            let namespace = PyDict::new(py);
            namespace.set_item("__slots__", PyTuple::empty(py))?;
            // `int.__int__` on a subclass instance returns the plain int.
            namespace.set_item("__call__", int.getattr("__int__")?)?;
            namespace.set_item("__module__", "fdkit._fdkit")?;
            namespace.set_item(
                "__doc__",
                "A pipe size in bytes: an int; calling it returns the same number \
                 (the older `size()` spelling).",
            )?;
            let class = builtins
                .getattr("type")?
                .call1(("PipeSize", (int,), namespace))?;
            Ok(class.cast_into::<PyType>()?.unbind())
        })
        .map(|class| class.bind(py))
}

/// `n` as a `PipeSize`.
pub fn pipe_size(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyAny>> {
    pipe_size_type(py)?.call1((n,))
}
