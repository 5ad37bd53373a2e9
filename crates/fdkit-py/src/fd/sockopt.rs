//! Socket options with an int value: `getsockopt`, `setsockopt`. See getsockopt(2), socket(7).

use crate::args::{i32_arg, Count, Fd, RawBuffer};
use crate::errors::os_error;
use fdkit::fd;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// `getsockopt(fd, level, optname, buflen=None)`: an int when `buflen` is None, else up to
/// `buflen` bytes (at most 1024). See getsockopt(2).
#[pyfunction]
#[pyo3(signature = (fd, level, optname, buflen=None))]
pub fn getsockopt<'py>(
    py: Python<'py>,
    fd: Fd,
    #[pyo3(from_py_with = i32_arg)] level: i32,
    #[pyo3(from_py_with = i32_arg)] optname: i32,
    buflen: Option<Count>,
) -> PyResult<Bound<'py, PyAny>> {
    match buflen {
        None => {
            let v = fd::getsockopt_int(fd.borrow(), level, optname).map_err(os_error)?;
            Ok(v.into_pyobject(py)?.into_any())
        }
        Some(Count(n)) => {
            if n == 0 || n > fd::MAX_SOCKOPT_LEN as u64 {
                return Err(PyValueError::new_err(format!(
                    "buflen must be 1..={}, got {n}",
                    fd::MAX_SOCKOPT_LEN
                )));
            }
            let mut buf = vec![0u8; n as usize];
            let got =
                fd::getsockopt_raw(fd.borrow(), level, optname, &mut buf).map_err(os_error)?;
            Ok(PyBytes::new(py, &buf[..got]).into_any())
        }
    }
}

/// `setsockopt(fd, level, optname, value)`: `value` is an int or a bytes-like object (at most
/// 1024 bytes). See setsockopt(2).
#[pyfunction]
pub fn setsockopt(
    fd: Fd,
    #[pyo3(from_py_with = i32_arg)] level: i32,
    #[pyo3(from_py_with = i32_arg)] optname: i32,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    if value.is_instance_of::<pyo3::types::PyInt>() {
        let v = i32_arg(value)?;
        return fd::setsockopt_int(fd.borrow(), level, optname, v).map_err(os_error);
    }
    let buf = RawBuffer::get(value, false)
        .map_err(|_| PyTypeError::new_err("option value must be an int or bytes-like"))?;
    let bytes = buf.as_slice();
    if bytes.len() > fd::MAX_SOCKOPT_LEN {
        return Err(PyValueError::new_err(format!(
            "option value is {} bytes; at most {} allowed",
            bytes.len(),
            fd::MAX_SOCKOPT_LEN
        )));
    }
    fd::setsockopt_raw(fd.borrow(), level, optname, bytes).map_err(os_error)
}
