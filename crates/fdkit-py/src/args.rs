//! Argument extraction: fds, counts and paths, checked before any syscall.
//!
//! Every check here exists so that no Python value can crash the process: a negative fd would
//! trip `BorrowedFd`'s invariant, a huge count would abort on allocation.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::os::fd::{BorrowedFd, RawFd};
use std::time::Duration;

/// A file descriptor argument: a non-negative `int` that fits a C `int`.
#[derive(Clone, Copy)]
pub struct Fd(pub RawFd);

impl<'a, 'py> FromPyObject<'a, 'py> for Fd {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let v = int_arg(obj, "fd")?;
        if (0..=i64::from(i32::MAX)).contains(&v) {
            Ok(Fd(v as RawFd))
        } else {
            Err(PyValueError::new_err(format!(
                "fd must be a non-negative int, got {v}"
            )))
        }
    }
}

impl Fd {
    /// The fd as a borrow for one syscall.
    pub fn borrow(self) -> BorrowedFd<'static> {
        // SAFETY: `self.0` is in 0..=i32::MAX (checked at extraction), so it is never the -1
        // niche `BorrowedFd` forbids. Whether it names an open file is the kernel's to check:
        // a closed number gives EBADF, never memory unsafety. Like `os.read`, the fd's
        // ownership stays with the Python caller.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

/// A byte count or offset argument: a non-negative `int`.
#[derive(Clone, Copy)]
pub struct Count(pub u64);

impl<'a, 'py> FromPyObject<'a, 'py> for Count {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let v = int_arg(obj, "count")?;
        u64::try_from(v)
            .map(Count)
            .map_err(|_| PyValueError::new_err(format!("must be a non-negative int, got {v}")))
    }
}

impl Count {
    /// The count as `usize`, clamped to what one kernel call moves anyway.
    pub fn clamped(self) -> usize {
        self.0.min(fdkit::fd::MAX_RW_COUNT as u64) as usize
    }
}

/// Extracts an `int` (anything with `__index__`), turning overflow into `ValueError`.
pub fn int_arg(obj: Borrowed<'_, '_, PyAny>, what: &str) -> PyResult<i64> {
    obj.extract::<i64>().map_err(|e| {
        if e.is_instance_of::<PyOverflowError>(obj.py()) {
            PyValueError::new_err(format!(
                "{what} out of range: {}",
                obj.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        } else {
            e
        }
    })
}

/// An integer argument of type `T` (flags, levels, modes, counts): overflow and values outside
/// `T`'s range are `ValueError`, like every other bad argument, rather than `OverflowError`.
/// Used with `#[pyo3(from_py_with = ...)]` so signatures keep their plain defaults.
fn ranged<T: TryFrom<i64>>(obj: &Bound<'_, PyAny>) -> PyResult<T> {
    let v = int_arg(obj.as_borrowed(), "integer argument")?;
    T::try_from(v)
        .map_err(|_| PyValueError::new_err(format!("{v} is out of range for this argument")))
}

/// [`ranged`] for `u32` arguments.
pub fn u32_arg(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    ranged(obj)
}

/// [`ranged`] for `i32` arguments.
pub fn i32_arg(obj: &Bound<'_, PyAny>) -> PyResult<i32> {
    ranged(obj)
}

/// [`ranged`] for `u16` arguments (ports).
pub fn u16_arg(obj: &Bound<'_, PyAny>) -> PyResult<u16> {
    ranged(obj)
}

/// [`ranged`] for `i64` arguments (offsets).
pub fn i64_arg(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    ranged(obj)
}

/// An integer type an argument may be read as by [`int_in_range`], with its bounds for the
/// message.
pub trait IntRange: TryFrom<i64> + std::fmt::Display {
    /// The smallest value.
    const LOW: Self;
    /// The largest value.
    const HIGH: Self;
}

impl IntRange for u16 {
    const LOW: Self = u16::MIN;
    const HIGH: Self = u16::MAX;
}

impl IntRange for u32 {
    const LOW: Self = u32::MIN;
    const HIGH: Self = u32::MAX;
}

/// An `int` argument (anything with `__index__`, as `socket` takes a port) named `what` that
/// must fit `T`: another type is a `TypeError`, a value outside `T` a `ValueError`, each
/// naming the argument (and the range). A port, an IPv6 flow label or scope id.
pub fn int_in_range<T: IntRange>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<T> {
    let out_of_range = || {
        PyValueError::new_err(format!(
            "{what} must be {}..={}, got {}",
            T::LOW,
            T::HIGH,
            obj.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    };
    match obj.extract::<i64>() {
        Ok(v) => T::try_from(v).map_err(|_| out_of_range()),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => Err(out_of_range()),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{what} must be an int, not {}",
            type_name(obj)
        ))),
    }
}

/// A port: an int in 0..=65535 ([`int_in_range`]), whether alone (`serve_static(port=...)`)
/// or in an address tuple.
pub fn port_arg(obj: &Bound<'_, PyAny>) -> PyResult<u16> {
    int_in_range(obj, "port")
}

/// The longest timeout or duration an argument may ask for, in seconds: what fits a signed
/// 64-bit count of nanoseconds (about 292 years), the limit CPython's own timeouts have
/// (`time.sleep`, `select`). Longer would overflow an `Instant` deadline or a kernel
/// `timespec` further down.
pub const MAX_SECONDS: f64 = 9_223_372_036.0;

/// What a duration beyond [`MAX_SECONDS`] (`inf` included) means at a call site.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Huge {
    /// Refused with a `ValueError` that says "too large" and gives the limit: the value ends
    /// up in a deadline, a kernel `timespec` or a server's configuration, which must hold it.
    Refuse,
    /// Waits forever, as `inf` (or `1e300`) naturally says: `poll` and `AtomicPipe`'s waits,
    /// which already take None for "no limit" and always took `inf` too. The duration is
    /// `Duration::MAX`, which the core reads as no deadline (past what an `Instant` holds).
    Forever,
}

