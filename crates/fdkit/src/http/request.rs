//! [`parse_request`]: one HTTP/1.1 request head out of the bytes received so far.
//!
//! Lines end in CRLF (a bare LF is accepted too, RFC 9112 §2.2); empty lines before the
//! request line are skipped. Only the headers the static server acts on are kept
//! (`Host`, `Connection`, `Content-Length`, `Transfer-Encoding`, `Range` and the conditional
//! fields `If-Match`, `If-None-Match`, `If-Modified-Since`, `If-Unmodified-Since`,
//! `If-Range`); the rest are checked for syntax and counted. The parser never panics and never
//! allocates.
//!
//! `Host` (RFC 9112 §3.2): an HTTP/1.1 request without one, any request with two, or one whose
//! value is not a `uri-host [":" port]` (RFC 3986's grammar, see `authority.rs`) is refused
//! with 400. An absolute-form target (`http://host/path`) must carry such an authority too, with
//! no userinfo, else 400; when it does, it names the host instead of `Host` (RFC 9112 §3.2.2),
//! which must still be valid. A target with a control byte (or a space) makes the request line
//! invalid: 400 (RFC 9112 §3). A request line that can never become valid is refused as soon as
//! it is seen, without waiting for the rest of the head: an HTTP/0.9 line (`GET /`), a TLS
//! ClientHello (first byte 0x16, not a token byte), a control byte in the target.

use super::authority::valid_host;
use super::path::strip_scheme;
use super::response::Status;

/// Bits of [`Request::repeated`]: which conditional fields came on more than one line. Set
/// here, by the parser; read by the precondition checks (`conditional.rs`).
pub(crate) const REPEATED_IF_MATCH: u8 = 1;
pub(crate) const REPEATED_IF_NONE_MATCH: u8 = 2;
pub(crate) const REPEATED_IF_MODIFIED_SINCE: u8 = 4;
pub(crate) const REPEATED_IF_UNMODIFIED_SINCE: u8 = 8;
pub(crate) const REPEATED_IF_RANGE: u8 = 16;

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
    /// `OPTIONS` (answered with the methods allowed).
    Options,
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
    /// The host (and port) the request is for: an absolute-form target's authority, else the
    /// `Host` value, trimmed (RFC 9112 §3.2.2, §3.3); `None` for HTTP/1.0 without either.
    pub host: Option<&'a [u8]>,
    /// The version.
    pub version: Version,
    /// Whether the connection stays open after the response (1.1 unless `Connection: close`,
    /// 1.0 only with `Connection: keep-alive`).
    pub keep_alive: bool,
    /// The `If-Modified-Since` value, trimmed.
    pub if_modified_since: Option<&'a [u8]>,
    /// The `If-Unmodified-Since` value, trimmed.
    pub if_unmodified_since: Option<&'a [u8]>,
    /// The first `If-Match` value, trimmed.
    pub if_match: Option<&'a [u8]>,
    /// The first `If-None-Match` value, trimmed.
    pub if_none_match: Option<&'a [u8]>,
    /// The `If-Range` value, trimmed.
    pub if_range: Option<&'a [u8]>,
    /// Which conditional fields came on more than one line (bits private to this module;
    /// [`crate::http::evaluate`] reads them and rescans `head` for the other lines).
    pub repeated: u8,
    /// The `Range` value, trimmed.
    pub range: Option<&'a [u8]>,
    /// The head itself, request line to blank line (leading blank lines excluded).
    pub head: &'a [u8],
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
            return partial(rest, lines);
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

