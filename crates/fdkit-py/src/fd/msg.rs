//! Datagrams and ancillary data: `sendto`, `recvfrom`, `recvfrom_into`, `sendmsg`, `recvmsg`,
//! and fd passing with `send_fds`/`recv_fds` (the signatures and results of
//! `socket.send_fds`/`socket.recv_fds`, on int fds). All release the GIL and take any
//! bytes-like object. See sendmsg(2), recvmsg(2), unix(7).

use super::addr;
use super::io::{read_to_bytes, writable_prefix};
use crate::args::{i32_arg, u32_arg, ByteArg, Count, Fd, RawBuffer};
use crate::gil::blocking;
use fdkit::fd::{self, RecvFlags, SendFlags, SocketAddrAny};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use std::io::IoSlice;
use std::os::fd::{BorrowedFd, IntoRawFd};

/// The sender's address as Python spells it; `None` when the kernel gave none.
fn address<'py>(py: Python<'py>, a: Option<&SocketAddrAny>) -> PyResult<Bound<'py, PyAny>> {
    match a {
        Some(a) => addr::to_py(py, Some(a)),
        None => Ok(py.None().into_bound(py)),
    }
}

fn dest(fd: Fd, address: Option<&Bound<'_, PyAny>>) -> PyResult<Option<SocketAddrAny>> {
    match address {
        Some(a) if !a.is_none() => addr::from_py(a, fd.borrow()).map(Some),
        _ => Ok(None),
    }
}

/// The kernel echoes `MSG_CMSG_CLOEXEC` into `msg_flags`; when fdkit added it (the caller did
/// not ask), it is taken out again so `msg_flags` reads as `socket.recvmsg`'s would.
fn echoed(msg_flags: i32, asked: u32) -> i32 {
    let cloexec = RecvFlags::CMSG_CLOEXEC.bits() as i32;
    if asked & RecvFlags::CMSG_CLOEXEC.bits() == 0 {
        msg_flags & !cloexec
    } else {
        msg_flags
    }
}

fn recv_flags(flags: u32, cloexec: bool) -> RecvFlags {
    let mut flags = RecvFlags::from_bits_retain(flags);
    if cloexec {
        flags |= RecvFlags::CMSG_CLOEXEC;
    }
    flags
}

/// The buffers of a `sendmsg`-style call: an iterable of bytes-like objects.
fn buffers<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Vec<ByteArg<'py>>> {
    if obj.is_instance_of::<PyBytes>() || obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(PyTypeError::new_err(
            "buffers must be an iterable of bytes-like objects (a list of them), not a single one",
        ));
    }
    obj.try_iter()
        .map_err(|_| PyTypeError::new_err("buffers must be an iterable of bytes-like objects"))?
        .map(|b| ByteArg::extract(&b?))
        .collect()
}

/// `sendto(fd, data, address, flags=0)`: one datagram to `address` (spelled as for `connect`);
/// always with `MSG_NOSIGNAL`. Returns the bytes sent. See sendto(2).
#[pyfunction]
#[pyo3(signature = (fd, data, address, flags=0))]
pub fn sendto(
    py: Python<'_>,
    fd: Fd,
    data: &Bound<'_, PyAny>,
    address: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
) -> PyResult<usize> {
    let data = ByteArg::extract(data)?;
    let to = addr::from_py(address, fd.borrow())?;
    let bytes = data.for_one_call();
    let flags = SendFlags::from_bits_retain(flags) | SendFlags::NOSIGNAL;
    blocking(py, || fd::sendto(fd.borrow(), bytes, flags, Some(&to)))
}

/// `recvfrom(fd, n, flags=0)`: one datagram of at most `n` bytes and its sender, as
/// `(data, address)`; the address is `None` when the kernel gives none (a connected stream).
/// See recvfrom(2).
#[pyfunction]
#[pyo3(signature = (fd, n, flags=0))]
pub fn recvfrom<'py>(
    py: Python<'py>,
    fd: Fd,
    n: Count,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
) -> PyResult<Bound<'py, PyTuple>> {
    let flags = RecvFlags::from_bits_retain(flags);
    let mut from = None;
    let data = read_to_bytes(py, n, |buf| {
        let (got, a) = fd::recvfrom(fd.borrow(), buf, flags)?;
        from = a;
        // With MSG_TRUNC the kernel reports the datagram's length: keep what the buffer holds.
        Ok(got.min(buf.len()))
    })?;
    PyTuple::new(py, [data.into_any(), address(py, from.as_ref())?])
}

