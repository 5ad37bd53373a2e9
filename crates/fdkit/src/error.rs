//! The one small error type for failures that are not a kernel errno.
//!
//! Kernel errors stay [`rustix::io::Errno`] so the binding can hand Python the exact errno;
//! this enum only adds the misuse cases the kernel cannot report (or would report by hanging).

use rustix::io::Errno;
use std::fmt;

/// A failure from an fdkit call: either the kernel's errno or a misuse fdkit caught first.
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

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Os(errno) => std::io::Error::from_raw_os_error(errno.raw_os_error()),
            other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
        }
    }
}

/// Result type for calls that can fail with a misuse as well as an errno.
pub type Result<T> = std::result::Result<T, Error>;

/// The kernel's text for an errno ("Bad file descriptor"), as strerror(3) gives it.
pub fn strerror(errno: Errno) -> String {
    let text = std::io::Error::from_raw_os_error(errno.raw_os_error()).to_string();
    // std appends " (os error N)" to the C library's text; keep only the text.
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}
