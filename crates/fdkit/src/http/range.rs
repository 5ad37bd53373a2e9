//! [`parse_range`]: a `Range` header against a representation of known length.
//!
//! RFC 9110 §14.2 lets a server ignore or refuse a range set that is invalid, overlapping, or
//! many small ranges out of order, and §15.3.7.2 lets it coalesce ranges that overlap or lie
//! closer together than the cost of a part. The rule here:
//!
//! 1. A header that does not parse, names another unit, has a range-spec that is invalid
//!    anywhere in its list, or more than [`MAX_RANGES`] range-specs, is ignored: the whole
//!    representation (200), never more than its size.
//! 2. Range-specs that are not satisfiable are dropped; when none is left, 416.
//! 3. Ranges that overlap or lie less than `gap` bytes apart (the caller passes the size of
//!    one part's header, so a merge never sends more than the part it saves) become one, in
//!    the place of the first of them asked for; the others keep the order they were asked in.
//! 4. One range left: a single-part 206. Several: a `multipart/byteranges` 206.
//!
//! After step 3 the parts are disjoint and, in file order, at least `gap` bytes apart, so
//! their bytes and all their part headers but one sum to at most the representation's size:
//! a multipart body is never longer than the file plus one part header and the closing
//! delimiter, however the set was written.

/// The most range-specs a `Range` header may list before it is ignored.
pub const MAX_RANGES: usize = 64;

/// What to send for a `Range` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ByteRange {
    /// The whole representation (200).
    Full,
    /// Bytes `start..=end` (206); `start <= end < len`.
    Partial {
        /// First byte.
        start: u64,
        /// Last byte (inclusive).
        end: u64,
    },
    /// Several ranges (206 `multipart/byteranges`): between 2 and [`MAX_RANGES`] `(first,
    /// last)` pairs, inclusive, each within the representation, disjoint and at least `gap`
    /// bytes apart, in the order they are to be sent.
    Multipart(Vec<(u64, u64)>),
    /// No byte of the range set exists (416).
    Unsatisfiable,
}

/// One range-spec, resolved against the length.
enum Spec {
    Invalid,
    Unsatisfiable,
    Span(u64, u64),
}

/// Parses `value` (the header's value) for a representation of `len` bytes; ranges less
/// than `gap` bytes apart are coalesced (see the module's rule). See RFC 9110 §14.1.2, §14.2.
pub fn parse_range(value: &[u8], len: u64, gap: u64) -> ByteRange {
    const UNIT: &[u8] = b"bytes=";
    if value.len() < UNIT.len() || !value[..UNIT.len()].eq_ignore_ascii_case(UNIT) {
        return ByteRange::Full;
    }
    let set = &value[UNIT.len()..];
    if !set.contains(&b',') {
        // The usual request: one range, nothing allocated.
        return match spec(trim(set), len) {
            Spec::Invalid => ByteRange::Full,
            Spec::Unsatisfiable => ByteRange::Unsatisfiable,
            Spec::Span(start, end) => ByteRange::Partial { start, end },
        };
    }
    let mut spans = [(0u64, 0u64); MAX_RANGES];
    let (mut listed, mut kept) = (0, 0);
    for item in set.split(|&b| b == b',') {
        let item = trim(item);
        if item.is_empty() {
            continue; // an empty list element (RFC 9110 §5.6.1)
        }
        if listed == MAX_RANGES {
            return ByteRange::Full;
        }
        listed += 1;
        match spec(item, len) {
            Spec::Invalid => return ByteRange::Full,
            Spec::Unsatisfiable => {}
            Spec::Span(start, end) => {
                spans[kept] = (start, end);
                kept += 1;
            }
        }
    }
    match (listed, kept) {
        (0, _) => ByteRange::Full,
        (_, 0) => ByteRange::Unsatisfiable,
        _ => coalesce(&spans[..kept], gap),
    }
}

/// Merges the ranges of `spans` (in the order asked) that overlap or lie less than `gap`
/// bytes apart; each merged range takes the place of the first of its members.
fn coalesce(spans: &[(u64, u64)], gap: u64) -> ByteRange {
    let mut order = [0u8; MAX_RANGES];
    for (i, o) in order.iter_mut().enumerate().take(spans.len()) {
        *o = i as u8;
    }
    let order = &mut order[..spans.len()];
    order.sort_unstable_by_key(|&i| spans[usize::from(i)].0);
    // (place asked, first, last), in file order.
    let mut merged: Vec<(u8, u64, u64)> = Vec::with_capacity(spans.len());
    for &i in order.iter() {
        let (start, end) = spans[usize::from(i)];
        match merged.last_mut() {
            // Less than `gap` bytes between them: start - (last + 1) < gap.
            Some(m) if start <= m.2.saturating_add(gap) => {
                m.0 = m.0.min(i);
                m.2 = m.2.max(end);
            }
            _ => merged.push((i, start, end)),
        }
    }
    if let [(_, start, end)] = merged[..] {
        return ByteRange::Partial { start, end };
    }
    merged.sort_unstable_by_key(|m| m.0);
    ByteRange::Multipart(merged.into_iter().map(|(_, s, e)| (s, e)).collect())
}

