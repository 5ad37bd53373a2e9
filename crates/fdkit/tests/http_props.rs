//! Property tests for `fdkit::http`: the parsers never panic on any input, and what the server
//! writes reads back the same.

use fdkit::http::{
    format_http_date, fuzz_one, parse_http_date, parse_range, parse_request, resolve_target,
    ByteRange, Method, Parsed, Status, Version,
};
use proptest::prelude::*;

fn method() -> impl Strategy<Value = (&'static str, Method)> {
    prop_oneof![
        Just(("GET", Method::Get)),
        Just(("HEAD", Method::Head)),
        Just(("POST", Method::Other)),
        Just(("DELETE", Method::Other)),
    ]
}

fn segment() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,11}".prop_filter("not . or ..", |s| s != "." && s != "..")
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
        let mut head = format!("{name} {path} HTTP/1.{}\r\n", if http10 { 0 } else { 1 });
        for (k, v) in &extra {
            let lower = k.to_ascii_lowercase();
            if ["connection", "content-length", "transfer-encoding", "range", "if-modified-since"]
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
        // Encode everything; what may not be named (dots, slashes, backslashes, controls) is
        // refused with 403, everything else decodes back to the same bytes.
        let mut target = b"/".to_vec();
        for b in &bytes {
            target.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
        let mut out = Vec::new();
        let forbidden = bytes.iter().any(|&b| b == b'.' || b == b'/' || b == b'\\' || b < 0x20 || b == 0x7f);
        match resolve_target(&target, &mut out) {
            Ok(_) => { prop_assert!(!forbidden); prop_assert_eq!(out, bytes); }
            Err(s) => { prop_assert!(forbidden); prop_assert_eq!(s, Status::Forbidden); }
        }
    }

    #[test]
    fn dot_dot_anywhere_is_refused(
        before in proptest::collection::vec(segment(), 0..4),
        after in proptest::collection::vec(segment(), 0..4),
        spelling in prop_oneof![Just(".."), Just("%2e%2e"), Just(".%2E"), Just("%2e.")],
    ) {
        let mut parts = before.clone();
        parts.push(spelling.to_string());
        parts.extend(after);
        let target = format!("/{}", parts.join("/"));
        prop_assert_eq!(resolve_target(target.as_bytes(), &mut Vec::new()), Err(Status::Forbidden));
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
        match parse_range(value.as_bytes(), len) {
            ByteRange::Partial { start, end } => prop_assert!(start <= end && end < len),
            ByteRange::Unsatisfiable => prop_assert!(kind != 2 || b == 0 || len == 0),
            ByteRange::Full => prop_assert!(kind == 0 && a > b),
        }
    }
}
