//! `AtomicPipeEnds`: a new pipe held whole, as Perl's `Atomic::Pipe->new` object: clone
//! writers (or readers) from it, then keep one end with `reader()`/`writer()`, which closes
//! the other. Once one end is kept, the object forwards attributes to it, so Perl's
//! `$p->reader; $p->read_message` reads the same in Python.
//!
//! The ends are held as the Python objects they are (`AtomicPipe`s) and used through their
//! Python methods: `pipe.rs` builds this class, so this file does not name that one back.

use pyo3::exceptions::{PyAttributeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::{Mutex, MutexGuard};

/// Both ends of a new pipe (`AtomicPipe.new()`), until `reader()` or `writer()` keeps one.
#[pyclass(name = "AtomicPipeEnds", module = "fdkit._fdkit", frozen)]
pub struct AtomicPipeEnds {
    ends: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    reader: Option<Py<PyAny>>,
    writer: Option<Py<PyAny>>,
}

impl AtomicPipeEnds {
    /// Both ends of a new pipe: its reader and its writer (`AtomicPipe` objects).
    pub(super) fn new(reader: Py<PyAny>, writer: Py<PyAny>) -> Self {
        AtomicPipeEnds {
            ends: Mutex::new(Held {
                reader: Some(reader),
                writer: Some(writer),
            }),
        }
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        self.ends.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps one end (closing the other); ValueError when that end is gone.
    fn keep(&self, py: Python<'_>, reader: bool) -> PyResult<Py<PyAny>> {
        let (kept, other) = {
            let mut guard = self.held();
            let held = &mut *guard;
            let (mine, theirs) = if reader {
                (&held.reader, &mut held.writer)
            } else {
                (&held.writer, &mut held.reader)
            };
            let Some(mine) = mine else {
                let (want, was) = if reader {
                    ("reader", "writer")
                } else {
                    ("writer", "reader")
                };
                return Err(PyValueError::new_err(format!(
                    "pipe was set to {was}, cannot set to {want}"
                )));
            };
            (mine.clone_ref(py), theirs.take())
        };
        if let Some(other) = other {
            other.bind(py).call_method0("close")?;
        }
        Ok(kept)
    }

    fn end(&self, py: Python<'_>, reader: bool) -> PyResult<Py<PyAny>> {
        let held = self.held();
        let end = if reader { &held.reader } else { &held.writer };
        end.as_ref().map(|p| p.clone_ref(py)).ok_or_else(|| {
            PyValueError::new_err(if reader {
                "not a reader: the read end was closed (writer() kept the other)"
            } else {
                "not a writer: the write end was closed (reader() kept the other)"
            })
        })
    }
}

#[pymethods]
impl AtomicPipeEnds {
    /// Keeps the read end and closes the write end (Perl's `reader`); returns the reader.
    /// Calling it again returns the same reader; after `writer()`, ValueError.
    fn reader(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.keep(py, true)
    }

    /// Keeps the write end and closes the read end (Perl's `writer`); returns the writer.
    fn writer(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.keep(py, false)
    }

    /// A new writer over a duplicate of the write end (Perl's `clone_writer`).
    fn clone_writer<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.end(py, false)?
            .into_bound(py)
            .call_method0("clone_writer")
    }

    /// A new reader over a duplicate of the read end (Perl's `clone_reader`).
    fn clone_reader<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.end(py, true)?
            .into_bound(py)
            .call_method0("clone_reader")
    }

    /// True once only the read end is held.
    #[getter]
    fn is_reader(&self) -> bool {
        let held = self.held();
        held.reader.is_some() && held.writer.is_none()
    }

    /// True once only the write end is held.
    #[getter]
    fn is_writer(&self) -> bool {
        let held = self.held();
        held.writer.is_some() && held.reader.is_none()
    }

    /// Closes the ends still held.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let Held { reader, writer } = std::mem::take(&mut *self.held());
        let close = |end: Option<Py<PyAny>>| {
            end.map_or(Ok(()), |e| e.bind(py).call_method0("close").map(drop))
        };
        let w = close(writer);
        let r = close(reader);
        w.and(r)
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Closes the ends; returns None, so an exception in the block propagates.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    /// Once one end is kept, its attributes (`read_message`, `write_message`, …).
    fn __getattr__<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let only = {
            let held = self.held();
            match (&held.reader, &held.writer) {
                (Some(r), None) => Some(r.clone_ref(py)),
                (None, Some(w)) => Some(w.clone_ref(py)),
                _ => None,
            }
        };
        match only {
            Some(end) => end.into_bound(py).getattr(name),
            None => Err(PyAttributeError::new_err(format!(
                "'AtomicPipeEnds' object has no attribute '{name}' (holding both ends or none: \
                 call reader() or writer() first)"
            ))),
        }
    }

    fn __repr__(&self) -> String {
        let held = self.held();
        match (held.reader.is_some(), held.writer.is_some()) {
            (true, true) => "<AtomicPipeEnds reader+writer>".into(),
            (true, false) => "<AtomicPipeEnds reader>".into(),
            (false, true) => "<AtomicPipeEnds writer>".into(),
            (false, false) => "<AtomicPipeEnds closed>".into(),
        }
    }
}
