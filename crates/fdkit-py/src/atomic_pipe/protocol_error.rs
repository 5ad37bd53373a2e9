//! `ProtocolError`: a stream that broke the Atomic::Pipe wire format, as a `ValueError`
//! subclass with the core error's details as attributes.
//!
//! Its module is `fdkit._fdkit`, where it lives, so that `pickle` finds the class again (a
//! `ProtocolError` crosses process boundaries: `multiprocessing`, `concurrent.futures`).
//! Pickling keeps `args` and the attributes, which are plain values in the instance dict.

use fdkit::atomic_pipe::{ProtocolError as CoreProtocolError, ProtocolErrorKind};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

pyo3::create_exception!(
    fdkit._fdkit,
    ProtocolError,
    PyValueError,
    "The stream broke the Atomic::Pipe wire format; `.writer` is (pid, tid) or None, \
     `.offset` the stream byte offset, `.kind` a short name, `.fatal` whether the stream \
     can be read further."
);

/// The core's protocol error as `ProtocolError(message)` with `writer`, `offset`, `kind`.
pub fn protocol_error(py: Python<'_>, e: &CoreProtocolError) -> PyErr {
    let err = ProtocolError::new_err(e.to_string());
    let value = err.value(py);
    let writer = e.writer().map(|w| (w.pid, w.tid));
    // Setting attributes on a fresh exception instance cannot fail short of memory
    // exhaustion; the error message already says it all if it did.
    let _ = value.setattr("writer", writer);
    let _ = value.setattr("offset", e.offset());
    let _ = value.setattr("kind", kind_name(e.kind()));
    let _ = value.setattr("fatal", e.is_fatal());
    err
}

fn kind_name(kind: ProtocolErrorKind) -> &'static str {
    match kind {
        ProtocolErrorKind::TruncatedChunk { .. } => "truncated_chunk",
        ProtocolErrorKind::TruncatedBurst { .. } => "truncated_burst",
        ProtocolErrorKind::IncompleteMessage { .. } => "incomplete_message",
        ProtocolErrorKind::ChunkTooLarge { .. } => "chunk_too_large",
        ProtocolErrorKind::ChunkOutOfOrder { .. } => "chunk_out_of_order",
        ProtocolErrorKind::MissingFrameEnd { .. } => "missing_frame_end",
        ProtocolErrorKind::BadBurst => "bad_burst",
        ProtocolErrorKind::BadCompressedData { .. } => "bad_compressed_data",
        _ => "protocol_error",
    }
}