/// `recvfrom_into(fd, buffer, nbytes=0, flags=0)`: receives into a writable buffer (its first
/// `nbytes` bytes, all when 0); returns `(nbytes, address)`. See recvfrom(2).
#[pyfunction]
#[pyo3(signature = (fd, buffer, nbytes=Count(0), flags=0), text_signature = "(fd, buffer, nbytes=0, flags=0)")]
pub fn recvfrom_into<'py>(
    py: Python<'py>,
    fd: Fd,
    buffer: &Bound<'py, PyAny>,
    nbytes: Count,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
) -> PyResult<Bound<'py, PyTuple>> {
    let mut buf = RawBuffer::get(buffer, true)?;
    let slice = writable_prefix(&mut buf, nbytes.0)?;
    let flags = RecvFlags::from_bits_retain(flags);
    let (got, from) = blocking(py, || fd::recvfrom(fd.borrow(), &mut *slice, flags))?;
    PyTuple::new(
        py,
        [
            got.into_pyobject(py)?.into_any(),
            address(py, from.as_ref())?,
        ],
    )
}

/// `sendmsg(fd, buffers, ancdata=(), flags=0, address=None)`: like `socket.sendmsg`: gathers
/// `buffers` into one message with the control messages `ancdata` (`(level, type, data)`
/// triples) to `address` (for an unconnected socket). Always `MSG_NOSIGNAL`. Returns the bytes
/// sent. See sendmsg(2), cmsg(3).
#[pyfunction]
#[pyo3(signature = (fd, buffers, ancdata=None, flags=0, address=None))]
pub fn sendmsg(
    py: Python<'_>,
    fd: Fd,
    buffers: &Bound<'_, PyAny>,
    ancdata: Option<&Bound<'_, PyAny>>,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
    address: Option<&Bound<'_, PyAny>>,
) -> PyResult<usize> {
    let bufs = self::buffers(buffers)?;
    let mut control: Vec<(i32, i32, ByteArg<'_>)> = Vec::new();
    if let Some(anc) = ancdata {
        for item in anc.try_iter().map_err(|_| {
            PyTypeError::new_err("ancdata must be an iterable of (level, type, data) tuples")
        })? {
            let item = item?;
            let t = item
                .cast::<PyTuple>()
                .ok()
                .filter(|t| t.len() == 3)
                .ok_or_else(|| {
                    PyTypeError::new_err("ancdata items must be (level, type, data) tuples")
                })?;
            let level = i32_arg(&t.get_item(0)?)?;
            let kind = i32_arg(&t.get_item(1)?)?;
            control.push((level, kind, ByteArg::extract(&t.get_item(2)?)?));
        }
    }
    let to = dest(fd, address)?;
    let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b.as_slice())).collect();
    let cmsgs: Vec<(i32, i32, &[u8])> = control
        .iter()
        .map(|(l, k, d)| (*l, *k, d.as_slice()))
        .collect();
    let flags = SendFlags::from_bits_retain(flags) | SendFlags::NOSIGNAL;
    blocking(py, || {
        fd::sendmsg(fd.borrow(), &slices, &cmsgs, flags, to.as_ref())
    })
}

/// `recvmsg(fd, bufsize, ancbufsize=0, flags=0, *, cloexec=True)`: like `socket.recvmsg`:
/// returns `(data, ancdata, msg_flags, address)`, `ancdata` a list of `(level, type, data)`.
/// Fds arriving by `SCM_RIGHTS` are close-on-exec (`MSG_CMSG_CLOEXEC`) unless `cloexec=False`;
/// their numbers are in the data and the caller owns them. `MSG_CTRUNC` in `msg_flags` says
/// control data did not fit. See recvmsg(2), cmsg(3).
#[pyfunction]
#[pyo3(signature = (fd, bufsize, ancbufsize=Count(0), flags=0, *, cloexec=true), text_signature = "(fd, bufsize, ancbufsize=0, flags=0, *, cloexec=True)")]
pub fn recvmsg<'py>(
    py: Python<'py>,
    fd: Fd,
    bufsize: Count,
    ancbufsize: Count,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
    cloexec: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let control_len = control_size(ancbufsize.0)?;
    let asked = flags;
    let flags = recv_flags(flags, cloexec);
    let mut meta = None;
    let data = read_to_bytes(py, bufsize, |buf| {
        let got = fd::recvmsg(fd.borrow(), buf, control_len, flags)?;
        let n = got.bytes.min(buf.len());
        meta = Some(got);
        Ok(n)
    })?;
    let Some(got) = meta else {
        return Err(PyValueError::new_err("recvmsg returned no result"));
    };
    let anc = PyList::empty(py);
    for m in &got.control {
        anc.append((m.level, m.kind, PyBytes::new(py, &m.data)))?;
    }
    PyTuple::new(
        py,
        [
            data.into_any(),
            anc.into_any(),
            echoed(got.flags, asked).into_pyobject(py)?.into_any(),
            address(py, got.address.as_ref())?,
        ],
    )
}

