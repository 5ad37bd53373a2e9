//! The two sending syscalls both engines use: `sendmsg` of a batch's segments and `sendfile`
//! of its tail (with a `send` of each later part's head when the tail is a multipart body),
//! on a non-blocking socket.

use super::out::Out;
use rustix::io::Errno;
use rustix::net::SendFlags;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

/// Where a send stopped.
pub(super) enum Sent {
    /// Everything of the batch is sent.
    Done,
    /// The socket is full: wait until it is writable.
    Blocked,
    /// The connection is broken (or the file shrank under a `sendfile`).
    Failed,
}

/// A `msghdr` over `iovs` (no address, no control data).
pub(super) fn msghdr(iovs: &mut [libc::iovec]) -> libc::msghdr {
    // SAFETY: msghdr is a plain C struct for which all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iovs.as_mut_ptr();
    msg.msg_iovlen = iovs.len() as _;
    msg
}

/// Sends what is left of the batch: `sendmsg(MSG_NOSIGNAL)` of the segments, then
/// `sendfile` of the tail. Returns the bytes sent in `progress`. See sendmsg(2), sendfile(2).
pub(super) fn send_out(
    fd: BorrowedFd<'_>,
    out: &mut Out,
    iovs: &mut Vec<libc::iovec>,
    progress: &mut bool,
) -> Sent {
    while out.segs_pending() {
        out.iovecs(iovs);
        let msg = msghdr(iovs);
        // SAFETY: every iovec points into `out.heads` or into a live read-only mapping held
        // by `out.files`, with its length inside that memory; the kernel only reads them,
        // for the duration of the call. `msg` names no address and no control data.
        let n = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            match Errno::from_raw_os_error(
                std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            ) {
                Errno::INTR => continue,
                Errno::AGAIN => return Sent::Blocked,
                _ => return Sent::Failed,
            }
        }
        out.sent += n as u64;
        *progress = true;
    }
    sendfile_tail(fd, out, progress)
}

/// Sends the batch's `sendfile` tail, if any: its bytes, and for a multipart body each later
/// part's head (`send`) and bytes (`sendfile`), then the closing delimiter.
pub(super) fn sendfile_tail(fd: BorrowedFd<'_>, out: &mut Out, progress: &mut bool) -> Sent {
    let Some(tail) = out.tail.as_mut() else {
        return Sent::Done;
    };
    loop {
        while tail.left > 0 {
            let chunk = tail.left.min(1 << 30) as usize;
            let mut off = tail.off;
            match rustix::fs::sendfile(fd, tail.file.fd.as_fd(), Some(&mut off), chunk) {
                Ok(0) => return Sent::Failed, // the file shrank: the promised length cannot be kept
                Ok(n) => {
                    tail.off += n as u64;
                    tail.left -= n as u64;
                    *progress = true;
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => return Sent::Blocked,
                Err(_) => return Sent::Failed,
            }
        }
        let Some(parts) = tail.parts.as_deref_mut() else {
            return Sent::Done;
        };
        let last = parts.next == parts.spans.len();
        // A head waits for its part's bytes (MSG_MORE: one segment, not a small one each).
        let flags = if last {
            SendFlags::NOSIGNAL
        } else {
            SendFlags::NOSIGNAL | SendFlags::MORE
        };
        while parts.sent < parts.delimiter().len() {
            match rustix::net::send(fd, &parts.delimiter()[parts.sent..], flags) {
                Ok(n) => {
                    parts.sent += n;
                    *progress = true;
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => return Sent::Blocked,
                Err(_) => return Sent::Failed,
            }
        }
        if last {
            tail.parts = None;
            return Sent::Done;
        }
        let (first, end) = parts.spans[parts.next];
        parts.next += 1;
        parts.sent = 0;
        tail.off = first;
        tail.left = end - first + 1;
    }
}
