//! `cargo +nightly fuzz run http_request`: the HTTP request parser, target resolver, range and
//! date parsers on arbitrary bytes (`fdkit::http::fuzz_one` panics only on a broken invariant).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fdkit::http::fuzz_one(data);
});
