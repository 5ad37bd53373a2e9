//! One request in, one response head (and body plan) out: statuses, conditional and range
//! requests, redirects, error bodies.
//!
//! Conditional requests follow RFC 9110 §13.2.2 (`crate::http::evaluate`): 412 for a failed
//! `If-Match`/`If-Unmodified-Since`, 304 (with `ETag` and `Last-Modified`, no body) for a
//! matching `If-None-Match` or an unmodified `If-Modified-Since`, and a `Range` honoured only
//! when its `If-Range` holds (for the whole range set). Every 200, 206 and 304 carries the
//! file's strong `ETag`.
//!
//! `Range` is honoured on `GET` alone (RFC 9110 §14.2: a server ignores it for any other
//! method; a `HEAD` gets the head of the 200). Several ranges get a `multipart/byteranges`
//! 206 (`multipart.rs`).

use super::access_log::AccessLog;
use super::files::{FileCache, FileEntry, Refusal};
use super::multipart::{gap, multipart};
use super::out::{etag_header, head_end, head_start, Out};
use crate::http::{
    evaluate, has_preconditions, parse_range, write_decimal, write_location, ByteRange, Method,
    Precondition, Request, Status, Validators, Version, HTTP_DATE_LEN,
};
use std::rc::Rc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The methods every resource allows (RFC 9110 §10.2.1), in a 405 and an OPTIONS answer.
const ALLOW: &[u8] = b"Allow: GET, HEAD, OPTIONS\r\n";

/// The 404 of a directory without an index file when listings are off: it says why, and
/// what lists the directory (the server's users type `fdkit serve` where they typed
/// `python -m http.server`, which lists directories by default).
const NO_INDEX: &[u8] = b"404 Not Found\n\nThis directory has no index.html or index.htm, \
and directory listings are off.\nStart the server with --list (fdkit serve --list) to list \
directories.\n";

/// What a response needs from the engine.
pub(super) struct Ctx<'a> {
    pub files: &'a mut FileCache,
    pub date: &'a [u8; HTTP_DATE_LEN],
    pub now: Instant,
    /// Wall-clock seconds (the access log's time).
    pub secs: u64,
    /// Where each response gets its line, when the access log is on.
    pub log: Option<&'a mut AccessLog>,
}

/// What a response was, for the caller (and its access log line).
#[derive(Debug, Clone, Copy)]
pub(super) struct Answer {
    /// The connection closes after it.
    pub close: bool,
    pub status: Status,
    /// Body bytes it carries (0 for `HEAD`, 304, or an empty file).
    pub body: u64,
}

impl Answer {
    fn new(status: Status, keep_alive: bool, body: u64) -> Answer {
        Answer {
            close: !keep_alive,
            status,
            body,
        }
    }
}

