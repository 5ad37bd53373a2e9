//! OpenSSL called directly on the `SSL` and `BIO` objects behind an `ssl.SSLObject` and its two
//! `ssl.MemoryBIO`s: the calls `_ssl.c` makes for `read`, `write`, `pending` and the BIOs'
//! `write`, `read`, `pending`, without the method call, the argument parsing and the release and
//! retake of the GIL around each (`SSL_read_ex(3)`, `SSL_write_ex(3)`, `BIO_read(3)`).
//!
//! Two things are CPython's internals and proven at load ([`Direct::load`]) before anything
//! is called: where `_ssl` keeps the `SSL *` in its `_SSLSocket` object and the `BIO *` (and the
//! `eof_written` flag) in its `MemoryBIO` object, and that the OpenSSL functions found through
//! `_ssl`'s own shared object (`dlopen(3)` with `RTLD_NOLOAD`, `dlsym(3)`: the library `_ssl` is
//! linked with, not another) are the ones operating on them. Where either does not hold (an
//! `_ssl` with OpenSSL linked in statically, another layout), `load` gives None and the record
//! path calls `_ssl`'s methods.
//!
//! A direct call only ever stands for a call whose result `_ssl` would return as a value: data,
//! a count, or the `SSLWantReadError` that asyncio catches. On any other outcome the caller
//! makes `_ssl`'s own call next, which meets the same OpenSSL state and error queue and raises
//! the exception `_ssl` raises (message and line number included): OpenSSL returns the failure
//! of a connection in error again without queueing a second error.

use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{c_char, c_int, c_void, CString};

type SslReadEx = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut usize) -> c_int;
type SslWriteEx = unsafe extern "C" fn(*mut c_void, *const c_void, usize, *mut usize) -> c_int;
type SslGetError = unsafe extern "C" fn(*const c_void, c_int) -> c_int;
type SslInt = unsafe extern "C" fn(*const c_void) -> c_int;
type SslPtr = unsafe extern "C" fn(*const c_void) -> *mut c_void;
type BioWrite = unsafe extern "C" fn(*mut c_void, *const c_void, c_int) -> c_int;
type BioRead = unsafe extern "C" fn(*mut c_void, *mut c_void, c_int) -> c_int;
type BioCtrlPending = unsafe extern "C" fn(*mut c_void) -> usize;

const SSL_ERROR_WANT_READ: c_int = 2;
const SSL_ERROR_ZERO_RETURN: c_int = 6;
const SSL_RECEIVED_SHUTDOWN: c_int = 2;
const TLS1_3_VERSION: c_int = 0x0304;

/// The OpenSSL functions `_ssl` calls, and where its objects keep OpenSSL's.
pub(super) struct Direct {
    read_ex: SslReadEx,
    write_ex: SslWriteEx,
    get_error: SslGetError,
    pending: SslInt,
    get_shutdown: SslInt,
    version: SslInt,
    bio_write: BioWrite,
    bio_read: BioRead,
    bio_pending: BioCtrlPending,
    /// `PyObject_HEAD`'s size: `_SSLSocket` is `{Socket, ssl, ctx, ...}` after it, `MemoryBIO`
    /// `{bio, eof_written}`, `_SSLContext` `{ctx, ...}`.
    head: isize,
    /// `_ssl._SSLSocket` and `_ssl.MemoryBIO`: only these exact types are read.
    sslsock_type: *mut ffi::PyTypeObject,
    bio_type: *mut ffi::PyTypeObject,
}

// SAFETY: function pointers and type pointers of immortal types (`_ssl`'s, kept loaded by the
// module), only used with the GIL held.
unsafe impl Send for Direct {}
// SAFETY: as above; never written after `load`.
unsafe impl Sync for Direct {}

/// What `SSLSocket.read` would come to.
pub(super) enum ReadOutcome {
    /// `n` bytes read into the buffer.
    Data(usize),
    /// `SSLWantReadError`: no record left to read.
    WantRead,
    /// `b''`: the peer's close_notify.
    Closed,
    /// Anything else: `_ssl`'s own `read` is to be called, to raise what it raises.
    Other,
}

fn field(obj: *mut ffi::PyObject, offset: isize) -> *mut c_void {
    // SAFETY: callers pass an object of a type whose layout `load` proved, and an offset inside
    // its basic size.
    unsafe { *obj.cast::<u8>().offset(offset).cast::<*mut c_void>() }
}

