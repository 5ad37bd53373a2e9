//! [`AccessLog`]: one line per response in the common log format, written in batches.
//!
//! `127.0.0.1 - - [23/Nov/2026:17:00:00 +0000] "GET /x HTTP/1.1" 200 1234`: the client's
//! address, no identity nor user (`-`), the time (UTC), the request line as sent, the status,
//! and the body bytes (`-` for none), as Apache's `common` format and `python -m http.server`
//! write it. Bytes of the request line that are not printable ASCII, and `"` and `\`, are
//! written `\xHH` (as nginx does), so a line is always one line and its quoting holds.
//!
//! Lines are buffered and written when [`FLUSH_AT`] bytes are waiting, at every tick of the
//! engine (100 ms), and when the log is dropped (the server stopped): a busy server makes one
//! `write(2)` per many requests, not one per request. Each `write` carries whole lines and at
//! most `PIPE_BUF` bytes when it can, so the lines of several workers sharing a pipe never
//! interleave. A failed write drops the batch: logging never stops the server (but a log
//! whose reader does not read blocks it, as it would any server that logs). See write(2),
//! pipe(7) (`PIPE_BUF`).

use crate::http::{format_clf_date, CLF_DATE_LEN};
use rustix::io::Errno;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Buffered bytes that make a write before the next tick.
const FLUSH_AT: usize = 64 * 1024;
/// The most bytes one write(2) to a pipe is atomic for.
const PIPE_BUF: usize = 4096;
/// The most bytes of a request line logged (the rest is cut, and marked `...`).
const LINE_MAX: usize = 2048;

/// The access log of one engine.
pub(super) struct AccessLog {
    fd: Arc<OwnedFd>,
    buf: Vec<u8>,
    secs: u64,
    date: [u8; CLF_DATE_LEN],
}

impl AccessLog {
    pub fn new(fd: Arc<OwnedFd>) -> AccessLog {
        AccessLog {
            fd,
            buf: Vec::with_capacity(FLUSH_AT + PIPE_BUF),
            secs: u64::MAX,
            date: [0; CLF_DATE_LEN],
        }
    }

    /// Adds the line of one response: `peer` the client's address, `secs` now (seconds since
    /// the epoch), `request` the request head (its first line is logged; empty: `-`).
    pub fn record(&mut self, peer: &[u8], secs: u64, request: &[u8], status: u16, body: u64) {
        if secs != self.secs {
            self.secs = secs;
            self.date = format_clf_date(secs);
        }
        let b = &mut self.buf;
        b.extend_from_slice(if peer.is_empty() { b"-" } else { peer });
        b.extend_from_slice(b" - - [");
        b.extend_from_slice(&self.date);
        b.extend_from_slice(b"] \"");
        let line = request_line(request);
        if line.is_empty() {
            b.push(b'-');
        }
        for &c in &line[..line.len().min(LINE_MAX)] {
            if c == b'"' || c == b'\\' || !(0x20..0x7f).contains(&c) {
                const HEX: &[u8; 16] = b"0123456789ABCDEF";
                b.extend_from_slice(&[
                    b'\\',
                    b'x',
                    HEX[usize::from(c >> 4)],
                    HEX[usize::from(c & 15)],
                ]);
            } else {
                b.push(c);
            }
        }
        if line.len() > LINE_MAX {
            b.extend_from_slice(b"...");
        }
        b.extend_from_slice(b"\" ");
        crate::http::write_decimal(b, u64::from(status));
        b.push(b' ');
        if body == 0 {
            b.push(b'-');
        } else {
            crate::http::write_decimal(b, body);
        }
        b.push(b'\n');
        if self.buf.len() >= FLUSH_AT {
            self.flush();
        }
    }

    /// Writes what is buffered: whole lines, at most `PIPE_BUF` bytes per write when a line
    /// fits. See write(2).
    pub fn flush(&mut self) {
        let mut at = 0;
        let len = self.buf.len();
        while at < len {
            let mut end = len.min(at + PIPE_BUF);
            if end < len {
                end = match self.buf[at..end].iter().rposition(|&c| c == b'\n') {
                    Some(i) => at + i + 1,
                    // One line longer than PIPE_BUF: written whole.
                    None => self.buf[end..]
                        .iter()
                        .position(|&c| c == b'\n')
                        .map_or(len, |i| end + i + 1),
                };
            }
            if !write_all(&self.fd, &self.buf[at..end]) {
                break;
            }
            at = end;
        }
        self.buf.clear();
    }
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The request line of a head: up to the first CR or LF.
fn request_line(head: &[u8]) -> &[u8] {
    let end = head
        .iter()
        .position(|&c| c == b'\r' || c == b'\n')
        .unwrap_or(head.len());
    &head[..end]
}

/// write(2) until all of `bytes` is written; false when the kernel refused (the rest is
/// dropped).
fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        match rustix::io::write(fd, bytes) {
            Ok(0) => return false,
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::INTR) => {}
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn logged(lines: impl FnOnce(&mut AccessLog)) -> String {
        let (r, w) = rustix::pipe::pipe().unwrap();
        let mut log = AccessLog::new(Arc::new(w));
        lines(&mut log);
        drop(log);
        let mut out = String::new();
        std::fs::File::from(r).read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn common_log_format() {
        let out = logged(|l| {
            l.record(
                b"127.0.0.1",
                1_795_453_200,
                b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n",
                200,
                1234,
            );
            l.record(b"::1", 1_795_453_201, b"HEAD / HTTP/1.0\r\n\r\n", 304, 0);
        });
        assert_eq!(
            out,
            "127.0.0.1 - - [23/Nov/2026:17:00:00 +0000] \"GET /x HTTP/1.1\" 200 1234\n\
             ::1 - - [23/Nov/2026:17:00:01 +0000] \"HEAD / HTTP/1.0\" 304 -\n"
        );
    }

    #[test]
    fn odd_bytes_cannot_break_the_line() {
        let out = logged(|l| {
            l.record(b"10.0.0.1", 0, b"GET /\"a\\b\x1b\xff HTTP/1.1\r\n", 400, 11);
            l.record(b"", 0, b"", 400, 11);
        });
        assert_eq!(
            out,
            "10.0.0.1 - - [01/Jan/1970:00:00:00 +0000] \"GET /\\x22a\\x5Cb\\x1B\\xFF HTTP/1.1\" 400 11\n\
             - - - [01/Jan/1970:00:00:00 +0000] \"-\" 400 11\n"
        );
    }

    #[test]
    fn writes_are_whole_lines_within_pipe_buf() {
        // A SEQPACKET pair: each read returns exactly what one write sent.
        use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
        let (r, w) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let mut log = AccessLog::new(Arc::new(w));
        let target = format!("GET /{} HTTP/1.1", "a".repeat(100));
        for _ in 0..100 {
            log.record(b"127.0.0.1", 0, target.as_bytes(), 200, 1);
        }
        let total = log.buf.len();
        assert!(total > 2 * PIPE_BUF);
        log.flush();
        assert!(log.buf.is_empty());
        let mut got = 0;
        let mut chunk = vec![0u8; 65536];
        while got < total {
            let n = rustix::io::read(&r, &mut chunk).unwrap();
            assert!(
                n <= PIPE_BUF && chunk[n - 1] == b'\n',
                "a write of {n} bytes"
            );
            got += n;
        }
        assert_eq!(got, total);
    }
}
