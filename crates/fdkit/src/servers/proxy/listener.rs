//! The proxy's listening socket: bound, listening, non-blocking, and cleaned up after.

use super::Endpoint;
use rustix::fs::FileType;
use rustix::io::Errno;
use rustix::net::{sockopt, SocketFlags, SocketType};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

/// A listening socket and the address it really has (the port the kernel picked for port 0).
/// A unix socket file it created is removed when it is dropped.
#[derive(Debug)]
pub(super) struct Listener {
    fd: OwnedFd,
    /// Where clients connect.
    pub local: Endpoint,
    unlink: Option<PathBuf>,
}

impl Listener {
    /// `socket(SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC)`, `bind`, `listen(backlog)`.
    /// See bind(2), listen(2).
    pub fn bind(at: &Endpoint, backlog: i32) -> io::Result<Listener> {
        let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
        let fd = rustix::net::socket_with(at.family(), SocketType::STREAM, flags, None)?;
        let addr = at.sockaddr()?;
        if at.is_tcp() {
            // Restarting the proxy must not wait out the previous run's TIME_WAIT sockets.
            sockopt::set_socket_reuseaddr(&fd, true)?;
        }
        match rustix::net::bind(&fd, &addr) {
            Err(Errno::ADDRINUSE) if stale_unix_socket(at) => {
                if let Endpoint::Unix(path) = at {
                    rustix::fs::unlink(path.as_path())?;
                }
                rustix::net::bind(&fd, &addr)?;
            }
            other => other?,
        }
        // From here on the socket file is ours: remove it on every way out.
        let unlink = match at {
            Endpoint::Unix(path) => Some(path.clone()),
            _ => None,
        };
        let mut listener = Listener {
            fd,
            local: at.clone(),
            unlink,
        };
        rustix::net::listen(&listener.fd, backlog)?;
        if let Endpoint::Tcp(_) = at {
            let bound = rustix::net::getsockname(&listener.fd)?;
            listener.local = Endpoint::Tcp(SocketAddr::try_from(bound)?);
        }
        Ok(listener)
    }
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(path) = &self.unlink {
            let _ = rustix::fs::unlink(path.as_path());
        }
    }
}

/// Whether `at` names a unix socket file that nothing listens on (a crashed server's
/// leftover): it is a socket and connecting to it is refused.
fn stale_unix_socket(at: &Endpoint) -> bool {
    let Endpoint::Unix(path) = at else {
        return false;
    };
    let is_socket = rustix::fs::lstat(path.as_path())
        .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::Socket)
        .unwrap_or(false);
    if !is_socket {
        return false;
    }
    let Ok(probe) = rustix::net::socket_with(
        at.family(),
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    ) else {
        return false;
    };
    let Ok(addr) = at.sockaddr() else {
        return false;
    };
    // A live listener accepts (or says EAGAIN when its backlog is full); only a refusal
    // proves nobody is there.
    matches!(rustix::net::connect(&probe, &addr), Err(Errno::CONNREFUSED))
}
