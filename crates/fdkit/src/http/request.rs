//! [`parse_request`]: one HTTP/1.1 request head out of the bytes received so far.
//!
//! Lines end in CRLF (a bare LF is accepted too, RFC 9112 §2.2); empty lines before the
//! request line are skipped. Only the headers the static server acts on are kept
//! (`Connection`, `Content-Length`, `Transfer-Encoding`, `If-Modified-Since`, `Range`); the rest
//! are checked for syntax and counted. The parser never panics and never allocates.

use super::response::Status;

/// The most bytes a request head may take (request line and headers, blank line included).
pub const MAX_HEAD_BYTES: usize = 8192;
/// The most header lines a request may have.
pub const MAX_HEADERS: usize = 100;

/// The request method, as far as the static server cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`.
    Get,
    /// `HEAD`.
    Head,
    /// Any other well-formed method (answered with 405).
    Other,
}

/// The protocol version of the request line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// `HTTP/1.0`.
    Http10,
    /// `HTTP/1.1`.
    Http11,
}

/// A parsed request head; slices borrow the receive buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// The method.
    pub method: Method,
    /// The request target as sent (origin-form `/a/b?q`, or absolute-form).
    pub target: &'a [u8],
    /// The version.
    pub version: Version,
    /// Whether the connection stays open after the response (1.1 unless `Connection: close`,
    /// 1.0 only with `Connection: keep-alive`).
    pub keep_alive: bool,
    /// The `If-Modified-Since` value, trimmed.
    pub if_modified_since: Option<&'a [u8]>,
    /// The `Range` value, trimmed.
    pub range: Option<&'a [u8]>,
    /// Whether the request announces a body (`Content-Length` > 0 or any `Transfer-Encoding`).
    pub has_body: bool,
    /// Bytes of the buffer this head took (leading blank lines included).
    pub head_len: usize,
}

/// What the bytes so far amount to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A whole head.
    Complete(Request<'a>),
    /// Not a whole head yet, and nothing wrong so far.
    Partial,
    /// A head that can never be valid: answer with this status and close.
    Invalid(Status),
}

/// Parses one request head at the start of `buf`. See RFC 9112 §3 and §5.
pub fn parse_request(buf: &[u8]) -> Parsed<'_> {
    // Leading empty lines (RFC 9112 §2.2: at least one SHOULD be ignored).
    let mut start = 0;
    while start < buf.len() && (buf[start] == b'\r' || buf[start] == b'\n') {
        if buf[start] == b'\r' && start + 1 < buf.len() && buf[start + 1] != b'\n' {
            return Parsed::Invalid(Status::BadRequest);
        }
        start += 1;
        if start > MAX_HEAD_BYTES {
            return Parsed::Invalid(Status::BadRequest);
        }
    }
    let rest = &buf[start..];
    // Find the end of the head: an empty line.
    let mut pos = 0;
    let mut lines = 0usize;
    let end = loop {
        let Some(nl) = rest[pos..].iter().position(|&b| b == b'\n') else {
            if rest.len() > MAX_HEAD_BYTES {
                return Parsed::Invalid(Status::HeaderFieldsTooLarge);
            }
            return Parsed::Partial;
        };
        let line_end = pos + nl;
        let empty = line_end == pos || (line_end == pos + 1 && rest[pos] == b'\r');
        pos = line_end + 1;
        if pos > MAX_HEAD_BYTES {
            return Parsed::Invalid(Status::HeaderFieldsTooLarge);
        }
        if empty && lines > 0 {
            break pos;
        }
        lines += 1;
        if lines > MAX_HEADERS + 1 {
            return Parsed::Invalid(Status::HeaderFieldsTooLarge);
        }
    };
    match parse_head(&rest[..end]) {
        Ok(mut req) => {
            req.head_len = start + end;
            Parsed::Complete(req)
        }
        Err(status) => Parsed::Invalid(status),
    }
}

/// Splits `head` (ending in its empty line) into lines without their CR/LF.
fn next_line<'a>(head: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    if *pos >= head.len() {
        return None;
    }
    let rest = &head[*pos..];
    let nl = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
    *pos += nl + 1;
    let line = &rest[..nl];
    Some(line.strip_suffix(b"\r").unwrap_or(line))
}

fn parse_head(head: &[u8]) -> Result<Request<'_>, Status> {
    let mut pos = 0;
    let line = next_line(head, &mut pos).ok_or(Status::BadRequest)?;
    let (method, target, version) = parse_request_line(line)?;
    let mut req = Request {
        method,
        target,
        version,
        keep_alive: version == Version::Http11,
        if_modified_since: None,
        range: None,
        has_body: false,
        head_len: 0,
    };
    let mut close = false;
    let mut keep_alive = false;
    let mut content_length: Option<u64> = None;
    while let Some(line) = next_line(head, &mut pos) {
        if line.is_empty() {
            break;
        }
        if line[0] == b' ' || line[0] == b'\t' {
            // obs-fold: RFC 9112 §5.2 lets a server reject it with 400.
            return Err(Status::BadRequest);
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(Status::BadRequest)?;
        let name = &line[..colon];
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err(Status::BadRequest);
        }
        let value = trim(&line[colon + 1..]);
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(Status::BadRequest);
        }
        if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',') {
                let token = trim(token);
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_decimal(value).ok_or(Status::BadRequest)?;
            if content_length.is_some_and(|m| m != n) {
                return Err(Status::BadRequest);
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            req.has_body = true;
        } else if name.eq_ignore_ascii_case(b"if-modified-since") {
            req.if_modified_since = Some(value);
        } else if name.eq_ignore_ascii_case(b"range") {
            req.range = Some(value);
        }
    }
    if content_length.is_some_and(|n| n > 0) {
        req.has_body = true;
    }
    req.keep_alive = match version {
        Version::Http11 => !close,
        Version::Http10 => keep_alive && !close,
    };
    Ok(req)
}