/// `Partial`, unless what is buffered of the request line already cannot become valid: then
/// 400 (or 505) at once, instead of waiting for the header deadline. `rest` starts at the
/// request line; `lines` counts its complete lines.
fn partial(rest: &[u8], lines: usize) -> Parsed<'_> {
    if lines > 0 {
        // The request line is complete (an HTTP/0.9 `GET /` has no version).
        let mut pos = 0;
        if let Some(line) = next_line(rest, &mut pos) {
            if let Err(status) = parse_request_line(line) {
                return Parsed::Invalid(status);
            }
        }
        return Parsed::Partial;
    }
    // The start of a request line: a method of token bytes (a TLS ClientHello starts with
    // 0x16), a target, then a prefix of `HTTP/`: the same verdicts the whole line would get.
    let mut parts = rest.splitn(3, |&b| b == b' ');
    let method = parts.next().unwrap_or_default();
    let target = parts.next();
    let version = parts.next();
    if !method.iter().all(|&b| is_tchar(b)) || (target.is_some() && method.is_empty()) {
        return Parsed::Invalid(Status::BadRequest);
    }
    if target.is_some_and(|t| t.iter().any(|&b| is_ctl(b))) {
        return Parsed::Invalid(Status::BadRequest);
    }
    if let (Some(target), Some(version)) = (target, version) {
        let n = version.len().min(5);
        if check_target(target).is_err() || version[..n] != b"HTTP/"[..n] {
            return Parsed::Invalid(Status::BadRequest);
        }
    }
    Parsed::Partial
}

fn parse_head(head: &[u8]) -> Result<Request<'_>, Status> {
    let mut pos = 0;
    let line = next_line(head, &mut pos).ok_or(Status::BadRequest)?;
    let (method, target, version) = parse_request_line(line)?;
    let mut req = Request {
        method,
        target,
        host: authority(target),
        version,
        keep_alive: version == Version::Http11,
        if_modified_since: None,
        if_unmodified_since: None,
        if_match: None,
        if_none_match: None,
        if_range: None,
        repeated: 0,
        range: None,
        head,
        has_body: false,
        head_len: 0,
    };
    let mut close = false;
    let mut keep_alive = false;
    let mut content_length: Option<u64> = None;
    let mut hosts = 0u32;
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
        if value.iter().any(|&b| class(b) & NOT_IN_VALUE != 0) {
            return Err(Status::BadRequest);
        }
        // Dispatch on the length first: most lines are none of these.
        match name.len() {
            4 if name.eq_ignore_ascii_case(b"host") => {
                hosts += 1;
                if hosts > 1 || !valid_host(value) {
                    return Err(Status::BadRequest);
                }
                req.host = req.host.or(Some(value));
            }
            5 if name.eq_ignore_ascii_case(b"range") => req.range = Some(value),
            8 if name.eq_ignore_ascii_case(b"if-match") => {
                keep_first(
                    &mut req.if_match,
                    value,
                    &mut req.repeated,
                    REPEATED_IF_MATCH,
                );
            }
            8 if name.eq_ignore_ascii_case(b"if-range") => {
                keep_first(
                    &mut req.if_range,
                    value,
                    &mut req.repeated,
                    REPEATED_IF_RANGE,
                );
            }
            10 if name.eq_ignore_ascii_case(b"connection") => {
                for token in value.split(|&b| b == b',') {
                    let token = trim(token);
                    if token.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        keep_alive = true;
                    }
                }
            }
            13 if name.eq_ignore_ascii_case(b"if-none-match") => {
                let bit = REPEATED_IF_NONE_MATCH;
                keep_first(&mut req.if_none_match, value, &mut req.repeated, bit);
            }
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                let n = parse_decimal(value).ok_or(Status::BadRequest)?;
                if content_length.is_some_and(|m| m != n) {
                    return Err(Status::BadRequest);
                }
                content_length = Some(n);
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => req.has_body = true,
            17 if name.eq_ignore_ascii_case(b"if-modified-since") => {
                let bit = REPEATED_IF_MODIFIED_SINCE;
                keep_first(&mut req.if_modified_since, value, &mut req.repeated, bit);
            }
            19 if name.eq_ignore_ascii_case(b"if-unmodified-since") => {
                let bit = REPEATED_IF_UNMODIFIED_SINCE;
                keep_first(&mut req.if_unmodified_since, value, &mut req.repeated, bit);
            }
            _ => {}
        }
    }
    if hosts == 0 && version == Version::Http11 {
        // RFC 9112 §3.2: a server MUST answer 400 to an HTTP/1.1 request without Host.
        return Err(Status::BadRequest);
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
    check_target(target)?;
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
        b"OPTIONS" => Method::Options,
        _ => Method::Other,
    };
    Ok((method, target, version))
}

