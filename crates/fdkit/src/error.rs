//! Errors: the kernel's [`Errno`], fdkit's small [`Error`] for misuse, and the conversions
//! that let `?` carry either into a [`std::io::Error`] with the errno intact.
//!
//! Which error type a call returns follows from where its failures can come from (the
//! crate-level docs, "Errors", give the rule). This module holds [`Error`], the
//! [`Result`] alias for it and its `From` impl into [`std::io::Error`]; every other error type
//! of the public API has its impl beside it (the atomic pipe's in `atomic_pipe/`, which this
//! module does not import). The conversions:
//!
//! | from                                   | into `std::io::Error`                               |
//! |----------------------------------------|-----------------------------------------------------|
//! | [`Errno`]                              | `from_raw_os_error` (rustix's `From`)                |
//! | [`Error::Os`]                          | `from_raw_os_error`                                 |
//! | other [`Error`] variants               | [`InvalidInput`], the [`Error`] kept as the payload  |
//! | [`ReadError`]                          | its errno, or [`InvalidData`] with the protocol error|
//! | [`ProtocolError`], [`DecompressError`] | [`InvalidData`], the error kept as the payload       |
//! | [`BurstError`]                         | [`InvalidInput`], the error kept as the payload      |
//!
//! A payload can be taken back with [`std::io::Error::get_ref`] and `downcast_ref`. The other
//! way, [`Errno::from_io_error`] recovers the errno of an `std::io::Error` that has one.
//!
//! [`InvalidInput`]: std::io::ErrorKind::InvalidInput
//! [`InvalidData`]: std::io::ErrorKind::InvalidData
//! [`ReadError`]: crate::atomic_pipe::ReadError
//! [`ProtocolError`]: crate::atomic_pipe::ProtocolError
//! [`DecompressError`]: crate::atomic_pipe::DecompressError
//! [`BurstError`]: crate::atomic_pipe::BurstError
//!
//! # Example
//!
//! ```
//! use std::io;
//! use std::os::fd::AsFd;
//!
//! fn stat_missing() -> io::Result<i64> {
//!     Ok(fdkit::fd::stat("/no/such/file")?.size) // Errno → io::Error
//! }
//!
//! fn drain_blocking_listener() -> io::Result<usize> {
//!     let listener = std::net::TcpListener::bind("127.0.0.1:0")?; // blocking by default
//!     // fdkit refuses before accept4 would sleep on an empty backlog.
//!     let conns = fdkit::fd::accept_many(listener.as_fd(), 16, fdkit::fd::SocketFlags::CLOEXEC)?;
//!     Ok(conns.len()) // fdkit::Error → io::Error
//! }
//!
//! assert_eq!(stat_missing().unwrap_err().raw_os_error(), Some(fdkit::Errno::NOENT.raw_os_error()));
//!
//! let e = drain_blocking_listener().unwrap_err();
//! assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
//! let inner = e.get_ref().and_then(|e| e.downcast_ref::<fdkit::Error>());
//! assert_eq!(inner, Some(&fdkit::Error::NeedsNonBlocking("accept_many")));
//! //! ```

pub use rustix::io::Errno;
use std::fmt;
use std::io;

/// A failure from an fdkit call: either the kernel's errno or a misuse fdkit caught first.
///
/// Returned (through [`Result`]) by the calls that check their arguments or the fd's state
/// before the kernel sees them; calls with no such check return `Result<T, Errno>`. Converts
/// into [`std::io::Error`] with `?`, keeping the errno ([`Error::Os`]) or itself as the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The kernel refused the call; the errno is kept intact.
    Os(Errno),
    /// The call needs a non-blocking fd and was given a blocking one (it would hang instead).
    NeedsNonBlocking(&'static str),
    /// An argument is out of the range the call accepts.
    InvalidArgument(&'static str),
}

impl Error {
    /// The kernel's errno, for [`Error::Os`]; `None` for a misuse fdkit caught itself.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Os(e) => Some(*e),
            _ => None,
        }
    }
}

impl From<Errno> for Error {
    fn from(e: Errno) -> Self {
        Error::Os(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Os(e) => write!(f, "{e}"),
            Error::NeedsNonBlocking(call) => {
                write!(
                    f,
                    "{call} needs a non-blocking fd (it would block forever otherwise)"
                )
            }
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for io::Error {
    /// The errno as `from_raw_os_error`; a misuse as [`io::ErrorKind::InvalidInput`] carrying
    /// the [`Error`] (its message is the error's text, `downcast_ref` gives it back).
    fn from(e: Error) -> Self {
        match e {
            Error::Os(errno) => io::Error::from_raw_os_error(errno.raw_os_error()),
            other => io::Error::new(io::ErrorKind::InvalidInput, other),
        }
    }
}

/// `Result<T, fdkit::Error>`: for calls that can refuse a misuse as well as fail in the kernel.
pub type Result<T> = std::result::Result<T, Error>;

/// The kernel's text for an errno ("Bad file descriptor"), as strerror(3) gives it.
///
/// # References
///  - [strerror(3)](https://man7.org/linux/man-pages/man3/strerror.3.html)
pub fn strerror(errno: Errno) -> String {
    let text = io::Error::from_raw_os_error(errno.raw_os_error()).to_string();
    // std appends " (os error N)" to the C library's text; keep only the text.
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}
