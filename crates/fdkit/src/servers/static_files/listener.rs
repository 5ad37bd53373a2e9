//! The listening socket: `SO_REUSEADDR` (restarts do not wait out `TIME_WAIT`), optionally
//! `SO_REUSEPORT` (worker processes share the port), non-blocking, close-on-exec.

use rustix::net::{sockopt, AddressFamily, SocketFlags, SocketType};
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;

/// `socket` + `bind` + `listen`; returns the socket and the address it really has.
/// See socket(7) (`SO_REUSEPORT`), bind(2), listen(2).
pub(super) fn bind(
    addr: SocketAddr,
    reuse_port: bool,
    backlog: i32,
) -> io::Result<(OwnedFd, SocketAddr)> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    let fd = rustix::net::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    if reuse_port {
        sockopt::set_socket_reuseport(&fd, true)?;
    }
    rustix::net::bind(&fd, &addr)?;
    rustix::net::listen(&fd, backlog)?;
    let local = SocketAddr::try_from(rustix::net::getsockname(&fd)?)
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    Ok((fd, local))
}
