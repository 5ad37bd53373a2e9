//! The cargo-fuzz target's function (`fdkit::http::fuzz_one`) on 100,000 generated inputs, so
//! plain `cargo test` exercises it on stable Rust: random bytes, and mutations (flips, inserts,
//! deletions, splices of HTTP-ish tokens) of real requests. Deterministic (fixed seed).

use fdkit::http::fuzz_one;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const SEEDS: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"HEAD /a/b.html?q=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"GET /f HTTP/1.1\r\nRange: bytes=0-10\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n",
    b"GET http://h/%2e%2e/x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
    b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"GET http://[::1]:80/a/./b/%2e%2E/c?q#f HTTP/1.1\r\nHost: [v1.x]:8\r\n\r\n",
];

const TOKENS: &[&[u8]] = &[
    b"\r\n",
    b"\n",
    b" ",
    b":",
    b"%",
    b"%2e",
    b"%2f",
    b"%00",
    b"..",
    b"/",
    b"\\",
    b"\0",
    b"bytes=",
    b"-",
    b",",
    b"HTTP/1.1",
    b"GMT",
    b"Range: ",
    b"Connection: close",
    b"Content-Length: ",
    b"99999999999999999999999",
    b"\t",
    b"[",
    b"]",
    b"::",
    b"/.",
    b"@",
    b"#",
];

#[test]
fn one_hundred_thousand_inputs() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut buf = Vec::new();
    for i in 0..100_000 {
        buf.clear();
        if i % 4 == 0 {
            let n = rng.below(300);
            buf.extend((0..n).map(|_| rng.next() as u8));
        } else {
            buf.extend_from_slice(SEEDS[rng.below(SEEDS.len())]);
            for _ in 0..1 + rng.below(6) {
                let at = rng.below(buf.len() + 1);
                match rng.below(4) {
                    0 if !buf.is_empty() => {
                        let at = at.min(buf.len() - 1);
                        buf[at] ^= 1 << rng.below(8);
                    }
                    1 => {
                        let t = TOKENS[rng.below(TOKENS.len())];
                        buf.splice(at..at, t.iter().copied());
                    }
                    2 if !buf.is_empty() => {
                        let end = (at + rng.below(8)).min(buf.len());
                        buf.drain(at.min(end)..end);
                    }
                    _ => buf.insert(at, rng.next() as u8),
                }
            }
        }
        fuzz_one(&buf);
    }
}
