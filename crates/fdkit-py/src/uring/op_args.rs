//! How `Ring`'s op methods read their arguments: for each kind of argument in the core's op
//! table (`fdkit::ring_ops!`), what Python passes, how it is checked, and what the core's
//! method takes. The methods themselves are written by `ring.rs` from the table.
//!
//! An argument is read in two steps: [`OpArg::extract`] when PyO3 extracts the call's
//! arguments (errors then name the argument), then [`OpArg::core`] with the op's fd and
//! `fixed` at hand ([`Ctx`]), still with the GIL held; what the ring's method takes is made
//! inside the queueing closure ([`OpArg::arg`]), once the ring is known to be open.

use super::args::{self, send_data, user_data_arg, SendData};
use crate::args::{i32_arg, u16_arg, u32_arg, Count, Fd, PathArg, Seconds};
use fdkit::uring::{FixedData, Target};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyInt;
use rustix::event::PollFlags;
use rustix::net::SocketType;
use rustix::net::{AddressFamily, Protocol, RecvFlags, SendFlags, Shutdown, SocketAddrAny};
use rustix::pipe::SpliceFlags;
use std::ffi::CString;
use std::os::fd::{BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// The kinds the table names, by those names: the core's types, and the few the core spells
/// out ([`Offset`], [`DirFd`], [`OptProtocol`], [`Data`], [`Buffers`], [`OptAddress`]).
pub mod kinds {
    pub use super::{Buffers, Data, DirFd, Offset, OptAddress, OptProtocol};
    pub use fdkit::uring::{FixedData, Target};
    pub use rustix::event::PollFlags;
    pub use rustix::net::SocketType;
    pub use rustix::net::{AddressFamily, RecvFlags, SendFlags, Shutdown, SocketAddrAny};
    pub use rustix::pipe::SpliceFlags;
    pub use std::ffi::CString;
    pub use std::os::fd::{BorrowedFd, OwnedFd};
    pub use std::primitive::{bool, i32, u16, u32, u64, usize};
    pub use std::time::Duration;
}

/// What an argument's reading may look at besides itself: the op's fd (its first `Target` or
/// `BorrowedFd` argument) and whether the caller asked for `fixed`.
pub struct Ctx<'py> {
    pub py: Python<'py>,
    pub fd: Option<Fd>,
    pub fixed: bool,
}

