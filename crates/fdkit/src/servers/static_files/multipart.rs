//! The `multipart/byteranges` 206 for a range set that leaves several parts (RFC 9110
//! §14.6; which sets do is `crate::http::parse_range`'s rule).
//!
//! The framing (every part's head and the closing delimiter) is written before anything is
//! sent, so the head's `Content-Length` is exact; each part's bytes then go out the way a
//! single range's do, from the one entry the request looked up (the file is opened at most
//! once, whatever the number of parts): a mapped file's parts in the batch's `sendmsg`
//! beside their heads, a larger file's by `sendfile`, each later head sent just before its
//! part (`out.rs`, `send.rs`).

use super::files::FileEntry;
use super::out::{etag_header, head_end, head_start, Out, Parts};
use crate::http::{
    part_head_max, write_decimal, Boundary, Framing, Status, Version, HTTP_DATE_LEN,
};
use std::rc::Rc;

/// The file's content type and the rest of its fixed head.
fn split_content_type(fixed: &[u8]) -> (&[u8], &[u8]) {
    const NAME: &[u8] = b"Content-Type: ";
    if let Some(line) = fixed.strip_prefix(NAME) {
        if let Some(i) = line.windows(2).position(|w| w == b"\r\n") {
            return (&line[..i], &line[i + 2..]);
        }
    }
    (b"application/octet-stream", fixed)
}

/// The gap below which two ranges of `entry` are coalesced: its longest part head.
pub(super) fn gap(entry: &FileEntry) -> u64 {
    part_head_max(split_content_type(&entry.fixed_head).0, entry.size) as u64
}

/// Appends a 206 `multipart/byteranges` response for `spans` (2 or more, in sending order)
/// of `entry` to `out`; returns its body's length.
pub(super) fn multipart(
    out: &mut Out,
    date: &[u8; HTTP_DATE_LEN],
    entry: &Rc<FileEntry>,
    spans: Vec<(u64, u64)>,
    keep_alive: bool,
    version: Version,
) -> u64 {
    let (content_type, rest) = split_content_type(&entry.fixed_head);
    let boundary = Boundary::new();
    let framing = Framing::new(&boundary, content_type, &spans, entry.size);
    let body = framing.body_len();
    let start = out.heads.len();
    head_start(out, Status::PartialContent, date);
    etag_header(out, entry);
    out.heads.extend_from_slice(rest);
    out.heads
        .extend_from_slice(b"Content-Type: multipart/byteranges; boundary=");
    out.heads.extend_from_slice(boundary.as_bytes());
    out.heads.extend_from_slice(b"\r\nContent-Length: ");
    write_decimal(&mut out.heads, body);
    out.heads.extend_from_slice(b"\r\n");
    head_end(out, keep_alive, version);
    out.heads.extend_from_slice(framing.head(0));
    out.push_head(start);
    if entry.map.is_none() {
        let parts = Parts {
            framing,
            spans,
            next: 1,
            sent: 0,
        };
        out.set_parts_tail(entry.clone(), Box::new(parts));
        return body;
    }
    for (i, &(first, last)) in spans.iter().enumerate() {
        if i > 0 {
            let start = out.heads.len();
            out.heads.extend_from_slice(framing.head(i));
            out.push_head(start);
        }
        out.push_body(entry, first, last - first + 1);
    }
    let start = out.heads.len();
    out.heads.extend_from_slice(framing.closing());
    out.push_head(start);
    body
}

#[cfg(test)]
mod tests {
    use super::super::files::{FileCache, Root, MAP_MAX};
    use super::super::send::{send_out, Sent};
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;
    use std::time::Instant;

    /// A multipart body, mapped or sent by `sendfile`, to a socket that fills up at every
    /// turn (small buffers, a reader taking a few bytes at a time): the bytes received are
    /// exactly the head, each part's head and bytes, and the closing delimiter, wherever a send
    /// stopped (inside a part's bytes or inside a head).
    #[test]
    fn a_multipart_body_resumes_wherever_the_socket_fills() {
        let dir = std::env::temp_dir().join(format!("fdkit-multipart-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let data: Vec<u8> = (0..400_000u32).map(|i| (i * 31 % 253) as u8).collect();
        std::fs::write(dir.join("big"), &data).unwrap();
        std::fs::write(dir.join("small"), &data[..MAP_MAX as usize]).unwrap();
        let mut cache = FileCache::new(Root::open(&dir).unwrap(), 8, false);
        let date = [b'D'; HTTP_DATE_LEN];
        let mut seed = 7u64;
        let mut next = move |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % n
        };
        for name in ["big", "small"] {
            let Ok(entry) = cache.lookup(format!("/{name}").as_bytes(), Instant::now()) else {
                panic!("lookup of {name}");
            };
            assert_eq!(entry.map.is_some(), name == "small");
            let size = entry.size;
            let spans: Vec<(u64, u64)> = (0..40)
                .map(|i| {
                    let first = (39 - i) * size / 40 + next(200);
                    (first, first + next(size / 50))
                })
                .collect();
            let mut out = Out::new();
            let body = multipart(
                &mut out,
                &date,
                &entry,
                spans.clone(),
                true,
                Version::Http11,
            );

            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server, _) = listener.accept().unwrap();
            server.set_nonblocking(true).unwrap();
            rustix::net::sockopt::set_socket_send_buffer_size(&server, 4096).unwrap();
            let mut got = Vec::new();
            let mut iovs = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let mut progress = false;
                let sent = send_out(server.as_fd(), &mut out, &mut iovs, &mut progress);
                if matches!(sent, Sent::Done) {
                    break;
                }
                assert!(matches!(sent, Sent::Blocked));
                let n = client.read(&mut buf[..1 + next(4095) as usize]).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            drop(server);
            client.read_to_end(&mut got).unwrap();

            let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let head = String::from_utf8_lossy(&got[..head_end]).into_owned();
            assert!(
                head.contains(&format!("Content-Length: {body}\r\n")),
                "{head}"
            );
            let boundary = head
                .split("boundary=")
                .nth(1)
                .and_then(|r| r.split("\r\n").next())
                .unwrap();
            let mut want = Vec::new();
            for (i, &(first, last)) in spans.iter().enumerate() {
                if i > 0 {
                    want.extend_from_slice(b"\r\n");
                }
                want.extend_from_slice(
                    format!(
                        "--{boundary}\r\nContent-Type: application/octet-stream\r\n\
                         Content-Range: bytes {first}-{last}/{size}\r\n\r\n"
                    )
                    .as_bytes(),
                );
                want.extend_from_slice(&data[first as usize..=last as usize]);
            }
            want.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
            assert_eq!(got.len() - head_end, want.len(), "{name}");
            assert!(got[head_end..] == want[..], "{name}: the body differs");
            assert_eq!(body, want.len() as u64);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn content_type_is_split_off() {
        let fixed = b"Content-Type: text/plain\r\nLast-Modified: x\r\nAccept-Ranges: bytes\r\n";
        assert_eq!(
            split_content_type(fixed),
            (
                &b"text/plain"[..],
                &b"Last-Modified: x\r\nAccept-Ranges: bytes\r\n"[..]
            )
        );
        let bare = b"Last-Modified: x\r\n";
        assert_eq!(split_content_type(bare).1, &bare[..]);
    }
}
