//! Reading and writing: `read`, `readinto`, `write`, `pread`, `pwrite`, `recv`, `recv_into`,
//! `send`, `sendfile`, `lseek`. All release the GIL; all take any bytes-like object.

use crate::args::{i32_arg, i64_arg, u32_arg, ByteArg, Count, Fd, RawBuffer};
use crate::errors::os_error;
use crate::gil::{blocking, with_signals};
use fdkit::fd::{self, RecvFlags, SeekFrom, SendFlags};
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::mem::MaybeUninit;

/// The first `limit` bytes of a writable buffer (all when 0) for the kernel to fill.
pub(crate) fn writable_prefix(buf: &mut RawBuffer, limit: u64) -> PyResult<&mut [MaybeUninit<u8>]> {
    let all = buf.as_uninit_mut();
    let len = all.len();
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if limit > len {
        return Err(PyValueError::new_err(format!(
            "nbytes {limit} is larger than the buffer ({len} bytes)"
        )));
    }
    let n = if limit == 0 { len } else { limit };
    Ok(&mut all[..n.min(fd::MAX_RW_COUNT)])
}

/// Reads into a fresh `bytes` of at most `n` bytes, with the GIL released.
///
/// The kernel writes straight into the new `bytes` object's storage (no second buffer, no
/// copy), which is then shrunk to what arrived, as `os.read` does.
pub(crate) fn read_to_bytes<'py>(
    py: Python<'py>,
    n: Count,
    mut call: impl FnMut(&mut [MaybeUninit<u8>]) -> Result<usize, fd::Errno> + Send,
) -> PyResult<Bound<'py, PyBytes>> {
    let n = n.clamped();
    // SAFETY: `n` fits `Py_ssize_t` (clamped to 2 GiB). The writer owns an uninitialised
    // n-byte buffer, or is NULL with MemoryError set.
    let writer = unsafe { ffi::compat::PyBytesWriter_Create(n as ffi::Py_ssize_t) };
    if writer.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `writer` is live and its data pointer addresses `n` writable bytes. No other
    // code can see the writer, so lending the bytes to the kernel with the GIL released is
    // sound; viewing them as `MaybeUninit` makes no claim about their contents.
    let buf = unsafe {
        std::slice::from_raw_parts_mut(ffi::compat::PyBytesWriter_GetData(writer).cast(), n)
    };
    match blocking(py, || call(&mut *buf)) {
        Ok(got) => {
            // SAFETY: the kernel initialised `got <= n` bytes; finishing consumes `writer`
            // and returns a new reference to the bytes (or NULL with an exception set).
            let obj = unsafe { ffi::compat::PyBytesWriter_FinishWithSize(writer, got as _) };
            // SAFETY: `obj` is an owned reference from the call above, checked for NULL.
            let any = unsafe { Bound::from_owned_ptr_or_err(py, obj) }?;
            Ok(any.cast_into::<PyBytes>()?)
        }
        Err(e) => {
            // SAFETY: `writer` is live and not yet finished; discarding frees it.
            unsafe { ffi::compat::PyBytesWriter_Discard(writer) };
            Err(e)
        }
    }
}

/// `read(fd, n)`: at most `n` bytes; `b""` at end of file. See read(2).
#[pyfunction]
pub fn read<'py>(py: Python<'py>, fd: Fd, n: Count) -> PyResult<Bound<'py, PyBytes>> {
    read_to_bytes(py, n, |buf| {
        fd::read(fd.borrow(), buf).map(|(init, _)| init.len())
    })
}

/// `pread(fd, n, offset)`: at most `n` bytes at `offset`, the file position untouched.
/// See pread(2).
#[pyfunction]
pub fn pread<'py>(
    py: Python<'py>,
    fd: Fd,
    n: Count,
    offset: Count,
) -> PyResult<Bound<'py, PyBytes>> {
    read_to_bytes(py, n, |buf| {
        fd::pread(fd.borrow(), buf, offset.0).map(|(init, _)| init.len())
    })
}