/// The one way a duration in seconds is read from Python: the argument's name (for the
/// messages), whether 0 is allowed (a wait that returns at once) or the value must be
/// positive (an idle timeout), and what a huge value means ([`Huge`]).
///
/// Every refusal is a `ValueError` that names the argument, the value as Python spells it,
/// and the real cause: NaN, below the minimum, or too large (with the limit).
#[derive(Clone, Copy, Debug)]
pub struct Seconds {
    /// The argument's name, as the user typed it: `timeout`, `idle_timeout`.
    pub what: &'static str,
    /// Whether 0 is allowed; if not, the value must be > 0.
    pub zero_ok: bool,
    /// What a value over [`MAX_SECONDS`] means.
    pub huge: Huge,
}

impl Seconds {
    /// A wait that may be 0 (do not wait); over [`MAX_SECONDS`] is refused.
    pub const fn wait(what: &'static str) -> Self {
        Seconds {
            what,
            zero_ok: true,
            huge: Huge::Refuse,
        }
    }

    /// A wait that may be 0; over [`MAX_SECONDS`] (`inf`) waits forever.
    pub const fn wait_or_forever(what: &'static str) -> Self {
        Seconds {
            what,
            zero_ok: true,
            huge: Huge::Forever,
        }
    }

    /// A timeout that must be positive (0 would end every connection at once); over
    /// [`MAX_SECONDS`] is refused.
    pub const fn positive(what: &'static str) -> Self {
        Seconds {
            what,
            zero_ok: false,
            huge: Huge::Refuse,
        }
    }

    /// Reads `t` (PyO3 has already refused a non-number, naming its type).
    pub fn of(self, t: f64) -> PyResult<Duration> {
        let what = self.what;
        let shown = float_repr(t);
        if t.is_nan() {
            return Err(PyValueError::new_err(format!(
                "{what} must be a number of seconds, got {shown}"
            )));
        }
        if t < 0.0 || (t == 0.0 && !self.zero_ok) {
            let bound = if self.zero_ok { ">= 0" } else { "> 0" };
            return Err(PyValueError::new_err(format!(
                "{what} must be {bound} seconds, got {shown}"
            )));
        }
        if t > MAX_SECONDS {
            return match self.huge {
                Huge::Forever => Ok(Duration::MAX),
                Huge::Refuse => Err(self.too_large(&shown)),
            };
        }
        Ok(Duration::from_secs_f64(t))
    }

    /// [`Seconds::of`] for an optional argument (None stays None: the caller's default).
    pub fn of_opt(self, t: Option<f64>) -> PyResult<Option<Duration>> {
        t.map(|t| self.of(t)).transpose()
    }

    /// Reads a Python object that must be an `int` or a `float`: a wrong type is a
    /// `TypeError` naming the argument and the type; an int too large even for a float is
    /// as large as any value over [`MAX_SECONDS`].
    pub fn extract(self, obj: &Bound<'_, PyAny>) -> PyResult<Duration> {
        let is_number = obj.is_instance_of::<pyo3::types::PyFloat>()
            || obj.is_instance_of::<pyo3::types::PyInt>();
        if !is_number {
            return Err(PyTypeError::new_err(format!(
                "{} must be a number of seconds (int or float), not {}",
                self.what,
                type_name(obj)
            )));
        }
        match obj.extract::<f64>() {
            Ok(t) => self.of(t),
            Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => match self.huge {
                Huge::Forever => Ok(Duration::MAX),
                Huge::Refuse => Err(self.too_large(
                    &obj.repr()
                        .map(|r| r.to_string())
                        .unwrap_or_else(|_| "?".into()),
                )),
            },
            Err(e) => Err(e),
        }
    }

