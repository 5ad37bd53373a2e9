//! [`valid_host`]: the `uri-host [ ":" port ]` grammar of a `Host` field and of an
//! absolute-form target's authority (RFC 9110 §7.2, RFC 3986 §3.2.2 and §3.2.3).
//!
//! ```text
//! host        = IP-literal / IPv4address / reg-name
//! IP-literal  = "[" ( IPv6address / IPv6addrz / IPvFuture ) "]"
//! IPv6addrz   = IPv6address "%25" ZoneID                    ; RFC 6874
//! IPvFuture   = "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )
//! reg-name    = *( unreserved / pct-encoded / sub-delims )
//! port        = *DIGIT
//! ```
//!
//! Every `IPv4address` is also a `reg-name`, so outside brackets the host is checked as a
//! `reg-name`. Two rules go beyond the grammar: the host may not be empty (an `http` URI with
//! an empty host MUST be rejected, RFC 9110 §4.2.1), and there is no userinfo (RFC 9110 §4.2.4:
//! treat it as an error; a `Host` field never has one). What the grammar allows is accepted as
//! it is, even where DNS would not (`a..b`, a trailing dot, an empty or very long port): the
//! server answers for any name it is reached by and looks nothing up. Pure logic, no
//! allocation.

/// Whether `value` is `uri-host [ ":" port ]` with a host that is not empty.
pub(super) fn valid_host(value: &[u8]) -> bool {
    if let Some(literal) = value.strip_prefix(b"[") {
        let Some(close) = literal.iter().position(|&b| b == b']') else {
            return false;
        };
        return ip_literal(&literal[..close])
            && match &literal[close + 1..] {
                [] => true,
                [b':', port @ ..] => port.iter().all(u8::is_ascii_digit),
                _ => false,
            };
    }
    // One pass: the reg-name up to the first `:`, then the port.
    let mut i = 0;
    while let Some(&b) = value.get(i) {
        if REG_NAME[usize::from(b)] {
            i += 1;
        } else if b == b'%' && pct_encoded(&value[i..]) {
            i += 3;
        } else {
            return b == b':' && i > 0 && value[i + 1..].iter().all(u8::is_ascii_digit);
        }
    }
    i > 0
}

/// `unreserved / sub-delims` (RFC 3986 §2.2, §2.3), by byte.
static REG_NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = is_unreserved(b as u8) || is_sub_delim(b as u8);
        b += 1;
    }
    t
};

/// Whether `s` starts with `%` and two hex digits.
fn pct_encoded(s: &[u8]) -> bool {
    matches!(s, [b'%', h, l, ..] if h.is_ascii_hexdigit() && l.is_ascii_hexdigit())
}

/// `*( unreserved / pct-encoded / sub-delims )`.
fn reg_name(s: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&b) = s.get(i) {
        if REG_NAME[usize::from(b)] {
            i += 1;
        } else if pct_encoded(&s[i..]) {
            i += 3;
        } else {
            return false;
        }
    }
    true
}

/// What is between the brackets of an `IP-literal`.
fn ip_literal(s: &[u8]) -> bool {
    match s {
        [b'v' | b'V', rest @ ..] => ip_future(rest),
        _ => {
            // RFC 6874: a zone, `%25` then one or more unreserved or pct-encoded.
            match s.windows(3).position(|w| w == b"%25") {
                Some(i) => ipv6(&s[..i]) && zone_id(&s[i + 3..]),
                None => ipv6(s),
            }
        }
    }
}

/// `IPvFuture` after its `v`: `1*HEXDIG "." 1*( unreserved / sub-delims / ":" )`.
fn ip_future(s: &[u8]) -> bool {
    let Some(dot) = s.iter().position(|&b| b == b'.') else {
        return false;
    };
    let (version, rest) = (&s[..dot], &s[dot + 1..]);
    !version.is_empty()
        && version.iter().all(u8::is_ascii_hexdigit)
        && !rest.is_empty()
        && rest
            .iter()
            .all(|&b| is_unreserved(b) || is_sub_delim(b) || b == b':')
}

/// RFC 6874 `ZoneID = 1*( unreserved / pct-encoded )`.
fn zone_id(s: &[u8]) -> bool {
    !s.is_empty() && !s.iter().any(|&b| is_sub_delim(b)) && reg_name(s)
}

/// RFC 3986 `IPv6address`: eight 16-bit pieces (`h16`, 1 to 4 hex digits; the last two may be
/// written as a dotted IPv4 address), or fewer around one `::` that stands for at least one.
fn ipv6(s: &[u8]) -> bool {
    match s.windows(2).position(|w| w == b"::") {
        Some(i) => {
            let (head, tail) = (&s[..i], &s[i + 2..]);
            // `head` ends before the `::`, so a `:` right after it is a third one: `tail`
            // then starts with `:` and its first piece is empty.
            match (pieces(head, false), pieces(tail, true)) {
                (Some(h), Some(t)) => h + t <= 7,
                _ => false,
            }
        }
        None => pieces(s, true) == Some(8),
    }
}

/// How many 16-bit pieces `s` holds (`h16` separated by `:`, an empty `s` holds none), or
/// `None` when it is not such a list; `ipv4_last`: the last piece may be an IPv4 address.
fn pieces(s: &[u8], ipv4_last: bool) -> Option<usize> {
    if s.is_empty() {
        return Some(0);
    }
    let mut n = 0;
    let mut parts = s.split(|&b| b == b':').peekable();
    while let Some(part) = parts.next() {
        let last = parts.peek().is_none();
        if (1..=4).contains(&part.len()) && part.iter().all(u8::is_ascii_hexdigit) {
            n += 1;
        } else if last && ipv4_last && ipv4(part) {
            n += 2;
        } else {
            return None;
        }
    }
    Some(n)
}

