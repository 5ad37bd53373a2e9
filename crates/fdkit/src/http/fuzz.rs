//! `fuzz_one`: every parser of this module run over one input, with the invariants checked.
//! The cargo-fuzz target (`fuzz/fuzz_targets/http_request.rs`) and a stable-Rust test drive it.

use super::{
    evaluate, parse_http_date, parse_range, parse_request, resolve_target, tag_list_matches,
    write_location, ByteRange, Comparison, Parsed, Precondition, Validators, Version,
};

/// Runs the request parser on `data`; for a complete head, resolves its target (and builds its
/// redirect `Location`), parses its `Range` against a few lengths, evaluates its preconditions;
/// also feeds `data` itself to the range, date and entity-tag parsers. Panics only if an
/// invariant breaks (which is the bug to find).
pub fn fuzz_one(data: &[u8]) {
    if let Parsed::Complete(req) = parse_request(data) {
        assert!(req.head_len <= data.len());
        assert!(!req.target.is_empty());
        assert!(req.target.iter().all(|&b| b > 0x20 && b != 0x7f));
        assert!(req.host.is_some() || req.version == Version::Http10);
        let mut out = Vec::new();
        if let Ok(t) = resolve_target(req.target, &mut out) {
            let mut location = Vec::new();
            write_location(t.raw_path, t.query, &mut location);
            assert!(location.starts_with(b"/") && !location.starts_with(b"//"));
            assert!(location.iter().all(|&b| b > 0x20 && b < 0x7f));
            // The redirect names the same path, as a directory.
            let mut again = Vec::new();
            let u = resolve_target(&location, &mut again).expect("a Location resolves");
            assert!(again == out && u.trailing_slash);
            assert!(!out.starts_with(b"/"));
            assert!(!out.contains(&0));
            assert!(!out.contains(&b'\\'));
            assert!(
                !out.split(|&b| b == b'/')
                    .any(|s| s == b".." || s == b"." || s.is_empty())
                    || out.is_empty()
            );
        }
        if let Some(range) = req.range {
            check_range(range);
        }
        if let Some(ims) = req.if_modified_since {
            let _ = parse_http_date(ims);
        }
        let tag = b"\"1-2-3\"";
        for last_modified in [0, 784_111_777, i64::MAX] {
            let v = Validators {
                etag: tag,
                last_modified,
            };
            let p = evaluate(&req, &v, || true);
            if req.if_match.is_none()
                && req.if_none_match.is_none()
                && req.if_modified_since.is_none()
                && req.if_unmodified_since.is_none()
            {
                assert!(matches!(p, Precondition::Proceed { .. }));
            }
            if req.range.is_none() || req.if_range.is_none() {
                assert!(!matches!(p, Precondition::Proceed { range: false }));
            }
        }
    }
    let _ = tag_list_matches(data, b"\"1-2-3\"", Comparison::Strong);
    let mut out = Vec::new();
    let _ = resolve_target(data, &mut out);
    check_range(data);
    let _ = parse_http_date(data);
}

fn check_range(value: &[u8]) {
    for len in [0u64, 1, 6, 4096, u64::MAX] {
        match parse_range(value, len, 64) {
            ByteRange::Partial { start, end } => assert!(start <= end && end < len),
            ByteRange::Multipart(parts) => {
                assert!((2..=super::MAX_RANGES).contains(&parts.len()));
                let mut sorted = parts.clone();
                sorted.sort_unstable();
                for w in sorted.windows(2) {
                    assert!(w[0].1.saturating_add(64) < w[1].0);
                }
                for (start, end) in parts {
                    assert!(start <= end && end < len);
                }
            }
            ByteRange::Full | ByteRange::Unsatisfiable => {}
        }
    }
}
