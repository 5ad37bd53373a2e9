//! The socket transport's hot paths, native: what asyncio's `_SelectorSocketTransport` does
//! in `_read_ready__data_received` (recv(2), then `protocol.data_received`) and in `write`
//! (send(2) at once while nothing is buffered), on the transport object itself, reading and
//! setting the same attributes asyncio's code reads and sets (CPython 3.11-3.13's
//! `selector_events.py`).
//!
//! Each path does natively only its common case and hands anything else to asyncio's own
//! method with the same arguments: a socket of a subclass (its own `recv`/`send` are called,
//! as asyncio calls them), a protocol that reads into its own buffer, data that is not `bytes`,
//! a transport that has buffered data, lost its connection, is at EOF or is sending a file. So a
//! transport behaves as asyncio's does, and its class is asyncio's (fdkit's subclass adds
//! nothing a program sees but `write` being a built-in method).

use super::asyncio_objects::AsyncioObjects;
use super::asyncio_objects::{TransportAttr as A, TransportAttrs, TransportClass};
use super::fastcall;
use super::gil_cell::GilCell;
use super::loop_core::State;
use super::loop_core::{passes_through, truthy};
use crate::errors::os_error;
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyType};
use rustix::io::Errno;
use rustix::net::{RecvFlags, SendFlags};
use std::os::fd::BorrowedFd;

/// asyncio's handling of an exception from send(2) in `write` (`fdkit.aio._native.write_error`:
/// the transport's `_fatal_error`, the traceback as asyncio's); `Err` for what asyncio lets
/// through.
fn write_failed(py: Python<'_>, tr: &Bound<'_, PyAny>, e: PyErr) -> PyResult<()> {
    if passes_through(py, &e) {
        return Err(e);
    }
    py.import(intern!(py, "fdkit.aio._native"))?
        .getattr(intern!(py, "write_error"))?
        .call1((tr, e.into_value(py)))
        .map(drop)
}

/// A syscall on a non-blocking socket, made with the GIL held (it cannot wait), retried after
/// `EINTR` once the signal handlers ran, as the socket module does (PEP 475): the outer `Err`
/// is a handler's exception.
pub(super) fn nonblocking<T>(
    py: Python<'_>,
    mut call: impl FnMut() -> Result<T, Errno>,
) -> PyResult<Result<T, Errno>> {
    loop {
        match call() {
            Err(Errno::INTR) => py.check_signals()?,
            other => return Ok(other),
        }
    }
}

/// asyncio's own `_read_ready(tr)`, which calls the transport's `_read_ready_cb`: the path a
/// read the core does not take goes, with `_read_ready`'s frame in what it raises.
fn asyncio_read_ready(py: Python<'_>, o: &AsyncioObjects, tr: &Bound<'_, PyAny>) -> PyResult<()> {
    o.read_ready.bind(py).call1((tr,)).map(drop)
}

