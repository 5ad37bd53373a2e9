//! [`resolve_target`]: a request target into a path relative to the served directory, or the
//! status that refuses it.
//!
//! The rules, in order: an absolute-form target (`http://host/p`) keeps only its path (the host
//! names no file; an empty authority is refused, 400); anything else must start with `/`. The
//! query and fragment are cut: they are never part of the path. Raw control bytes (NUL
//! included) are refused (400: the request line is invalid, RFC 9112 §3), backslashes too
//! (403). Each segment is percent-decoded once; an escape that decodes to `/`, `\`, or a
//! control byte (`%2f`, `%5c`, `%00`) is refused (403), as is a malformed escape (400); `%2e`
//! is a dot like any other (RFC 3986 §6.2.2.2). Empty segments are dropped, then the dot
//! segments are removed (RFC 3986 §5.2.4, §6.2.2.3): `.` goes, `..` takes the segment before
//! it with it, and a path that ends in either names a directory (`/a/b/.` is `/a/b/`, `/a/b/..`
//! is `/a/`). A `..` that would climb above the root is refused (403), never clamped. What is
//! left can only name something below the root (the server still opens it with
//! `RESOLVE_BENEATH`, which also stops symlinks that leave the root).

use super::response::Status;

/// A resolved target: the relative path is in the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    /// The path part as sent (absolute-form stripped, query cut), for a redirect `Location`.
    pub raw_path: &'a [u8],
    /// The query with its `?`, or empty.
    pub query: &'a [u8],
    /// Whether the path ends in `/` (a directory was asked for).
    pub trailing_slash: bool,
}

/// Resolves `target` into `out` (cleared first): segments joined by `/`, no leading slash,
/// empty for the root. See RFC 9112 §3.2, RFC 3986 §2.1, §5.2.4.
pub fn resolve_target<'a>(target: &'a [u8], out: &mut Vec<u8>) -> Result<Target<'a>, Status> {
    out.clear();
    let mut path = target;
    if let Some(rest) = strip_scheme(target) {
        let end = rest
            .iter()
            .position(|&b| b == b'/' || b == b'?' || b == b'#')
            .unwrap_or(rest.len());
        if end == 0 {
            // No host: RFC 9110 §4.2.1.
            return Err(Status::BadRequest);
        }
        path = &rest[end..];
    } else if path.first() != Some(&b'/') {
        return Err(Status::BadRequest);
    }
    let (path, query) = match path.iter().position(|&b| b == b'?' || b == b'#') {
        Some(i) if path[i] == b'?' => {
            let q = &path[i..];
            let q = &q[..q.iter().position(|&b| b == b'#').unwrap_or(q.len())];
            (&path[..i], q)
        }
        Some(i) => (&path[..i], &b""[..]),
        None => (path, &b""[..]),
    };
    // An absolute-form target with an empty path asks for the root (RFC 3986 §6.2.3).
    let path = if path.is_empty() { &b"/"[..] } else { path };
    if target.iter().any(|&b| is_ctl(b)) {
        return Err(Status::BadRequest);
    }
    // Whether the last segment seen was `.` or `..`: the path then names a directory.
    let mut dot_last = false;
    for segment in path.split(|&b| b == b'/') {
        if segment.is_empty() {
            continue;
        }
        let mark = out.len();
        if mark > 0 {
            out.push(b'/');
        }
        let name = out.len();
        // Runs without `%` or a backslash are copied whole; most segments are one run.
        let mut i = 0;
        while i < segment.len() {
            let run = segment[i..]
                .iter()
                .position(|&b| b == b'%' || b == b'\\')
                .unwrap_or(segment.len() - i);
            out.extend_from_slice(&segment[i..i + run]);
            i += run;
            if i == segment.len() {
                break;
            }
            if segment[i] == b'\\' {
                return Err(Status::Forbidden);
            }
            let (Some(&h), Some(&l)) = (segment.get(i + 1), segment.get(i + 2)) else {
                return Err(Status::BadRequest);
            };
            let (Some(h), Some(l)) = (hex(h), hex(l)) else {
                return Err(Status::BadRequest);
            };
            let d = h << 4 | l;
            if d == b'/' || d == b'\\' || is_ctl(d) {
                return Err(Status::Forbidden);
            }
            out.push(d);
            i += 3;
        }
        dot_last = match &out[name..] {
            b"." => {
                out.truncate(mark);
                true
            }
            b".." => {
                if mark == 0 {
                    // Above the root.
                    return Err(Status::Forbidden);
                }
                let parent = out[..mark].iter().rposition(|&b| b == b'/').unwrap_or(0);
                out.truncate(parent);
                true
            }
            _ => false,
        };
    }
    Ok(Target {
        raw_path: path,
        query,
        trailing_slash: path.ends_with(b"/") || dot_last,
    })
}

