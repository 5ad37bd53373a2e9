//! Python glue for `proxy_server` (being written).

use pyo3::prelude::*;

/// Adds this family's functions and classes to the native module.
pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
