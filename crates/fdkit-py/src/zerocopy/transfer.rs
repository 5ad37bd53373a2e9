//! `transfer` (the best kernel path between two fds, with fallbacks), what it did
//! (`transfer_stats`), and the pool of pipes it reuses. See splice(2), sendfile(2),
//! copy_file_range(2).

use crate::args::{Count, Fd};
use crate::gil::with_signals;
use fdkit::zerocopy::{self, TransferStats};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::cell::RefCell;

thread_local! {
    /// The calling thread's last transfer, for `transfer_stats()`.
    static LAST: RefCell<Option<TransferStats>> = const { RefCell::new(None) };
}

/// `transfer(src_fd, dst_fd, count=None, *, src_offset=None, dst_offset=None,
/// nonblocking=False)`: moves up to `count` bytes (until the source ends when None) by the
/// best kernel path for the two fds, falling back until one works. Returns the bytes moved;
/// `transfer_stats()` says how. With `nonblocking=True` it never waits: it returns
/// `(moved, would_block)` as soon as a side would block (`"read"` or `"write"`), or with
/// `would_block` None once finished (count reached or source ended).
#[pyfunction]
#[pyo3(signature = (
    src_fd, dst_fd, count=None, *, src_offset=None, dst_offset=None, nonblocking=false
))]
pub fn transfer(
    py: Python<'_>,
    src_fd: Fd,
    dst_fd: Fd,
    count: Option<Count>,
    src_offset: Option<Count>,
    dst_offset: Option<Count>,
    nonblocking: bool,
) -> PyResult<Py<PyAny>> {
    let mut src_off = src_offset.map(|c| c.0);
    let mut dst_off = dst_offset.map(|c| c.0);
    let mut stats = None;
    let run = if nonblocking {
        zerocopy::transfer_nonblocking
    } else {
        zerocopy::transfer
    };
    let moved = with_signals(py, |checkpoint| {
        let (result, done) = run(
            src_fd.borrow(),
            dst_fd.borrow(),
            count.map(|c| c.0),
            src_off.as_mut(),
            dst_off.as_mut(),
            checkpoint,
        );
        stats = Some(done);
        result
    });
    let would_block = stats.as_ref().and_then(|s| s.would_block);
    LAST.with(|l| *l.borrow_mut() = stats);
    let moved = moved?;
    if nonblocking {
        Ok((moved, would_block.map(|w| w.name()))
            .into_pyobject(py)?
            .into_any()
            .unbind())
    } else {
        Ok(moved.into_pyobject(py)?.into_any().unbind())
    }
}

/// `transfer_held(src_fd, dst_fd)`: bytes a non-blocking `transfer` took from `src_fd` and
/// keeps for `dst_fd` (the destination was full); the next transfer between the two delivers
/// them first.
#[pyfunction]
pub fn transfer_held(src_fd: Fd, dst_fd: Fd) -> u64 {
    zerocopy::held(src_fd.borrow(), dst_fd.borrow())
}

/// `transfer_stats()`: the calling thread's last `transfer`: `{"path", "bytes", "fallbacks":
/// [{"from", "to", "errno", "reason"}], "remembered"}`, or None before any transfer.
#[pyfunction]
pub fn transfer_stats(py: Python<'_>) -> PyResult<Option<Bound<'_, PyDict>>> {
    LAST.with(|l| {
        let Some(stats) = l.borrow().clone() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("path", stats.path.name())?;
        d.set_item("bytes", stats.bytes)?;
        d.set_item("remembered", stats.remembered)?;
        d.set_item("would_block", stats.would_block.map(|w| w.name()))?;
        d.set_item("held", stats.held)?;
        let fallbacks = PyList::empty(py);
        for f in &stats.fallbacks {
            let fd = PyDict::new(py);
            fd.set_item("from", f.from.name())?;
            fd.set_item("to", f.to.name())?;
            fd.set_item("errno", f.errno.map(|e| e.raw_os_error()))?;
            fd.set_item("reason", f.reason)?;
            fallbacks.append(fd)?;
        }
        d.set_item("fallbacks", fallbacks)?;
        Ok(Some(d))
    })
}

/// `pipe_pool_clear()`: closes the idle internal pipes `transfer` keeps for reuse (at most
/// 16 pairs); returns how many pairs it closed.
#[pyfunction]
pub fn pipe_pool_clear() -> usize {
    zerocopy::pool_clear()
}

/// `pipe_pool_idle()`: how many idle internal pipe pairs the pool holds.
#[pyfunction]
pub fn pipe_pool_idle() -> usize {
    zerocopy::pool_idle()
}