    fn too_large(self, shown: &str) -> PyErr {
        PyValueError::new_err(format!(
            "{} is too large: {shown} seconds (the limit is {MAX_SECONDS:.0} seconds, \
             about 292 years)",
            self.what
        ))
    }
}

/// `repr(t)` as Python writes a float: `1e+300`, `inf`, `nan`, `30.0`.
fn float_repr(t: f64) -> String {
    if t.is_nan() {
        return "nan".into();
    }
    if t.is_infinite() {
        return if t > 0.0 { "inf" } else { "-inf" }.into();
    }
    let a = t.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        // Rust's `{:e}` gives `1e300`; Python writes `1e+300`.
        let e = format!("{t:e}");
        return match e.split_once('e') {
            Some((m, x)) if !x.starts_with('-') => format!("{m}e+{x}"),
            _ => e,
        };
    }
    format!("{t:?}")
}

/// A filesystem path: `str` (UTF-8 fast path, else the filesystem encoding with
/// surrogateescape, as `os.fsencode` does), `bytes`, or any `os.PathLike`.
///
/// Held as a C string borrowed from the Python object when it can be: CPython keeps a NUL
/// after the UTF-8 form of a `str` and after the data of a `bytes`, so the common case costs
/// one scan for interior NULs and no copy before the syscall.
pub struct PathArg<'a>(pub Cow<'a, CStr>);

impl<'a> PathArg<'a> {
    /// Extracts a path; an embedded NUL is a `ValueError`, as in `os.open`.
    pub fn extract(obj: &'a Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(s) = obj.cast::<PyString>() {
            if let Ok(utf8) = s.to_str() {
                // SAFETY: `to_str` uses PyUnicode_AsUTF8AndSize, whose buffer is documented to
                // carry a terminating NUL after its `len` bytes; the buffer lives as long as
                // the string object, which `obj` keeps alive for `'a`.
                let with_nul = unsafe { std::slice::from_raw_parts(utf8.as_ptr(), utf8.len() + 1) };
                return Self::borrowed(with_nul);
            }
            return Self::owned(fsencode(obj)?);
        }
        if let Ok(b) = obj.cast::<PyBytes>() {
            let data = b.as_bytes();
            // SAFETY: a `bytes` object's storage always has a NUL after its `len` bytes
            // (PyBytes_AsString's contract); it lives as long as `obj`, i.e. for `'a`.
            let with_nul = unsafe { std::slice::from_raw_parts(data.as_ptr(), data.len() + 1) };
            return Self::borrowed(with_nul);
        }
        let fspath = obj
            .py()
            .import("os")?
            .call_method1("fspath", (obj,))
            .map_err(|_| {
                PyTypeError::new_err(format!(
                    "path must be str, bytes or os.PathLike, not {}",
                    type_name(obj)
                ))
            })?;
        Ok(PathArg(Cow::Owned(
            PathArg::extract(&fspath)?.0.into_owned(),
        )))
    }

    fn borrowed(with_nul: &'a [u8]) -> PyResult<Self> {
        CStr::from_bytes_with_nul(with_nul)
            .map(|c| PathArg(Cow::Borrowed(c)))
            .map_err(|_| PyValueError::new_err("embedded null byte in path"))
    }

    fn owned(bytes: Vec<u8>) -> PyResult<Self> {
        CString::new(bytes)
            .map(|c| PathArg(Cow::Owned(c)))
            .map_err(|_| PyValueError::new_err("embedded null byte in path"))
    }

    /// The path's bytes, without the terminating NUL.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.to_bytes()
    }
}

/// The Python type name of `obj`, for error messages.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

fn fsencode(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let encoded = obj.py().import("os")?.call_method1("fsencode", (obj,))?;
    Ok(encoded.cast::<PyBytes>()?.as_bytes().to_vec())
}

/// A read-only bytes-like argument, borrowed for the length of one call: a `bytes` object is
/// read in place (no buffer export), any other object through the buffer protocol
/// ([`RawBuffer`]). `str` is refused, as `os.write` refuses it.
pub enum ByteArg<'py> {
    /// A `bytes` object, read in place.
    Bytes(Bound<'py, PyBytes>),
    /// Any other exporter of a contiguous buffer.
    Buffer(RawBuffer),
}

