//! Conditional requests (RFC 9110 §13): the strong [`ETag`] of a file, entity-tag lists, and
//! [`evaluate`], the preconditions in the order RFC 9110 §13.2.2 gives.
//!
//! The order: `If-Match` (412 unless a tag matches strongly, `*` matches any file); without it
//! `If-Unmodified-Since` (412 when the file is newer); then `If-None-Match` (304 for GET and
//! HEAD when a tag matches weakly, `*` too); without it `If-Modified-Since` (304 when the file
//! is not newer); last `If-Range`, which decides whether a `Range` is honoured (a strong
//! entity-tag match, or a date equal to `Last-Modified` when that date is a strong validator)
//! or the whole file is sent. A field that does not parse is ignored where the RFC says so (the
//! dates), and matches nothing otherwise: an unparsable `If-Match` fails (412), an unparsable
//! `If-None-Match` or `If-Range` sends the whole file, which is always a correct answer.

use super::date::parse_http_date;
use super::request::{
    Method, Request, REPEATED_IF_MATCH, REPEATED_IF_MODIFIED_SINCE, REPEATED_IF_NONE_MATCH,
    REPEATED_IF_RANGE, REPEATED_IF_UNMODIFIED_SINCE,
};

/// The longest [`ETag`]: two quotes, three 64-bit numbers in hex, two dashes.
pub const ETAG_MAX: usize = 2 + 3 * 16 + 2;

/// A strong entity tag, `"<inode>-<size>-<mtime in ns>"` (lowercase hex), formatted once per
/// open file into a fixed buffer (no allocation). Any change that rewrites, truncates, grows,
/// touches or replaces the file changes one of the three. See RFC 9110 §8.8.3.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ETag {
    buf: [u8; ETAG_MAX],
    len: u8,
}

impl ETag {
    /// The tag of a file with inode `ino`, `size` bytes, modified at `mtime_sec` seconds and
    /// `mtime_nsec` nanoseconds since the epoch (as `fstat(2)` reports them). The nanosecond
    /// count wraps to 64 bits (it would only before 1970 or after 2554).
    pub fn new(ino: u64, size: u64, mtime_sec: i64, mtime_nsec: i64) -> ETag {
        let ns = (i128::from(mtime_sec) * 1_000_000_000 + i128::from(mtime_nsec)) as u64;
        let mut tag = ETag {
            buf: [0; ETAG_MAX],
            len: 0,
        };
        tag.push(b'"');
        tag.hex(ino);
        tag.push(b'-');
        tag.hex(size);
        tag.push(b'-');
        tag.hex(ns);
        tag.push(b'"');
        tag
    }

    /// The tag as it goes on the wire, quotes included.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    fn push(&mut self, b: u8) {
        self.buf[usize::from(self.len)] = b;
        self.len += 1;
    }

    fn hex(&mut self, n: u64) {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let nibbles = (64 - n.leading_zeros()).div_ceil(4).max(1);
        for i in (0..nibbles).rev() {
            self.push(DIGITS[((n >> (4 * i)) & 0xf) as usize]);
        }
    }
}

impl std::fmt::Debug for ETag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

/// What the server knows of the selected representation.
#[derive(Debug, Clone, Copy)]
pub struct Validators<'a> {
    /// The current strong entity tag, quotes included (what `ETag` says).
    pub etag: &'a [u8],
    /// The modification time in whole seconds (what `Last-Modified` says).
    pub last_modified: i64,
}

/// The outcome of the preconditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Perform the request; `range` says whether a `Range` may be honoured (false when an
    /// `If-Range` does not hold: send the whole representation, 200).
    Proceed {
        /// Whether to honour `Range`.
        range: bool,
    },
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// Whether the request carries any conditional field (the fast path skips [`evaluate`]).
pub fn has_preconditions(req: &Request<'_>) -> bool {
    req.if_match.is_some()
        || req.if_none_match.is_some()
        || req.if_modified_since.is_some()
        || req.if_unmodified_since.is_some()
        || (req.if_range.is_some() && req.range.is_some())
}

