//! TLS records on fdkit's loops: what asyncio's `sslproto.SSLProtocol` runs in Python for
//! every record, run here on asyncio's own objects (`sslproto.py` of CPython 3.11-3.15, whose
//! methods taken here have one source).
//!
//! - [`read_ready`]: the socket transport's `_read_ready__get_buffer` for an `SSLProtocol`
//!   whose connection is up (`SSLProtocolState.WRAPPED`): recv(2), the bytes into the incoming
//!   `MemoryBIO`, then `_do_read`: the `SSLObject`'s records into the app protocol's
//!   `data_received`, the outgoing BIO to the socket transport's `write`, flow control.
//! - the app transport's `write` (a method descriptor on fdkit's subclass of asyncio's
//!   `_SSLProtocolTransport`): `_write_appdata` and `_do_write` while the backlog is empty.
//!
//! The `SSLObject` and the BIOs are driven through OpenSSL's own calls where `openssl` proved
//! them (TLS 1.3), else through their C methods (`_ssl._SSLSocket.read`, `.write`, `.pending`,
//! `MemoryBIO.write`, `.read`, `.pending`): no Python frame per record either way. An error is
//! handled where asyncio handles it, with asyncio's traceback entries ([`Failed`]).
//! One thing differs from asyncio's code, invisibly: where asyncio calls `read` until it raises
//! `SSLWantReadError` (an exception built and caught per record), this path stops when neither
//! the incoming BIO nor the `SSLObject` holds a byte, which is when `read` would raise it.
//!
//! Each path does natively only its common case and hands every other to asyncio's Python with
//! the objects as they are: a connection in its handshake or shutdown, a backlog, an app
//! protocol with `get_buffer`, a class of a program's, a method patched ([`TlsClasses::native`]).

use super::bytes_out::BytesOut;
use super::fastcall;
use super::gil_cell::GilCell;
use super::loop_core::{truthy, State};
use super::openssl::{Direct, ReadOutcome};
use crate::errors::os_error;
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyInt, PyString, PyTuple, PyType};
use rustix::io::Errno;
use rustix::net::RecvFlags;
use std::ffi::c_void;
use std::os::fd::{BorrowedFd, RawFd};
use std::os::raw::c_char;

/// The classes and values the native TLS paths check and compare with, once per process.
pub(super) struct TlsClasses {
    /// `asyncio.sslproto.SSLProtocol`, and fdkit's subclass keeping the attributes read here
    /// in slots: only exactly these classes are run natively.
    proto: Py<PyType>,
    slotted: Py<PyType>,
    /// The fields' names, interned, and their offsets in the slotted class.
    names: [Py<PyString>; 19],
    slots: Option<[isize; 19]>,
    /// fdkit's subclass of `_SSLProtocolTransport` (the native `write`'s class).
    app: Py<PyType>,
    /// `ssl.SSLObject` and `ssl.MemoryBIO`.
    sslobject: Py<PyType>,
    bio: Py<PyType>,
    /// `SSLProtocolState.WRAPPED`.
    wrapped: Py<PyAny>,
    /// `sslproto.SSLAgainErrors`: what `_do_read__copied` and `_do_write` catch and pass.
    again: Py<PyTuple>,
    /// `_SelectorSocketTransport._read_ready__get_buffer` when fdkit.aio was imported.
    pub read_ready_buffer: Py<PyAny>,
    /// `fdkit.aio._tls.native_ok`.
    native_ok: Py<PyAny>,
    /// OpenSSL's own functions, where `_ssl`'s layout and library were proven (see `openssl`).
    direct: PyOnceLock<Option<Direct>>,
    /// The version tags of `proto`, `slotted`, `app` and `sslobject` when `native_ok` last
    /// answered, and its answer: CPython retags a class whenever it or a base changes.
    rule: GilCell<Option<([u32; 4], bool)>>,
}

static TLS: PyOnceLock<TlsClasses> = PyOnceLock::new();