impl Direct {
    /// OpenSSL through the shared object at `ssl_so` (`_ssl.__file__`), proven on `probe`: a
    /// client `ssl.SSLObject` over two new `MemoryBIO`s (`incoming`, `outgoing`), and
    /// `eof_bio`, a `MemoryBIO` whose `write_eof()` was called. None when it cannot be had or
    /// does not hold.
    pub fn load(
        ssl_so: &str,
        probe: &Bound<'_, PyAny>,
        incoming: &Bound<'_, PyAny>,
        outgoing: &Bound<'_, PyAny>,
        eof_bio: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Self>> {
        let py = probe.py();
        let Ok(path) = CString::new(ssl_so) else {
            return Ok(None);
        };
        // SAFETY: dlopen with RTLD_NOLOAD only returns the already loaded `_ssl` (or null); the
        // handle is never closed, as the module is never unloaded.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if handle.is_null() {
            return Ok(None);
        }
        let sym = |name: &str| -> Option<*mut c_void> {
            let name = CString::new(name).ok()?;
            // SAFETY: a symbol lookup in a live handle (its dependencies included).
            let p = unsafe { libc::dlsym(handle, name.as_ptr() as *const c_char) };
            (!p.is_null()).then_some(p)
        };
        macro_rules! syms {
            ($($name:literal as $ty:ty),* $(,)?) => {
                ($(match sym($name) {
                    // SAFETY: the symbol is OpenSSL's function of that name, whose C signature
                    // (OpenSSL 1.1.1 and 3.x) is `$ty`.
                    Some(p) => unsafe { std::mem::transmute::<*mut c_void, $ty>(p) },
                    None => return Ok(None),
                },)*)
            };
        }
        let (read_ex, write_ex, get_error, pending, get_shutdown, version) = syms!(
            "SSL_read_ex" as SslReadEx,
            "SSL_write_ex" as SslWriteEx,
            "SSL_get_error" as SslGetError,
            "SSL_pending" as SslInt,
            "SSL_get_shutdown" as SslInt,
            "SSL_version" as SslInt,
        );
        let (get_rbio, get_wbio, get_ctx) = syms!(
            "SSL_get_rbio" as SslPtr,
            "SSL_get_wbio" as SslPtr,
            "SSL_get_SSL_CTX" as SslPtr,
        );
        let (bio_write, bio_read, bio_pending) = syms!(
            "BIO_write" as BioWrite,
            "BIO_read" as BioRead,
            "BIO_ctrl_pending" as BioCtrlPending,
        );
        let head = std::mem::size_of::<ffi::PyObject>() as isize;
        let Ok(sslsock) = probe.getattr("_sslobj") else {
            return Ok(None);
        };
        let basic = |o: &Bound<'_, PyAny>| -> isize {
            // SAFETY: reading the basic size of a live type.
            unsafe { (*o.get_type().as_type_ptr()).tp_basicsize }
        };
        let ctx_obj = sslsock.getattr("context")?;
        if basic(&sslsock) < head + 24
            || basic(incoming) < head + 12
            || basic(&ctx_obj) < head + 8
            || !incoming.get_type().is(outgoing.get_type())
            || !eof_bio.get_type().is(incoming.get_type())
        {
            return Ok(None);
        }
        let s = sslsock.as_ptr();
        // `_SSLSocket` is `{Socket, ssl, ctx}`: no socket for a BIO pair, and its context is the
        // `_SSLContext` the probe was made by.
        if !field(s, head).is_null() || field(s, head + 16) != ctx_obj.as_ptr().cast() {
            return Ok(None);
        }
        let ssl = field(s, head + 8);
        let bio = |b: &Bound<'_, PyAny>| field(b.as_ptr(), head);
        // SAFETY: `ssl` is the probe's `SSL *` (the fields around it are the ones expected);
        // these accessors only read it.
        let same = unsafe {
            !ssl.is_null()
                && get_ctx(ssl) == field(ctx_obj.as_ptr(), head)
                && get_rbio(ssl) == bio(incoming)
                && get_wbio(ssl) == bio(outgoing)
        };
        let eof = |b: &Bound<'_, PyAny>| -> c_int {
            // SAFETY: a `MemoryBIO` is `{bio, eof_written}` after its header (checked above by
            // its size and, here, by the flag's values).
            unsafe { *b.as_ptr().cast::<u8>().offset(head + 8).cast::<c_int>() }
        };
        if !same || eof(incoming) != 0 || eof(eof_bio) != 1 {
            return Ok(None);
        }
        let direct = Direct {
            read_ex,
            write_ex,
            get_error,
            pending,
            get_shutdown,
            version,
            bio_write,
            bio_read,
            bio_pending,
            head,
            sslsock_type: sslsock.get_type().as_type_ptr(),
            bio_type: incoming.get_type().as_type_ptr(),
        };
        // Bytes written by the direct BIO_write are what the BIO's own `read` gives back.
        let b = incoming.as_ptr();
        if direct.bio_write(b, b"fdkit") != Some(5) || !direct.bio_pending_is(b, 5) {
            return Ok(None);
        }
        let back: Vec<u8> = incoming.call_method0("read")?.extract()?;
        if back != b"fdkit" || direct.bio_pending(field(b, head)) != 0 {
            return Ok(None);
        }
        let _ = py;
        Ok(Some(direct))
    }

    /// The `SSL *` of `sslsock` when it is exactly `_ssl._SSLSocket` on a TLS 1.3 connection
    /// (no renegotiation: no callback of a program's runs in a record's read or write).
    pub fn ssl_of(&self, sslsock: &Bound<'_, PyAny>) -> Option<*mut c_void> {
        let s = sslsock.as_ptr();
        // SAFETY: comparing a type pointer; the field is read only for the proven type.
        unsafe {
            if ffi::Py_TYPE(s) != self.sslsock_type {
                return None;
            }
            let ssl = field(s, self.head + 8);
            (!ssl.is_null() && (self.version)(ssl) == TLS1_3_VERSION).then_some(ssl)
        }
    }

    /// The `BIO *` of `bio` when it is exactly `_ssl.MemoryBIO`.
    pub fn bio_of(&self, bio: &Bound<'_, PyAny>) -> Option<*mut c_void> {
        let b = bio.as_ptr();
        // SAFETY: as `ssl_of`.
        unsafe { (ffi::Py_TYPE(b) == self.bio_type).then(|| field(b, self.head)) }
    }

    /// Whether `write_eof()` was called on `bio` (whose `write` then raises).
    pub fn eof_written(&self, bio: &Bound<'_, PyAny>) -> bool {
        // SAFETY: `bio` is a `MemoryBIO` (`bio_of` gave its BIO), whose flag follows the BIO.
        unsafe {
            *bio.as_ptr()
                .cast::<u8>()
                .offset(self.head + 8)
                .cast::<c_int>()
                != 0
        }
    }

    /// `SSLSocket.read(len(buf), buf)`.
    pub fn read(&self, ssl: *mut c_void, buf: &mut [u8]) -> ReadOutcome {
        let mut n = 0usize;
        // SAFETY: `ssl` is a live `SSL *` (its Python object is held by the caller); `buf` is
        // writable for its length.
        unsafe {
            let ok = (self.read_ex)(ssl, buf.as_mut_ptr().cast(), buf.len(), &mut n);
            if ok == 1 {
                return ReadOutcome::Data(n);
            }
            match (self.get_error)(ssl, ok) {
                SSL_ERROR_WANT_READ => ReadOutcome::WantRead,
                SSL_ERROR_ZERO_RETURN if (self.get_shutdown)(ssl) == SSL_RECEIVED_SHUTDOWN => {
                    ReadOutcome::Closed
                }
                _ => ReadOutcome::Other,
            }
        }
    }

    /// `SSLSocket.write(data)`: the count written, or None when `_ssl`'s `write` is to raise.
    pub fn write(&self, ssl: *mut c_void, data: &[u8]) -> Option<usize> {
        if data.len() > c_int::MAX as usize {
            return None; // `_ssl` raises OverflowError
        }
        let mut n = 0usize;
        // SAFETY: as `read`; `data` is readable for its length.
        let ok = unsafe { (self.write_ex)(ssl, data.as_ptr().cast(), data.len(), &mut n) };
        (ok == 1).then_some(n)
    }

    /// `SSLSocket.pending()`.
    pub fn ssl_pending(&self, ssl: *mut c_void) -> c_int {
        // SAFETY: as `read`.
        unsafe { (self.pending)(ssl) }
    }

    /// `MemoryBIO.pending`.
    pub fn bio_pending(&self, bio: *mut c_void) -> usize {
        // SAFETY: `bio` is a live memory BIO.
        unsafe { (self.bio_pending)(bio) }
    }

    fn bio_pending_is(&self, bio: *mut ffi::PyObject, n: usize) -> bool {
        self.bio_pending(field(bio, self.head)) == n
    }

    /// `MemoryBIO.write(data)` on a BIO whose EOF was not written: the count, or None (then
    /// `_ssl`'s `write` is to raise).
    fn bio_write(&self, bio: *mut ffi::PyObject, data: &[u8]) -> Option<usize> {
        self.bio_write_to(field(bio, self.head), data)
    }

    pub fn bio_write_to(&self, bio: *mut c_void, data: &[u8]) -> Option<usize> {
        if data.len() > c_int::MAX as usize {
            return None;
        }
        // SAFETY: `bio` is a live memory BIO; `data` is readable for its length.
        let n = unsafe { (self.bio_write)(bio, data.as_ptr().cast(), data.len() as c_int) };
        usize::try_from(n).ok()
    }

    /// `MemoryBIO.read()`: every pending byte, as `bytes` (None when there is none).
    pub fn bio_read_all<'py>(
        &self,
        py: Python<'py>,
        bio: *mut c_void,
    ) -> PyResult<Option<Bound<'py, pyo3::types::PyBytes>>> {
        let avail = self.bio_pending(bio).min(c_int::MAX as usize);
        if avail == 0 {
            return Ok(None);
        }
        // Read into the object's own storage (pyo3's `PyBytes::new_with` would zero it first).
        let mut out = super::bytes_out::BytesOut::new(py, avail)?;
        let room = out.room(avail)?;
        // SAFETY: `bio` is a live memory BIO; `room` is writable for `avail` bytes.
        let got = unsafe { (self.bio_read)(bio, room.as_mut_ptr().cast(), avail as c_int) };
        // A memory BIO gives every pending byte at once.
        if got != avail as c_int {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "a memory BIO gave fewer bytes than it held",
            ));
        }
        out.finish(avail)
    }
}
