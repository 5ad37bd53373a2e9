//! `AtomicPipe`'s keyword options (`mixed_data_mode`, `compression`, `level`, `dictionary`,
//! `keep_compressed`), checked before any fd is taken over, and the setters' arguments.

use crate::args::{type_name, PathArg, RawBuffer};
use crate::errors::io_error_named;
use fdkit::atomic_pipe::{Compression, Compressor, Decompressor, DEFAULT_LEVEL};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use std::os::unix::ffi::OsStrExt;

/// The options every constructor takes (and the setters change later). The level and the
/// dictionary are remembered while compression is off, as Atomic::Pipe keeps them.
#[derive(Default, Clone)]
pub struct Options {
    pub mixed: bool,
    /// Whether zstd compression is on.
    pub zstd: bool,
    /// The zstd level set (None: [`fdkit::atomic_pipe::DEFAULT_LEVEL`]).
    pub level: Option<i32>,
    /// The dictionary's bytes.
    pub dictionary: Option<Vec<u8>>,
    pub keep_compressed: bool,
}

impl Options {
    /// Parses `**options`; unknown names are a `TypeError`, as for any Python call.
    pub fn parse(options: Option<&Bound<'_, PyDict>>) -> PyResult<Options> {
        let mut out = Options::default();
        let Some(options) = options else {
            return Ok(out);
        };
        let get = |name: &str| options.get_item(name);
        for key in options.keys() {
            let key: String = key.extract()?;
            if !matches!(
                key.as_str(),
                "mixed_data_mode" | "compression" | "level" | "dictionary" | "keep_compressed"
            ) {
                return Err(PyTypeError::new_err(format!(
                    "unexpected keyword argument '{key}'"
                )));
            }
        }
        if let Some(v) = get("mixed_data_mode")? {
            out.mixed = v.is_truthy()?;
        }
        out.keep_compressed = match get("keep_compressed")? {
            Some(v) => v.is_truthy()?,
            None => false,
        };
        let codec = get("compression")?;
        let level = get("level")?;
        let dictionary = get("dictionary")?;
        let codec = match &codec {
            Some(c) if !c.is_none() => Some(c.extract::<String>()?),
            _ => None,
        };
        out.zstd = codec_arg(codec.as_deref())?;
        if !out.zstd && (level.is_some() || dictionary.is_some()) {
            return Err(PyValueError::new_err(
                "level and dictionary need compression='zstd'",
            ));
        }
        out.level = level_arg(level.as_ref())?;
        out.dictionary = dictionary_arg(dictionary.as_ref())?;
        out.check()?;
        Ok(out)
    }

    /// The core's compression config, None when compression is off.
    pub fn compression(&self) -> Option<Compression> {
        self.zstd.then(|| Compression {
            level: self.level.unwrap_or(DEFAULT_LEVEL),
            dictionary: self.dictionary.clone(),
        })
    }

    /// Checked here, before any fd is taken over: zstd refuses a malformed trained dictionary
    /// (raw content is always accepted).
    pub fn check(&self) -> PyResult<()> {
        let Some(config) = self.compression() else {
            return Ok(());
        };
        Compressor::new(&config)
            .and_then(|_| Decompressor::new(&config))
            .map_err(|e| PyValueError::new_err(format!("zstd refused the settings: {e}")))?;
        Ok(())
    }
}

/// `compression=`: True for 'zstd', False for None, ValueError for anything else.
pub fn codec_arg(codec: Option<&str>) -> PyResult<bool> {
    match codec {
        None => Ok(false),
        Some("zstd") => Ok(true),
        Some(other) => Err(PyValueError::new_err(format!(
            "unknown compression {other:?}: only 'zstd' is supported"
        ))),
    }
}

/// A zstd level, checked (None or Python None: not given).
pub fn level_arg(level: Option<&Bound<'_, PyAny>>) -> PyResult<Option<i32>> {
    let Some(level) = level.filter(|l| !l.is_none()) else {
        return Ok(None);
    };
    let (min, max) = (zstd_min_level(), 22);
    let out_of_range = || {
        PyValueError::new_err(format!(
            "zstd level {} is out of range ({min}..={max})",
            level
                .repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| "?".into())
        ))
    };
    // An int too large for i64 (OverflowError) is out of range, not of the wrong type.
    let lvl: i64 = level.extract().map_err(|e: PyErr| {
        if e.is_instance_of::<PyOverflowError>(level.py()) {
            out_of_range()
        } else {
            PyTypeError::new_err(format!("level must be an int, not {}", type_name(level)))
        }
    })?;
    if !(min..=max).contains(&lvl) {
        return Err(out_of_range());
    }
    Ok(Some(lvl as i32))
}

/// A dictionary (bytes, a buffer, or a path to a file), or None.
pub fn dictionary_arg(dict: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<u8>>> {
    dict.filter(|d| !d.is_none())
        .map(dictionary_bytes)
        .transpose()
}

fn zstd_min_level() -> i64 {
    -(1 << 17)
}

/// A dictionary given as bytes (raw content) or as a path to a file holding it.
fn dictionary_bytes(dict: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(b) = dict.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    let is_path = dict.is_instance_of::<PyString>() || dict.hasattr("__fspath__").unwrap_or(false);
    if is_path {
        let path = PathArg::extract(dict)?;
        let path = std::ffi::OsStr::from_bytes(path.as_bytes());
        return std::fs::read(path).map_err(|e| io_error_named(&e, Some(dict.clone().unbind())));
    }
    RawBuffer::get(dict, false).map(|b| b.as_slice().to_vec())
}