fn control_size(n: u64) -> PyResult<usize> {
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= fd::MAX_CONTROL_LEN)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "ancbufsize must be at most {}, got {n}",
                fd::MAX_CONTROL_LEN
            ))
        })
}

/// `send_fds(fd, buffers, fds, flags=0, address=None)`: like `socket.send_fds`: sends
/// `buffers` with the fds `fds` in one `SCM_RIGHTS` message (at most 253). Returns the bytes
/// sent. The fds stay open here; the receiver gets its own. See unix(7).
#[pyfunction]
#[pyo3(signature = (fd, buffers, fds, flags=0, address=None))]
pub fn send_fds(
    py: Python<'_>,
    fd: Fd,
    buffers: &Bound<'_, PyAny>,
    fds: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
    address: Option<&Bound<'_, PyAny>>,
) -> PyResult<usize> {
    let bufs = self::buffers(buffers)?;
    let passed: Vec<Fd> = fds
        .try_iter()
        .map_err(|_| PyTypeError::new_err("fds must be an iterable of ints"))?
        .map(|f| f?.extract::<Fd>())
        .collect::<PyResult<_>>()?;
    if passed.len() > fd::SCM_MAX_FD {
        return Err(PyValueError::new_err(format!(
            "at most {} fds travel in one message, got {}",
            fd::SCM_MAX_FD,
            passed.len()
        )));
    }
    let to = dest(fd, address)?;
    let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b.as_slice())).collect();
    let borrowed: Vec<BorrowedFd<'static>> = passed.iter().map(|f| f.borrow()).collect();
    let flags = SendFlags::from_bits_retain(flags) | SendFlags::NOSIGNAL;
    blocking(py, || {
        fd::send_fds(fd.borrow(), &slices, &borrowed, flags, to.as_ref())
    })
}

/// `recv_fds(fd, bufsize, maxfds, flags=0, *, cloexec=True)`: like `socket.recv_fds`: returns
/// `(data, fds, msg_flags, address)`; the new fds are close-on-exec (`MSG_CMSG_CLOEXEC`)
/// unless `cloexec=False`, and the caller owns them. More fds than `maxfds` sets `MSG_CTRUNC`
/// in `msg_flags` (the kernel closes the rest). See unix(7).
#[pyfunction]
#[pyo3(signature = (fd, bufsize, maxfds, flags=0, *, cloexec=true))]
pub fn recv_fds<'py>(
    py: Python<'py>,
    fd: Fd,
    bufsize: Count,
    maxfds: Count,
    #[pyo3(from_py_with = u32_arg)] flags: u32,
    cloexec: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let maxfds = usize::try_from(maxfds.0)
        .ok()
        .filter(|&n| n <= fd::MAX_CONTROL_LEN / 4)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "maxfds must be at most {}, got {}",
                fd::MAX_CONTROL_LEN / 4,
                maxfds.0
            ))
        })?;
    let asked = flags;
    let flags = recv_flags(flags, cloexec);
    let mut meta = None;
    let data = read_to_bytes(py, bufsize, |buf| {
        let got = fd::recv_fds(fd.borrow(), buf, maxfds, flags)?;
        let n = got.0.min(buf.len());
        meta = Some(got);
        Ok(n)
    })?;
    let Some((_, fds, msg_flags, from)) = meta else {
        return Err(PyValueError::new_err("recv_fds returned no result"));
    };
    // Everything that can fail is built first: until the fds become ints below, dropping them
    // on an error closes them.
    let from = address(py, from.as_ref())?;
    let msg_flags = echoed(msg_flags, asked).into_pyobject(py)?.into_any();
    let list = PyList::empty(py);
    let raws: Vec<i32> = fds.into_iter().map(IntoRawFd::into_raw_fd).collect();
    for raw in &raws {
        if let Err(e) = list.append(*raw) {
            for r in &raws {
                // SAFETY: these fds were just received and are owned by nobody else.
                drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(*r) });
            }
            return Err(e);
        }
    }
    PyTuple::new(py, [data.into_any(), list.into_any(), msg_flags, from])
}