/// The classes, once `fdkit.aio._tls` installed them.
pub(super) fn classes(py: Python<'_>) -> Option<&'static TlsClasses> {
    TLS.get(py)
}

fn version_tag(tp: &Bound<'_, PyType>) -> u32 {
    // SAFETY: reading the version tag of a live type object.
    unsafe { (*tp.as_type_ptr()).tp_version_tag }
}

impl TlsClasses {
    /// Whether the native paths stand for asyncio's methods now (`native_ok`, asked again only
    /// when one of the classes changed).
    fn native(&self, py: Python<'_>) -> PyResult<bool> {
        let tags = || {
            [
                version_tag(self.proto.bind(py)),
                version_tag(self.slotted.bind(py)),
                version_tag(self.app.bind(py)),
                version_tag(self.sslobject.bind(py)),
            ]
        };
        let now = tags();
        if let Some((t, ok)) = self.rule.with(py, |r| *r) {
            if t == now && !now.contains(&0) {
                return Ok(ok);
            }
        }
        let ok = self.native_ok.bind(py).call0()?.is_truthy()?;
        // `native_ok` looked the methods up, which gave each class a tag if it had none.
        let now = tags();
        self.rule.with(py, |r| *r = Some((now, ok)));
        Ok(ok)
    }

    fn is_again(&self, py: Python<'_>, e: &PyErr) -> bool {
        e.matches(py, self.again.bind(py)).unwrap_or(false)
    }

    /// Whether `obj` is an SSL protocol of a class the native paths run.
    fn runs(&self, obj: &Bound<'_, PyAny>) -> bool {
        let py = obj.py();
        let tp = obj.get_type();
        tp.is(self.proto.bind(py)) || tp.is(self.slotted.bind(py))
    }
}

/// The `SSLProtocol` attributes the record paths read and set, in [`FIELD_NAMES`] order:
/// fdkit's slotted class keeps each in a slot.
#[derive(Clone, Copy)]
enum F {
    AppProtocol,
    AppProtocolIsBuffer,
    AppReadingPaused,
    AppTransport,
    AppWritingPaused,
    Incoming,
    IncomingHighWater,
    IncomingLowWater,
    Outgoing,
    OutgoingHighWater,
    OutgoingLowWater,
    SslBuffer,
    SslReadingPaused,
    SslWritingPaused,
    Sslobj,
    State,
    Transport,
    WriteBacklog,
    WriteBufferSize,
}

/// fdkit's `SSLProtocol` subclass takes these as its `__slots__` (`_fdkit.TLS_RECORD_FIELDS`).
pub const FIELD_NAMES: [&str; 19] = [
    "_app_protocol",
    "_app_protocol_is_buffer",
    "_app_reading_paused",
    "_app_transport",
    "_app_writing_paused",
    "_incoming",
    "_incoming_high_water",
    "_incoming_low_water",
    "_outgoing",
    "_outgoing_high_water",
    "_outgoing_low_water",
    "_ssl_buffer",
    "_ssl_reading_paused",
    "_ssl_writing_paused",
    "_sslobj",
    "_state",
    "_transport",
    "_write_backlog",
    "_write_buffer_size",
];

/// An `SSLProtocol` and what its per-record path reads of it, from its `__dict__` first (no
/// class of its MRO defines these names as data descriptors; `native_ok` checks the classes).
struct Proto<'py> {
    obj: Bound<'py, PyAny>,
    dict: Option<Bound<'py, PyDict>>,
    /// The fields' offsets, when `obj` is of fdkit's slotted class.
    slots: Option<&'static [isize; 19]>,
    names: &'static [Py<PyString>; 19],
}

impl<'py> Proto<'py> {
    fn new(tls: &'static TlsClasses, obj: Bound<'py, PyAny>) -> Self {
        let slotted = obj.get_type().is(tls.slotted.bind(obj.py()));
        let (dict, slots) = match &tls.slots {
            Some(offsets) if slotted => (None, Some(offsets)),
            _ => (super::attrs::instance_dict(&obj), None),
        };
        Proto {
            obj,
            dict,
            slots,
            names: &tls.names,
        }
    }

    fn get(&self, f: F) -> PyResult<Bound<'py, PyAny>> {
        let name = &self.names[f as usize];
        if let Some(offsets) = self.slots {
            return super::attrs::slot_attr(&self.obj, offsets[f as usize], name);
        }
        self.get_name(name.bind(self.obj.py()))
    }

    /// `obj.name`, the dict first.
    fn get_name(&self, name: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(d) = &self.dict {
            if let Some(v) = super::attrs::dict_get(d, name.as_any())? {
                return Ok(v);
            }
        }
        self.obj.getattr(name)
    }

    fn flag(&self, f: F) -> PyResult<bool> {
        truthy(&self.get(f)?)
    }

    fn set(&self, f: F, value: Bound<'py, PyAny>) -> PyResult<()> {
        self.obj.setattr(&self.names[f as usize], value)
    }
}

/// An exact `int` as an `i64`; None for anything else (asyncio's Python then compares it).
fn small_int(v: &Bound<'_, PyAny>) -> Option<i64> {
    v.is_exact_instance_of::<PyInt>()
        .then(|| v.extract::<i64>().ok())
        .flatten()
}