fn parse_request_line(line: &[u8]) -> Result<(Method, &[u8], Version), Status> {
    let mut parts = line.splitn(3, |&b| b == b' ');
    let method = parts.next().ok_or(Status::BadRequest)?;
    let target = parts.next().ok_or(Status::BadRequest)?;
    let version = parts.next().ok_or(Status::BadRequest)?;
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err(Status::BadRequest);
    }
    if target.is_empty() || target.iter().any(|&b| b == b' ' || b == b'\r') {
        return Err(Status::BadRequest);
    }
    let version = match version {
        b"HTTP/1.1" => Version::Http11,
        b"HTTP/1.0" => Version::Http10,
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            return Err(Status::VersionNotSupported)
        }
        _ => return Err(Status::BadRequest),
    };
    let method = match method {
        b"GET" => Method::Get,
        b"HEAD" => Method::Head,
        _ => Method::Other,
    };
    Ok((method, target, version))
}

/// RFC 9110 §5.6.2 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Strips optional whitespace (SP, HTAB) from both ends.
fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// A non-empty run of ASCII digits that fits a u64.
fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(buf: &[u8]) -> Request<'_> {
        match parse_request(buf) {
            Parsed::Complete(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn simple_get() {
        let buf = b"GET /a/b.html?x=1 HTTP/1.1\r\nHost: x\r\n\r\nGET";
        let r = complete(buf);
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.target, b"/a/b.html?x=1");
        assert_eq!(r.version, Version::Http11);
        assert!(r.keep_alive);
        assert_eq!(r.head_len, buf.len() - 3);
        assert!(!r.has_body);
    }

    #[test]
    fn partial_until_blank_line() {
        let full = b"HEAD / HTTP/1.0\r\nConnection: keep-alive\r\nRange: bytes=0-1\r\n\r\n";
        for n in 0..full.len() {
            assert_eq!(parse_request(&full[..n]), Parsed::Partial, "{n}");
        }
        let r = complete(full);
        assert_eq!(r.method, Method::Head);
        assert!(r.keep_alive);
        assert_eq!(r.range, Some(&b"bytes=0-1"[..]));
    }

    #[test]
    fn keep_alive_rules() {
        assert!(!complete(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(!complete(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(!complete(b"GET / HTTP/1.1\r\nconnection: Keep-Alive, CLOSE\r\n\r\n").keep_alive);
        assert!(complete(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
    }

    #[test]
    fn bare_lf_and_leading_blank_lines() {
        let r = complete(b"\r\n\nGET /x HTTP/1.1\nA: b\n\n");
        assert_eq!(r.target, b"/x");
        assert_eq!(r.head_len, 25);
    }

    #[test]
    fn bodies_flagged() {
        assert!(complete(b"GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\n").has_body);
        assert!(!complete(b"GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n").has_body);
        assert!(complete(b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").has_body);
    }

    #[test]
    fn malformed() {
        for bad in [
            &b"GET /\r\n\r\n"[..],
            b"GET  / HTTP/1.1\r\n\r\n",
            b"G(T / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nNo colon\r\n\r\n",
            b"GET / HTTP/1.1\r\nA : b\r\n\r\n",
            b"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"GET / FTP/1.1\r\n\r\n",
        ] {
            assert_eq!(
                parse_request(bad),
                Parsed::Invalid(Status::BadRequest),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            parse_request(b"GET / HTTP/2.0\r\n\r\n"),
            Parsed::Invalid(Status::VersionNotSupported)
        );
    }

    #[test]
    fn limits() {
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_HEAD_BYTES + 1, b'a');
        assert_eq!(
            parse_request(&big),
            Parsed::Invalid(Status::HeaderFieldsTooLarge)
        );
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for _ in 0..=MAX_HEADERS {
            many.extend_from_slice(b"A: b\r\n");
        }
        assert_eq!(
            parse_request(&many),
            Parsed::Invalid(Status::HeaderFieldsTooLarge)
        );
        let mut ok = b"GET / HTTP/1.1\r\n".to_vec();
        for _ in 0..MAX_HEADERS {
            ok.extend_from_slice(b"A: b\r\n");
        }
        ok.extend_from_slice(b"\r\n");
        assert!(matches!(parse_request(&ok), Parsed::Complete(_)));
    }
}