/// `recv(fd, n, flags)`: at most `n` bytes from a socket. See recv(2).
#[pyfunction]
#[pyo3(signature = (fd, n, flags=0))]
pub fn recv<'py>(
    py: Python<'py>,
    fd: Fd,
    n: Count,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
) -> PyResult<Bound<'py, PyBytes>> {
    let flags = RecvFlags::from_bits_retain(flags);
    read_to_bytes(py, n, |buf| {
        fd::recv(fd.borrow(), buf, flags).map(|((init, _), _)| init.len())
    })
}

/// `readinto(fd, buffer)`: reads into a writable buffer, returns the count. See read(2).
#[pyfunction]
pub fn readinto(py: Python<'_>, fd: Fd, buffer: &Bound<'_, PyAny>) -> PyResult<usize> {
    let mut buf = RawBuffer::get(buffer, true)?;
    let slice = writable_prefix(&mut buf, 0)?;
    blocking(py, || {
        fd::read(fd.borrow(), &mut *slice).map(|(init, _)| init.len())
    })
}

/// `recv_into(fd, buffer, nbytes=0, flags=0)`: receives into a writable buffer (its first
/// `nbytes` bytes, all of it when 0), returns the count. See recv(2).
#[pyfunction]
#[pyo3(signature = (fd, buffer, nbytes=Count(0), flags=0), text_signature = "(fd, buffer, nbytes=0, flags=0)")]
pub fn recv_into(
    py: Python<'_>,
    fd: Fd,
    buffer: &Bound<'_, PyAny>,
    nbytes: Count,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
) -> PyResult<usize> {
    let mut buf = RawBuffer::get(buffer, true)?;
    let slice = writable_prefix(&mut buf, nbytes.0)?;
    let flags = RecvFlags::from_bits_retain(flags);
    // The kernel's own count, as `socket.recv_into` returns it (with MSG_TRUNC it can exceed
    // the buffer).
    blocking(py, || {
        fd::recv(fd.borrow(), &mut *slice, flags).map(|(_, n)| n)
    })
}

/// `write(fd, data)`: returns how many bytes the kernel took (possibly fewer). See write(2).
#[pyfunction]
pub fn write(py: Python<'_>, fd: Fd, data: &Bound<'_, PyAny>) -> PyResult<usize> {
    let data = ByteArg::extract(data)?;
    let bytes = data.for_one_call();
    blocking(py, || fd::write(fd.borrow(), bytes))
}

/// `pwrite(fd, data, offset)`: writes at `offset`, the file position untouched. See pwrite(2).
#[pyfunction]
pub fn pwrite(py: Python<'_>, fd: Fd, data: &Bound<'_, PyAny>, offset: Count) -> PyResult<usize> {
    let data = ByteArg::extract(data)?;
    let bytes = data.for_one_call();
    blocking(py, || fd::pwrite(fd.borrow(), bytes, offset.0))
}

/// `send(fd, data, flags=0)`: always with `MSG_NOSIGNAL`, so a closed peer gives
/// `BrokenPipeError` rather than a `SIGPIPE` that kills an embedding process. See send(2).
#[pyfunction]
#[pyo3(signature = (fd, data, flags=0))]
pub fn send(
    py: Python<'_>,
    fd: Fd,
    data: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
) -> PyResult<usize> {
    let data = ByteArg::extract(data)?;
    let bytes = data.for_one_call();
    let flags = SendFlags::from_bits_retain(flags) | SendFlags::NOSIGNAL;
    blocking(py, || fd::send(fd.borrow(), bytes, flags))
}