impl<'py> ByteArg<'py> {
    /// Takes `obj`'s bytes (`TypeError` for an object without the buffer protocol).
    pub fn extract(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        match obj.cast::<PyBytes>() {
            Ok(b) => Ok(ByteArg::Bytes(b.clone())),
            Err(_) => RawBuffer::get(obj, false).map(ByteArg::Buffer),
        }
    }

    /// All the bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            ByteArg::Bytes(b) => b.as_bytes(),
            ByteArg::Buffer(b) => b.as_slice(),
        }
    }

    /// The bytes one kernel call can move (at most `MAX_RW_COUNT`, as read(2) caps them).
    pub fn for_one_call(&self) -> &[u8] {
        let all = self.as_slice();
        &all[..all.len().min(fdkit::fd::MAX_RW_COUNT)]
    }
}

/// A contiguous buffer exported by any object with the buffer protocol, whatever its item
/// format (`bytearray`, `memoryview.cast('H')`, `array('i')`, `mmap`…), as `os.write` takes.
///
/// PyO3's typed `PyBuffer<u8>` refuses non-byte formats; fdkit moves bytes, so it asks for a
/// plain byte view (`PyBUF_SIMPLE`, which also demands C-contiguity). The export pins the
/// memory (a `bytearray` cannot resize while exported) until this is dropped, which happens
/// with the GIL held: the type holds raw pointers, so it cannot cross into a GIL-free closure.
pub struct RawBuffer(Box<pyo3::ffi::Py_buffer>);

impl RawBuffer {
    /// Exports `obj`'s buffer; `writable` asks for a writable one (`TypeError` otherwise).
    pub fn get(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
        use pyo3::ffi;
        // SAFETY: an all-zero `Py_buffer` is a valid "empty" value for the C struct.
        let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
        let flags = if writable {
            ffi::PyBUF_WRITABLE
        } else {
            ffi::PyBUF_SIMPLE
        };
        // SAFETY: `obj` is a live object and `view` a live, writable Py_buffer; on success the
        // exporter fills it and we own one release, done in `Drop`.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) } != 0 {
            let err = PyErr::fetch(obj.py());
            return Err(PyTypeError::new_err(format!(
                "a {}bytes-like object is required, not {} ({err})",
                if writable { "writable " } else { "" },
                type_name(obj)
            )));
        }
        Ok(RawBuffer(view))
    }

    /// The buffer's bytes. Python code may write into the same memory from another thread
    /// while a syscall reads it, exactly as with `os.write`; the export keeps the allocation
    /// alive and in place.
    pub fn as_slice(&self) -> &[u8] {
        if self.0.len == 0 {
            return &[];
        }
        // SAFETY: a PyBUF_SIMPLE/PyBUF_WRITABLE export is one C-contiguous block of `len`
        // bytes at `buf`, valid until released in `Drop`.
        unsafe { std::slice::from_raw_parts(self.0.buf.cast::<u8>(), self.0.len as usize) }
    }

    /// The buffer as memory the kernel may fill (only for a writable export).
    pub fn as_uninit_mut(&mut self) -> &mut [std::mem::MaybeUninit<u8>] {
        if self.0.len == 0 || self.0.readonly != 0 {
            return &mut [];
        }
        // SAFETY: as in `as_slice`, and the export is writable (checked); viewing initialised
        // bytes as `MaybeUninit` is always allowed.
        unsafe { std::slice::from_raw_parts_mut(self.0.buf.cast(), self.0.len as usize) }
    }
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        // SAFETY: the view was filled by a successful PyObject_GetBuffer and is released once.
        // `RawBuffer` is !Send (raw pointers), so it is only ever dropped on a thread that
        // holds the GIL, as PyBuffer_Release requires.
        unsafe { pyo3::ffi::PyBuffer_Release(&mut *self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        for (t, text) in [
            (1e300, "1e+300"),
            (30.0, "30.0"),
            (0.5, "0.5"),
            (-1.0, "-1.0"),
            (0.0, "0.0"),
            (1e-5, "1e-5"),
            (9223372037.0, "9223372037.0"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
        ] {
            assert_eq!(float_repr(t), text);
        }
    }

    #[test]
    fn max_seconds_fits_an_instant_deadline() {
        let d = Duration::from_secs_f64(MAX_SECONDS);
        assert!(std::time::Instant::now().checked_add(d).is_some());
        assert!(d.as_nanos() <= i64::MAX as u128);
    }
}