/// One kind of op argument.
pub trait OpArg {
    /// What PyO3 extracts (the method's parameter type; its default is the table's).
    type Py;
    /// What is carried into the queueing closure.
    type Core: Send;
    /// What the ring's method takes.
    type Arg;
    /// Reads the Python object (`#[pyo3(from_py_with)]`).
    fn extract(obj: &Bound<'_, PyAny>) -> PyResult<Self::Py>;
    /// The fd this argument names, if it is the op's fd.
    fn fd(_: &Self::Py) -> Option<Fd> {
        None
    }
    /// Checks and converts, with the GIL held.
    fn core(v: Self::Py, ctx: &Ctx<'_>) -> PyResult<Self::Core>;
    /// The ring method's argument, made once the ring is open.
    fn arg(v: Self::Core) -> Self::Arg;
}

/// One kind: `Kind: Py = extract => Core = |value, ctx| conversion`, carried into the closure
/// as it is. `struct Name: ...` also declares the kind; `<'a> Kind<'a>: ...` is generic; `fd`
/// after the extraction says the kind is the op's fd.
macro_rules! kind {
    (@impl [$($gen:tt)*] $kind:ty: $py:ty = $extract:expr $(, $fd:ident)?
        => $core:ty = |$v:ident, $ctx:ident| $conv:expr) => {
        impl $($gen)* OpArg for $kind {
            type Py = $py;
            type Core = $core;
            type Arg = $core;
            fn extract(obj: &Bound<'_, PyAny>) -> PyResult<$py> {
                $extract(obj)
            }
            $(fn $fd(v: &$py) -> Option<Fd> {
                Some(*v)
            })?
            fn core($v: $py, $ctx: &Ctx<'_>) -> PyResult<$core> {
                $conv
            }
            fn arg(v: $core) -> $core {
                v
            }
        }
    };
    (struct $name:ident: $($rest:tt)*) => {
        pub struct $name;
        kind!(@impl [] $name: $($rest)*);
    };
    (<$lt:lifetime> $($rest:tt)*) => {
        kind!(@impl [<$lt>] $($rest)*);
    };
    ($($rest:tt)*) => {
        kind!(@impl [] $($rest)*);
    };
}

/// Any object, read later (an address needs the op's fd).
fn object(obj: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    Ok(obj.clone().unbind())
}

/// Any object but None, read later.
fn optional(obj: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
    Ok((!obj.is_none()).then(|| obj.clone().unbind()))
}

/// What PyO3 extracts as it would for a parameter of type `T`.
fn plain<T: for<'a, 'py> FromPyObject<'a, 'py, Error = PyErr>>(
    obj: &Bound<'_, PyAny>,
) -> PyResult<T> {
    obj.extract()
}

// An fd, or with `fixed=True` an index into the registered files.
kind!(<'a> Target<'a>: Fd = plain, fd => Target<'static> = |fd, ctx| Ok(if ctx.fixed {
    Target::Fixed(fd.0 as u32)
} else {
    Target::Fd(fd.borrow())
}));
// A plain fd (splice and tee ends).
kind!(<'a> BorrowedFd<'a>: Fd = plain, fd => BorrowedFd<'static> = |fd, _c| Ok(fd.borrow()));
// An fd or None: the directory a path is relative to.
kind!(struct DirFd: Option<Fd> = plain => Option<BorrowedFd<'static>> = |v, _c| {
    Ok(v.map(Fd::borrow))
});
// A byte count to receive or read.
kind!(usize: Count = plain => usize = |n, _c| args::nbytes(n));
// A length the kernel takes as 32 bits (splice, tee), a count, a mode or a mask.
kind!(u32: u32 = u32_arg => u32 = |v, _c| Ok(v));
// A buffer group or a registered buffer's index.
kind!(u16: u16 = u16_arg => u16 = |v, _c| Ok(v));
// `O_*` or `AT_*` flags.
kind!(i32: i32 = i32_arg => i32 = |v, _c| Ok(v));
// A switch.
kind!(bool: bool = plain => bool = |v, _c| Ok(v));
// Another op's `user_data`.
kind!(u64: u64 = user_data_arg => u64 = |v, _c| Ok(v));
// A file offset, or None for the file position.
kind!(struct Offset: Option<Count> = plain => Option<u64> = |v, _c| Ok(v.map(|o| o.0)));
// A duration in seconds.
kind!(Duration: f64 = plain => Duration = |s, _c| Seconds::wait("timeout").of(s));
// `MSG_*` flags of a receive, then of a send; `SPLICE_F_*` flags.
kind!(RecvFlags: u32 = u32_arg => RecvFlags = |v, _c| Ok(RecvFlags::from_bits_retain(v)));
kind!(SendFlags: u32 = u32_arg => SendFlags = |v, _c| Ok(SendFlags::from_bits_retain(v)));
kind!(SpliceFlags: u32 = u32_arg => SpliceFlags = |v, _c| Ok(SpliceFlags::from_bits_retain(v)));
// `select.POLL*` events.
kind!(PollFlags: u32 = u32_arg => PollFlags = |events, _c| u16::try_from(events)
    .map(PollFlags::from_bits_retain)
    .map_err(|_| PyValueError::new_err(format!("events out of range: {events}"))));
// `socket.SHUT_RD`, `SHUT_WR` or `SHUT_RDWR`.
kind!(Shutdown: i32 = i32_arg => Shutdown = |how, _c| match how {
    0 => Ok(Shutdown::Read),
    1 => Ok(Shutdown::Write),
    2 => Ok(Shutdown::Both),
    other => Err(PyValueError::new_err(format!(
        "how must be SHUT_RD, SHUT_WR or SHUT_RDWR, got {other}"
    ))),
});
// An address family (`socket.AF_*`).
kind!(AddressFamily: u32 = u32_arg => AddressFamily = |family, _c| u16::try_from(family)
    .map(AddressFamily::from_raw)
    .map_err(|_| PyValueError::new_err(format!("invalid address family {family}"))));