/// Evaluates the preconditions of `req` against `v` in the order of RFC 9110 §13.2.2.
/// `date_is_strong` is asked only for an `If-Range` that carries a date: whether
/// `Last-Modified` may serve as a strong validator (RFC 9110 §8.8.2.2: the server must know
/// the file did not change twice within that second).
pub fn evaluate(
    req: &Request<'_>,
    v: &Validators<'_>,
    date_is_strong: impl FnOnce() -> bool,
) -> Precondition {
    let safe = matches!(req.method, Method::Get | Method::Head);
    // 1. If-Match (§13.1.1), strong comparison; else 2. If-Unmodified-Since (§13.1.4).
    if let Some(first) = req.if_match {
        if !list_matches(
            req,
            first,
            (b"if-match", REPEATED_IF_MATCH),
            v.etag,
            Comparison::Strong,
        ) {
            return Precondition::Failed;
        }
    } else if let Some(date) =
        single(req, req.if_unmodified_since, REPEATED_IF_UNMODIFIED_SINCE).and_then(parse_http_date)
    {
        if v.last_modified > date as i64 {
            return Precondition::Failed;
        }
    }
    // 3. If-None-Match (§13.1.2), weak comparison; else 4. If-Modified-Since (§13.1.3).
    if let Some(first) = req.if_none_match {
        if list_matches(
            req,
            first,
            (b"if-none-match", REPEATED_IF_NONE_MATCH),
            v.etag,
            Comparison::Weak,
        ) {
            return if safe {
                Precondition::NotModified
            } else {
                Precondition::Failed
            };
        }
    } else if safe {
        if let Some(date) =
            single(req, req.if_modified_since, REPEATED_IF_MODIFIED_SINCE).and_then(parse_http_date)
        {
            if v.last_modified <= date as i64 {
                return Precondition::NotModified;
            }
        }
    }
    // 5. If-Range (§13.1.5), only with a Range.
    let range = match (req.range, req.if_range) {
        (Some(_), Some(value)) => {
            req.repeated & REPEATED_IF_RANGE == 0 && if_range_holds(value, v, date_is_strong)
        }
        _ => true,
    };
    Precondition::Proceed { range }
}

/// A singleton field's value; a field sent twice has more than one member and is ignored
/// (RFC 9110 §13.1.3, §13.1.4).
fn single<'a>(req: &Request<'a>, value: Option<&'a [u8]>, bit: u8) -> Option<&'a [u8]> {
    if req.repeated & bit != 0 {
        None
    } else {
        value
    }
}

/// How two entity tags are compared (RFC 9110 §8.8.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// Both strong and the same opaque tag.
    Strong,
    /// The same opaque tag, either or both weak.
    Weak,
}

/// Whether an `If-Match`/`If-None-Match` field (every line of it: lines of a list field join
/// with commas, RFC 9110 §5.3) matches `etag`.
fn list_matches(
    req: &Request<'_>,
    first: &[u8],
    (name, bit): (&[u8], u8),
    etag: &[u8],
    cmp: Comparison,
) -> bool {
    if req.repeated & bit == 0 {
        return tag_list_matches(first, etag, cmp);
    }
    field_values(req.head, name).any(|value| tag_list_matches(value, etag, cmp))
}

/// Every value of the header field `name` (lowercase) in `head`, trimmed. The head was
/// checked by the parser, so this only splits it.
fn field_values<'a>(head: &'a [u8], name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    head.split(|&b| b == b'\n').skip(1).filter_map(move |line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(name)
            .then(|| line[colon + 1..].trim_ascii())
    })
}

/// Whether the field value `value` (`*` or a comma-separated list of entity tags) matches
/// `etag` (our strong tag, quotes included) under `cmp`. `*` matches (a file exists). A value
/// that is not a valid list matches nothing. See RFC 9110 §13.1.1, §13.1.2.
pub fn tag_list_matches(value: &[u8], etag: &[u8], cmp: Comparison) -> bool {
    let value = value.trim_ascii();
    if value == b"*" {
        return true;
    }
    let mut rest = value;
    let mut matched = false;
    loop {
        // Empty list elements and optional whitespace (RFC 9110 §5.6.1.2).
        while let [b' ' | b'\t' | b',', r @ ..] = rest {
            rest = r;
        }
        if rest.is_empty() {
            return matched;
        }
        let Some((weak, opaque, r)) = entity_tag(rest) else {
            return false;
        };
        matched |= opaque == etag && (cmp == Comparison::Weak || !weak);
        rest = r;
        while let [b' ' | b'\t', r @ ..] = rest {
            rest = r;
        }
        match rest {
            [] => return matched,
            [b',', ..] => {}
            _ => return false,
        }
    }
}