/// Appends the response to `req` to `out`.
pub(super) fn respond(req: &Request<'_>, out: &mut Out, ctx: &mut Ctx<'_>) -> Answer {
    let head = req.method == Method::Head;
    let keep_alive = req.keep_alive;
    match req.method {
        Method::Get | Method::Head => {}
        Method::Options => {
            // RFC 9110 §9.3.7: the same methods for every target (`*` included). A body is
            // never read: the connection closes after the answer when one was announced.
            let keep = keep_alive && !req.has_body;
            let start = out.heads.len();
            head_start(out, Status::Ok, ctx.date);
            out.heads.extend_from_slice(ALLOW);
            out.heads.extend_from_slice(b"Content-Length: 0\r\n");
            head_end(out, keep, req.version);
            out.push_head(start);
            return Answer::new(Status::Ok, keep, 0);
        }
        Method::Other => {
            // RFC 9110 §15.5.6: 405 with `Allow`, before any look at a body (never read).
            // The connection closes after it: what follows an unknown method need not be a
            // request (CONNECT turns the connection into a tunnel; a body may follow), and
            // nothing pipelined behind a refused TRACE or CONNECT is answered, as nginx does.
            let body = error(out, ctx, Status::MethodNotAllowed, false, false, &[ALLOW]);
            return Answer::new(Status::MethodNotAllowed, false, body);
        }
    }
    if req.has_body {
        // We never read request bodies: refuse, and close (the body is still unread).
        let body = error(out, ctx, Status::ContentTooLarge, head, false, &[]);
        return Answer::new(Status::ContentTooLarge, false, body);
    }
    let entry = match ctx.files.lookup(req.target, ctx.now) {
        Ok(entry) => entry,
        Err((Refusal::Redirect, raw_path, query)) => {
            let start = out.heads.len();
            head_start(out, Status::MovedPermanently, ctx.date);
            out.heads.extend_from_slice(b"Location: ");
            write_location(raw_path, query, &mut out.heads);
            out.heads.extend_from_slice(b"\r\n");
            let body = error_rest(
                out,
                Status::MovedPermanently,
                head,
                keep_alive,
                req.version,
                start,
            );
            return Answer::new(Status::MovedPermanently, keep_alive, body);
        }
        Err((Refusal::NoIndex, _, _)) => {
            let start = out.heads.len();
            head_start(out, Status::NotFound, ctx.date);
            let body = error_rest_with(out, NO_INDEX, head, keep_alive, req.version, start);
            return Answer::new(Status::NotFound, keep_alive, body);
        }
        Err((Refusal::Status(status), _, _)) => {
            let keep = keep_alive && !status.closes();
            let body = error(out, ctx, status, head, keep, &[]);
            return Answer::new(status, keep, body);
        }
        Err((Refusal::Listing(page), _, _)) => {
            let start = out.heads.len();
            head_start(out, Status::Ok, ctx.date);
            out.heads.extend_from_slice(
                b"Content-Type: text/html; charset=utf-8\r\nCache-Control: no-cache\r\n\
                  Content-Length: ",
            );
            write_decimal(&mut out.heads, page.len() as u64);
            out.heads.extend_from_slice(b"\r\n");
            head_end(out, keep_alive, req.version);
            let body = if head { 0 } else { page.len() as u64 };
            if !head {
                out.heads.extend_from_slice(&page);
            }
            out.push_head(start);
            return Answer::new(Status::Ok, keep_alive, body);
        }
    };
    // RFC 9110 §14.2: a server MUST ignore Range for any method but GET.
    let mut range = if req.method == Method::Get {
        req.range
    } else {
        None
    };
    if has_preconditions(req) {
        let v = Validators {
            etag: entry.etag.as_bytes(),
            last_modified: entry.mtime,
        };
        match evaluate(req, &v, || date_is_strong(entry.mtime)) {
            Precondition::Proceed { range: true } => {}
            Precondition::Proceed { range: false } => range = None,
            Precondition::NotModified => {
                let start = out.heads.len();
                head_start(out, Status::NotModified, ctx.date);
                etag_header(out, &entry);
                out.heads
                    .extend_from_slice(without_content_type(&entry.fixed_head));
                head_end(out, keep_alive, req.version);
                out.push_head(start);
                return Answer::new(Status::NotModified, keep_alive, 0);
            }
            Precondition::Failed => {
                let body = error(out, ctx, Status::PreconditionFailed, head, keep_alive, &[]);
                return Answer::new(Status::PreconditionFailed, keep_alive, body);
            }
        }
    }
    let (status, off, len) = match range.map(|r| parse_range(r, entry.size, gap(&entry))) {
        None | Some(ByteRange::Full) => (Status::Ok, 0, entry.size),
        Some(ByteRange::Partial { start, end }) => (Status::PartialContent, start, end - start + 1),
        Some(ByteRange::Multipart(spans)) => {
            let body = multipart(out, ctx.date, &entry, spans, keep_alive, req.version);
            return Answer::new(Status::PartialContent, keep_alive, body);
        }
        Some(ByteRange::Unsatisfiable) => {
            let start = out.heads.len();
            head_start(out, Status::RangeNotSatisfiable, ctx.date);
            out.heads.extend_from_slice(b"Content-Range: bytes */");
            write_decimal(&mut out.heads, entry.size);
            out.heads.extend_from_slice(b"\r\n");
            let body = error_rest(
                out,
                Status::RangeNotSatisfiable,
                head,
                keep_alive,
                req.version,
                start,
            );
            return Answer::new(Status::RangeNotSatisfiable, keep_alive, body);
        }
    };
    let start = out.heads.len();
    head_start(out, status, ctx.date);
    etag_header(out, &entry);
    out.heads.extend_from_slice(&entry.fixed_head);
    if status == Status::PartialContent {
        out.heads.extend_from_slice(b"Content-Range: bytes ");
        write_decimal(&mut out.heads, off);
        out.heads.push(b'-');
        write_decimal(&mut out.heads, off + len - 1);
        out.heads.push(b'/');
        write_decimal(&mut out.heads, entry.size);
        out.heads.extend_from_slice(b"\r\n");
    }
    out.heads.extend_from_slice(b"Content-Length: ");
    write_decimal(&mut out.heads, len);
    out.heads.extend_from_slice(b"\r\n");
    head_end(out, keep_alive, req.version);
    out.push_head(start);
    if head || len == 0 {
        return Answer::new(status, keep_alive, 0);
    }
    body(out, &entry, off, len);
    Answer::new(status, keep_alive, len)
}