/// `bio.pending` of a `MemoryBIO` (its C getter).
fn pending(bio: &Bound<'_, PyAny>) -> PyResult<i64> {
    let py = bio.py();
    small_int(&bio.getattr(intern!(py, "pending"))?)
        .ok_or_else(|| PyValueError::new_err("MemoryBIO.pending is not an int"))
}

/// The objects a record path drives, each of the class it expects: the `SSLObject`'s
/// `_ssl._SSLSocket`, and the two BIOs. None for anything else (a `sslobject_class` of a
/// program's). Each operation is OpenSSL's own call where [`Direct`] holds for the connection,
/// `_ssl`'s method otherwise (and whenever `_ssl` would raise: see `openssl`).
struct Engine<'py> {
    sslsock: Bound<'py, PyAny>,
    incoming: Bound<'py, PyAny>,
    outgoing: Bound<'py, PyAny>,
    direct: Option<(&'static Direct, DirectPtrs)>,
}

/// The `SSL *` and the incoming and outgoing `BIO *` of a connection.
#[derive(Clone, Copy)]
struct DirectPtrs {
    ssl: *mut c_void,
    incoming: *mut c_void,
    outgoing: *mut c_void,
}

/// A read of [`Engine::read`].
enum Got {
    Data(usize),
    Again,
    Closed,
}

impl<'py> Engine<'py> {
    fn of(tls: &'static TlsClasses, p: &Proto<'py>) -> PyResult<Option<Self>> {
        let py = p.obj.py();
        let sslobj = p.get(F::Sslobj)?;
        let incoming = p.get(F::Incoming)?;
        let outgoing = p.get(F::Outgoing)?;
        let bio = tls.bio.bind(py);
        if !sslobj.get_type().is(tls.sslobject.bind(py))
            || !incoming.get_type().is(bio)
            || !outgoing.get_type().is(bio)
        {
            return Ok(None);
        }
        // `SSLObject` keeps its `_ssl._SSLSocket` in its `__dict__` (a plain attribute of a
        // class with no slots, set in `_create`).
        let sslsock = super::attrs::instance_dict(&sslobj).and_then(|d| {
            super::attrs::dict_get(&d, intern!(py, "_sslobj").as_any())
                .ok()
                .flatten()
        });
        let Some(sslsock) = sslsock else {
            return Ok(None);
        };
        // OpenSSL directly only for a connection whose app transport fdkit adopted (its
        // context had no message callback when it was made: see `fdkit.aio._tls.adopt`).
        let mut direct = None;
        if let Some(d) = tls.direct.get(py).and_then(Option::as_ref) {
            let adopted = p.get(F::AppTransport)?.get_type().is(tls.app.bind(py));
            if adopted {
                if let (Some(ssl), Some(i), Some(o)) =
                    (d.ssl_of(&sslsock), d.bio_of(&incoming), d.bio_of(&outgoing))
                {
                    let ptrs = DirectPtrs {
                        ssl,
                        incoming: i,
                        outgoing: o,
                    };
                    direct = Some((d, ptrs));
                }
            }
        }
        Ok(Some(Engine {
            sslsock,
            incoming,
            outgoing,
            direct,
        }))
    }

    /// `incoming.write(data)`.
    fn feed(&self, py: Python<'py>, data: &mut [u8]) -> PyResult<()> {
        if let Some((d, ptrs)) = self.direct {
            if !d.eof_written(&self.incoming) && d.bio_write_to(ptrs.incoming, data).is_some() {
                return Ok(());
            }
        }
        let v = view(py, data, false)?;
        self.incoming
            .call_method1(intern!(py, "write"), (v,))
            .map(drop)
    }

    /// `incoming.pending`, `outgoing.pending`.
    fn pending_in(&self) -> PyResult<i64> {
        match self.direct {
            Some((d, ptrs)) => Ok(d.bio_pending(ptrs.incoming) as i64),
            None => pending(&self.incoming),
        }
    }

    fn pending_out(&self) -> PyResult<i64> {
        match self.direct {
            Some((d, ptrs)) => Ok(d.bio_pending(ptrs.outgoing) as i64),
            None => pending(&self.outgoing),
        }
    }

    /// `outgoing.read()`, None for no byte.
    fn drain(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        if let Some((d, ptrs)) = self.direct {
            return Ok(d.bio_read_all(py, ptrs.outgoing)?.map(Bound::into_any));
        }
        let data = self.outgoing.call_method0(intern!(py, "read"))?;
        Ok((data.len()? > 0).then_some(data))
    }