/// Appends the `Location` of the redirect from a directory asked for without its slash:
/// `raw_path` (a [`Target::raw_path`] that resolved) with its empty segments dropped, its dot
/// segments removed as [`resolve_target`] removes them, and `/` added, then `query`. The result
/// is path-absolute: it starts with exactly one `/`, so a browser never reads it as a
/// network-path reference (`//host/…`, an open redirect; RFC 3986 §4.2). Bytes a URI may not
/// carry there are percent-encoded; escapes already in the path (checked by
/// [`resolve_target`]) are kept as sent. See RFC 9110 §10.2.2.
pub fn write_location(raw_path: &[u8], query: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    for segment in raw_path.split(|&b| b == b'/').filter(|s| !s.is_empty()) {
        match dots(segment) {
            1 => continue,
            2 => {
                // A path that resolved never climbs above the root; if one did, it stays there.
                let parent = out[start..].iter().rposition(|&b| b == b'/');
                out.truncate(start + parent.unwrap_or(0));
                continue;
            }
            _ => {}
        }
        out.push(b'/');
        for &b in segment {
            push_uri_byte(out, b, is_pchar(b));
        }
    }
    out.push(b'/');
    if let Some(rest) = query.strip_prefix(b"?") {
        out.push(b'?');
        for (i, &b) in rest.iter().enumerate() {
            let keep = if b == b'%' {
                matches!(rest.get(i + 1..i + 3), Some(&[h, l]) if hex(h).is_some() && hex(l).is_some())
            } else {
                is_pchar(b) || b == b'/' || b == b'?'
            };
            push_uri_byte(out, b, keep);
        }
    }
}

/// 1 for a `.` segment, 2 for `..`, `%2e` counting as a dot; 0 for any other segment.
fn dots(segment: &[u8]) -> usize {
    match segment {
        b"." | b"%2e" | b"%2E" => 1,
        b".." | b".%2e" | b".%2E" | b"%2e." | b"%2E." => 2,
        [b'%', b'2', b'e' | b'E', b'%', b'2', b'e' | b'E'] => 2,
        _ => 0,
    }
}

/// RFC 3986 `pchar` (unreserved, sub-delims, `:`, `@`), and `%` (escapes were checked).
fn is_pchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@%".contains(&b)
}

fn push_uri_byte(out: &mut Vec<u8>, b: u8, keep: bool) {
    if keep {
        out.push(b);
    } else {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
    }
}

/// The target after `http://` or `https://` (any case), when it has one.
pub(super) fn strip_scheme(target: &[u8]) -> Option<&[u8]> {
    for scheme in [&b"http://"[..], b"https://"] {
        if target.len() >= scheme.len() && target[..scheme.len()].eq_ignore_ascii_case(scheme) {
            return Some(&target[scheme.len()..]);
        }
    }
    None
}