/// asyncio's `_SelectorSocketTransport._read_ready` for the transport `tr`.
pub(super) fn read_ready(
    py: Python<'_>,
    o: &AsyncioObjects,
    state: &GilCell<State>,
    read_error: &Bound<'_, PyAny>,
    tr: &Bound<'_, PyAny>,
) -> PyResult<()> {
    // An exception of the read path goes to `read_error` (the transport's `_fatal_error`,
    // its traceback as asyncio's), except what asyncio lets through.
    let failed = |e: PyErr, in_recv: bool| -> PyResult<()> {
        if passes_through(py, &e) {
            // It leaves the loop through asyncio's read methods: their traceback entries.
            let leaving = py
                .import(intern!(py, "fdkit.aio._native"))?
                .getattr(intern!(py, "leaving_read"))?
                .call1((e.into_value(py), in_recv))?;
            return Err(PyErr::from_value(leaving));
        }
        read_error.call1((tr, e.into_value(py), in_recv)).map(drop)
    };
    let n = &o.names;
    let t = TransportAttrs::of(o, tr);
    let cb = t.get(A::ReadReadyCb, &n._read_ready_cb)?;
    match o.bound_method(&cb) {
        Some((func, slf)) if func == o.read_ready_data.as_ptr() && slf == tr.as_ptr() => {}
        Some((func, slf))
            if slf == tr.as_ptr()
                && super::tls_records::classes(py)
                    .is_some_and(|c| func == c.read_ready_buffer.as_ptr()) =>
        {
            return read_ready_buffered(py, o, state, tr, &t);
        }
        _ => return asyncio_read_ready(py, o, tr),
    }
    // `_read_ready__data_received`.
    if truthy(&t.get(A::ConnLost, &n._conn_lost)?)? {
        return Ok(());
    }
    let sock = t.get(A::Sock, &n._sock)?;
    let fd = match o.sock_layout {
        Some(l) if sock.get_type().is(o.socket_type.bind(py)) => l.nonblocking_fd(&sock),
        _ => None,
    };
    let Some(fd) = fd else {
        // A socket subclass (its own recv), a socket with a timeout, or no proven layout:
        // asyncio's own read path.
        return asyncio_read_ready(py, o, tr);
    };
    // A `max_size` the native read does not take (not an int, beyond asyncio's default, or
    // one whose reading fails) is asyncio's to read: inside its `try`, its errors reach
    // `_fatal_error`, and `recv` allocates what it asks for.
    let Some(max) = t.max_size(o).ok().flatten() else {
        return asyncio_read_ready(py, o, tr);
    };
    let mut buf = state.with(py, |s| std::mem::take(&mut s.recv_buf));
    if buf.len() < max {
        buf.resize(max, 0);
    }
    // The socket is non-blocking: recv(2) returns at once, so the GIL stays held for it.
    let got = nonblocking(py, || {
        if fd < 0 {
            return Err(Errno::BADF); // a closed socket: what its recv would raise
        }
        // SAFETY: `fd` is the socket's own open fd, as its `recv` would use it.
        let sock = unsafe { BorrowedFd::borrow_raw(fd) };
        rustix::net::recv(sock, &mut buf[..max], RecvFlags::empty()).map(|(n, _)| n)
    });
    let data = match &got {
        Ok(Ok(n)) if *n > 0 => Some(PyBytes::new(py, &buf[..*n])),
        _ => None,
    };
    state.with(py, |s| s.recv_buf = buf);
    match got {
        Err(e) => return failed(e, true),
        Ok(Err(Errno::AGAIN)) => return Ok(()),
        Ok(Err(e)) => return failed(os_error(e), true),
        Ok(Ok(_)) => {}
    }
    let Some(data) = data else {
        return tr
            .call_method0(intern!(py, "_read_ready__on_eof"))
            .map(drop);
    };
    let protocol = t.get(A::Protocol, &n._protocol)?;
    match protocol.call_method1(n.data_received.bind(py), (data,)) {
        Ok(_) => Ok(()),
        Err(e) => failed(e, false),
    }
}

/// asyncio's `_read_ready__get_buffer` (the transport's `_read_ready_cb`) for the transport
/// `tr`: native for a TLS connection's `SSLProtocol` (see `tls_records`), asyncio's otherwise.
fn read_ready_buffered(
    py: Python<'_>,
    o: &AsyncioObjects,
    state: &GilCell<State>,
    tr: &Bound<'_, PyAny>,
    t: &TransportAttrs<'_>,
) -> PyResult<()> {
    let n = &o.names;
    if truthy(&t.get(A::ConnLost, &n._conn_lost)?)? {
        return Ok(());
    }
    let sock = t.get(A::Sock, &n._sock)?;
    let fd = match o.sock_layout {
        Some(l) if sock.get_type().is(o.socket_type.bind(py)) => l.nonblocking_fd(&sock),
        _ => None,
    };
    if let Some(fd) = fd {
        let protocol = t.get(A::Protocol, &n._protocol)?;
        if super::tls_records::read_ready(py, state, tr, &protocol, fd)? {
            return Ok(());
        }
    }
    asyncio_read_ready(py, o, tr)
}