    /// Whether `read` could give a byte without raising `SSLWantReadError`: a byte in the
    /// incoming BIO or decrypted in the `SSLObject`.
    fn readable(&self, py: Python<'py>) -> PyResult<bool> {
        if self.pending_in()? > 0 {
            return Ok(true);
        }
        if let Some((d, ptrs)) = self.direct {
            return Ok(d.ssl_pending(ptrs.ssl) > 0);
        }
        Ok(small_int(&self.sslsock.call_method0(intern!(py, "pending"))?).is_some_and(|n| n > 0))
    }

    /// At least as many bytes as the reads to come can give (before more is fed): what the
    /// incoming BIO holds (a record's plaintext is no longer than the record, unless
    /// compressed: then a read's buffer grows) and what the `SSLObject` decrypted already.
    fn plain_bound(&self, py: Python<'py>) -> PyResult<usize> {
        let decrypted = match self.direct {
            Some((d, ptrs)) => i64::from(d.ssl_pending(ptrs.ssl)),
            None => small_int(&self.sslsock.call_method0(intern!(py, "pending"))?).unwrap_or(0),
        };
        Ok((self.pending_in()?.max(0) + decrypted.max(0)) as usize)
    }

    /// `sslobj.read(len(buf), buf)`, `SSLAgainErrors` as [`Got::Again`].
    fn read(&self, py: Python<'py>, tls: &TlsClasses, buf: &mut [u8]) -> PyResult<Got> {
        if let Some((d, ptrs)) = self.direct {
            let got = d.read(ptrs.ssl, buf);
            // `_ssl` runs the signal handlers after each call.
            py.check_signals()?;
            match got {
                ReadOutcome::Data(n) => return Ok(Got::Data(n)),
                ReadOutcome::WantRead => return Ok(Got::Again),
                ReadOutcome::Closed => return Ok(Got::Closed),
                ReadOutcome::Other => {}
            }
        }
        let max = buf.len();
        let got = view(py, buf, true).and_then(|v| {
            self.sslsock
                .call_method1(intern!(py, "read"), (max, v))
                .and_then(|n| n.extract::<usize>())
        });
        match got {
            Ok(0) => Ok(Got::Closed),
            Ok(n) => Ok(Got::Data(n.min(max))),
            Err(x) if tls.is_again(py, &x) => Ok(Got::Again),
            Err(x) => Err(x),
        }
    }

    /// `sslobj.write(data)`: the count the `SSLObject` took.
    fn write(&self, py: Python<'py>, data: &Bound<'py, PyBytes>) -> PyResult<usize> {
        if let Some((d, ptrs)) = self.direct {
            if let Some(n) = d.write(ptrs.ssl, data.as_bytes()) {
                py.check_signals()?;
                return Ok(n);
            }
        }
        self.sslsock
            .call_method1(intern!(py, "write"), (data,))?
            .extract::<usize>()
    }
}

/// A memoryview over `buf` (writable when `write`), for a C method that copies in or out of it
/// during the call; the view must not outlive `buf` (the methods given it keep no reference).
fn view<'py>(py: Python<'py>, buf: &mut [u8], write: bool) -> PyResult<Bound<'py, PyAny>> {
    let flags = if write {
        ffi::PyBUF_WRITE
    } else {
        ffi::PyBUF_READ
    };
    // SAFETY: `buf` is valid for its length for the duration of the borrow; the memoryview
    // is dropped by the caller before `buf` is (see above).
    unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyMemoryView_FromMemory(
                buf.as_mut_ptr().cast::<c_char>(),
                buf.len() as ffi::Py_ssize_t,
                flags,
            ),
        )
    }
}

/// An exception met on a record path, and where: the site (a key of `fdkit.aio._tls`'s
/// chains) says which of asyncio's methods it would have passed through, so that it is handled
/// where asyncio handles it, with asyncio's traceback entries (`_tls.failed`).
struct Failed {
    err: PyErr,
    site: &'static str,
}

/// Tags an error with its site.
fn at(site: &'static str) -> impl Fn(PyErr) -> Failed {
    move |err| Failed { err, site }
}

/// `_tls.failed(site, protocol, transport, exc)`: what asyncio does with the exception
/// (`transport` None for a write): `Ok` once handled, `Err` for what leaves the loop (raised
/// here, so that its traceback holds asyncio's entries and no frame of `failed`).
fn handle(
    py: Python<'_>,
    f: Failed,
    protocol: &Bound<'_, PyAny>,
    transport: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let leaving = errors(py)?.getattr(intern!(py, "failed"))?.call1((
        f.site,
        protocol,
        transport,
        f.err.into_value(py),
    ))?;
    if leaving.is_none() {
        return Ok(());
    }
    Err(PyErr::from_value(leaving))
}

