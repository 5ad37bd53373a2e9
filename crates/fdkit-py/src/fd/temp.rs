//! Temporary files and directories with random names: `mkstemp`, `mkdtemp`. See mkstemp(3),
//! mkdtemp(3).

use crate::args::PathArg;
use crate::errors::FsError;
use crate::gil::fs_call;
use fdkit::fd;
use pyo3::prelude::*;
use std::ffi::OsStr;
use std::os::fd::{IntoRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn temp_dir(dir: Option<&Bound<'_, PyAny>>) -> PyResult<std::path::PathBuf> {
    match dir {
        Some(d) => Ok(Path::new(OsStr::from_bytes(PathArg::extract(d)?.as_bytes())).to_path_buf()),
        None => Ok(std::env::temp_dir()),
    }
}

/// A temporary-name failure names the directory it was made in, as `tempfile` does.
fn in_dir(e: FsError, py: Python<'_>, dir: Option<&Bound<'_, PyAny>>, dir_path: &Path) -> PyErr {
    match dir {
        Some(d) => e.with_path(d),
        None => match dir_path.as_os_str().into_pyobject(py) {
            Ok(p) => e.with_path(&p.into_any()),
            Err(never) => match never {},
        },
    }
}

fn name_part(part: &Bound<'_, PyAny>) -> PyResult<std::ffi::OsString> {
    let bytes = PathArg::extract(part)?;
    Ok(OsStr::from_bytes(bytes.as_bytes()).to_os_string())
}

/// `mkstemp(suffix="", prefix="tmp", dir=None)`: creates a new file with a random name, mode
/// 0600, opened read-write and close-on-exec; returns `(fd, path)`. `dir` defaults to
/// `$TMPDIR` or `/tmp`. See mkstemp(3).
#[pyfunction]
#[pyo3(signature = (suffix=None, prefix=None, dir=None, *, cloexec=true))]
pub fn mkstemp(
    py: Python<'_>,
    suffix: Option<&Bound<'_, PyAny>>,
    prefix: Option<&Bound<'_, PyAny>>,
    dir: Option<&Bound<'_, PyAny>>,
    cloexec: bool,
) -> PyResult<(RawFd, Py<PyAny>)> {
    let dir_path = temp_dir(dir)?;
    let suffix = suffix.map(name_part).transpose()?.unwrap_or_default();
    let prefix = prefix
        .map(name_part)
        .transpose()?
        .unwrap_or_else(|| "tmp".into());
    let (fd, path) = fs_call(py, || fd::mkstemp(&dir_path, &prefix, &suffix, cloexec))
        .map_err(|e| in_dir(e, py, dir, &dir_path))?;
    let fd = fd.into_raw_fd();
    Ok((
        fd,
        path.into_os_string().into_pyobject(py)?.into_any().unbind(),
    ))
}

/// `mkdtemp(suffix="", prefix="tmp", dir=None)`: creates a new directory with a random name,
/// mode 0700; returns its path. See mkdtemp(3).
#[pyfunction]
#[pyo3(signature = (suffix=None, prefix=None, dir=None))]
pub fn mkdtemp(
    py: Python<'_>,
    suffix: Option<&Bound<'_, PyAny>>,
    prefix: Option<&Bound<'_, PyAny>>,
    dir: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let dir_path = temp_dir(dir)?;
    let suffix = suffix.map(name_part).transpose()?.unwrap_or_default();
    let prefix = prefix
        .map(name_part)
        .transpose()?
        .unwrap_or_else(|| "tmp".into());
    let path = fs_call(py, || fd::mkdtemp(&dir_path, &prefix, &suffix))
        .map_err(|e| in_dir(e, py, dir, &dir_path))?;
    Ok(path.into_os_string().into_pyobject(py)?.into_any().unbind())
}