/// A target the request line may carry (RFC 9112 §3.2): not empty, no control byte or space;
/// when absolute-form (`http://` or `https://`), an authority that is `uri-host [":" port]`
/// with a host and no userinfo (RFC 9110 §4.2.1, §4.2.4). Other forms (origin `/p`, asterisk
/// `*`, authority-form) are left to the target's resolution or the method's refusal.
fn check_target(target: &[u8]) -> Result<(), Status> {
    if target.is_empty() || target.iter().any(|&b| class(b) & NOT_IN_TARGET != 0) {
        return Err(Status::BadRequest);
    }
    match authority(target) {
        Some(a) if !valid_host(a) => Err(Status::BadRequest),
        _ => Ok(()),
    }
}

/// An absolute-form target's authority (what follows `http://` up to `/`, `?` or `#`).
fn authority(target: &[u8]) -> Option<&[u8]> {
    if target.first() == Some(&b'/') {
        return None;
    }
    let rest = strip_scheme(target)?;
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?' || b == b'#')
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// A control byte (RFC 5234 `CTL`).
fn is_ctl(b: u8) -> bool {
    class(b) & CTL != 0
}

/// RFC 9110 §5.6.2 `tchar`.
const TCHAR: u8 = 1;
/// RFC 5234 `CTL`: 0x00-0x1f and DEL.
const CTL: u8 = 2;
/// What a field value may not hold: a `CTL` other than HTAB (RFC 9110 §5.5).
const NOT_IN_VALUE: u8 = 4;
/// What a request target may not hold: a `CTL` or a space (RFC 9112 §3).
const NOT_IN_TARGET: u8 = 8;

/// Each byte's classes, as bits: the parser looks a byte up once instead of comparing it
/// against a list, since every byte of a request head goes through one of these checks.
static CLASSES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        let ctl = c < 0x20 || c == 0x7f;
        let mut bits = 0;
        if c.is_ascii_alphanumeric() {
            bits |= TCHAR;
        } else {
            let mut i = 0;
            let extra = b"!#$%&'*+-.^_`|~";
            while i < extra.len() {
                if extra[i] == c {
                    bits |= TCHAR;
                }
                i += 1;
            }
        }
        if ctl {
            bits |= CTL | NOT_IN_TARGET;
            if c != b'\t' {
                bits |= NOT_IN_VALUE;
            }
        }
        if c == b' ' {
            bits |= NOT_IN_TARGET;
        }
        t[b] = bits;
        b += 1;
    }
    t
};

fn class(b: u8) -> u8 {
    CLASSES[usize::from(b)]
}

/// Keeps the first value of a field and notes (in `repeated`) that it came again.
fn keep_first<'a>(slot: &mut Option<&'a [u8]>, value: &'a [u8], repeated: &mut u8, bit: u8) {
    if slot.is_some() {
        *repeated |= bit;
    } else {
        *slot = Some(value);
    }
}