// A socket type, with `SOCK_NONBLOCK` or `SOCK_CLOEXEC` or'ed in if wanted.
kind!(SocketType: u32 = u32_arg => SocketType = |v, _c| Ok(SocketType::from_raw(v)));
// A protocol number (0: the family's default).
kind!(struct OptProtocol: u32 = u32_arg => Option<Protocol> = |v, _c| {
    Ok(std::num::NonZeroU32::new(v).map(Protocol::from_raw))
});
// Bytes to send or write: `bytes` kept by reference, other bytes-like objects copied.
kind!(struct Data: SendData = send_data => SendData = |v, _c| Ok(v));
// An iterable of bytes-like objects, sent as one message.
kind!(struct Buffers: Vec<Box<dyn AsRef<[u8]> + Send>> = buffers
    => Vec<Box<dyn AsRef<[u8]> + Send>> = |v, _c| Ok(v));
// A path: str, bytes or os.PathLike.
kind!(CString: CString = path => CString = |v, _c| Ok(v));
// `write_fixed`'s data: bytes-like (copied into the buffer first), or an int (that many of the
// buffer's bytes, as they are).
kind!(FixedData: FixedData = fixed_data => FixedData = |v, _c| Ok(v));
// An address as `socket.connect` takes it, read in the family of the op's fd.
kind!(SocketAddrAny: Py<PyAny> = object => SocketAddrAny = |v, ctx| address(&v, ctx));
// An address or None (a datagram's destination); a plain fd only, not `fixed`.
kind!(struct OptAddress: Option<Py<PyAny>> = optional => Option<SocketAddrAny> = |v, ctx| {
    match v {
        None => Ok(None),
        // The family comes from the fd, which a registered file's index is not.
        Some(_) if ctx.fixed => Err(PyValueError::new_err(
            "sendmsg with an address takes a plain fd (fixed=False)",
        )),
        Some(a) => address(&a, ctx).map(Some),
    }
});

/// An fd handed over to be closed (`close_fd`): it becomes the ring's only once the ring is
/// known open, so a refused call leaves it open and the caller's.
impl OpArg for OwnedFd {
    type Py = Fd;
    type Core = RawFd;
    type Arg = OwnedFd;
    fn extract(obj: &Bound<'_, PyAny>) -> PyResult<Fd> {
        obj.extract()
    }
    fn core(fd: Fd, _: &Ctx<'_>) -> PyResult<RawFd> {
        Ok(fd.0)
    }
    fn arg(fd: RawFd) -> OwnedFd {
        // SAFETY: the Python caller hands this fd number over to be closed, as with
        // `os.close`; if queueing fails the core gives it back and [`Queued`] lets it go
        // without closing it.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }
}

/// [`SocketAddrAny`]'s reading: in the family of the op's fd.
fn address(v: &Py<PyAny>, ctx: &Ctx<'_>) -> PyResult<SocketAddrAny> {
    let fd = ctx.fd.expect("an op with an address has an fd");
    crate::fd::addr::from_py(v.bind(ctx.py), fd.borrow())
}

/// [`Buffers`]: each item of the iterable, as [`send_data`] reads it.
fn buffers(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Box<dyn AsRef<[u8]> + Send>>> {
    let mut parts: Vec<Box<dyn AsRef<[u8]> + Send>> = Vec::new();
    for item in obj.try_iter()? {
        parts.push(Box::new(send_data(&item?)?));
    }
    Ok(parts)
}

/// [`CString`]: a path as `os.open` takes it.
fn path(obj: &Bound<'_, PyAny>) -> PyResult<CString> {
    Ok(PathArg::extract(obj)?.0.into_owned())
}

/// [`FixedData`]: an int is a length, anything else bytes to copy in.
fn fixed_data(obj: &Bound<'_, PyAny>) -> PyResult<FixedData> {
    if obj.is_instance_of::<PyInt>() {
        Ok(FixedData::Len(args::nbytes(obj.extract::<Count>()?)?))
    } else {
        Ok(FixedData::Copy(Box::new(send_data(obj)?)))
    }
}

/// What queueing an op returned, as the core's `Result`: `close_fd` gives its fd back on
/// failure, and the fd, still the caller's, is let go without being closed.
pub trait Queued {
    fn queued(self) -> fdkit::Result<()>;
}

impl Queued for fdkit::Result<()> {
    fn queued(self) -> fdkit::Result<()> {
        self
    }
}

impl Queued for Result<(), (fdkit::Error, OwnedFd)> {
    fn queued(self) -> fdkit::Result<()> {
        self.map_err(|(e, fd)| {
            let _ = fd.into_raw_fd();
            e
        })
    }
}
