//! Property tests for `fdkit::http`: the parsers never panic on any input, and what the server
//! writes reads back the same.

use fdkit::http::{
    evaluate, format_http_date, fuzz_one, parse_http_date, parse_range, parse_request,
    part_head_max, resolve_target, tag_list_matches, write_location, Boundary, ByteRange,
    Comparison, ETag, Framing, Method, Parsed, Precondition, Status, Validators, Version,
};
use proptest::prelude::*;

fn method() -> impl Strategy<Value = (&'static str, Method)> {
    prop_oneof![
        Just(("GET", Method::Get)),
        Just(("HEAD", Method::Head)),
        Just(("OPTIONS", Method::Options)),
        Just(("POST", Method::Other)),
        Just(("DELETE", Method::Other)),
    ]
}

/// Something shaped like an IPv6 address, valid or nearly: up to nine pieces of one to five
/// hex digits, maybe a `::` somewhere, maybe a dotted quad (octets up to 300, leading zeros
/// possible) at the end, and random bytes from the same alphabet now and then.
fn ipv6_like() -> impl Strategy<Value = String> {
    let structured = (
        proptest::collection::vec("[0-9a-fA-F]{1,5}", 0..10),
        proptest::option::of(0usize..10),
        proptest::option::of(proptest::collection::vec("0|[1-9][0-9]{0,2}|0[0-9]", 4..6)),
    )
        .prop_map(|(pieces, gap, quad)| {
            let mut parts: Vec<String> = pieces;
            if let Some(quad) = quad {
                parts.push(quad.join("."));
            }
            match gap {
                Some(at) => {
                    let at = at.min(parts.len());
                    format!("{}::{}", parts[..at].join(":"), parts[at..].join(":"))
                }
                None => parts.join(":"),
            }
        });
    let canonical = any::<[u16; 8]>().prop_map(|p| {
        std::net::Ipv6Addr::new(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]).to_string()
    });
    prop_oneof![3 => structured, 1 => canonical, 1 => "[0-9a-fA-F:.]{0,24}"]
}

/// A `reg-name` (RFC 3986 §3.2.2), not empty.
fn reg_name() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            8 => "[A-Za-z0-9._~-]",
            2 => "[!$&'()*+,;=]",
            1 => "%[0-9A-Fa-f]{2}",
        ],
        1..20,
    )
    .prop_map(|v| v.concat())
}

/// A valid `uri-host [ ":" port ]`.
fn host() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        4 => reg_name(),
        2 => any::<[u16; 8]>().prop_map(|p| {
            format!("[{}]", std::net::Ipv6Addr::new(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]))
        }),
        1 => any::<[u8; 4]>().prop_map(|q| std::net::Ipv4Addr::from(q).to_string()),
        1 => "\\[[vV][0-9a-fA-F]{1,3}\\.[A-Za-z0-9._~!$&'()*+,;=:-]{1,12}\\]",
    ];
    (name, proptest::option::of("[0-9]{0,6}")).prop_map(|(n, port)| match port {
        Some(p) => format!("{n}:{p}"),
        None => n,
    })
}

fn segment() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,11}".prop_filter("not . or ..", |s| s != "." && s != "..")
}

/// A range-spec as a client writes it (`a-b`, `a-`, `-n`, with optional spaces), and what
/// it asks for over `len` bytes when satisfiable (RFC 9110 §14.1.1), written independently of
/// the parser.
fn range_spec() -> impl Strategy<Value = (u8, u64, u64, bool)> {
    (0u8..3, 0u64..6000, 0u64..6000, any::<bool>())
}

fn spec_text(&(kind, a, b, space): &(u8, u64, u64, bool)) -> String {
    let s = match kind {
        0 => format!("{}-{}", a.min(b), a.max(b)),
        1 => format!("{a}-"),
        _ => format!("-{b}"),
    };
    if space {
        format!(" {s}\t")
    } else {
        s
    }
}