/// RFC 3986 `IPv4address`: four `dec-octet` (0 to 255, no leading zero) joined by dots.
fn ipv4(s: &[u8]) -> bool {
    let mut octets = 0;
    for part in s.split(|&b| b == b'.') {
        octets += 1;
        let ok = match part {
            [d] => d.is_ascii_digit(),
            [b'1'..=b'9', rest @ ..] if rest.len() <= 2 && rest.iter().all(u8::is_ascii_digit) => {
                part.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0')) <= 255
            }
            _ => false,
        };
        if !ok || octets > 4 {
            return false;
        }
    }
    octets == 4
}

const fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

const fn is_sub_delim(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 3986 §3.2.2 and RFC 9110 §7.2: hosts the grammar admits.
    #[test]
    fn rfc_3986_3_2_2_valid_hosts() {
        for good in [
            &b"localhost"[..],
            b"localhost:8080",
            b"www.abcd-ef.g02.xyz",
            b"www.abcd-ef.g02.xyz.",
            b"abcd-ef.g02.xyz.:88",
            b"AbC-d93.0.34ZhGt-s.nk.Ru:88",
            b"_foo.example.com",
            b"-._~!$&'()*+,;=%25.example.com",
            b"123.40.56.78",
            b"123.49.0.78:987",
            b"999.999.999.999", // not an IPv4address, but a reg-name
            b"example.com:",    // port = *DIGIT: may be empty
            b"example..com",    // the grammar admits empty labels (DNS does not)
            b"[abcd::ef98:0:7654:321]",
            b"[abcd::ef98:0:7654:321]:80",
            b"[::ffff:12.30.67.89]",
            b"[::123.45.67.89]:4321",
            b"[2001:DB8::1]",
            b"[::]",
            b"[::1]:80",
            b"[1:2:3:4:5:6:7:8]",
            b"[1:2:3:4:5:6:1.2.3.4]",
            b"[1:2:3:4:5:6:7::]",
            b"[::2:3:4:5:6:7:8]",
            b"[2001:db8::1%25en1]", // RFC 6874 zone
            b"[2001:db8::1%25en1]:80",
            b"[v0123456789aBcDeF.!$&'()*+,;=-._~AbCdEfGhIjKlMnOpQrStUvWxYz0123456789:]",
            b"[v0.1azAZ.!$&'()*+,;=-._~:]:80",
            b"[V1.x]",
        ] {
            assert!(valid_host(good), "{:?}", String::from_utf8_lossy(good));
        }
    }

    /// RFC 9112 §3.2: a server MUST answer 400 to a Host that is none of these.
    #[test]
    fn rfc_9112_3_2_invalid_hosts() {
        for bad in [
            &b""[..],
            b":80",
            b"example.com.:1.2",
            b"123.40.56.78:9000:80",
            b"example.com:80:80",
            b"example.com:foo",
            b"example.com:-1",
            b"example/com",
            b"example.com/\\:552",
            b"example\\com",
            b"user@example.com",
            b"exa mple.com",
            b"example.com\x02",
            b"example.com\xff",
            b"ex%zzample.com",
            b"ex%2",
            b"extra[abcd::1]:98",
            b"[abcd::ef98:0:7654:321",
            b"[2001:db8::1",
            b"[abcd::ef98:0:7654:321]..:98",
            b"[abcd::1]x",
            b"[abcd::1]:x",
            b"[abcd::e\\f98:0/:7654:321]",
            b"[abcd\\::ef98:0:7654:321/]:12",
            b"[ab..cd::ef98:0:7654:321]",
            b"[2001:db8::1/2]",
            b"[2001:db8::1..2]",
            b"[]",
            b"[:]",
            b"[:::]",
            b"[1:::2]",
            b"[1::2::3]",
            b"[:1::2]",
            b"[1::2:]",
            b"[1:2:3:4:5:6:7]",
            b"[1:2:3:4:5:6:7:8:9]",
            b"[1:2:3:4::5:6:7:8]",
            b"[12345::]",
            b"[g::]",
            b"[::1.2.3]",
            b"[::1.2.3.4.5]",
            b"[::01.2.3.4]",
            b"[::256.2.3.4]",
            b"[1.2.3.4::]",
            b"[::1.2.3.4:5]",
            b"[1:2:3:4:5:6:7:1.2.3.4]",
            b"[2001:db8::1%25]",
            b"[2001:db8::1%en1]",
            b"[2001:db8::1%25a!b]",
            b"[v0.1/2]",
            b"[v0.1\\2]",
            b"[v.1]",
            b"[v0.]",
            b"[v0]",
            b"[vg.1]",
            b"[v0.1",
            b"[127.0.0.1]",
        ] {
            assert!(!valid_host(bad), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn ipv4_dec_octets() {
        for good in ["0.0.0.0", "255.255.255.255", "10.0.0.1", "199.249.250.9"] {
            assert!(ipv4(good.as_bytes()), "{good}");
        }
        for bad in [
            "256.0.0.0",
            "1.2.3",
            "1.2.3.4.",
            ".1.2.3",
            "00.1.2.3",
            "1.2.3.-4",
            "1..3.4",
        ] {
            assert!(!ipv4(bad.as_bytes()), "{bad}");
        }
    }
}
