//! The small HTTP/1.1 pieces the static file server uses: pure logic, no I/O, never panics.
//!
//! - `request.rs`: [`parse_request`] (request line, headers, limits: 8 KiB and 100 lines).
//! - `authority.rs`: the `Host` and absolute-form authority grammar (RFC 3986 §3.2.2).
//! - `path.rs`: [`resolve_target`] (absolute-form, percent-decoding, dot segments, the
//!   traversal rules).
//! - `range.rs`: [`parse_range`] (a `bytes=` range set: the rule for which sets are honoured,
//!   coalesced or ignored).
//! - `multipart.rs`: [`Framing`] (the part heads of a `multipart/byteranges` body).
//! - `conditional.rs`: [`ETag`] and [`evaluate`] (RFC 9110 §13 preconditions, in order).
//! - `date.rs`: [`format_http_date`] and [`parse_http_date`] (RFC 7231 IMF-fixdate), and
//!   [`format_clf_date`] (the access log's timestamp).
//! - `html.rs`: [`escape_html`] and [`percent_encode`] (the directory listing).
//! - `mime.rs`: [`content_type`] by file extension.
//! - `response.rs`: [`Status`] and response heads written into a reused buffer.
//! - `fuzz.rs`: `fuzz_one`, the function the cargo-fuzz target and the stable test drive. It is
//!   public only so that they can reach it: hidden from the docs, not part of the API.
//!
//! Errors: parsing never fails with an `Err` of its own; a request that can never be valid is
//! [`Parsed::Invalid`] with the [`Status`] to answer, and a target that cannot be served is an
//! `Err(Status)`.
//!
//! # Example
//!
//! ```
//! use fdkit::http::{parse_request, parse_range, resolve_target, ByteRange, Method, Parsed};
//!
//! let buf = b"GET /docs/a%20b.txt?v=2 HTTP/1.1\r\nHost: x\r\nRange: bytes=0-99\r\n\r\nnext...";
//! let Parsed::Complete(req) = parse_request(buf) else {
//!     panic!("a whole head");
//! };
//! assert_eq!(req.method, Method::Get);
//! assert!(req.keep_alive);
//! assert_eq!(&buf[req.head_len..], b"next..."); // a pipelined request would start here
//!
//! let mut path = Vec::new();
//! let target = resolve_target(req.target, &mut path).expect("a servable path");
//! assert_eq!(path, b"docs/a b.txt"); // percent-decoded, relative to the served root
//! assert_eq!(target.query, b"?v=2");
//!
//! let range = parse_range(req.range.expect("a Range field"), 1000, 0);
//! assert_eq!(range, ByteRange::Partial { start: 0, end: 99 }); // inclusive, as on the wire
//!
//! assert_eq!(parse_request(b"GET / HTTP/1.1\r\nHost"), Parsed::Partial);
//! ```
//!
//! # References
//!  - [RFC 9110](https://www.rfc-editor.org/rfc/rfc9110) (semantics),
//!    [RFC 9112](https://www.rfc-editor.org/rfc/rfc9112) (HTTP/1.1 message syntax),
//!    [RFC 3986](https://www.rfc-editor.org/rfc/rfc3986) (URIs)

mod authority;
mod conditional;
mod date;
mod fuzz;
mod html;
mod mime;
mod multipart;
mod path;
mod range;
mod request;
mod response;

pub use conditional::{
    evaluate, has_preconditions, if_range_holds, tag_list_matches, Comparison, ETag, Precondition,
    Validators, ETAG_MAX,
};
pub use date::{format_clf_date, format_http_date, parse_http_date, CLF_DATE_LEN, HTTP_DATE_LEN};
// Not API: public for `fuzz/` and `tests/http_fuzz.rs` only, and may change in any release.
#[doc(hidden)]
pub use fuzz::fuzz_one;
pub use html::{escape_html, percent_encode};
pub use mime::content_type;
pub use multipart::{part_head_max, Boundary, Framing, BOUNDARY_LEN};
pub use path::{resolve_target, write_location, Target};
pub use range::{parse_range, ByteRange, MAX_RANGES};
pub use request::{parse_request, Method, Parsed, Request, Version, MAX_HEADERS, MAX_HEAD_BYTES};
pub use response::{write_decimal, Status};