/// One range-spec (`a-b`, `a-`, `-n`), trimmed. See RFC 9110 §14.1.1.
fn spec(s: &[u8], len: u64) -> Spec {
    let Some(dash) = s.iter().position(|&b| b == b'-') else {
        return Spec::Invalid;
    };
    let (first, last) = (trim(&s[..dash]), trim(&s[dash + 1..]));
    if first.is_empty() {
        // Suffix: the last n bytes.
        let Some(n) = digits(last) else {
            return Spec::Invalid;
        };
        if n == 0 || len == 0 {
            return Spec::Unsatisfiable;
        }
        return Spec::Span(len.saturating_sub(n), len - 1);
    }
    let Some(start) = digits(first) else {
        return Spec::Invalid;
    };
    let end = if last.is_empty() {
        u64::MAX
    } else {
        match digits(last) {
            Some(e) if e >= start => e,
            _ => return Spec::Invalid,
        }
    };
    if start >= len {
        return Spec::Unsatisfiable;
    }
    Spec::Span(start, end.min(len - 1))
}

/// ASCII digits, saturating at `u64::MAX`.
fn digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |n, &b| {
        n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::ByteRange::*;
    use super::*;

    fn p(v: &[u8], len: u64) -> ByteRange {
        parse_range(v, len, 0)
    }

    #[test]
    fn one_range() {
        assert_eq!(p(b"bytes=0-4", 10), Partial { start: 0, end: 4 });
        assert_eq!(p(b"bytes=5-", 10), Partial { start: 5, end: 9 });
        assert_eq!(p(b"bytes=-3", 10), Partial { start: 7, end: 9 });
        assert_eq!(p(b"bytes=-30", 10), Partial { start: 0, end: 9 });
        assert_eq!(
            p(b"bytes=2-99999999999999999999999", 10),
            Partial { start: 2, end: 9 }
        );
        assert_eq!(p(b"Bytes= 9-9 ", 10), Partial { start: 9, end: 9 });
        assert_eq!(p(b"bytes=10-", 10), Unsatisfiable);
        assert_eq!(p(b"bytes=10-20", 10), Unsatisfiable);
        assert_eq!(p(b"bytes=-0", 10), Unsatisfiable);
        assert_eq!(p(b"bytes=0-", 0), Unsatisfiable);
        assert_eq!(p(b"bytes=5-1", 10), Full);
        assert_eq!(p(b"items=0-1", 10), Full);
        assert_eq!(p(b"bytes=a-b", 10), Full);
        assert_eq!(p(b"bytes=", 10), Full);
        assert_eq!(p(b"bytes=-", 10), Full);
        assert_eq!(p(b"bytes=10", 10), Full);
    }

    /// RFC 9110 §14.1.1: a list, each element resolved on its own; §5.6.1: empty elements
    /// are skipped.
    #[test]
    fn several_ranges() {
        assert_eq!(p(b"bytes=0-1,3-4", 10), Multipart(vec![(0, 1), (3, 4)]));
        assert_eq!(
            p(b"bytes=0-9, -10, 100000-, 10-19", 1000),
            Multipart(vec![(0, 9), (990, 999), (10, 19)])
        );
        assert_eq!(p(b"bytes=0-1,", 10), Partial { start: 0, end: 1 });
        assert_eq!(p(b"bytes= , 0-1 ,,", 10), Partial { start: 0, end: 1 });
        assert_eq!(p(b"bytes=0-1, 20-", 10), Partial { start: 0, end: 1 });
        assert_eq!(p(b"bytes=20-, 30-40", 10), Unsatisfiable);
        assert_eq!(p(b"bytes=,", 10), Full);
        assert_eq!(p(b"bytes=0-1, x", 10), Full);
        assert_eq!(p(b"bytes=0-1, 5-2", 10), Full);
        assert_eq!(p(b"bytes=10-11 12-", 100), Full);
    }

    /// RFC 9110 §15.3.7.2: overlapping and near ranges are coalesced, in the place of the
    /// first; the rest keep their order.
    #[test]
    fn coalescing() {
        // Overlapping: one range, so a single part.
        assert_eq!(
            p(b"bytes=0-10001, 0-0", 1000),
            Partial { start: 0, end: 999 }
        );
        assert_eq!(p(b"bytes=5-9, 0-5", 10), Partial { start: 0, end: 9 });
        // Adjacent ranges merge only when the gap allows it.
        assert_eq!(p(b"bytes=0-1,2-3", 10), Multipart(vec![(0, 1), (2, 3)]));
        assert_eq!(
            parse_range(b"bytes=0-1,2-3", 10, 1),
            Partial { start: 0, end: 3 }
        );
        // Out of order, far apart: kept in the order asked.
        assert_eq!(
            parse_range(b"bytes=500-599, 0-99", 1000, 100),
            Multipart(vec![(500, 599), (0, 99)])
        );
        // 100-199 and 150-160 and 240-250 (40 apart < 50) merge where 150-160 was asked.
        assert_eq!(
            parse_range(b"bytes=900-, 150-160, 0-9, 240-250, 100-199", 1000, 50),
            Multipart(vec![(900, 999), (100, 250), (0, 9)])
        );
    }

    #[test]
    fn too_many_ranges_are_ignored() {
        let mut v = b"bytes=".to_vec();
        for i in 0..MAX_RANGES {
            v.extend_from_slice(format!("{}-{},", i * 10, i * 10).as_bytes());
        }
        assert!(matches!(p(&v, 10_000), Multipart(parts) if parts.len() == MAX_RANGES));
        v.extend_from_slice(b"9999-");
        assert_eq!(p(&v, 10_000), Full);
        // Many overlapping copies are too many all the same.
        let many = format!("bytes={}", vec!["0-"; MAX_RANGES + 1].join(","));
        assert_eq!(p(many.as_bytes(), 10), Full);
    }
}
