//! What a read asks for and what it gives back: how long it may wait (`Patience`, checked
//! under the reader's lock), and the message, burst and line objects Python receives.

use super::state::{closed, End, State};
use super::TIMEOUT;
use fdkit::atomic_pipe::{Event, Mode, Wait, Writer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyTuple, PyType};

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

/// `Decompressed`, made once: `class Decompressed(bytes)`, whose instances carry the zstd
/// frame they travelled as in `.compressed` (keep_compressed).
static DECOMPRESSED: PyOnceLock<Py<PyType>> = PyOnceLock::new();

pub fn decompressed_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    DECOMPRESSED
        .get_or_try_init(py, || {
            let builtins = py.import("builtins")?;
            let namespace = PyDict::new(py);
            namespace.set_item("__module__", "fdkit._fdkit")?;
            namespace.set_item(
                "__doc__",
                "bytes: a message or burst as it was sent (decompressed), with the zstd \
                 frame it travelled as in `.compressed` (an AtomicPipe with \
                 keep_compressed=True returns these).",
            )?;
            let class = builtins.getattr("type")?.call1((
                "Decompressed",
                (builtins.getattr("bytes")?,),
                namespace,
            ))?;
            Ok(class.cast_into::<PyType>()?.unbind())
        })
        .map(|class| class.bind(py))
}

/// `data` as Python bytes; with a kept compressed frame, a `Decompressed` carrying it.
fn data_object<'py>(
    py: Python<'py>,
    data: &[u8],
    kept: Option<&[u8]>,
) -> PyResult<Bound<'py, PyAny>> {
    let bytes = PyBytes::new(py, data).into_any();
    let Some(frame) = kept else {
        return Ok(bytes);
    };
    let out = decompressed_type(py)?.call1((bytes,))?;
    out.setattr("compressed", PyBytes::new(py, frame))?;
    Ok(out)
}

/// A message for Python: its bytes, or `(pid, tid, bytes)` when the caller asked who wrote it
/// (the bytes a `Decompressed` when a compressed frame was kept).
pub(super) fn message_object<'py>(
    py: Python<'py>,
    writer: Writer,
    data: &[u8],
    with_writer: bool,
    kept: Option<&[u8]>,
) -> PyResult<Bound<'py, PyAny>> {
    let bytes = data_object(py, data, kept)?;
    if !with_writer {
        return Ok(bytes);
    }
    Ok((writer.pid, writer.tid, bytes)
        .into_pyobject(py)?
        .into_any())
}

/// `(kind, data)` (data a `Decompressed` when a compressed frame was kept).
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
    PyTuple::new(
        py,
        [
            kind.into_pyobject(py)?.into_any(),
            data_object(py, &data, kept)?,
        ],
    )
}
