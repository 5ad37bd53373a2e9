//! Text for HTML pages and URIs: [`escape_html`] and [`percent_encode`], what the directory
//! listing needs to show names it does not control.

/// Appends `text` (bytes, shown as UTF-8 with invalid sequences replaced by U+FFFD) with
/// `&`, `<`, `>`, `"` and `'` written as character references, so that no name can open a
/// tag or leave an attribute value. See the HTML standard, "Escaping a string".
pub fn escape_html(text: &[u8], out: &mut Vec<u8>) {
    for chunk in text.utf8_chunks() {
        for &b in chunk.valid().as_bytes() {
            match b {
                b'&' => out.extend_from_slice(b"&amp;"),
                b'<' => out.extend_from_slice(b"&lt;"),
                b'>' => out.extend_from_slice(b"&gt;"),
                b'"' => out.extend_from_slice(b"&quot;"),
                b'\'' => out.extend_from_slice(b"&#39;"),
                _ => out.push(b),
            }
        }
        if !chunk.invalid().is_empty() {
            out.extend_from_slice("\u{fffd}".as_bytes());
        }
    }
}

/// Appends `bytes` percent-encoded: every byte but the RFC 3986 unreserved ones (letters,
/// digits, `-._~`) becomes `%XX`. The result is one path segment that names exactly these
/// bytes (a `/`, `%`, `?`, `#`, `:` or space in a name cannot change what it points to).
/// See RFC 3986 §2.1, §2.3.
pub fn percent_encode(bytes: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn html(s: &[u8]) -> String {
        let mut out = Vec::new();
        escape_html(s, &mut out);
        String::from_utf8(out).unwrap()
    }

    fn pct(s: &[u8]) -> String {
        let mut out = Vec::new();
        percent_encode(s, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            html(b"<script>alert('x')</script>"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
        );
        assert_eq!(html(b"a&b \"q\""), "a&amp;b &quot;q&quot;");
        assert_eq!(html("caf\u{e9}".as_bytes()), "caf\u{e9}");
        assert_eq!(html(b"bad\xffname"), "bad\u{fffd}name");
    }

    #[test]
    fn names_are_one_segment() {
        assert_eq!(pct(b"a b%c"), "a%20b%25c");
        assert_eq!(pct(b"x/y?z#w:v"), "x%2Fy%3Fz%23w%3Av");
        assert_eq!(pct(b"Az09-._~"), "Az09-._~");
        assert_eq!(pct("\u{e9}".as_bytes()), "%C3%A9");
        assert_eq!(pct(b"<script>&"), "%3Cscript%3E%26");
    }
}