/// The socket transport's `_read_ready__get_buffer` for transport `tr` (its socket's fd `fd`,
/// non-blocking) and its protocol `proto`, an `SSLProtocol`; `cb` is the Handle's bound
/// `_read_ready__get_buffer`, called when the native path does not stand for it. `Ok(false)`
/// when it left the read to `cb` before doing anything.
pub(super) fn read_ready(
    py: Python<'_>,
    state: &GilCell<State>,
    tr: &Bound<'_, PyAny>,
    proto: &Bound<'_, PyAny>,
    fd: RawFd,
) -> PyResult<bool> {
    let Some(tls) = classes(py) else {
        return Ok(false);
    };
    if !tls.runs(proto) || !tls.native(py)? {
        return Ok(false);
    }
    let p = Proto::new(tls, proto.clone());
    // Only a connection that is up; the handshake and the shutdown are asyncio's.
    if !p.get(F::State)?.is(tls.wrapped.bind(py)) {
        return Ok(false);
    }
    let Some(engine) = Engine::of(tls, &p)? else {
        return Ok(false);
    };
    // `get_buffer(-1)` returns a view of `_ssl_buffer`, at least `max_size` long: recv(2) reads
    // up to its length. Taken natively while both are what asyncio made them.
    let size = match (
        small_int(&p.get_name(intern!(py, "max_size"))?),
        p.get(F::SslBuffer)?
            .cast_exact::<PyByteArray>()
            .map(|b| b.len())
            .ok(),
    ) {
        (Some(max), Some(len)) if max > 0 && len as i64 == max && len <= MAX_RECORD_READ => len,
        _ => return Ok(false),
    };
    let mut buf = state.with(py, |s| std::mem::take(&mut s.recv_buf));
    if buf.len() < size {
        buf.resize(size, 0);
    }
    let got = super::socket_transport::nonblocking(py, || {
        if fd < 0 {
            return Err(Errno::BADF);
        }
        // SAFETY: `fd` is the socket's own open fd, as its `recv_into` would use it.
        let sock = unsafe { BorrowedFd::borrow_raw(fd) };
        rustix::net::recv(sock, &mut buf[..size], RecvFlags::empty()).map(|(n, _)| n)
    });
    let n = match got {
        Err(e) => {
            state.with(py, |s| s.recv_buf = buf);
            return recv_failed(py, tr, e).map(|()| true);
        }
        Ok(Err(Errno::AGAIN)) => {
            state.with(py, |s| s.recv_buf = buf);
            return Ok(true);
        }
        Ok(Err(e)) => {
            state.with(py, |s| s.recv_buf = buf);
            return recv_failed(py, tr, os_error(e)).map(|()| true);
        }
        Ok(Ok(n)) => n,
    };
    if n == 0 {
        state.with(py, |s| s.recv_buf = buf);
        tr.call_method0(intern!(py, "_read_ready__on_eof"))?;
        return Ok(true);
    }
    // `buffer_updated(n)`: the bytes into the incoming BIO, then `_do_read` (the state was
    // WRAPPED before recv(2), which runs no Python).
    let outcome = engine
        .feed(py, &mut buf[..n])
        .map_err(at("feed"))
        .and_then(|()| do_read(py, tls, &p, &engine, size));
    state.with(py, |s| s.recv_buf = buf);
    match outcome {
        Ok(()) => Ok(true),
        Err(f) => handle(py, f, proto, Some(tr)).map(|()| true),
    }
}

/// The largest `max_size` read natively: asyncio's (`256 * 1024`).
const MAX_RECORD_READ: usize = 256 * 1024;

fn errors(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    py.import(intern!(py, "fdkit.aio._tls"))
}

/// `_tls.recv_failed`: asyncio's handling of an exception from `recv_into`, `Err` for what
/// leaves the loop (raised here, with asyncio's traceback entries).
fn recv_failed(py: Python<'_>, tr: &Bound<'_, PyAny>, e: PyErr) -> PyResult<()> {
    let leaving = errors(py)?
        .getattr(intern!(py, "recv_failed"))?
        .call1((tr, e.into_value(py)))?;
    if leaving.is_none() {
        return Ok(());
    }
    Err(PyErr::from_value(leaving))
}