fn asked(&(kind, a, b, _): &(u8, u64, u64, bool), len: u64) -> Option<(u64, u64)> {
    match kind {
        0 if a.min(b) < len => Some((a.min(b), a.max(b).min(len - 1))),
        1 if a < len => Some((a, len - 1)),
        2 if b > 0 && len > 0 => Some((len.saturating_sub(b), len - 1)),
        _ => None,
    }
}

/// The parts of a `multipart/byteranges` body, parsed back by RFC 9110 §14.6 and RFC 2046
/// §5.1.1: `(first, last, complete length, content type, bytes)` of each.
type Part = (u64, u64, u64, String, Vec<u8>);

fn parse_multipart(body: &[u8], boundary: &[u8]) -> Result<Vec<Part>, String> {
    let mut delim = b"--".to_vec();
    delim.extend_from_slice(boundary);
    let mut rest = body.strip_prefix(&delim[..]).ok_or("no first delimiter")?;
    let mut parts = Vec::new();
    loop {
        if let Some(after) = rest.strip_prefix(b"--") {
            return if after == b"\r\n" {
                Ok(parts)
            } else {
                Err("bytes after the close".into())
            };
        }
        rest = rest
            .strip_prefix(b"\r\n")
            .ok_or("no CRLF after a delimiter")?;
        let end = rest
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or("no end of part head")?;
        let head = std::str::from_utf8(&rest[..end]).map_err(|e| e.to_string())?;
        rest = &rest[end + 4..];
        let (mut ctype, mut range) = (None, None);
        for line in head.split("\r\n") {
            let (k, v) = line.split_once(": ").ok_or("a bad part header")?;
            match k.to_ascii_lowercase().as_str() {
                "content-type" => ctype = Some(v.to_string()),
                "content-range" => range = Some(v.to_string()),
                other => return Err(format!("an unexpected part header {other}")),
            }
        }
        let range = range.ok_or("a part without Content-Range")?;
        let spec = range.strip_prefix("bytes ").ok_or("not a byte range")?;
        let (span, total) = spec.split_once('/').ok_or("no complete length")?;
        let (first, last) = span.split_once('-').ok_or("no dash")?;
        let num = |s: &str| s.parse::<u64>().map_err(|e| e.to_string());
        let (first, last, total) = (num(first)?, num(last)?, num(total)?);
        if first > last || last >= total {
            return Err(format!("an invalid Content-Range {range}"));
        }
        let n = usize::try_from(last - first + 1).map_err(|e| e.to_string())?;
        if rest.len() < n {
            return Err("a part shorter than its Content-Range".into());
        }
        parts.push((
            first,
            last,
            total,
            ctype.ok_or("no Content-Type")?,
            rest[..n].to_vec(),
        ));
        rest = rest[n..]
            .strip_prefix(b"\r\n")
            .ok_or("no CRLF before a delimiter")?;
        rest = rest
            .strip_prefix(&delim[..])
            .ok_or("a part longer than its Content-Range")?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// RFC 9110 §14.2, §14.6, §15.3.7.2: for any set of valid ranges over any file, the
    /// multipart body parsed back gives exactly the file's bytes of each part; every asked
    /// range lies whole in one part; parts are disjoint, coalesced only when closer than a
    /// part head, in the order first asked; the body is never longer than the file plus one
    /// part head and the closing delimiter.
    #[test]
    fn multipart_body_gives_back_each_range(
        file in proptest::collection::vec(any::<u8>(), 0..5000),
        specs in proptest::collection::vec(range_spec(), 1..12),
        ctype in prop_oneof![Just("text/plain; charset=utf-8"), Just("application/octet-stream")],
    ) {
        let len = file.len() as u64;
        let value = format!("bytes={}", specs.iter().map(spec_text).collect::<Vec<_>>().join(","));
        let gap = part_head_max(ctype.as_bytes(), len) as u64;
        let wanted: Vec<(usize, (u64, u64))> = specs
            .iter()
            .enumerate()
            .filter_map(|(i, s)| asked(s, len).map(|r| (i, r)))
            .collect();
        let parts = match parse_range(value.as_bytes(), len, gap) {
            ByteRange::Full => return Err(TestCaseError::fail(format!("ignored: {value}"))),
            ByteRange::Unsatisfiable => {
                prop_assert!(wanted.is_empty(), "416 for {value}");
                return Ok(());
            }
            ByteRange::Partial { start, end } => vec![(start, end)],
            ByteRange::Multipart(parts) => {
                prop_assert!(parts.len() >= 2);
                let boundary = Boundary::new();
                let framing = Framing::new(&boundary, ctype.as_bytes(), &parts, len);
                let mut body = Vec::new();
                for (i, &(first, last)) in parts.iter().enumerate() {
                    body.extend_from_slice(framing.head(i));
                    body.extend_from_slice(&file[first as usize..=last as usize]);
                }
                body.extend_from_slice(framing.closing());
                prop_assert_eq!(body.len() as u64, framing.body_len());
                let bound = len + gap + framing.closing().len() as u64;
                prop_assert!(framing.body_len() <= bound, "{} > {bound}", framing.body_len());
                let back = parse_multipart(&body, boundary.as_bytes()).map_err(TestCaseError::fail)?;
                prop_assert_eq!(back.len(), parts.len());
                for ((first, last, total, t, bytes), &(f, l)) in back.iter().zip(&parts) {
                    prop_assert_eq!((*first, *last, *total), (f, l, len));
                    prop_assert_eq!(t, ctype);
                    prop_assert_eq!(&bytes[..], &file[f as usize..=l as usize]);
                }
                parts
            }
        };
        prop_assert!(!wanted.is_empty());
        // Every asked range lies whole in one part; each part starts and ends where an asked
        // range does; parts are the order of the first range each holds.
        let mut firsts = Vec::new();
        for &(first, last) in &parts {
            let inside: Vec<_> = wanted.iter().filter(|(_, (s, e))| first <= *s && *e <= last).collect();
            prop_assert!(inside.iter().any(|(_, (s, _))| *s == first));
            prop_assert!(inside.iter().any(|(_, (_, e))| *e == last));
            firsts.push(inside.iter().map(|(i, _)| *i).min().unwrap());
        }
        prop_assert!(firsts.windows(2).all(|w| w[0] < w[1]), "order {firsts:?}");
        for (_, (s, e)) in &wanted {
            prop_assert!(parts.iter().any(|(f, l)| f <= s && e <= l), "{s}-{e} in no part");
        }
        let mut sorted = parts.clone();
        sorted.sort_unstable();
        for w in sorted.windows(2) {
            prop_assert!(w[1].0 > w[0].1 + gap, "parts {w:?} closer than {gap}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn never_panics_on_bytes(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        fuzz_one(&data);
    }

    #[test]
    fn never_panics_on_near_requests(
        line in "[A-Z]{1,6} [ -~]{0,40} HTTP/[0-9]\\.[0-9]",
        headers in proptest::collection::vec("[ -~]{0,40}", 0..8),
        tail in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let mut buf = line.into_bytes();
        for h in headers {
            buf.extend_from_slice(b"\r\n");
            buf.extend_from_slice(h.as_bytes());
        }
        buf.extend_from_slice(b"\r\n\r\n");
        buf.extend_from_slice(&tail);
        fuzz_one(&buf);
    }

    #[test]
    fn request_round_trip(
        (name, m) in method(),
        segments in proptest::collection::vec(segment(), 0..5),
        http10 in any::<bool>(),
        close in any::<bool>(),
        range in proptest::option::of((0u64..1000, 0u64..1000)),
        ims in proptest::option::of(0u64..4_000_000_000),
        extra in proptest::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,15}", "[ -~]{0,30}"), 0..10),
        pipelined in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let path = format!("/{}", segments.join("/"));
        let mut head = format!("{name} {path} HTTP/1.{}\r\nHost: x\r\n", if http10 { 0 } else { 1 });
        for (k, v) in &extra {
            let lower = k.to_ascii_lowercase();
            if ["connection", "content-length", "transfer-encoding", "range", "if-modified-since", "host"]
                .contains(&lower.as_str()) {
                continue;
            }
            head.push_str(&format!("{k}: {}\r\n", v.trim()));
        }
        if close { head.push_str("Connection: close\r\n"); }
        let range_text = range.map(|(a, b)| format!("bytes={a}-{}", a + b));
        if let Some(r) = &range_text { head.push_str(&format!("Range: {r}\r\n")); }
        let date = ims.map(format_http_date);
        if let Some(d) = &date {
            head.push_str("If-Modified-Since: ");
            head.push_str(std::str::from_utf8(d).unwrap());
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let mut buf = head.clone().into_bytes();
        buf.extend_from_slice(&pipelined);
        let Parsed::Complete(req) = parse_request(&buf) else {
            panic!("not parsed: {head:?}");
        };
        prop_assert_eq!(req.method, m);
        prop_assert_eq!(req.target, path.as_bytes());
        prop_assert_eq!(req.version, if http10 { Version::Http10 } else { Version::Http11 });
        prop_assert_eq!(req.keep_alive, !http10 && !close);
        prop_assert_eq!(req.head_len, head.len());
        prop_assert_eq!(req.range, range_text.as_deref().map(str::as_bytes));
        prop_assert_eq!(req.if_modified_since.and_then(parse_http_date), ims);
        let mut out = Vec::new();
        let t = resolve_target(req.target, &mut out).unwrap();
        prop_assert_eq!(out, segments.join("/").into_bytes());
        prop_assert_eq!(t.trailing_slash, segments.is_empty());
        // Every proper prefix of the head is Partial, never an error.
        for n in [0, head.len() / 3, head.len() / 2, head.len() - 1] {
            prop_assert_eq!(parse_request(&head.as_bytes()[..n]), Parsed::Partial);
        }
    }

    #[test]
    fn percent_encoding_round_trips(bytes in proptest::collection::vec(any::<u8>(), 1..40)) {
        // Encode everything; what may not be named (slashes, backslashes, controls) is refused
        // with 403, a lone `.` is the root and `..` climbs above it (403, RFC 3986 §5.2.4 with
        // `%2e` a dot), everything else decodes back to the same bytes.
        let mut target = b"/".to_vec();
        for b in &bytes {
            target.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
        let mut out = Vec::new();
        let forbidden = bytes == b".."
            || bytes.iter().any(|&b| b == b'/' || b == b'\\' || b < 0x20 || b == 0x7f);
        match resolve_target(&target, &mut out) {
            Ok(t) if bytes == b"." => { prop_assert!(out.is_empty() && t.trailing_slash); }
            Ok(_) => { prop_assert!(!forbidden); prop_assert_eq!(out, bytes); }
            Err(s) => { prop_assert!(forbidden); prop_assert_eq!(s, Status::Forbidden); }
        }
    }

    #[test]
    fn dot_segments_follow_rfc_3986_5_2_4(
        parts in proptest::collection::vec(
            prop_oneof![
                4 => segment(),
                1 => Just(String::new()),
                1 => Just(".".to_string()),
                1 => Just("%2e".to_string()),
                1 => Just("..".to_string()),
                1 => Just("%2E%2e".to_string()),
                1 => Just(".%2e".to_string()),
                1 => Just("%2e.".to_string()),
            ],
            0..8,
        ),
        slash in any::<bool>(),
        absolute in any::<bool>(),
        tail in prop_oneof![Just(""), Just("?a=/../.."), Just("#/.."), Just("?q#f")],
    ) {
        // The model: a stack of names; `.` stays, `..` pops (refused when empty); the result
        // names a directory when the path ends in `/` or in a dot segment.
        let mut path = format!("/{}", parts.join("/"));
        if slash && !parts.is_empty() {
            path.push('/');
        }
        let mut stack: Vec<&str> = Vec::new();
        let mut dir = false;
        let mut above = false;
        for p in parts.iter().filter(|p| !p.is_empty()) {
            match p.to_ascii_lowercase().replace("%2e", ".").as_str() {
                "." => dir = true,
                ".." => { above |= stack.pop().is_none(); dir = true; }
                _ => { stack.push(p); dir = false; }
            }
        }
        dir |= path.ends_with('/');
        let target = format!("{}{path}{tail}", if absolute { "http://h:1" } else { "" });
        let mut out = Vec::new();
        let got = resolve_target(target.as_bytes(), &mut out);
        if above {
            prop_assert_eq!(got, Err(Status::Forbidden), "{}", target);
        } else {
            let t = got.unwrap();
            prop_assert_eq!(String::from_utf8(out).unwrap(), stack.join("/"), "{}", target);
            prop_assert_eq!(t.trailing_slash, dir, "{}", target);
            prop_assert_eq!(t.query, tail.split('#').next().unwrap().as_bytes());
        }
    }

    #[test]
    fn date_round_trip(secs in 0u64..253_402_300_799) {
        let text = format_http_date(secs);
        prop_assert_eq!(parse_http_date(&text), Some(secs));
    }

    #[test]
    fn range_is_within_length(a in any::<u64>(), b in any::<u64>(), len in 0u64..1 << 40, kind in 0u8..4) {
        let value = match kind {
            0 => format!("bytes={a}-{b}"),
            1 => format!("bytes={a}-"),
            2 => format!("bytes=-{b}"),
            _ => format!("bytes={}-{}", a % (len + 1), (a % (len + 1)).saturating_add(b % 100)),
        };
        match parse_range(value.as_bytes(), len, 100) {
            ByteRange::Partial { start, end } => prop_assert!(start <= end && end < len),
            ByteRange::Unsatisfiable => prop_assert!(kind != 2 || b == 0 || len == 0),
            ByteRange::Full => prop_assert!(kind == 0 && a > b),
            ByteRange::Multipart(_) => prop_assert!(false, "one range"),
        }
    }

    #[test]
    fn early_rejection_is_final(
        line in "[A-Z]{0,6}[ \x16\x03\x01]{0,2}[ -~]{0,20}( HTTP/1\\.[01])?",
        junk in proptest::collection::vec(any::<u8>(), 0..24),
        rest in "(\r\nHost: x)?(\r\n[A-Za-z-]{1,8}: [ -~]{0,10}){0,3}\r\n\r\n",
        cut in 0usize..200,
    ) {
        // Whatever a prefix of a head is refused with, the whole head is refused too: an early
        // 400 (HTTP/0.9 lines, TLS records) never refuses what would have become valid.
        let mut buf = line.into_bytes();
        buf.extend_from_slice(&junk);
        buf.extend_from_slice(rest.as_bytes());
        let cut = cut.min(buf.len());
        if let Parsed::Invalid(early) = parse_request(&buf[..cut]) {
            let whole = parse_request(&buf);
            prop_assert!(matches!(whole, Parsed::Invalid(_)), "{:?} then {:?}", early, whole);
        }
    }

    #[test]
    fn redirect_locations_never_leave_the_host(
        segments in proptest::collection::vec(
            prop_oneof![
                4 => "[ -~]{0,6}",
                1 => Just(".".to_string()),
                1 => Just("..".to_string()),
                1 => Just("%2E".to_string()),
            ],
            0..5,
        ),
        query in proptest::option::of("[ -~]{0,12}"),
        absolute in any::<bool>(),
    ) {
        let mut target = if absolute { "http://h".to_string() } else { String::new() };
        target.push('/');
        target.push_str(&segments.join("/"));
        if let Some(q) = &query {
            target.push('?');
            target.push_str(q);
        }
        let mut path = Vec::new();
        if let Ok(t) = resolve_target(target.as_bytes(), &mut path) {
            let mut loc = Vec::new();
            write_location(t.raw_path, t.query, &mut loc);
            prop_assert!(loc.starts_with(b"/") && !loc.starts_with(b"//"), "{:?}", loc);
            prop_assert!(loc.iter().all(|&b| b.is_ascii_graphic()), "{:?}", loc);
            // The path part ends in "/" and has no empty segment.
            let path_end = loc.iter().position(|&b| b == b'?').unwrap_or(loc.len());
            prop_assert!(loc[..path_end].ends_with(b"/"));
            prop_assert!(!loc[..path_end].windows(2).any(|w| w == b"//"));
            // It names the same file, as a directory, with its dot segments already removed.
            let mut again = Vec::new();
            let u = resolve_target(&loc, &mut again).unwrap();
            prop_assert_eq!(&again, &path, "{:?} -> {:?}", target, loc);
            prop_assert!(u.trailing_slash);
            prop_assert!(!u.raw_path.split(|&b| b == b'/').any(|s| s == b"." || s == b".."));
        }
    }

    #[test]
    fn tag_lists_match_exactly_when_the_tag_is_in_them(
        others in proptest::collection::vec(("[!#-~]{0,8}", any::<bool>()), 0..5),
        ours in proptest::option::of((0usize..6, any::<bool>())),
        ows in "[ \t]{0,2}",
        ino in any::<u64>(), size in any::<u64>(), sec in 0i64..1 << 40, nsec in 0i64..1_000_000_000,
    ) {
        let etag = ETag::new(ino, size, sec, nsec);
        let tag = std::str::from_utf8(etag.as_bytes()).unwrap().to_string();
        prop_assert!(tag.starts_with('"') && tag.ends_with('"') && tag.len() <= fdkit::http::ETAG_MAX);
        let mut items: Vec<String> = others
            .iter()
            .map(|(o, weak)| format!("{}\"{}\"", if *weak { "W/" } else { "" }, o.replace('"', "")))
            .filter(|t| !t.ends_with(&tag))
            .collect();
        if let Some((at, weak)) = ours {
            items.insert(at.min(items.len()), format!("{}{tag}", if weak { "W/" } else { "" }));
        }
        let value = items.join(&format!("{ows},{ows}"));
        let weak_hit = ours.is_some();
        let strong_hit = ours.is_some_and(|(_, weak)| !weak);
        prop_assert_eq!(tag_list_matches(value.as_bytes(), etag.as_bytes(), Comparison::Weak), weak_hit, "{}", value);
        prop_assert_eq!(tag_list_matches(value.as_bytes(), etag.as_bytes(), Comparison::Strong), strong_hit, "{}", value);
    }

    #[test]
    fn preconditions_follow_rfc_9110_13_2_2(
        if_match in proptest::option::of(0u8..3),      // 0: ours, 1: another, 2: *
        if_none_match in proptest::option::of(0u8..3),
        ims in proptest::option::of(-2i64..3),          // date = mtime + delta
        ius in proptest::option::of(-2i64..3),
        if_range in proptest::option::of(0u8..4),       // 0: ours, 1: another, 2: same date, 3: other date
        range in any::<bool>(),
        head_method in any::<bool>(),
        date_strong in any::<bool>(),
        mtime in 1_000_000i64..2_000_000_000,
    ) {
        let tag = "\"abc-1-2\"";
        let tags = |k: u8| match k { 0 => tag.to_string(), 1 => "\"zzz\"".to_string(), _ => "*".to_string() };
        let date = |d: i64| String::from_utf8(format_http_date((mtime + d) as u64).to_vec()).unwrap();
        let mut head = format!("{} /f HTTP/1.1\r\nHost: x\r\n", if head_method { "HEAD" } else { "GET" });
        if let Some(k) = if_match { head.push_str(&format!("If-Match: {}\r\n", tags(k))); }
        if let Some(k) = if_none_match { head.push_str(&format!("If-None-Match: {}\r\n", tags(k))); }
        if let Some(d) = ims { head.push_str(&format!("If-Modified-Since: {}\r\n", date(d))); }
        if let Some(d) = ius { head.push_str(&format!("If-Unmodified-Since: {}\r\n", date(d))); }
        if let Some(k) = if_range {
            let v = match k { 0 => tag.to_string(), 1 => "\"zzz\"".to_string(), 2 => date(0), _ => date(-1) };
            head.push_str(&format!("If-Range: {v}\r\n"));
        }
        if range { head.push_str("Range: bytes=0-1\r\n"); }
        head.push_str("\r\n");
        let Parsed::Complete(req) = parse_request(head.as_bytes()) else { panic!("{head}") };
        let got = evaluate(&req, &Validators { etag: tag.as_bytes(), last_modified: mtime }, || date_strong);
        // The model: RFC 9110 §13.2.2, step by step.
        let want = (|| {
            match (if_match, ius) {
                (Some(1), _) => return Precondition::Failed,
                (None, Some(d)) if mtime > mtime + d => return Precondition::Failed,
                _ => {}
            }
            match (if_none_match, ims) {
                (Some(0 | 2), _) => return Precondition::NotModified,
                (None, Some(d)) if mtime <= mtime + d => return Precondition::NotModified,
                _ => {}
            }
            let honour = match (range, if_range) {
                (true, Some(0)) => true,
                (true, Some(2)) => date_strong,
                (true, Some(_)) => false,
                _ => true,
            };
            Precondition::Proceed { range: honour }
        })();
        prop_assert_eq!(got, want, "{}", head);
    }

    /// RFC 3986 §3.2.2's `IPv6address`, checked against the standard library's parser (which
    /// follows RFC 4291's text forms: the same language, without zones).
    #[test]
    fn ipv6_literals_agree_with_std(candidate in ipv6_like()) {
        let head = format!("GET / HTTP/1.1\r\nHost: [{candidate}]:80\r\n\r\n");
        let ours = matches!(parse_request(head.as_bytes()), Parsed::Complete(_));
        let std = candidate.parse::<std::net::Ipv6Addr>().is_ok();
        prop_assert_eq!(ours, std, "{}", candidate);
        if !std {
            prop_assert_eq!(parse_request(head.as_bytes()), Parsed::Invalid(Status::BadRequest));
        }
    }

    /// RFC 9112 §3.2 and §3.2.2: every host the grammar admits is served, in `Host` or in an
    /// absolute-form target (which then names the host); one byte the grammar refuses, put
    /// anywhere in it, makes the request 400.
    #[test]
    fn hosts_follow_rfc_3986_3_2_2(
        host in host(),
        other in reg_name(),
        bad in prop_oneof![
            Just(b'/'), Just(b'\\'), Just(b'@'), Just(b'#'), Just(b'?'), Just(b'['), Just(b']'),
            Just(b'"'), Just(b'<'), Just(b'{'), Just(b'|'), Just(b'^'), Just(b'`'), Just(0x01),
            Just(0x7f), Just(0x80), Just(0xff),
        ],
        at in any::<prop::sample::Index>(),
    ) {
        let head = format!("GET /x HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let Parsed::Complete(req) = parse_request(head.as_bytes()) else {
            panic!("refused: {head:?}");
        };
        prop_assert_eq!(req.host, Some(host.as_bytes()));
        let head = format!("GET http://{host}/x HTTP/1.1\r\nHost: {other}\r\n\r\n");
        let Parsed::Complete(req) = parse_request(head.as_bytes()) else {
            panic!("refused: {head:?}");
        };
        prop_assert_eq!(req.host, Some(host.as_bytes()));
        let mut mangled = host.clone().into_bytes();
        mangled.insert(at.index(mangled.len() + 1), bad);
        let mut head = b"GET /x HTTP/1.1\r\nHost: ".to_vec();
        head.extend_from_slice(&mangled);
        head.extend_from_slice(b"\r\n\r\n");
        prop_assert_eq!(
            parse_request(&head),
            Parsed::Invalid(Status::BadRequest),
            "{:?}",
            String::from_utf8_lossy(&mangled)
        );
    }
}
