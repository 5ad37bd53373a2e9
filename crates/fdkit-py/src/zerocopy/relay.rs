//! Relaying between sockets without copying through user space: `proxy` (both directions,
//! half-closes passed on) and `relay` (one direction, teed to a recording). See splice(2),
//! tee(2).

use crate::args::{Fd, Seconds};
use crate::gil::with_signals;
use fdkit::zerocopy;
use pyo3::prelude::*;

/// `proxy(a_fd, b_fd, *, idle_timeout=None)`: relays both directions between two connected
/// stream sockets until both end, passing half-closes on; returns `(a_to_b, b_to_a)`. A reset
/// on one side is passed on as a reset to the other (after the bytes before it), then raised.
#[pyfunction]
#[pyo3(signature = (a_fd, b_fd, *, idle_timeout=None))]
pub fn proxy(
    py: Python<'_>,
    a_fd: Fd,
    b_fd: Fd,
    idle_timeout: Option<f64>,
) -> PyResult<(u64, u64)> {
    let idle = Seconds::positive("idle_timeout").of_opt(idle_timeout)?;
    with_signals(py, |cp| {
        zerocopy::proxy(a_fd.borrow(), b_fd.borrow(), idle, cp)
    })
}

/// `relay(src_fd, dst_fd, *, record_fd=None)`: everything from `src_fd` to `dst_fd` until
/// the source ends, teed to `record_fd` when given; returns the bytes relayed. A reset of
/// either TCP side is passed on as a reset to the other, then raised.
#[pyfunction]
#[pyo3(signature = (src_fd, dst_fd, *, record_fd=None))]
pub fn relay(py: Python<'_>, src_fd: Fd, dst_fd: Fd, record_fd: Option<Fd>) -> PyResult<u64> {
    with_signals(py, |cp| {
        zerocopy::relay(
            src_fd.borrow(),
            dst_fd.borrow(),
            record_fd.map(Fd::borrow),
            cp,
        )
    })
}
