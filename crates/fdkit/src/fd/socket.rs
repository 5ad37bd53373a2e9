//! Creating sockets and connecting them.

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::addr::SocketAddrArg;
use rustix::net::sockopt;
use std::os::fd::BorrowedFd;

pub use rustix::net::socket_with as socket;
pub use rustix::net::socketpair;

/// `connect(fd, addr, len)`, finishing the connection when a signal interrupts it.
///
/// A blocking connect interrupted by a signal keeps going in the kernel; calling connect again
/// would fail with `EALREADY`. So, as PEP 475 does, after `EINTR` (and a `checkpoint` that says
/// go on) this waits for the socket to become writable and reads `SO_ERROR` for the outcome.
/// A non-blocking socket's `EINPROGRESS` is returned as is. See connect(2).
pub fn connect(
    fd: BorrowedFd<'_>,
    addr: &impl SocketAddrArg,
    mut checkpoint: impl FnMut() -> Result<(), Errno>,
) -> Result<(), Errno> {
    match rustix::net::connect(fd, addr) {
        Err(Errno::INTR) => {
            checkpoint()?;
            let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
            super::poll(&mut fds, None, &mut checkpoint)?;
            sockopt::socket_error(fd)?
        }
        other => other,
    }
}
