//! Waiting for fds to become ready: `poll`. See poll(2).

use crate::args::{type_name, Fd, Seconds};
use crate::gil::with_signals;
use fdkit::fd;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use rustix::event::{PollFd, PollFlags};

/// `poll(fds, timeout=None)`: `fds` is an iterable of `(fd, events)` pairs (events from
/// `select.POLLIN`, …); waits up to `timeout` seconds (`None` forever, 0 not at all) and
/// returns `[(fd, revents), …]` for the fds with events, `[]` on timeout. Keeps its deadline
/// across signals; Ctrl-C interrupts it. See poll(2).
#[pyfunction]
#[pyo3(signature = (fds, timeout=None))]
pub fn poll<'py>(
    py: Python<'py>,
    fds: &Bound<'py, PyAny>,
    timeout: Option<f64>,
) -> PyResult<Bound<'py, PyList>> {
    // `inf` (or any value past ~292 years) waits forever, as None does.
    let timeout = Seconds::wait_or_forever("timeout").of_opt(timeout)?;
    let mut wanted: Vec<(Fd, u16)> = Vec::new();
    for item in fds.try_iter()? {
        let item = item?;
        let pair = item
            .cast::<PyTuple>()
            .map_err(|_| PyTypeError::new_err("poll() wants (fd, events) pairs"))?;
        if pair.len() != 2 {
            return Err(PyTypeError::new_err("poll() wants (fd, events) pairs"));
        }
        let fd: Fd = pair.get_item(0)?.extract()?;
        let events_obj = pair.get_item(1)?;
        let events: u16 = events_obj.extract().map_err(|e: PyErr| {
            // An int out of u16's range overflows; anything else is the wrong type.
            if e.is_instance_of::<PyOverflowError>(py) {
                PyValueError::new_err(format!(
                    "poll() events must be in 0..=65535, got {}",
                    events_obj.repr().map(|r| r.to_string()).unwrap_or_default()
                ))
            } else {
                PyTypeError::new_err(format!(
                    "poll() events must be an int, not {}",
                    type_name(&events_obj)
                ))
            }
        })?;
        wanted.push((fd, events));
    }
    let mut pollfds: Vec<PollFd<'_>> = wanted
        .iter()
        .map(|(fd, ev)| PollFd::from_borrowed_fd(fd.borrow(), PollFlags::from_bits_retain(*ev)))
        .collect();
    with_signals(py, |checkpoint| fd::poll(&mut pollfds, timeout, checkpoint))?;
    let ready = PyList::empty(py);
    for (pfd, (fd, _)) in pollfds.iter().zip(&wanted) {
        let revents = pfd.revents().bits();
        if revents != 0 {
            ready.append((fd.0, revents))?;
        }
    }
    Ok(ready)
}