/// RFC 9110 §5.6.2 token characters.
fn is_tchar(b: u8) -> bool {
    class(b) & TCHAR != 0
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
        assert!(!complete(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(
            !complete(b"GET / HTTP/1.1\r\nHost: x\r\nconnection: Keep-Alive, CLOSE\r\n\r\n")
                .keep_alive
        );
        assert!(complete(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
    }

    #[test]
    fn bare_lf_and_leading_blank_lines() {
        let r = complete(b"\r\n\nGET /x HTTP/1.1\nHost: h\n\n");
        assert_eq!(r.target, b"/x");
        assert_eq!(r.head_len, 28);
    }

    #[test]
    fn bodies_flagged() {
        assert!(complete(b"GET / HTTP/1.0\r\nContent-Length: 5\r\n\r\n").has_body);
        assert!(!complete(b"GET / HTTP/1.0\r\nContent-Length: 0\r\n\r\n").has_body);
        assert!(complete(b"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n").has_body);
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
        let mut ok = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
        for _ in 1..MAX_HEADERS {
            ok.extend_from_slice(b"A: b\r\n");
        }
        ok.extend_from_slice(b"\r\n");
        assert!(matches!(parse_request(&ok), Parsed::Complete(_)));
    }

    #[test]
    fn host_rules() {
        // RFC 9112 §3.2: HTTP/1.1 needs exactly one valid Host; HTTP/1.0 may go without.
        for bad in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"GET http://h/ HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost:\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: user@a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\\b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: example.com.:1.2\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: 123.40.56.78:9000:80\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: [abcd::ef98:0:7654:321\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: [abcd::ef98:0:7654:321]..:98\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: extra[abcd::ef98:0:7654:321]:98\r\n\r\n",
            b"GET / HTTP/1.0\r\nHost: [ab..cd::ef98:0:7654:321]\r\n\r\n",
            b"GET / HTTP/1.0\r\nHost: :80\r\n\r\n",
            // Invalid even when an absolute-form target names the host: RFC 9112 §3.2.
            b"GET http://a/ HTTP/1.1\r\nHost: a:b\r\n\r\n",
        ] {
            assert_eq!(
                parse_request(bad),
                Parsed::Invalid(Status::BadRequest),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        for good in [
            &b"GET / HTTP/1.0\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHOST: example.com\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost:  xn--bcher-kva.example \r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: abcd-ef.g02.xyz.:88\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: [::ffff:12.30.67.89]:4321\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: [v1.a:b]\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: example.com:\r\n\r\n",
        ] {
            assert!(
                matches!(parse_request(good), Parsed::Complete(_)),
                "{good:?}"
            );
        }
    }

    #[test]
    fn hopeless_request_lines_are_refused_before_the_head_ends() {
        // HTTP/0.9 (no version), a TLS ClientHello, other protocols: 400 at once.
        for bad in [
            &b"GET /\r\n"[..],
            b"GET /index.html\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
            b"\x16",
            b"SSH-2.0-OpenSSH_9.6\r\n",
            b"GET / FTP/1.1",
            b"GET  /",
            b" GET",
            b"\r\n\x16\x03",
            b"GET /a?b=\x01",
            b"GET /\x02",
            b"GET http://[::1 HTTP/",
            b"GET http://a:b/ HTTP/1.1\r\n",
        ] {
            assert_eq!(
                parse_request(bad),
                Parsed::Invalid(Status::BadRequest),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            parse_request(b"GET / HTTP/2.0\r\n"),
            Parsed::Invalid(Status::VersionNotSupported)
        );
        // What may still become a request waits.
        for partial in [
            &b""[..],
            b"G",
            b"GET",
            b"GET ",
            b"GET /a?b=%01",
            b"GET http://[::1",
            b"GET / H",
            b"GET / HTTP/1.1\r",
            b"GET / HTTP/1.1\r\nHost: x\r\n",
        ] {
            assert_eq!(parse_request(partial), Parsed::Partial, "{partial:?}");
        }
    }

    /// RFC 9112 §3: a control byte (or a second space) in the target makes the request line
    /// invalid: 400.
    #[test]
    fn rfc_9112_3_control_bytes_in_the_target() {
        for bad in [
            &b"GET /\x02 HTTP/1.0\r\n\r\n"[..],
            b"GET /\0 HTTP/1.0\r\n\r\n",
            b"GET /a\tb HTTP/1.0\r\n\r\n",
            b"GET /a\x7f HTTP/1.0\r\n\r\n",
            b"GET /a?q=\x1b HTTP/1.0\r\n\r\n",
            b"GET /a\rb HTTP/1.0\r\n\r\n",
            b"GET / / HTTP/1.0\r\n\r\n",
            b"GET http://\x1b/xample.com/ HTTP/1.0\r\nHost: localhost\r\n\r\n",
        ] {
            assert_eq!(
                parse_request(bad),
                Parsed::Invalid(Status::BadRequest),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // Bytes above 0x7f are not controls: a file name in UTF-8 sent raw is looked up.
        assert_eq!(
            complete(b"GET /caf\xc3\xa9 HTTP/1.0\r\n\r\n").target,
            b"/caf\xc3\xa9"
        );
    }

    /// RFC 9112 §3.2.2, RFC 9110 §4.2: an absolute-form target's authority is `uri-host
    /// [":" port]` with a host and no userinfo, else 400.
    #[test]
    fn rfc_9112_3_2_2_absolute_form_authority() {
        for authority in [
            &b"123.40.56.78:9000:80"[..],
            b"[ab..cd::ef98:0:7654:321]",
            b"[abcd\\::ef98:0:7654:321",
            b"[2001:db8::1",
            b"[v0.1",
            b"example.com:80:80",
            b"example.com:foo",
            b"example\\com",
            b"example.com\xff",
            b"user@example.com",
            b"@example.com",
            b":80",
            b"",
        ] {
            for rest in [&b"/"[..], b"", b"?a", b"#f"] {
                let mut buf = b"GET http://".to_vec();
                buf.extend_from_slice(authority);
                buf.extend_from_slice(rest);
                buf.extend_from_slice(b" HTTP/1.1\r\nHost: localhost\r\n\r\n");
                assert_eq!(
                    parse_request(&buf),
                    Parsed::Invalid(Status::BadRequest),
                    "{:?}",
                    String::from_utf8_lossy(&buf)
                );
            }
        }
        for good in [
            &b"GET http://localhost:8080 HTTP/1.1\r\nHost: localhost\r\n\r\n"[..],
            b"GET HTTPS://[abcd::ef98:0:7654:321]:5/x HTTP/1.0\r\n\r\n",
            b"GET http://[::123.45.67.89]?args HTTP/1.0\r\n\r\n",
            b"GET http://com.exa-m.45..:/ HTTP/1.0\r\n\r\n",
            b"GET http://[v0.1azAZ.!$&'()*+,;=-._~:]:80/ HTTP/1.0\r\n\r\n",
        ] {
            assert!(
                matches!(parse_request(good), Parsed::Complete(_)),
                "{:?}",
                String::from_utf8_lossy(good)
            );
        }
    }

    /// RFC 9112 §3.2.2: the absolute-form target's authority names the host, not `Host`.
    #[test]
    fn rfc_9112_3_2_2_absolute_form_wins_over_host() {
        let r = complete(b"GET http://a.example:81/x HTTP/1.1\r\nHost: b.example\r\n\r\n");
        assert_eq!(r.host, Some(&b"a.example:81"[..]));
        let r = complete(b"GET HTTP://[::1]?q HTTP/1.0\r\n\r\n");
        assert_eq!(r.host, Some(&b"[::1]"[..]));
        let r = complete(b"GET /x HTTP/1.1\r\nHost:  b.example \r\n\r\n");
        assert_eq!(r.host, Some(&b"b.example"[..]));
        assert_eq!(complete(b"GET /x HTTP/1.0\r\n\r\n").host, None);
        // Asterisk- and authority-form targets carry no host of their own.
        let r = complete(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(r.host, Some(&b"h"[..]));
    }

    #[test]
    fn conditional_fields_are_kept() {
        let r = complete(
            b"GET / HTTP/1.1\r\nHost: x\r\nIf-Match: \"a\"\r\nIF-NONE-MATCH: *\r\n\
              If-Unmodified-Since: d1\r\nIf-Range: \"b\"\r\nIf-Modified-Since: d2\r\n\
              If-None-Match: \"c\"\r\n\r\n",
        );
        assert_eq!(r.if_match, Some(&b"\"a\""[..]));
        assert_eq!(r.if_none_match, Some(&b"*"[..]));
        assert_eq!(r.if_unmodified_since, Some(&b"d1"[..]));
        assert_eq!(r.if_modified_since, Some(&b"d2"[..]));
        assert_eq!(r.if_range, Some(&b"\"b\""[..]));
        assert_eq!(r.repeated, REPEATED_IF_NONE_MATCH);
    }
}