/// asyncio's `_SelectorSocketTransport.write(data)` for the transport `tr`: `bytes` sent at
/// once while nothing is buffered; the rest (partial send, `EAGAIN`) buffered by the
/// transport's `_write_rest`, as asyncio buffers it; anything else asyncio's own `write`.
fn write(
    py: Python<'_>,
    o: &AsyncioObjects,
    tr: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
) -> PyResult<Option<()>> {
    let Ok(bytes) = data.cast_exact::<PyBytes>() else {
        return Ok(None);
    };
    let payload = bytes.as_bytes();
    let n = &o.names;
    let t = TransportAttrs::of(o, tr);
    if payload.is_empty()
        || truthy(&t.get(A::Eof, &n._eof)?)?
        || !t.get(A::EmptyWaiter, &n._empty_waiter)?.is_none()
        || truthy(&t.get(A::ConnLost, &n._conn_lost)?)?
        || t.get(A::Buffer, &n._buffer)?.len()? != 0
    {
        return Ok(None);
    }
    let sock = t.get(A::Sock, &n._sock)?;
    let fd = match o.sock_layout {
        Some(l) if sock.get_type().is(o.socket_type.bind(py)) => l.nonblocking_fd(&sock),
        _ => None,
    };
    let Some(fd) = fd else {
        return Ok(None);
    };
    let sent = nonblocking(py, || {
        if fd < 0 {
            return Err(Errno::BADF); // a closed socket: what its send would raise
        }
        // SAFETY: `fd` is the socket's own open fd, as its `send` would use it; `payload` is
        // immutable bytes kept alive by `data`.
        let sock = unsafe { BorrowedFd::borrow_raw(fd) };
        rustix::net::send(sock, payload, SendFlags::empty())
    });
    let sent = match sent {
        Err(e) => return write_failed(py, tr, e).map(Some),
        Ok(Err(Errno::AGAIN)) => 0,
        Ok(Err(e)) => return write_failed(py, tr, os_error(e)).map(Some),
        Ok(Ok(k)) => k,
    };
    if sent < payload.len() {
        tr.call_method1(intern!(py, "_write_rest"), (data, sent))?;
    }
    Ok(Some(()))
}

/// `tr.write(data)` for `tr` of exactly the native transport class, as its native `write`
/// method does it, without the method call: Err(()) when the call is `write`'s method's to make
/// (a patched `write` behind it, or data the native path declines).
pub(super) fn write_bytes(
    py: Python<'_>,
    tr: &Bound<'_, PyAny>,
    data: &Bound<'_, PyBytes>,
) -> PyResult<Result<(), ()>> {
    let o = super::asyncio_objects::objects(py)?;
    let Some(class) = o.transport_class.get(py) else {
        return Ok(Err(()));
    };
    let tp = tr.get_type();
    if !tp.is(class.cls.bind(py)) || !class.write_is_own(&tp, &o.transport_write)? {
        return Ok(Err(()));
    }
    Ok(write(py, o, tr, data.as_any())?.ok_or(()))
}

// `write(*args, **kwargs)` of a transport (the descriptor checked its class): the native path
// for one positional `bytes` while the `write` behind the native one is asyncio's own; that
// `write` (asyncio's, or what a program put on asyncio's class) for every other call.
fastcall::write_method_def!(
    WRITE_DEF,
    write_trampoline,
    write_method,
    "fdkit's transport write",
    c"write(data)\n--\n\nasyncio's Transport.write: send data (bytes-like) on the transport."
);

/// The write of [`write_trampoline`].
///
/// # Safety
/// CPython's `METH_FASTCALL | METH_KEYWORDS` contract: `args` holds `nargs` positional values
/// then one per name in `kwnames` (a tuple, or null).
unsafe fn write_method(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: `slf` is the transport the built-in is bound to, alive during the call.
    let tr = unsafe { Bound::from_borrowed_ptr(py, slf) };
    let o = super::asyncio_objects::objects(py)?;
    let Some(class) = o.transport_class.get(py) else {
        return Err(PyValueError::new_err(
            "fdkit's transport write is not installed",
        ));
    };
    let tp = tr.get_type();
    if nargs == 1 && kwnames.is_null() && class.write_is_own(&tp, &o.transport_write)? {
        // SAFETY: CPython passes `nargs` valid borrowed references in `args`.
        let data = unsafe { Bound::from_borrowed_ptr(py, *args) };
        if write(py, o, &tr, &data)?.is_some() {
            return Ok(py.None().into_ptr());
        }
    }
    let func = match class.write_behind(&tp)? {
        Some(f) => f,
        None => o.transport_write.bind(py).clone(),
    };
    // SAFETY: CPython's METH_FASTCALL | METH_KEYWORDS contract, passed on.
    unsafe { fastcall::call_behind(&tr, &func, args, nargs, kwnames) }
}

/// Makes ``cls.write`` the native write (see `fastcall::install`).
#[pyfunction]
pub fn install_write(cls: &Bound<'_, PyType>) -> PyResult<()> {
    let py = cls.py();
    fastcall::install(cls, intern!(py, "write"), &WRITE_DEF)?;
    let o = super::asyncio_objects::objects(py)?;
    let class = TransportClass::new(cls, &o.names)?;
    if o.transport_class.set(py, class).is_err() {
        return Err(PyValueError::new_err(
            "the native write is installed on one class only",
        ));
    }
    Ok(())
}
