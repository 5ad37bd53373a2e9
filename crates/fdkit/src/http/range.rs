//! [`parse_range`]: a `Range` header against a representation of known length.
//!
//! One byte range (`bytes=a-b`, `bytes=a-`, `bytes=-n`) is honoured. Several ranges are
//! answered with the whole representation (RFC 9110 §14.2 lets a server ignore `Range`), and
//! so is a header that does not parse or names another unit.

/// What to send for a `Range` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// No byte of the range exists (416).
    Unsatisfiable,
}

/// Parses `value` (the header's value) for a representation of `len` bytes. See RFC 9110
/// §14.1.2.
pub fn parse_range(value: &[u8], len: u64) -> ByteRange {
    const UNIT: &[u8] = b"bytes=";
    if value.len() < UNIT.len() || !value[..UNIT.len()].eq_ignore_ascii_case(UNIT) {
        return ByteRange::Full;
    }
    let spec = trim(&value[UNIT.len()..]);
    if spec.contains(&b',') {
        return ByteRange::Full;
    }
    let Some(dash) = spec.iter().position(|&b| b == b'-') else {
        return ByteRange::Full;
    };
    let (first, last) = (trim(&spec[..dash]), trim(&spec[dash + 1..]));
    if first.is_empty() {
        // Suffix: the last n bytes.
        let Some(n) = digits(last) else {
            return ByteRange::Full;
        };
        if n == 0 || len == 0 {
            return ByteRange::Unsatisfiable;
        }
        return ByteRange::Partial {
            start: len.saturating_sub(n),
            end: len - 1,
        };
    }
    let Some(start) = digits(first) else {
        return ByteRange::Full;
    };
    let end = if last.is_empty() {
        u64::MAX
    } else {
        match digits(last) {
            Some(e) if e >= start => e,
            _ => return ByteRange::Full,
        }
    };
    if start >= len {
        return ByteRange::Unsatisfiable;
    }
    ByteRange::Partial {
        start,
        end: end.min(len - 1),
    }
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

    #[test]
    fn ranges() {
        assert_eq!(parse_range(b"bytes=0-4", 10), Partial { start: 0, end: 4 });
        assert_eq!(parse_range(b"bytes=5-", 10), Partial { start: 5, end: 9 });
        assert_eq!(parse_range(b"bytes=-3", 10), Partial { start: 7, end: 9 });
        assert_eq!(parse_range(b"bytes=-30", 10), Partial { start: 0, end: 9 });
        assert_eq!(
            parse_range(b"bytes=2-99999999999999999999999", 10),
            Partial { start: 2, end: 9 }
        );
        assert_eq!(
            parse_range(b"Bytes= 9-9 ", 10),
            Partial { start: 9, end: 9 }
        );
        assert_eq!(parse_range(b"bytes=10-", 10), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=10-20", 10), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=-0", 10), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=0-", 0), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=0-1,3-4", 10), Full);
        assert_eq!(parse_range(b"bytes=5-1", 10), Full);
        assert_eq!(parse_range(b"items=0-1", 10), Full);
        assert_eq!(parse_range(b"bytes=a-b", 10), Full);
        assert_eq!(parse_range(b"bytes=", 10), Full);
        assert_eq!(parse_range(b"bytes=-", 10), Full);
    }
}