/// asyncio's `SSLProtocol._do_read` in state WRAPPED; `max` is the protocol's `max_size`.
fn do_read(
    py: Python<'_>,
    tls: &'static TlsClasses,
    p: &Proto<'_>,
    e: &Engine<'_>,
    max: usize,
) -> Result<(), Failed> {
    let paused = p.flag(F::AppReadingPaused).map_err(at("ssl_reading"))?;
    if !paused {
        if p.flag(F::AppProtocolIsBuffer).map_err(at("buffered"))? {
            p.obj
                .call_method0(intern!(py, "_do_read__buffered"))
                .map_err(at("buffered"))?;
        } else {
            read_copied(py, tls, p, e, max)?;
        }
        if p.flag(F::WriteBacklog).map_err(at("do_write"))? {
            p.obj
                .call_method0(intern!(py, "_do_write"))
                .map_err(at("do_write"))?;
        } else {
            process_outgoing(py, p, e, "")?;
        }
    }
    control_ssl_reading(py, p, e).map_err(at("ssl_reading"))
}

/// asyncio's `SSLProtocol._do_read__copied`: every record the incoming BIO holds, read into
/// one `data_received` call; at close_notify the app protocol's EOF and the shutdown. Each
/// read takes up to `max` bytes, as asyncio's `read(self.max_size)`, straight into the `bytes`
/// object `data_received` gets (sized for what the BIO holds): the bytes asyncio joins are
/// decrypted in place here.
fn read_copied(
    py: Python<'_>,
    tls: &'static TlsClasses,
    p: &Proto<'_>,
    e: &Engine<'_>,
    max: usize,
) -> Result<(), Failed> {
    let mut out = e
        .plain_bound(py)
        .and_then(|n| BytesOut::new(py, n))
        .map_err(at("read"))?;
    let mut filled = 0;
    let mut closed = false;
    // `read` raises SSLWantReadError exactly when no byte is left to it: none in the incoming
    // BIO and none decrypted in the SSLObject; asking is cheaper than the read.
    while e.readable(py).map_err(at("read"))? {
        // Up to `max`, within the object while it has room (its size is a bound, not a count).
        let want = match out.capacity() - filled {
            0 => max,
            room => room.min(max),
        };
        let room = out.room(filled + want).map_err(at("read"))?;
        match e
            .read(py, tls, &mut room[filled..filled + want])
            .map_err(at("read"))?
        {
            Got::Data(n) => filled += n,
            Got::Again => break,
            Got::Closed => {
                closed = true;
                break;
            }
        }
    }
    let app = p.get(F::AppProtocol).map_err(at("protocol"))?;
    if let Some(data) = out.finish(filled).map_err(at("read"))? {
        app.call_method1(intern!(py, "data_received"), (data,))
            .map_err(at("protocol"))?;
    }
    if closed {
        p.obj
            .call_method0(intern!(py, "_call_eof_received"))
            .map_err(at("eof"))?;
        p.obj
            .call_method0(intern!(py, "_start_shutdown"))
            .map_err(at("shutdown"))?;
    }
    Ok(())
}

/// asyncio's `SSLProtocol._process_outgoing`: the outgoing BIO to the socket transport (unless
/// it paused the protocol), then `_control_app_writing`.
///
/// `caller` is `""` when `_do_read` calls it, `"w_"` when the app transport's `write` does:
/// the prefix of its errors' sites.
fn process_outgoing(
    py: Python<'_>,
    p: &Proto<'_>,
    e: &Engine<'_>,
    caller: &'static str,
) -> Result<(), Failed> {
    let (outgoing, app_writing) = if caller.is_empty() {
        ("outgoing", "app_writing")
    } else {
        ("w_outgoing", "w_app_writing")
    };
    let mut drained = false;
    if !p.flag(F::SslWritingPaused).map_err(at(outgoing))? {
        // `read()` takes every byte the BIO holds; none is added unless the socket
        // transport's `write` is a program's (which could write into it).
        let written = e.drain(py).and_then(|data| {
            let Some(data) = data else {
                return Ok(true);
            };
            let tr = p.get(F::Transport)?;
            let native = match data.cast_exact::<PyBytes>() {
                Ok(b) => super::socket_transport::write_bytes(py, &tr, b)?.is_ok(),
                Err(_) => false,
            };
            if native {
                return Ok(true);
            }
            let still = is_native_transport(py, &tr)?;
            tr.call_method1(intern!(py, "write"), (data,))?;
            Ok(still)
        });
        drained = written.map_err(at(outgoing))?;
    }
    control_app_writing(py, p, e, drained).map_err(at(app_writing))
}

/// Whether `tr` is exactly fdkit's socket transport (whose `write` runs no program code).
fn is_native_transport(py: Python<'_>, tr: &Bound<'_, PyAny>) -> PyResult<bool> {
    let o = super::asyncio_objects::objects(py)?;
    Ok(o.transport_class
        .get(py)
        .is_some_and(|c| tr.get_type().is(c.cls.bind(py))))
}

