//! The errno of an io-uring crate error: ring setup (`setup.rs`) and the ring's own calls
//! (`ring.rs`) both turn the crate's `std::io::Error` into an [`Errno`] this way.

use rustix::io::Errno;

/// The errno of an error from the io-uring crate (`EINVAL` for its own argument checks).
pub(crate) fn errno(e: &std::io::Error) -> Errno {
    Errno::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EINVAL))
}
