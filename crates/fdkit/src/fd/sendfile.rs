//! `sendfile` looped over partial sends and the kernel's per-call cap.

use super::MAX_RW_COUNT;
use rustix::io::Errno;
use std::os::fd::BorrowedFd;

/// Sends up to `count` bytes (to the end of the file when `None`) from `in_fd` to `out_fd`.
///
/// One `sendfile` call moves at most [`MAX_RW_COUNT`] bytes and may move fewer; this loops
/// until `count` bytes went out, the input reaches its end, or the output would block. With
/// `offset` the input's file position is untouched and `*offset` advances; without it the
/// input's position advances. Returns the bytes sent; `EAGAIN` after some bytes returns that
/// count (the caller waits and calls again), `EAGAIN` before any byte is returned as an error.
/// `checkpoint` runs after every short send and every `EINTR`: a blocking socket that a signal
/// interrupts returns a short count, and the checkpoint is where the caller's Ctrl-C lands.
/// See sendfile(2).
pub fn sendfile_all(
    out_fd: BorrowedFd<'_>,
    in_fd: BorrowedFd<'_>,
    mut offset: Option<&mut u64>,
    count: Option<u64>,
    mut checkpoint: impl FnMut() -> Result<(), Errno>,
) -> Result<u64, Errno> {
    let mut sent: u64 = 0;
    loop {
        let want = match count {
            Some(c) if sent >= c => return Ok(sent),
            Some(c) => (c - sent).min(MAX_RW_COUNT as u64) as usize,
            None => MAX_RW_COUNT,
        };
        match rustix::fs::sendfile(out_fd, in_fd, offset.as_deref_mut(), want) {
            Ok(0) => return Ok(sent),
            Ok(n) => {
                sent += n as u64;
                if n < want {
                    checkpoint()?;
                }
            }
            Err(Errno::INTR) => checkpoint()?,
            Err(Errno::AGAIN) if sent > 0 => return Ok(sent),
            Err(e) => return Err(e),
        }
    }
}
