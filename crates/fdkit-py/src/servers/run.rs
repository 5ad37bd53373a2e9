//! Running a native server loop from Python: the GIL released for the whole run, signal
//! handlers run at the loop's checkpoints, log lines to stderr, the stats back as a dict.

use crate::gil::Signals;
use fdkit::fd::Errno;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::io::{self, Write};

/// Runs `run` (the server loop) with the GIL released. A signal handler's exception (Ctrl-C,
/// or the `SIGTERM` handler Python code installed) stops the loop and is raised with the stats
/// attached as `stats_attr`; otherwise the stats come back as a dict. `quiet` drops the loop's
/// log lines.
pub fn run_server<'py, S: Send>(
    py: Python<'py>,
    quiet: bool,
    stats_attr: &str,
    run: impl FnOnce(
            &mut (dyn FnMut() -> Result<(), Errno> + Send),
            &mut (dyn FnMut(&str) + Send),
        ) -> io::Result<S>
        + Send,
    to_dict: impl FnOnce(Python<'py>, &S) -> PyResult<Bound<'py, PyDict>>,
    io_error: impl FnOnce(io::Error) -> PyErr,
) -> PyResult<Bound<'py, PyDict>> {
    let mut signals = Signals::default();
    let result = py.detach(|| {
        let mut log = |line: &str| {
            if !quiet {
                write_stderr(line);
            }
        };
        run(&mut signals.checkpoint(), &mut log)
    });
    let raised = signals.take_raised();
    match result {
        Ok(stats) => {
            let dict = to_dict(py, &stats)?;
            match raised {
                Some(raised) => {
                    // Best effort: an exception type with __slots__ cannot take the attribute.
                    let _ = raised.value(py).setattr(stats_attr, &dict);
                    Err(raised)
                }
                None => Ok(dict),
            }
        }
        Err(e) => Err(raised.unwrap_or_else(|| io_error(e))),
    }
}

/// One log line to fd 2 in one `write` (Rust's stderr is unbuffered); errors are dropped, as
/// a server's logging must never stop it.
pub fn write_stderr(line: &str) {
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    let _ = io::stderr().lock().write_all(&buf);
}