/// `sendfile(out_fd, in_fd, offset=None, count=None)`: file to socket (or any fd) in the
/// kernel. `count=None` sends to the end of the file, looping over partial sends and the
/// kernel's 2 GiB cap. Returns the bytes sent: fewer than asked when the input ended or a
/// non-blocking output filled up (it raises `BlockingIOError` only when nothing went out).
/// With `offset` the input's file position is untouched. See sendfile(2).
#[pyfunction]
#[pyo3(signature = (out_fd, in_fd, offset=None, count=None))]
pub fn sendfile(
    py: Python<'_>,
    out_fd: Fd,
    in_fd: Fd,
    offset: Option<Count>,
    count: Option<Count>,
) -> PyResult<u64> {
    let mut off = offset.map(|o| o.0);
    with_signals(py, |checkpoint| {
        fd::sendfile_all(
            out_fd.borrow(),
            in_fd.borrow(),
            off.as_mut(),
            count.map(|c| c.0),
            checkpoint,
        )
    })
}

/// `lseek(fd, offset, whence)`: moves the file position; returns the new one. `whence` is
/// `os.SEEK_SET`/`SEEK_CUR`/`SEEK_END`/`SEEK_DATA`/`SEEK_HOLE`. See lseek(2).
#[pyfunction]
#[pyo3(signature = (fd, offset, whence=0))]
pub fn lseek(
    fd: Fd,
    #[pyo3(from_py_with = i64_arg)] offset: i64,
    #[pyo3(from_py_with = i32_arg)] whence: i32,
) -> PyResult<u64> {
    // A negative absolute offset is the kernel's EINVAL, as `os.lseek` reports it.
    let absolute = || u64::try_from(offset).map_err(|_| os_error(fd::Errno::INVAL));
    let pos = match whence {
        0 => SeekFrom::Start(absolute()?),
        1 => SeekFrom::Current(offset),
        2 => SeekFrom::End(offset),
        3 => SeekFrom::Data(absolute()?),
        4 => SeekFrom::Hole(absolute()?),
        _ => return Err(PyValueError::new_err(format!("invalid whence {whence}"))),
    };
    fd::lseek(fd.borrow(), pos).map_err(os_error)
}

/// `splice(fd_in, fd_out, count, *, off_in=None, off_out=None, flags=0)`: moves up to `count`
/// bytes between two fds, one of them a pipe, in one syscall (no loop), the GIL released.
/// `off_in`/`off_out` read or write at that offset of a file, its position untouched. Returns
/// the bytes moved, 0 at end of input. `flags`: `SPLICE_F_MOVE`, `SPLICE_F_NONBLOCK`,
/// `SPLICE_F_MORE`, `SPLICE_F_GIFT`. See splice(2).
#[pyfunction]
#[pyo3(signature = (fd_in, fd_out, count, *, off_in=None, off_out=None, flags=0))]
pub fn splice(
    py: Python<'_>,
    fd_in: Fd,
    fd_out: Fd,
    count: Count,
    off_in: Option<Count>,
    off_out: Option<Count>,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
) -> PyResult<usize> {
    let flags = fd::SpliceFlags::from_bits_retain(flags);
    let (mut a, mut b) = (off_in.map(|o| o.0), off_out.map(|o| o.0));
    let len = count.clamped();
    blocking(py, || {
        fd::splice(
            fd_in.borrow(),
            a.as_mut(),
            fd_out.borrow(),
            b.as_mut(),
            len,
            flags,
        )
    })
}

/// `tee(fd_in, fd_out, count, flags=0)`: copies up to `count` bytes from one pipe to another
/// without consuming them, in one syscall, the GIL released. Returns the bytes copied.
/// See tee(2).
#[pyfunction]
#[pyo3(signature = (fd_in, fd_out, count, flags=0))]
pub fn tee(
    py: Python<'_>,
    fd_in: Fd,
    fd_out: Fd,
    count: Count,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
) -> PyResult<usize> {
    let flags = fd::SpliceFlags::from_bits_retain(flags);
    let len = count.clamped();
    blocking(py, || fd::tee(fd_in.borrow(), fd_out.borrow(), len, flags))
}
