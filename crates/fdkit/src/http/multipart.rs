//! [`Framing`]: the bytes around the parts of a `multipart/byteranges` body (RFC 9110 §14.6),
//! written before anything is sent, so that the response's `Content-Length` is exact and each
//! part's bytes can go out from the file itself (`sendfile`, or a mapping in an iovec).
//!
//! A body is, for each part, its head (`--BOUNDARY`, the part's `Content-Type` and
//! `Content-Range`, an empty line; every head after the first starts with the CRLF that ends
//! the previous part), then the part's bytes; then the closing delimiter `CRLF--BOUNDARY--CRLF`.

use super::response::write_decimal;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

/// The length of a [`Boundary`].
pub const BOUNDARY_LEN: usize = 16;

/// A multipart boundary: 16 hex digits, new for every response and unpredictable (a randomly
/// keyed hash), so a file cannot be written to contain the delimiter of its own response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boundary([u8; BOUNDARY_LEN]);

impl Boundary {
    /// A fresh boundary (std's randomly keyed SipHash: no syscall after a thread's first).
    #[allow(clippy::new_without_default)]
    pub fn new() -> Boundary {
        let mut n = RandomState::new().hash_one(0u8);
        let mut b = [0u8; BOUNDARY_LEN];
        for d in b.iter_mut().rev() {
            *d = b"0123456789abcdef"[(n & 15) as usize];
            n >>= 4;
        }
        Boundary(b)
    }

    /// The boundary's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The delimiters of one multipart body: each part's head, then the closing delimiter, back
/// to back in one buffer.
#[derive(Debug, Clone)]
pub struct Framing {
    bytes: Vec<u8>,
    /// Where each part's head ends in `bytes` (the closing delimiter follows the last).
    ends: Vec<usize>,
    body_len: u64,
}

impl Framing {
    /// The framing of `parts` (`(first, last)` byte pairs, inclusive, in sending order) of a
    /// representation of `len` bytes with `content_type`.
    pub fn new(
        boundary: &Boundary,
        content_type: &[u8],
        parts: &[(u64, u64)],
        len: u64,
    ) -> Framing {
        let mut bytes = Vec::with_capacity(parts.len() * (part_head_max(content_type, len) + 2));
        let mut ends = Vec::with_capacity(parts.len());
        let mut body_len = 0;
        for (i, &(first, last)) in parts.iter().enumerate() {
            if i > 0 {
                bytes.extend_from_slice(b"\r\n");
            }
            bytes.extend_from_slice(b"--");
            bytes.extend_from_slice(boundary.as_bytes());
            bytes.extend_from_slice(b"\r\nContent-Type: ");
            bytes.extend_from_slice(content_type);
            bytes.extend_from_slice(b"\r\nContent-Range: bytes ");
            write_decimal(&mut bytes, first);
            bytes.push(b'-');
            write_decimal(&mut bytes, last);
            bytes.push(b'/');
            write_decimal(&mut bytes, len);
            bytes.extend_from_slice(b"\r\n\r\n");
            ends.push(bytes.len());
            body_len += last - first + 1;
        }
        bytes.extend_from_slice(b"\r\n--");
        bytes.extend_from_slice(boundary.as_bytes());
        bytes.extend_from_slice(b"--\r\n");
        body_len += bytes.len() as u64;
        Framing {
            bytes,
            ends,
            body_len,
        }
    }

    /// Part `i`'s head.
    pub fn head(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// The closing delimiter.
    pub fn closing(&self) -> &[u8] {
        &self.bytes[self.ends.last().copied().unwrap_or(0)..]
    }

    /// The whole body's length: every head, every part's bytes, the closing delimiter.
    pub fn body_len(&self) -> u64 {
        self.body_len
    }
}

/// The longest part head a representation of `len` bytes with `content_type` can have (with
/// its leading CRLF): the gap below which [`parse_range`](super::parse_range) should
/// coalesce two ranges, since the part a merge saves would cost at least this much.
pub fn part_head_max(content_type: &[u8], len: u64) -> usize {
    const FIXED: usize = b"\r\n--".len()
        + BOUNDARY_LEN
        + b"\r\nContent-Type: ".len()
        + b"\r\nContent-Range: bytes ".len()
        + b"-/".len()
        + b"\r\n\r\n".len();
    let mut digits = 1;
    let mut n = len;
    while n >= 10 {
        n /= 10;
        digits += 1;
    }
    FIXED + content_type.len() + 3 * digits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing() {
        let b = Boundary(*b"0123456789abcdef");
        let f = Framing::new(&b, b"text/plain", &[(0, 1), (990, 999)], 1000);
        assert_eq!(
            f.head(0),
            b"--0123456789abcdef\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/1000\r\n\r\n"
        );
        assert_eq!(
            f.head(1),
            b"\r\n--0123456789abcdef\r\nContent-Type: text/plain\r\n\
              Content-Range: bytes 990-999/1000\r\n\r\n"
        );
        assert_eq!(f.closing(), b"\r\n--0123456789abcdef--\r\n");
        let heads = f.head(0).len() + f.head(1).len() + f.closing().len();
        assert_eq!(f.body_len(), heads as u64 + 12);
        assert!(f.head(1).len() <= part_head_max(b"text/plain", 1000));
    }

    #[test]
    fn part_head_max_is_the_longest_head() {
        for len in [1u64, 9, 10, 99, 100, 12345, u64::MAX] {
            let last = len - 1;
            let f = Framing::new(&Boundary::new(), b"a/b", &[(0, 0), (last, last)], len);
            assert!(f.head(1).len() <= part_head_max(b"a/b", len));
            // Numbers as wide as the length itself: the bound is reached.
            let widest = Framing::new(&Boundary::new(), b"a/b", &[(0, 0), (len, len)], len);
            assert_eq!(widest.head(1).len(), part_head_max(b"a/b", len));
        }
    }

    #[test]
    fn boundaries_differ() {
        let a = Boundary::new();
        assert_ne!(a, Boundary::new());
        assert!(a.as_bytes().iter().all(u8::is_ascii_hexdigit));
    }
}
