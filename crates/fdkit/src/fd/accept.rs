//! `accept4` and the batch form `accept_many`.

use crate::error::Error;
use rustix::io::Errno;
use rustix::net::{acceptfrom_with, SocketAddrAny, SocketFlags};
use std::os::fd::{BorrowedFd, OwnedFd};

/// One accepted connection: the new fd and the peer address (`None` for an unnamed unix peer).
pub type Accepted = (OwnedFd, Option<SocketAddrAny>);

/// `accept4(fd, &addr, &len, flags)`: accept one connection and learn the peer's address.
///
/// One syscall: unlike Python's `socket.accept`, no socket object and no extra call follow.
/// Pass `SocketFlags::CLOEXEC` so the new fd is close-on-exec from birth. `EINTR` is returned
/// as is; the caller decides whether to retry. See accept4(2).
pub fn accept4(listener: BorrowedFd<'_>, flags: SocketFlags) -> Result<Accepted, Errno> {
    acceptfrom_with(listener, flags)
}

/// Drains up to `max` pending connections from a non-blocking listener in one call.
///
/// Returns an empty vector when nothing is pending. Connections the peer aborted before we got
/// to them (`ECONNABORTED`, `EPROTO`) are skipped; `EINTR` is retried. Any other error stops
/// the batch: if connections were already accepted they are returned (the error will recur on
/// the next call, and no accepted fd is ever dropped on the floor); if none were, the error is
/// returned. That covers `EMFILE`/`ENFILE`: the caller gets what fit.
///
/// A blocking listener is refused with [`Error::NeedsNonBlocking`]: draining it would block
/// once the backlog is empty. That costs one `fcntl(F_GETFL)` per batch, not per connection.
/// See accept4(2).
pub fn accept_many(
    listener: BorrowedFd<'_>,
    max: usize,
    flags: SocketFlags,
) -> crate::Result<Vec<Accepted>> {
    if max == 0 {
        return Err(Error::InvalidArgument("max must be at least 1"));
    }
    if !super::get_blocking(listener).map(|b| !b)? {
        return Err(Error::NeedsNonBlocking("accept_many"));
    }
    // Most batches are small; do not reserve `max` slots when `max` is huge.
    let mut out = Vec::with_capacity(max.min(256));
    while out.len() < max {
        match acceptfrom_with(listener, flags) {
            Ok(pair) => out.push(pair),
            Err(Errno::INTR) | Err(Errno::CONNABORTED) | Err(Errno::PROTO) => continue,
            Err(Errno::AGAIN) => break,
            Err(e) if out.is_empty() => return Err(Error::Os(e)),
            Err(_) => break,
        }
    }
    Ok(out)
}
