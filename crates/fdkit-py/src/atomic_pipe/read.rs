//! What a read asks for and what it gives back: how long it may wait (`Patience`, checked
//! under the reader's lock), and the message, burst and line objects Python receives.

use super::state::{closed, End, State};
use super::TIMEOUT;
use fdkit::atomic_pipe::{Event, Mode, Wait, Writer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

/// How long a read may wait, as the caller asked.
pub(super) enum Patience {
    /// `timeout` seconds; None: as the fd's mode says (forever when blocking, not at all when
    /// not).
    Timeout(Option<f64>),
    /// As long as it takes, whatever the fd's mode (iteration).
    Forever,
}

/// Under the reader's lock: refuses a stream in the other mode, turns `patience` into a
/// [`Wait`], and refuses a closed pipe (in that order).
pub(super) fn read_wait(state: &State, mode: Mode, patience: Patience) -> PyResult<Wait> {
    let End::Reader(r) = &state.end else {
        unreachable!("need_reader checked the end");
    };
    if r.mode() != mode {
        return Err(PyValueError::new_err(match mode {
            Mode::Normal => {
                "read_message() reads normal-mode streams; in mixed data mode use \
                 get_line_burst_or_data()"
            }
            Mode::Mixed => "get_line_burst_or_data() needs mixed data mode (set_mixed_data_mode())",
        }));
    }
    let wait = match patience {
        Patience::Forever => Wait::Until(None),
        Patience::Timeout(t) => match TIMEOUT.of_opt(t)? {
            Some(t) => Wait::timeout(Some(t)),
            None if r.is_blocking() => Wait::Until(None),
            None => Wait::Never,
        },
    };
    if r.is_closed() {
        return Err(closed());
    }
    Ok(wait)
}

/// What one read found.
pub(super) enum Next {
    /// An event, and (keep_compressed) the compressed frame of a message or burst.
    Event(Event, Option<Vec<u8>>),
    Peek(Py<PyBytes>),
    Nothing,
}

/// A message for Python: its bytes, or `(pid, tid, bytes)` when the caller asked who wrote it;
/// with a kept compressed frame, `(bytes, compressed)` / `(pid, tid, bytes, compressed)`.
pub(super) fn message_object<'py>(
    py: Python<'py>,
    writer: Writer,
    data: &[u8],
    with_writer: bool,
    kept: Option<&[u8]>,
) -> PyResult<Bound<'py, PyAny>> {
    let bytes = PyBytes::new(py, data).into_any();
    let kept = kept.map(|k| PyBytes::new(py, k).into_any());
    Ok(match (with_writer, kept) {
        (false, None) => bytes,
        (false, Some(k)) => (bytes, k).into_pyobject(py)?.into_any(),
        (true, None) => (writer.pid, writer.tid, bytes)
            .into_pyobject(py)?
            .into_any(),
        (true, Some(k)) => (writer.pid, writer.tid, bytes, k)
            .into_pyobject(py)?
            .into_any(),
    })
}

/// `(kind, data)`, or `(kind, data, compressed)` with a kept compressed frame.
pub(super) fn event_tuple<'py>(
    py: Python<'py>,
    event: Event,
    kept: Option<&[u8]>,
) -> PyResult<Bound<'py, PyTuple>> {
    let (kind, data) = match event {
        Event::Message { data, .. } => ("message", data),
        Event::Burst(data) => ("burst", data),
        Event::Line(data) => ("line", data),
    };
    let mut items = vec![
        kind.into_pyobject(py)?.into_any(),
        PyBytes::new(py, &data).into_any(),
    ];
    if let Some(k) = kept {
        items.push(PyBytes::new(py, k).into_any());
    }
    PyTuple::new(py, items)
}