/// asyncio's `SSLProtocol._control_app_writing`: its Python runs when the app protocol is to be
/// paused or resumed (or a figure is not a plain int). `drained`: the outgoing BIO is known to be empty (its `pending` is not asked).
fn control_app_writing(
    py: Python<'_>,
    p: &Proto<'_>,
    e: &Engine<'_>,
    drained: bool,
) -> PyResult<()> {
    // Paused, the app protocol is resumed at the low-water mark; else paused at the high one.
    let paused = p.flag(F::AppWritingPaused)?;
    let mark = if paused {
        F::OutgoingLowWater
    } else {
        F::OutgoingHighWater
    };
    let size = small_int(&p.get(F::WriteBufferSize)?);
    let (Some(size), Some(mark)) = (size, small_int(&p.get(mark)?)) else {
        return p
            .obj
            .call_method0(intern!(py, "_control_app_writing"))
            .map(drop);
    };
    let size = if drained {
        size
    } else {
        e.pending_out()? + size
    };
    if (!paused && size >= mark) || (paused && size <= mark) {
        p.obj.call_method0(intern!(py, "_control_app_writing"))?;
    }
    Ok(())
}

/// asyncio's `SSLProtocol._control_ssl_reading`, as [`control_app_writing`].
fn control_ssl_reading(py: Python<'_>, p: &Proto<'_>, e: &Engine<'_>) -> PyResult<()> {
    let paused = p.flag(F::SslReadingPaused)?;
    let mark = if paused {
        F::IncomingLowWater
    } else {
        F::IncomingHighWater
    };
    let Some(mark) = small_int(&p.get(mark)?) else {
        return p
            .obj
            .call_method0(intern!(py, "_control_ssl_reading"))
            .map(drop);
    };
    let size = e.pending_in()?;
    if (!paused && size >= mark) || (paused && size <= mark) {
        p.obj.call_method0(intern!(py, "_control_ssl_reading"))?;
    }
    Ok(())
}

/// The app transport's `write(data)`: `_write_appdata((data,))` for `bytes` while the
/// connection is up and nothing waits in the backlog. `Ok(None)` when asyncio's `write` is to
/// run instead (nothing was done).
fn app_write(
    py: Python<'_>,
    tls: &'static TlsClasses,
    tr: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
) -> PyResult<Option<()>> {
    let Ok(bytes) = data.cast_exact::<PyBytes>() else {
        return Ok(None);
    };
    if bytes.as_bytes().is_empty() || !tls.native(py)? {
        return Ok(None);
    }
    let proto = super::attrs::instance_dict(tr).and_then(|d| {
        super::attrs::dict_get(&d, intern!(py, "_ssl_protocol").as_any())
            .ok()
            .flatten()
    });
    let Some(proto) = proto else {
        return Ok(None);
    };
    if !tls.runs(&proto) {
        return Ok(None);
    }
    let p = Proto::new(tls, proto);
    if !p.get(F::State)?.is(tls.wrapped.bind(py)) || p.flag(F::WriteBacklog)? {
        return Ok(None);
    }
    let Some(e) = Engine::of(tls, &p)? else {
        return Ok(None);
    };
    // `_do_write` of a backlog of `data` alone: what the SSLObject did not take stays in it.
    let len = bytes.as_bytes().len();
    let left = match e.write(py, bytes) {
        Ok(n) if n >= len => None,
        Ok(n) => Some((
            data.get_item(pyo3::types::PySlice::new(py, n as isize, len as isize, 1))?,
            len - n,
        )),
        Err(x) if tls.is_again(py, &x) => Some((data.clone(), len)),
        Err(x) => {
            // Still in the backlog, as asyncio's `_do_write` leaves it.
            backlog(py, &p, data, len)?;
            handle(py, at("w_write")(x), &p.obj, None)?;
            return Ok(Some(()));
        }
    };
    if let Some((rest, n)) = left {
        backlog(py, &p, &rest, n)?;
    }
    if let Err(f) = process_outgoing(py, &p, &e, "w_") {
        handle(py, f, &p.obj, None)?;
    }
    Ok(Some(()))
}

/// Leaves `data` (`n` bytes) in the protocol's write backlog, counted in its buffer size.
fn backlog(py: Python<'_>, p: &Proto<'_>, data: &Bound<'_, PyAny>, n: usize) -> PyResult<()> {
    p.get(F::WriteBacklog)?
        .call_method1(intern!(py, "append"), (data,))?;
    let size = p.get(F::WriteBufferSize)?.add(n)?;
    p.set(F::WriteBufferSize, size)
}