/// The fixed head without its `Content-Type` line: a 304 carries the validators, not the
/// representation's metadata (RFC 9110 §15.4.5).
fn without_content_type(fixed: &[u8]) -> &[u8] {
    if fixed.starts_with(b"Content-Type:") {
        if let Some(i) = fixed.windows(2).position(|w| w == b"\r\n") {
            return &fixed[i + 2..];
        }
    }
    fixed
}

/// Whether a `Last-Modified` of `mtime` (whole seconds) may serve as a strong validator for
/// `If-Range`: only when the file's last change is over a second in the past now, so that no
/// second change within that same second can still come (RFC 9110 §8.8.2.2; the one-second
/// rule Apache applies before it calls its ETags strong).
/// A file changed twice within one second earlier still looks the same by date: clients
/// resuming downloads should send the `ETag` instead. Read here, off the fast path (vDSO).
fn date_is_strong(mtime: i64) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    i64::try_from(now).is_ok_and(|now| now >= mtime.saturating_add(2))
}

fn body(out: &mut Out, entry: &Rc<FileEntry>, off: u64, len: u64) {
    if entry.map.is_some() {
        out.push_body(entry, off, len);
    } else {
        out.set_tail(entry.clone(), off, len);
    }
}

/// An error response for a request that could not be parsed (always closes).
pub(super) fn invalid(out: &mut Out, date: &[u8; HTTP_DATE_LEN], status: Status) -> Answer {
    let start = out.heads.len();
    head_start(out, status, date);
    let body = error_rest(out, status, false, false, Version::Http11, start);
    Answer::new(status, false, body)
}

/// An error response; returns its body's length.
fn error(
    out: &mut Out,
    ctx: &Ctx<'_>,
    status: Status,
    head: bool,
    keep_alive: bool,
    extra: &[&[u8]],
) -> u64 {
    let start = out.heads.len();
    head_start(out, status, ctx.date);
    for e in extra {
        out.heads.extend_from_slice(e);
    }
    error_rest(out, status, head, keep_alive, Version::Http11, start)
}

/// Content type and length of the small plain-text body, the end of the head, the body.
/// Returns the body bytes sent (none for `HEAD`).
fn error_rest(
    out: &mut Out,
    status: Status,
    head: bool,
    keep_alive: bool,
    version: Version,
    start: usize,
) -> u64 {
    error_rest_with(out, status.body(), head, keep_alive, version, start)
}

/// [`error_rest`] with a body of the caller's.
fn error_rest_with(
    out: &mut Out,
    body: &[u8],
    head: bool,
    keep_alive: bool,
    version: Version,
    start: usize,
) -> u64 {
    out.heads
        .extend_from_slice(b"Content-Type: text/plain; charset=utf-8\r\nContent-Length: ");
    write_decimal(&mut out.heads, body.len() as u64);
    out.heads.extend_from_slice(b"\r\n");
    head_end(out, keep_alive, version);
    if !head {
        out.heads.extend_from_slice(body);
    }
    out.push_head(start);
    if head {
        0
    } else {
        body.len() as u64
    }
}