/// One `entity-tag` at the start of `s`: (weak, opaque tag with its quotes, the rest).
/// `entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE`, `etagc = %x21 / %x23-7E / obs-text`.
fn entity_tag(s: &[u8]) -> Option<(bool, &[u8], &[u8])> {
    let (weak, s) = match s {
        [b'W', b'/', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    if s.first() != Some(&b'"') {
        return None;
    }
    let len = s[1..].iter().position(|&b| b == b'"')?;
    let opaque = &s[..len + 2];
    if !opaque[1..len + 1]
        .iter()
        .all(|&b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
    {
        return None;
    }
    Some((weak, opaque, &s[len + 2..]))
}

/// RFC 9110 §13.1.5: an entity tag holds when it matches strongly (a weak one never does); a
/// date holds when it equals `Last-Modified` exactly and that date is a strong validator.
/// Anything else does not hold (the whole file is sent).
pub fn if_range_holds(
    value: &[u8],
    v: &Validators<'_>,
    date_is_strong: impl FnOnce() -> bool,
) -> bool {
    let value = value.trim_ascii();
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return matches!(entity_tag(value), Some((false, opaque, []))  if opaque == v.etag);
    }
    v.last_modified >= 0
        && parse_http_date(value) == Some(v.last_modified as u64)
        && date_is_strong()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{parse_request, Parsed};

    const TAG: &[u8] = b"\"1a-6-17f\"";

    fn req(buf: &[u8]) -> Request<'_> {
        match parse_request(buf) {
            Parsed::Complete(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn eval(head: &str, last_modified: i64, strong: bool) -> Precondition {
        let buf = format!("GET /f HTTP/1.1\r\nHost: x\r\n{head}\r\n");
        let r = req(buf.as_bytes());
        let v = Validators {
            etag: TAG,
            last_modified,
        };
        evaluate(&r, &v, || strong)
    }

    const PROCEED: Precondition = Precondition::Proceed { range: true };
    const WHOLE: Precondition = Precondition::Proceed { range: false };
    const D: &str = "Sun, 06 Nov 1994 08:49:37 GMT"; // 784111777
    const T: i64 = 784_111_777;

    #[test]
    fn etag_format() {
        let t = ETag::new(0x1a, 6, 0, 0x17f);
        assert_eq!(t.as_bytes(), TAG);
        let t = ETag::new(u64::MAX, u64::MAX, 1_700_000_000, 999_999_999);
        assert_eq!(
            t.as_bytes(),
            format!(
                "\"ffffffffffffffff-ffffffffffffffff-{:x}\"",
                1_700_000_000_999_999_999u64
            )
            .as_bytes()
        );
        assert_eq!(ETag::new(0, 0, 0, 0).as_bytes(), b"\"0-0-0\"");
        // One nanosecond apart: different tags.
        assert_ne!(ETag::new(1, 1, 5, 1), ETag::new(1, 1, 5, 2));
    }

    #[test]
    fn tag_lists() {
        use Comparison::*;
        assert!(tag_list_matches(b"*", TAG, Strong));
        assert!(tag_list_matches(b" * ", TAG, Weak));
        assert!(tag_list_matches(TAG, TAG, Strong));
        assert!(tag_list_matches(b"\"x\", \"1a-6-17f\"", TAG, Strong));
        assert!(tag_list_matches(b",\"x\" ,, \"1a-6-17f\",", TAG, Strong));
        assert!(tag_list_matches(b"W/\"1a-6-17f\"", TAG, Weak));
        assert!(!tag_list_matches(b"W/\"1a-6-17f\"", TAG, Strong));
        assert!(!tag_list_matches(b"\"1a-6-17e\"", TAG, Weak));
        assert!(!tag_list_matches(b"1a-6-17f", TAG, Weak));
        assert!(!tag_list_matches(b"\"1a-6-17f", TAG, Weak));
        assert!(!tag_list_matches(b"\"1a-6-17f\" junk", TAG, Weak));
        assert!(!tag_list_matches(b"*, \"1a-6-17f\"", TAG, Weak));
        assert!(!tag_list_matches(b"w/\"1a-6-17f\"", TAG, Weak));
        assert!(!tag_list_matches(b"", TAG, Weak));
        assert!(tag_list_matches(b"\"a,b\", \"1a-6-17f\"", TAG, Strong));
    }

    #[test]
    fn the_order_of_rfc_9110_13_2_2() {
        // No conditions.
        assert_eq!(eval("", T, true), PROCEED);
        // If-Match.
        assert_eq!(eval("If-Match: \"1a-6-17f\"\r\n", T, true), PROCEED);
        assert_eq!(eval("If-Match: *\r\n", T, true), PROCEED);
        assert_eq!(
            eval("If-Match: \"nope\"\r\n", T, true),
            Precondition::Failed
        );
        assert_eq!(
            eval("If-Match: W/\"1a-6-17f\"\r\n", T, true),
            Precondition::Failed
        );
        // If-Match wins over If-Unmodified-Since (ignored when If-Match is present).
        assert_eq!(
            eval(
                &format!("If-Match: \"1a-6-17f\"\r\nIf-Unmodified-Since: {D}\r\n"),
                T + 10,
                true
            ),
            PROCEED
        );
        // If-Unmodified-Since.
        let ius = format!("If-Unmodified-Since: {D}\r\n");
        assert_eq!(eval(&ius, T, true), PROCEED);
        assert_eq!(eval(&ius, T + 1, true), Precondition::Failed);
        assert_eq!(eval("If-Unmodified-Since: junk\r\n", T + 1, true), PROCEED);
        // A 412 comes before a 304.
        assert_eq!(
            eval("If-Match: \"x\"\r\nIf-None-Match: *\r\n", T, true),
            Precondition::Failed
        );
        // If-None-Match.
        assert_eq!(
            eval("If-None-Match: \"1a-6-17f\"\r\n", T, true),
            Precondition::NotModified
        );
        assert_eq!(
            eval("If-None-Match: W/\"1a-6-17f\"\r\n", T, true),
            Precondition::NotModified
        );
        assert_eq!(
            eval("If-None-Match: *\r\n", T, true),
            Precondition::NotModified
        );
        assert_eq!(eval("If-None-Match: \"old\"\r\n", T, true), PROCEED);
        // If-None-Match present: If-Modified-Since is ignored.
        assert_eq!(
            eval(
                &format!("If-None-Match: \"old\"\r\nIf-Modified-Since: {D}\r\n"),
                T,
                true
            ),
            PROCEED
        );
        // If-Modified-Since.
        let ims = format!("If-Modified-Since: {D}\r\n");
        assert_eq!(eval(&ims, T, true), Precondition::NotModified);
        assert_eq!(eval(&ims, T - 5, true), Precondition::NotModified);
        assert_eq!(eval(&ims, T + 1, true), PROCEED);
        // Two If-Modified-Since lines: more than one member, ignored.
        assert_eq!(eval(&format!("{ims}{ims}"), T, true), PROCEED);
    }

    #[test]
    fn if_range() {
        let range = "Range: bytes=0-1\r\n";
        // Without Range, If-Range is ignored.
        assert_eq!(eval("If-Range: \"x\"\r\n", T, true), PROCEED);
        assert_eq!(
            eval(&format!("{range}If-Range: \"1a-6-17f\"\r\n"), T, true),
            PROCEED
        );
        assert_eq!(eval(&format!("{range}If-Range: \"x\"\r\n"), T, true), WHOLE);
        assert_eq!(
            eval(&format!("{range}If-Range: W/\"1a-6-17f\"\r\n"), T, true),
            WHOLE
        );
        assert_eq!(eval(&format!("{range}If-Range: {D}\r\n"), T, true), PROCEED);
        // An older or newer date, or a date that is not a strong validator: the whole file.
        assert_eq!(
            eval(&format!("{range}If-Range: {D}\r\n"), T + 1, true),
            WHOLE
        );
        assert_eq!(
            eval(&format!("{range}If-Range: {D}\r\n"), T - 1, true),
            WHOLE
        );
        assert_eq!(eval(&format!("{range}If-Range: {D}\r\n"), T, false), WHOLE);
        assert_eq!(eval(&format!("{range}If-Range: junk\r\n"), T, true), WHOLE);
        // Twice: not a valid singleton.
        assert_eq!(
            eval(
                &format!("{range}If-Range: {D}\r\nIf-Range: {D}\r\n"),
                T,
                true
            ),
            WHOLE
        );
        // If-Range comes last: a 304 first.
        assert_eq!(
            eval(
                &format!("{range}If-Range: \"x\"\r\nIf-None-Match: *\r\n"),
                T,
                true
            ),
            Precondition::NotModified
        );
    }

    #[test]
    fn repeated_list_fields_join() {
        assert_eq!(
            eval(
                "If-None-Match: \"a\"\r\nX: y\r\nif-none-match: \"b\", \"1a-6-17f\"\r\n",
                T,
                true
            ),
            Precondition::NotModified
        );
        assert_eq!(
            eval("If-Match: \"a\"\r\nIf-Match: \"1a-6-17f\"\r\n", T, true),
            PROCEED
        );
        assert_eq!(
            eval("If-Match: \"a\"\r\nIf-Match: \"b\"\r\n", T, true),
            Precondition::Failed
        );
    }

    #[test]
    fn head_gets_304_too() {
        let buf = b"HEAD /f HTTP/1.1\r\nHost: x\r\nIf-None-Match: *\r\n\r\n";
        let v = Validators {
            etag: TAG,
            last_modified: T,
        };
        assert_eq!(evaluate(&req(buf), &v, || true), Precondition::NotModified);
    }
}
