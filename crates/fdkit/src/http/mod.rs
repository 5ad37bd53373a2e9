//! The small HTTP/1.1 pieces the static file server uses: pure logic, no I/O, never panics.
//!
//! - `request.rs`: [`parse_request`] (request line, headers, limits: 8 KiB and 100 lines).
//! - `path.rs`: [`resolve_target`] (absolute-form, percent-decoding, the traversal rules).
//! - `range.rs`: [`parse_range`] (one `bytes=` range; several ranges are served whole).
//! - `conditional.rs`: [`ETag`] and [`evaluate`] (RFC 9110 §13 preconditions, in order).
//! - `date.rs`: [`format_http_date`] and [`parse_http_date`] (RFC 7231 IMF-fixdate).
//! - `mime.rs`: [`content_type`] by file extension.
//! - `response.rs`: [`Status`] and response heads written into a reused buffer.
//! - `fuzz.rs`: `fuzz_one`, the function the cargo-fuzz target and the stable test drive. It is
//!   public only so that they can reach it: hidden from the docs, not part of the API.
//!
//! See RFC 9110 (semantics), RFC 9112 (HTTP/1.1 message syntax), RFC 3986 (URIs).

mod conditional;
mod date;
mod fuzz;
mod mime;
mod path;
mod range;
mod request;
mod response;

pub use conditional::{
    evaluate, has_preconditions, if_range_holds, tag_list_matches, Comparison, ETag, Precondition,
    Validators, ETAG_MAX,
};
pub use date::{format_http_date, parse_http_date, HTTP_DATE_LEN};
// Not API: public for `fuzz/` and `tests/http_fuzz.rs` only, and may change in any release.
#[doc(hidden)]
pub use fuzz::fuzz_one;
pub use mime::content_type;
pub use path::{resolve_target, write_location, Target};
pub use range::{parse_range, ByteRange};
pub use request::{parse_request, Method, Parsed, Request, Version, MAX_HEADERS, MAX_HEAD_BYTES};
pub use response::{write_decimal, Status};
