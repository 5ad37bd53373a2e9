//! A pipe's capacity, on any pipe fd: read, set, or set as high as allowed. See pipe(7).

use rustix::io::Errno;
use rustix::pipe::{fcntl_getpipe_size, fcntl_setpipe_size};
use std::os::fd::AsFd;

/// `/proc/sys/fs/pipe-max-size`: the largest size an unprivileged process may give a pipe.
/// See pipe(7).
pub fn pipe_max_size() -> Result<usize, Errno> {
    std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or(Errno::NOENT)
}

/// `fcntl(F_GETPIPE_SZ)`: the capacity in bytes of the pipe `fd` is an end of. See pipe(7).
pub fn pipe_size(fd: impl AsFd) -> Result<usize, Errno> {
    fcntl_getpipe_size(fd)
}

/// `fcntl(F_SETPIPE_SZ)`: asks for `size` bytes; the kernel rounds up to a power-of-two number
/// of pages and returns what it set. `EPERM` above `pipe-max-size` without
/// CAP_SYS_RESOURCE; `EBUSY` when the pipe holds more than `size`. See pipe(7).
pub fn set_pipe_size(fd: impl AsFd, size: usize) -> Result<usize, Errno> {
    fcntl_setpipe_size(fd, size)
}

/// Sets the size to `size`, or to `pipe-max-size` when `size` is above what is allowed;
/// returns the size set. An `EPERM` at the maximum too (a per-user page budget exhausted)
/// leaves the pipe as it was and returns its current size: a smaller pipe still works.
pub fn set_pipe_size_or_max(fd: impl AsFd, size: usize) -> Result<usize, Errno> {
    let fd = fd.as_fd();
    match set_pipe_size(fd, size) {
        Err(Errno::PERM) => {
            let max = pipe_max_size()?;
            match set_pipe_size(fd, size.min(max)) {
                Err(Errno::PERM) => pipe_size(fd),
                other => other,
            }
        }
        other => other,
    }
}