fn is_ctl(b: u8) -> bool {
    b < 0x20 || b == 0x7f
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(target: &str) -> (String, bool) {
        let mut out = Vec::new();
        let t = resolve_target(target.as_bytes(), &mut out).unwrap();
        (String::from_utf8(out).unwrap(), t.trailing_slash)
    }

    fn err(target: &[u8]) -> Status {
        resolve_target(target, &mut Vec::new()).unwrap_err()
    }

    #[test]
    fn plain_paths() {
        assert_eq!(ok("/"), (String::new(), true));
        assert_eq!(ok("/a/b.txt"), ("a/b.txt".into(), false));
        assert_eq!(ok("//a//b/"), ("a/b".into(), true));
        assert_eq!(ok("/a%20b?x=/../"), ("a b".into(), false));
        assert_eq!(ok("/x#frag"), ("x".into(), false));
        assert_eq!(
            ok("http://evil.example/etc/passwd"),
            ("etc/passwd".into(), false)
        );
        assert_eq!(ok("HTTP://h"), (String::new(), true));
        assert_eq!(ok("/%252e%252e/"), ("%2e%2e".into(), true));
        assert_eq!(ok("/.hidden"), (".hidden".into(), false));
        assert_eq!(ok("/a..b"), ("a..b".into(), false));
        assert_eq!(ok("/..a/b.."), ("..a/b..".into(), false));
        assert_eq!(ok("/..."), ("...".into(), false));
    }

    fn query(target: &str) -> String {
        let t = resolve_target(target.as_bytes(), &mut Vec::new()).unwrap();
        String::from_utf8(t.query.to_vec()).unwrap()
    }

    /// RFC 3986 §5.2.4 and §6.2.2.3: dot segments are removed; a path that ends in one names a
    /// directory; the query and fragment are never part of the path.
    #[test]
    fn rfc_3986_5_2_4_dot_segments_are_removed() {
        for (target, path, dir) in [
            ("/foo/bar/.", "foo/bar", true),
            ("/foo/bar/.?args", "foo/bar", true),
            ("/foo/bar/.#frag", "foo/bar", true),
            ("/foo/bar/?#frag", "foo/bar", true),
            ("/foo/bar/..", "foo", true),
            ("/foo/bar/..?args", "foo", true),
            ("/foo/bar/./", "foo/bar", true),
            ("/foo/./bar", "foo/bar", false),
            ("/foo/../bar", "bar", false),
            ("/a/b/c/./../../g", "a/g", false), // RFC 3986 §5.2.4's own example
            ("/mid/content=5/../6", "mid/6", false),
            ("/.", "", true),
            ("/./", "", true),
            ("/a/..", "", true),
            ("/a/../", "", true),
            ("/a/b/../../c/.", "c", true),
            ("/a//..", "", true), // empty segments go first, as nginx's merge_slashes
            ("/a/%2e/b", "a/b", false),
            ("/a/%2E%2e/b", "b", false),
            ("/a/.%2E", "", true),
            ("/a/%2e.", "", true),
            ("/file%2etxt", "file.txt", false),
            ("/%2e%2e%2e", "...", false),
            ("/a/..%20/b", "a/.. /b", false),
            ("/x?a=/../..", "x", false),
            ("/x#/../..", "x", false),
            ("http://h/a/../b", "b", false),
            ("http://h/a/.", "a", true),
            ("http://h", "", true),
            ("http://h?args", "", true),
            ("http://h:8080#frag", "", true),
        ] {
            assert_eq!(ok(target), (path.to_string(), dir), "{target}");
        }
        assert_eq!(query("/foo/bar/.?args"), "?args");
        assert_eq!(query("/foo/bar/.?args#frag"), "?args");
        assert_eq!(query("/foo/bar/.#frag?no"), "");
        assert_eq!(query("http://h?args"), "?args");
    }

    /// A `..` that would climb above the root is refused, however it is spelled.
    #[test]
    fn dot_dot_above_the_root_is_refused() {
        for t in [
            &b"/.."[..],
            b"/../",
            b"/../a",
            b"/a/../..",
            b"/a/../../b",
            b"/a/./../../b",
            b"/%2e%2e",
            b"/%2E%2E/x",
            b"/.%2e/x",
            b"/%2e./x",
            b"/a/%2e%2e/%2E%2E/",
            b"/a/b/../../../",
            b"http://h/..",
            b"http://h/a/../../x",
        ] {
            assert_eq!(
                err(t),
                Status::Forbidden,
                "{:?}",
                String::from_utf8_lossy(t)
            );
        }
    }

    /// RFC 9112 §3: a raw control byte makes the request line invalid: 400, not 403.
    #[test]
    fn rfc_9112_3_raw_control_bytes_are_400() {
        for t in [
            &b"/\x02"[..],
            b"/a\0b",
            b"/a\x7f",
            b"/a\tb",
            b"/a?q=\x01",
            b"/a#\x1b",
            b"http://h/\x02",
        ] {
            assert_eq!(
                err(t),
                Status::BadRequest,
                "{:?}",
                String::from_utf8_lossy(t)
            );
        }
    }

    fn location(target: &str) -> String {
        let t = resolve_target(target.as_bytes(), &mut Vec::new()).unwrap();
        let mut out = Vec::new();
        write_location(t.raw_path, t.query, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn redirect_locations_are_path_absolute() {
        assert_eq!(location("/sub"), "/sub/");
        assert_eq!(location("//sub"), "/sub/");
        assert_eq!(location("///sub"), "/sub/");
        assert_eq!(location("//evil.example//x"), "/evil.example/x/");
        assert_eq!(location("http://x//sub"), "/sub/");
        assert_eq!(location("http://x///sub?a=1"), "/sub/?a=1");
        assert_eq!(location("/a//b?q=/x?y#frag"), "/a/b/?q=/x?y");
        assert_eq!(location("/a%20b"), "/a%20b/");
        assert_eq!(location("/caf\u{e9}"), "/caf%C3%A9/");
        assert_eq!(location("/a\"b<c>"), "/a%22b%3Cc%3E/");
        assert_eq!(location("/s?x=%zz%41"), "/s/?x=%25zz%41");
        let mut raw = Vec::new();
        write_location(b"/s", b"?x=\x01", &mut raw);
        assert_eq!(raw, b"/s/?x=%01");
        assert_eq!(location("/a/./sub"), "/a/sub/");
        assert_eq!(location("/x/../sub"), "/sub/");
        assert_eq!(location("/x/%2e%2E/sub?q"), "/sub/?q");
        assert_eq!(location("/x/y/.%2e/%2e/sub"), "/x/sub/");
        assert_eq!(location("//x//..//sub"), "/sub/");
    }

    #[test]
    fn hostile_targets() {
        for t in [
            &b"/.."[..],
            b"/../etc/passwd",
            b"/a/../../b",
            b"/%2e%2e/etc/passwd",
            b"/%2E%2E/x",
            b"/.%2e/x",
            b"/..%2fetc%2fpasswd",
            b"/a%2fb",
            b"/a%5cb",
            b"/a\\..\\b",
            b"/a%00.html",
            b"/a%0ab",
            b"/a%7f",
            b"http://h/../x",
        ] {
            assert_eq!(
                err(t),
                Status::Forbidden,
                "{:?}",
                String::from_utf8_lossy(t)
            );
        }
        for t in [
            &b"*"[..],
            b"a/b",
            b"/%",
            b"/%4",
            b"/%zz",
            b"http://",
            b"http:///x",
            b"https://?q",
            b"example.com:80",
            b"#frag",
        ] {
            assert_eq!(
                err(t),
                Status::BadRequest,
                "{:?}",
                String::from_utf8_lossy(t)
            );
        }
    }
}