// `write(*args, **kwargs)` of app transport (the descriptor checked its class): the native
// path for one positional `bytes`; the `write` behind it (asyncio's, or what a program put on
// asyncio's class) for every other call.
fastcall::write_method_def!(
    WRITE_DEF,
    write_trampoline,
    write_method,
    "fdkit's TLS transport write",
    c"write(data)\n--\n\nWrite some data bytes to the transport.\n\nThis does not \
block; it buffers the data and arranges for it\nto be sent out asynchronously."
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
    let Some(tls) = classes(py) else {
        return Err(PyValueError::new_err(
            "fdkit's TLS transport write is not installed",
        ));
    };
    if nargs == 1 && kwnames.is_null() {
        // SAFETY: CPython passes `nargs` valid borrowed references in `args`.
        let data = unsafe { Bound::from_borrowed_ptr(py, *args) };
        if app_write(py, tls, &tr, &data)?.is_some() {
            return Ok(py.None().into_ptr());
        }
    }
    let app = tls.app.bind(py);
    let Some(func) = super::attrs::after_in_mro(&tr.get_type(), app, intern!(py, "write"))? else {
        return Err(pyo3::exceptions::PyAttributeError::new_err("write"));
    };
    // SAFETY: CPython's METH_FASTCALL | METH_KEYWORDS contract, passed on.
    unsafe { fastcall::call_behind(&tr, &func, args, nargs, kwnames) }
}

/// What [`load_direct`] proves OpenSSL's direct calls on.
type Probe<'py> = (
    String,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
);

/// Installs the native TLS paths: `app` (fdkit's subclass of asyncio's `_SSLProtocolTransport`)
/// gets the native `write`; `native_ok` is asked whether they may stand for asyncio's methods;
/// `read_ready_buffer` is asyncio's `_SelectorSocketTransport._read_ready__get_buffer`. The
/// record paths call `_ssl`'s methods until [`load_direct`] proves OpenSSL's own calls.
#[pyfunction]
pub fn install_tls(
    app: &Bound<'_, PyType>,
    proto: &Bound<'_, PyType>,
    native_ok: &Bound<'_, PyAny>,
    read_ready_buffer: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let py = app.py();
    let sslproto = py.import("asyncio.sslproto")?;
    let ssl = py.import("ssl")?;
    fastcall::install(app, intern!(py, "write"), &WRITE_DEF)?;
    let classes = TlsClasses {
        proto: sslproto
            .getattr("SSLProtocol")?
            .cast_into::<PyType>()?
            .unbind(),
        slotted: proto.clone().unbind(),
        names: FIELD_NAMES.map(|n| PyString::intern(py, n).unbind()),
        slots: super::attrs::slot_offsets(proto, proto, FIELD_NAMES)?,
        app: app.clone().unbind(),
        sslobject: ssl.getattr("SSLObject")?.cast_into::<PyType>()?.unbind(),
        bio: ssl.getattr("MemoryBIO")?.cast_into::<PyType>()?.unbind(),
        wrapped: sslproto
            .getattr("SSLProtocolState")?
            .getattr("WRAPPED")?
            .unbind(),
        again: sslproto
            .getattr("SSLAgainErrors")?
            .cast_into::<PyTuple>()?
            .unbind(),
        read_ready_buffer: read_ready_buffer.clone().unbind(),
        native_ok: native_ok.clone().unbind(),
        direct: PyOnceLock::new(),
        rule: GilCell::new(None),
    };
    if TLS.set(py, classes).is_err() {
        return Err(PyValueError::new_err(
            "the native TLS paths are installed once",
        ));
    }
    Ok(())
}

/// Proves OpenSSL's direct calls once, on `probe`: `None` (the record paths keep calling
/// `_ssl`'s methods) or `(ssl_so, sslobject, incoming, outgoing, eof_bio)`: `_ssl.__file__`, a
/// client `SSLObject` over the two new `MemoryBIO`s, and a `MemoryBIO` whose EOF was written
/// (see [`Direct::load`]). Returns whether the record paths call OpenSSL directly. Made on the
/// first TLS connection, not at import: an `SSLContext` costs milliseconds.
#[pyfunction]
#[pyo3(signature = (probe=None))]
pub fn load_direct(py: Python<'_>, probe: Option<Probe<'_>>) -> PyResult<bool> {
    let Some(tls) = classes(py) else {
        return Err(PyValueError::new_err(
            "the native TLS paths are not installed",
        ));
    };
    let direct = tls.direct.get_or_try_init(py, || match &probe {
        Some((so, obj, incoming, outgoing, eof)) => Direct::load(so, obj, incoming, outgoing, eof),
        None => Ok(None),
    })?;
    Ok(direct.is_some())
}
