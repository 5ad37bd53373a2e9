//! [`fuzz_one`]: every parser of this module run over one input, with the invariants checked.
//! The cargo-fuzz target (`fuzz/fuzz_targets/http_request.rs`) and a stable-Rust test drive it.

use super::{parse_http_date, parse_range, parse_request, resolve_target, ByteRange, Parsed};

/// Runs the request parser on `data`; for a complete head, resolves its target, parses its
/// `Range` against a few lengths and its `If-Modified-Since`; also feeds `data` itself to the
/// range and date parsers. Panics only if an invariant breaks (which is the bug to find).
pub fn fuzz_one(data: &[u8]) {
    if let Parsed::Complete(req) = parse_request(data) {
        assert!(req.head_len <= data.len());
        assert!(!req.target.is_empty());
        let mut out = Vec::new();
        if resolve_target(req.target, &mut out).is_ok() {
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
    }
    let mut out = Vec::new();
    let _ = resolve_target(data, &mut out);
    check_range(data);
    let _ = parse_http_date(data);
}

fn check_range(value: &[u8]) {
    for len in [0u64, 1, 6, 4096, u64::MAX] {
        match parse_range(value, len) {
            ByteRange::Partial { start, end } => assert!(start <= end && end < len),
            ByteRange::Full | ByteRange::Unsatisfiable => {}
        }
    }
}
