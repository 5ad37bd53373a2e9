//! The io_uring probe for Python: `fdkit.uring.probe()` and `fdkit doctor` read it; and the
//! kernel floor of the io_uring engines, which `fdkit.aio` reads.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `uring_probe()`: `{"available": bool, "reason": str | None, "ops": {name: bool},
/// "defer_taskrun": bool, "skip_success": bool}`. Releases the GIL while the kernel is asked.
#[pyfunction]
pub fn uring_probe(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let a = py.detach(fdkit::uring::probe);
    let d = PyDict::new(py);
    d.set_item("available", a.available)?;
    d.set_item("reason", a.reason)?;
    let ops = PyDict::new(py);
    for op in &a.ops {
        ops.set_item(op.name, op.supported)?;
    }
    d.set_item("ops", ops)?;
    d.set_item("defer_taskrun", a.defer_taskrun)?;
    d.set_item("skip_success", a.skip_success)?;
    Ok(d)
}

/// `uring_kernel_check(what)`: None when this kernel is at least the one fdkit's io_uring
/// engines need (the core's `MIN_KERNEL`, Linux 6.0), else why `what` cannot run here
/// (`"{what} needs Linux 6.0; this kernel is {release}"`). `fdkit.aio` asks it before setting
/// its reactor up; the static server asks the same in Rust. See uname(2).
#[pyfunction]
pub fn uring_kernel_check(what: &str) -> Option<String> {
    fdkit::uring::KernelVersion::running().check_min(what).err()
}
