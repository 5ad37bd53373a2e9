//! The atomic pipe wire codec against bytes written by Perl's Atomic::Pipe 0.028
//! (`tests/vectors/atomic_pipe_vectors/` at the repository root), plus boundaries, interleaved
//! writers, truncation and garbage. Pure logic: no kernel involved.

use fdkit::atomic_pipe::{
    chunk_count, encode_burst, encode_burst_unchecked, encode_message, encoded_len, fits_in_burst,
    message_chunks, zstd_frame_len, BurstError, Compression, Decoder, Decompressor, Event,
    FrameScan, Mode, ProtocolError, ProtocolErrorKind, Writer, PIPE_BUF,
};
use std::collections::BTreeMap;
use std::path::PathBuf;

// ---------------------------------------------------------------------------------------------
// A tiny JSON reader for manifest.json (the workspace has no serde).

#[derive(Debug, Clone)]
enum Json {
    Null,
    Bool,
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

impl Json {
    fn get(&self, key: &str) -> &Json {
        match self {
            Json::Obj(m) => m.get(key).unwrap_or(&Json::Null),
            _ => &Json::Null,
        }
    }
    fn str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }
    fn num(&self) -> f64 {
        match self {
            Json::Num(n) => *n,
            other => panic!("not a number: {other:?}"),
        }
    }
    fn arr(&self) -> &[Json] {
        match self {
            Json::Arr(a) => a,
            other => panic!("not an array: {other:?}"),
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) {
        self.ws();
        assert_eq!(
            self.s[self.i], c,
            "json: expected {:?} at {}",
            c as char, self.i
        );
        self.i += 1;
    }
    fn value(&mut self) -> Json {
        self.ws();
        match self.s[self.i] {
            b'{' => {
                self.i += 1;
                let mut m = BTreeMap::new();
                self.ws();
                if self.s[self.i] == b'}' {
                    self.i += 1;
                    return Json::Obj(m);
                }
                loop {
                    self.ws();
                    let Json::Str(k) = self.value() else {
                        panic!("json: key")
                    };
                    self.eat(b':');
                    let v = self.value();
                    m.insert(k, v);
                    self.ws();
                    self.i += 1;
                    if self.s[self.i - 1] == b'}' {
                        return Json::Obj(m);
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut a = Vec::new();
                self.ws();
                if self.s[self.i] == b']' {
                    self.i += 1;
                    return Json::Arr(a);
                }
                loop {
                    a.push(self.value());
                    self.ws();
                    self.i += 1;
                    if self.s[self.i - 1] == b']' {
                        return Json::Arr(a);
                    }
                }
            }
            b'"' => {
                self.i += 1;
                let mut out = String::new();
                loop {
                    let c = self.s[self.i];
                    self.i += 1;
                    match c {
                        b'"' => return Json::Str(out),
                        b'\\' => {
                            let e = self.s[self.i];
                            self.i += 1;
                            out.push(match e {
                                b'n' => '\n',
                                b't' => '\t',
                                b'r' => '\r',
                                b'b' => '\u{8}',
                                b'f' => '\u{c}',
                                b'u' => {
                                    let hex = std::str::from_utf8(&self.s[self.i..self.i + 4]);
                                    self.i += 4;
                                    let code = u32::from_str_radix(hex.unwrap(), 16).unwrap();
                                    char::from_u32(code).expect("no surrogates in manifest")
                                }
                                other => other as char,
                            });
                        }
                        _ => {
                            // Copy a whole UTF-8 sequence.
                            let start = self.i - 1;
                            while self.i < self.s.len() && (self.s[self.i] & 0xC0) == 0x80 {
                                self.i += 1;
                            }
                            out.push_str(std::str::from_utf8(&self.s[start..self.i]).unwrap());
                        }
                    }
                }
            }
            b't' => {
                self.i += 4;
                Json::Bool
            }
            b'f' => {
                self.i += 5;
                Json::Bool
            }
            b'n' => {
                self.i += 4;
                Json::Null
            }
            _ => {
                let start = self.i;
                while self.i < self.s.len() && b"+-0123456789.eE".contains(&self.s[self.i]) {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                Json::Num(text.parse().unwrap())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The vectors.

fn vectors_dir() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // The vectors live in the repository, so a clean clone tests against the same bytes:
    // crates/fdkit → the repo root → tests/vectors.
    manifest_dir.join("../../tests/vectors/atomic_pipe_vectors")
}

struct Vector {
    file: String,
    mode: Mode,
    zstd: bool,
    call: String,
    input: Option<Vec<u8>>,
    tid: i32,
    wire: Vec<u8>,
    wire_bytes: usize,
    decodes_to: Vec<(String, Vec<u8>)>,
}

/// A manifest payload: `{"text": ...}`, `{"repeat": c, "count": n}` or `{"hex": ...}`.
fn payload(j: &Json) -> Vec<u8> {
    if let Some(t) = j.get("text").str() {
        return t.as_bytes().to_vec();
    }
    if let Some(r) = j.get("repeat").str() {
        return r.repeat(j.get("count").num() as usize).into_bytes();
    }
    let hex = j.get("hex").str().expect("text, repeat or hex");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn vectors() -> Vec<Vector> {
    let dir = vectors_dir();
    let text = std::fs::read(dir.join("manifest.json")).expect("manifest.json");
    let root = Parser { s: &text, i: 0 }.value();
    let vs: Vec<Vector> = root
        .get("vectors")
        .arr()
        .iter()
        .map(|v| {
            let file = v.get("file").str().unwrap().to_owned();
            assert_eq!(v.get("pid").num(), 12345.0);
            Vector {
                wire: std::fs::read(dir.join(&file)).unwrap(),
                file,
                mode: match v.get("mode").str() {
                    Some("normal") => Mode::Normal,
                    Some("mixed") => Mode::Mixed,
                    other => panic!("mode {other:?}"),
                },
                zstd: v.get("compression").str() == Some("zstd"),
                call: v.get("call").str().unwrap().to_owned(),
                input: match v.get("input") {
                    Json::Null => None,
                    j => Some(payload(j)),
                },
                tid: v.get("tid").num() as i32,
                wire_bytes: v.get("wire_bytes").num() as usize,
                decodes_to: v
                    .get("decodes_to")
                    .arr()
                    .iter()
                    .map(|e| {
                        let e = e.arr();
                        (e[0].str().unwrap().to_owned(), payload(&e[1]))
                    })
                    .collect(),
            }
        })
        .collect();
    assert_eq!(vs.len(), 18, "18 vectors in the manifest");
    vs
}

/// Decompresses one frame with real zstd (the crate's `Decompressor`, as readers do).
fn unzstd(frame: &[u8]) -> Vec<u8> {
    Decompressor::new(&Compression::default())
        .unwrap()
        .decompress(frame)
        .unwrap()
}

/// Decodes a whole stream: events (as (kind, bytes)) and errors, draining after finish.
fn decode_all(mode: Mode, zstd: bool, splits: &[&[u8]]) -> (Vec<Event>, Vec<ProtocolError>) {
    let mut d = Decoder::new(mode).with_zstd_bursts(zstd);
    let mut events = Vec::new();
    let mut errors = Vec::new();
    let drain = |d: &mut Decoder, events: &mut Vec<Event>, errors: &mut Vec<ProtocolError>| {
        for _ in 0..10_000_000 {
            match d.next_event() {
                Ok(Some(e)) => events.push(e),
                Ok(None) => return,
                Err(e) => {
                    let fatal = e.is_fatal();
                    errors.push(e);
                    if fatal {
                        return;
                    }
                }
            }
        }
        panic!("decoder did not settle");
    };
    for part in splits {
        d.feed(part);
        drain(&mut d, &mut events, &mut errors);
    }
    d.finish();
    drain(&mut d, &mut events, &mut errors);
    (events, errors)
}

fn kind_and_data(e: &Event) -> (&'static str, &[u8]) {
    match e {
        Event::Message { data, .. } => ("message", data),
        Event::Burst(data) => ("burst", data),
        Event::Line(data) => ("line", data),
    }
}

/// Checks decoded events against a vector's `decodes_to`, decompressing zstd payloads.
fn check_decoded(v: &Vector, events: &[Event]) {
    assert_eq!(events.len(), v.decodes_to.len(), "{}: {events:?}", v.file);
    for (e, (kind, want)) in events.iter().zip(&v.decodes_to) {
        let (k, data) = kind_and_data(e);
        assert_eq!(k, kind, "{}", v.file);
        if let Event::Message { writer, .. } = e {
            assert_eq!(*writer, Writer::new(12345, v.tid), "{}", v.file);
        }
        if v.zstd {
            assert_eq!(&unzstd(data), want, "{}", v.file);
        } else {
            assert_eq!(data, &want[..], "{}", v.file);
        }
    }
}

/// Decodes a vector. In normal mode a burst has no framing: the reader sees its raw bytes.
fn decode_vector(v: &Vector, splits: &[&[u8]]) -> Vec<Event> {
    if v.mode == Mode::Normal && v.call == "write_burst" {
        let len = if v.zstd {
            match zstd_frame_len(&v.wire) {
                FrameScan::Complete(n) => n,
                other => panic!("{}: {other:?}", v.file),
            }
        } else {
            v.wire.len()
        };
        assert_eq!(len, v.wire.len());
        return vec![Event::Burst(v.wire.clone())];
    }
    let (events, errors) = decode_all(v.mode, v.zstd, splits);
    assert!(errors.is_empty(), "{}: {errors:?}", v.file);
    events
}

#[test]
fn every_vector_decodes_to_its_decodes_to() {
    for v in vectors() {
        assert_eq!(v.wire.len(), v.wire_bytes, "{}", v.file);
        let events = decode_vector(&v, &[&v.wire]);
        check_decoded(&v, &events);
    }
}

#[test]
fn every_vector_decodes_split_anywhere() {
    for v in vectors() {
        // Byte by byte.
        let bytes: Vec<&[u8]> = v.wire.chunks(1).collect();
        check_decoded(&v, &decode_vector(&v, &bytes));
        // Every split point into two parts (every 7th for the large ones).
        let step = if v.wire.len() > 1000 { 7 } else { 1 };
        for cut in (0..=v.wire.len()).step_by(step) {
            let (a, b) = v.wire.split_at(cut);
            check_decoded(&v, &decode_vector(&v, &[a, b]));
        }
    }
}

#[test]
fn every_non_zstd_vector_is_encoded_byte_for_byte() {
    let mut checked = 0;
    for v in vectors().into_iter().filter(|v| !v.zstd) {
        let writer = Writer::new(12345, v.tid);
        let mut out = Vec::new();
        match v.call.as_str() {
            "write_message" => {
                let input = v.input.as_ref().unwrap();
                let n = encode_message(v.mode, writer, input, &mut out);
                assert_eq!(n, chunk_count(v.mode, input.len()));
                assert_eq!(out.len(), encoded_len(v.mode, input.len()), "{}", v.file);
            }
            "write_burst" => {
                encode_burst(v.mode, v.input.as_ref().unwrap(), &mut out).unwrap();
            }
            call => {
                // V12: raw write 'line one\n', write_burst 'B', write_message 'M', raw 'tail\n'.
                assert!(call.starts_with("sequence"), "{call}");
                out.extend_from_slice(b"line one\n");
                encode_burst(v.mode, b"B", &mut out).unwrap();
                encode_message(v.mode, writer, b"M", &mut out);
                out.extend_from_slice(b"tail\n");
            }
        }
        assert_eq!(out, v.wire, "{}", v.file);
        checked += 1;
    }
    assert_eq!(checked, 12);
}

#[test]
fn zstd_vectors_are_framed_like_the_peer() {
    // The zstd frame itself comes from libzstd; the framing around it must match.
    for v in vectors()
        .into_iter()
        .filter(|v| v.zstd && v.call == "write_message")
    {
        let events = decode_vector(&v, &[&v.wire]);
        let Event::Message { data, .. } = &events[0] else {
            panic!("{}", v.file)
        };
        let mut out = Vec::new();
        encode_message(v.mode, Writer::new(12345, v.tid), data, &mut out);
        assert_eq!(out, v.wire, "{}", v.file);
    }
    for v in vectors()
        .into_iter()
        .filter(|v| v.zstd && v.call == "write_burst")
    {
        let body = match v.mode {
            Mode::Normal => &v.wire[..],
            Mode::Mixed => &v.wire[1..v.wire.len() - 1],
        };
        let mut out = Vec::new();
        encode_burst_unchecked(v.mode, body, &mut out).unwrap();
        assert_eq!(out, v.wire, "{}", v.file);
    }
}

// ---------------------------------------------------------------------------------------------
// Encoder shape and boundaries.

#[test]
fn chunks_count_down_and_fit_in_pipe_buf() {
    let w = Writer::new(7, 3);
    for mode in [Mode::Normal, Mode::Mixed] {
        let msg: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
        let chunks: Vec<_> = message_chunks(mode, w, &msg).collect();
        assert_eq!(chunks.len(), chunk_count(mode, msg.len()));
        let mut joined = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            assert!(c.len() <= PIPE_BUF);
            assert_eq!(c.header().chunk_id as usize, chunks.len() - 1 - i);
            assert_eq!(c.header().writer, w);
            assert_eq!(c.header().size as usize, c.payload().len());
            joined.extend_from_slice(c.payload());
            if i + 1 < chunks.len() {
                assert_eq!(c.len(), PIPE_BUF);
            }
        }
        assert_eq!(joined, msg);
        assert_eq!(message_chunks(mode, w, b"").count(), 0);
    }
}

#[test]
fn boundary_sizes_round_trip() {
    let w = Writer::new(12345, 0);
    for mode in [Mode::Normal, Mode::Mixed] {
        for len in [
            0,
            1,
            4077,
            4078,
            4080,
            4081,
            8154,
            8155,
            8160,
            8161,
            1 << 20,
        ] {
            let msg: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut wire = Vec::new();
            encode_message(mode, w, &msg, &mut wire);
            let (events, errors) = decode_all(mode, false, &[&wire]);
            assert!(errors.is_empty(), "{errors:?}");
            if len == 0 {
                assert!(events.is_empty());
            } else {
                assert!(
                    events
                        == vec![Event::Message {
                            writer: w,
                            data: msg
                        }],
                    "{len}"
                );
            }
        }
    }
    assert_eq!(chunk_count(Mode::Normal, 4080), 1);
    assert_eq!(chunk_count(Mode::Normal, 4081), 2);
    assert_eq!(chunk_count(Mode::Mixed, 4077), 1);
    assert_eq!(chunk_count(Mode::Mixed, 4078), 2);
}

#[test]
fn bursts_are_checked() {
    let mut out = Vec::new();
    assert_eq!(fits_in_burst(Mode::Normal, 4096), Some(4096));
    assert_eq!(fits_in_burst(Mode::Normal, 4097), None);
    assert_eq!(fits_in_burst(Mode::Mixed, 4094), Some(4096));
    assert_eq!(fits_in_burst(Mode::Mixed, 4095), None);
    assert!(matches!(
        encode_burst(Mode::Mixed, &[b'a'; 4095], &mut out),
        Err(BurstError::TooLarge {
            len: 4095,
            max: 4094
        })
    ));
    assert_eq!(
        encode_burst(Mode::Mixed, b"a\x0Fb", &mut out),
        Err(BurstError::ContainsFrameEnd { at: 1 })
    );
    assert_eq!(
        encode_burst(Mode::Mixed, b"\x10ab", &mut out),
        Err(BurstError::StartsWithMessageKey)
    );
    assert!(out.is_empty(), "nothing written on refusal");
    // Normal mode bursts are raw bytes: anything goes.
    assert_eq!(encode_burst(Mode::Normal, b"\x10\x0F", &mut out), Ok(2));
    // A 4094-byte mixed burst round-trips, fed one byte at a time.
    let data: Vec<u8> = (0..4094u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut wire = Vec::new();
    encode_burst(Mode::Mixed, &data, &mut wire).unwrap();
    let parts: Vec<&[u8]> = wire.chunks(1).collect();
    let (events, errors) = decode_all(Mode::Mixed, false, &parts);
    assert!(errors.is_empty());
    assert!(events == vec![Event::Burst(data)]);
}

// ---------------------------------------------------------------------------------------------
// Interleaved writers: a deterministic pseudo-random property test.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bytes(&mut self, len: usize, alphabet: &[u8]) -> Vec<u8> {
        (0..len)
            .map(|_| alphabet[self.below(alphabet.len())])
            .collect()
    }
}

/// One writer's pending chunks: wire bytes, and the whole message on its last chunk.
type ChunkQueue = std::collections::VecDeque<(Vec<u8>, Option<Vec<u8>>)>;

/// Lengths that hit chunk boundaries often.
fn message_len(rng: &mut Rng, mode: Mode) -> usize {
    let p = mode.max_payload();
    match rng.below(6) {
        0 => 0,
        1 => rng.below(64),
        2 => p - 1 + rng.below(3),
        3 => 2 * p - 1 + rng.below(3),
        4 => rng.below(3 * p + 10),
        _ => rng.below(300),
    }
}

#[test]
fn interleaved_writers_decode_per_writer_in_order() {
    let nasty = b"\x00\x0E\x0F\x10\n\rab\xFF";
    let (mut total_messages, mut multi_writer_cases) = (0, 0);
    for case in 0..300u64 {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (case + 1).wrapping_mul(0x1234_5678_9ABC_DEF1));
        let mode = if case % 2 == 0 {
            Mode::Normal
        } else {
            Mode::Mixed
        };
        let writers: Vec<Writer> = (0..1 + rng.below(5))
            .map(|i| Writer::new(1000 + (i as i32 % 3), i as i32 / 3))
            .collect();
        // Each writer's queue of chunks (as wire bytes), message by message.
        let mut queues: Vec<ChunkQueue> = vec![Default::default(); writers.len()];
        for (q, &w) in queues.iter_mut().zip(&writers) {
            for _ in 0..rng.below(6) {
                let len = message_len(&mut rng, mode);
                let msg = rng.bytes(len, nasty);
                let chunks: Vec<_> = message_chunks(mode, w, &msg).collect();
                let n = chunks.len();
                for (i, c) in chunks.into_iter().enumerate() {
                    let mut wire = Vec::new();
                    c.append_to(&mut wire);
                    q.push_back((wire, (i + 1 == n).then(|| msg.clone())));
                }
            }
        }
        // Interleave at chunk boundaries (plus lines and bursts in mixed mode), computing the
        // events the decoder must return in order.
        let mut stream = Vec::new();
        let mut expected = Vec::new();
        loop {
            let live: Vec<usize> = (0..queues.len())
                .filter(|&i| !queues[i].is_empty())
                .collect();
            if mode == Mode::Mixed && rng.below(5) == 0 {
                if rng.below(2) == 0 {
                    let n = rng.below(40);
                    let mut line = rng.bytes(n, b"abc \x0F\x10\r");
                    line.push(b'\n');
                    stream.extend_from_slice(&line);
                    expected.push(Event::Line(line));
                } else {
                    let n = rng.below(100);
                    let mut data = rng.bytes(n, b"xyz\n\x0E\x10");
                    if data.first() == Some(&0x10) {
                        data[0] = b'x';
                    }
                    encode_burst(mode, &data, &mut stream).unwrap();
                    expected.push(Event::Burst(data));
                }
                continue;
            }
            if live.is_empty() {
                break;
            }
            let i = live[rng.below(live.len())];
            let (wire, done) = queues[i].pop_front().unwrap();
            stream.extend_from_slice(&wire);
            if let Some(data) = done {
                expected.push(Event::Message {
                    writer: writers[i],
                    data,
                });
            }
        }
        // Feed in random splits.
        let mut parts = Vec::new();
        let mut rest = &stream[..];
        while !rest.is_empty() {
            let cap = if rng.below(3) == 0 { 8 } else { 9000 };
            let n = 1 + rng.below(rest.len().min(cap));
            let (a, b) = rest.split_at(n);
            parts.push(a);
            rest = b;
        }
        let (events, errors) = decode_all(mode, false, &parts);
        assert!(errors.is_empty(), "case {case}: {errors:?}");
        assert_eq!(events.len(), expected.len(), "case {case}");
        assert!(events == expected, "case {case}: events differ");
        total_messages += expected
            .iter()
            .filter(|e| matches!(e, Event::Message { .. }))
            .count();
        multi_writer_cases += usize::from(writers.len() > 1);
    }
    assert!(
        total_messages > 1000 && multi_writer_cases > 200,
        "{total_messages}"
    );
}

#[test]
fn mixed_lines_straddle_frames_and_end_at_eof() {
    let w = Writer::new(5, 0);
    let mut wire = b"one\nStart ...".to_vec();
    encode_burst(Mode::Mixed, b"burst\n\n", &mut wire).unwrap();
    encode_message(Mode::Mixed, w, b"msg", &mut wire);
    wire.extend_from_slice(b"... end\r\nlast");
    let (events, errors) = decode_all(Mode::Mixed, false, &[&wire]);
    assert!(errors.is_empty());
    assert_eq!(
        events,
        vec![
            Event::Line(b"one\n".to_vec()),
            Event::Burst(b"burst\n\n".to_vec()),
            Event::Message {
                writer: w,
                data: b"msg".to_vec()
            },
            Event::Line(b"Start ...... end\r\n".to_vec()),
            Event::Line(b"last".to_vec()),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Truncation: clear errors naming the writer and the offset, after every complete message.

#[test]
fn truncated_streams_report_writer_and_offset_after_complete_messages() {
    let a = Writer::new(111, 0);
    let b = Writer::new(222, 4);
    for mode in [Mode::Normal, Mode::Mixed] {
        let mut whole = Vec::new();
        encode_message(mode, a, b"first", &mut whole);
        let prefix = whole.len();
        encode_message(mode, b, &[b'z'; 10_000], &mut whole);
        for cut in prefix + 1..whole.len() {
            let (events, errors) = decode_all(mode, false, &[&whole[..cut]]);
            assert_eq!(
                events,
                vec![Event::Message {
                    writer: a,
                    data: b"first".to_vec()
                }]
            );
            assert!(errors.len() <= 2, "cut {cut}: {errors:?}");
            assert!(!errors.is_empty(), "cut {cut}");
            for e in &errors {
                assert!(!e.is_fatal());
                let text = e.to_string();
                assert!(text.contains(&format!("byte {}", e.offset())), "{text}");
                match e.kind() {
                    ProtocolErrorKind::TruncatedChunk { have, need } => {
                        assert!(e.offset() >= prefix as u64);
                        assert_eq!(have as u64, cut as u64 - e.offset());
                        let head = if mode == Mode::Mixed { 10 } else { 8 };
                        if have >= head {
                            assert_eq!(e.writer(), Some(b), "{text}");
                            assert!(text.contains("writer pid 222 tid 4"), "{text}");
                        }
                        if let Some(need) = need {
                            assert!(need > have);
                        }
                    }
                    ProtocolErrorKind::IncompleteMessage { chunks, .. } => {
                        assert_eq!(e.offset(), prefix as u64);
                        assert_eq!(e.writer(), Some(b));
                        assert!(chunks >= 1);
                        assert!(text.contains("writer pid 222 tid 4"), "{text}");
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    }
}

#[test]
fn interleaved_message_of_one_writer_is_reported_not_merged() {
    let w = Writer::new(9, 0);
    for mode in [Mode::Normal, Mode::Mixed] {
        let first: Vec<_> = message_chunks(mode, w, &[b'a'; 9000]).collect();
        let mut wire = Vec::new();
        first[0].append_to(&mut wire); // id 2
        let second_at = wire.len() as u64;
        // ids 4 … 0: a new message (a countdown that happens to continue cannot be told apart).
        encode_message(mode, w, &[b'b'; 20_000], &mut wire);
        let (events, errors) = decode_all(mode, false, &[&wire]);
        assert!(
            events
                == vec![Event::Message {
                    writer: w,
                    data: vec![b'b'; 20_000]
                }]
        );
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].offset(), second_at);
        assert!(matches!(
            errors[0].kind(),
            ProtocolErrorKind::ChunkOutOfOrder {
                expected: 1,
                got: 4,
                dropped: 4080 | 4077
            }
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Garbage never hangs or spins.

#[test]
fn normal_mode_garbage_is_fatal_and_sticky() {
    let mut wire = Vec::new();
    encode_message(Mode::Normal, Writer::new(1, 1), b"ok", &mut wire);
    let bad_at = wire.len() as u64;
    wire.extend_from_slice(&[0xAB; 64]); // size field 0xABABABAB
    let mut d = Decoder::new(Mode::Normal);
    d.feed(&wire);
    assert!(matches!(d.next_event(), Ok(Some(Event::Message { .. }))));
    let e = d.next_event().unwrap_err();
    assert!(e.is_fatal());
    assert_eq!(e.offset(), bad_at);
    assert!(matches!(e.kind(), ProtocolErrorKind::ChunkTooLarge { .. }));
    assert_eq!(d.next_event().unwrap_err(), e, "sticky");
    d.finish();
    assert_eq!(d.next_event().unwrap_err(), e);
}

#[test]
fn random_garbage_always_terminates() {
    for case in 0..200u64 {
        let mut rng = Rng(case * 7919 + 17);
        let len = rng.below(20_000);
        let garbage = rng.bytes(len, b"\x0E\x0F\x10\x00\x01\n ab\xFF");
        for mode in [Mode::Normal, Mode::Mixed] {
            let mut parts = Vec::new();
            let mut rest = &garbage[..];
            while !rest.is_empty() {
                let (a, b) = rest.split_at(1 + rng.below(rest.len().min(5000)));
                parts.push(a);
                rest = b;
            }
            // decode_all panics if the decoder does not settle.
            let (_events, _errors) = decode_all(mode, false, &parts);
            let (_events, _errors) = decode_all(mode, true, &parts);
        }
    }
}

#[test]
fn mixed_mode_resyncs_after_garbage() {
    let w = Writer::new(3, 0);
    let mut wire = vec![0x0E];
    wire.extend_from_slice(&[b'x'; 5000]); // a "burst" longer than any atomic write
    wire.push(b'\n');
    encode_message(Mode::Mixed, w, b"after", &mut wire);
    // A chunk header claiming too much, then a valid message.
    let mut bogus = vec![0x0E, 0x10];
    bogus.extend_from_slice(&3i32.to_ne_bytes());
    bogus.extend_from_slice(&0i32.to_ne_bytes());
    bogus.extend_from_slice(&0u32.to_ne_bytes());
    bogus.extend_from_slice(&9999u32.to_ne_bytes());
    bogus.push(b'\n');
    wire.extend_from_slice(&bogus);
    encode_message(Mode::Mixed, w, b"again", &mut wire);
    let (events, errors) = decode_all(Mode::Mixed, false, &[&wire]);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(errors[0].kind(), ProtocolErrorKind::BadBurst);
    assert_eq!(errors[0].offset(), 0);
    assert!(matches!(
        errors[1].kind(),
        ProtocolErrorKind::ChunkTooLarge { size: 9999, .. }
    ));
    let mut line = vec![0x0E];
    line.extend_from_slice(&[b'x'; 5000]);
    line.push(b'\n');
    assert_eq!(events[0], Event::Line(line));
    assert_eq!(
        events[1],
        Event::Message {
            writer: w,
            data: b"after".to_vec()
        }
    );
    assert_eq!(events[2], Event::Line(bogus));
    assert_eq!(
        events[3],
        Event::Message {
            writer: w,
            data: b"again".to_vec()
        }
    );
}

#[test]
fn mixed_truncated_burst_at_eof() {
    let (events, errors) = decode_all(Mode::Mixed, false, &[b"line\n\x0Eunfinished"]);
    assert_eq!(events, vec![Event::Line(b"line\n".to_vec())]);
    assert_eq!(errors.len(), 1);
    assert_eq!(
        errors[0].kind(),
        ProtocolErrorKind::TruncatedBurst { have: 10 }
    );
    assert_eq!(errors[0].offset(), 5);
}

// ---------------------------------------------------------------------------------------------
// zstd bursts in mixed mode, and volume.

/// A zstd frame of one raw block holding `data` (valid zstd, what tiny inputs become).
fn raw_zstd_frame(data: &[u8]) -> Vec<u8> {
    assert!(data.len() < 256);
    let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0x20, data.len() as u8];
    let h = (data.len() as u32) << 3 | 1;
    f.extend_from_slice(&h.to_le_bytes()[..3]);
    f.extend_from_slice(data);
    f
}

#[test]
fn zstd_bursts_holding_0x0f_survive_mixed_mode() {
    let frame = raw_zstd_frame(b"a\x0Fb\x0F");
    let mut wire = Vec::new();
    assert!(encode_burst(Mode::Mixed, &frame, &mut wire).is_err());
    encode_burst_unchecked(Mode::Mixed, &frame, &mut wire).unwrap();
    encode_burst(Mode::Mixed, b"plain", &mut wire).unwrap();
    for parts in [vec![&wire[..]], wire.chunks(1).collect()] {
        let (events, errors) = decode_all(Mode::Mixed, true, &parts);
        assert!(errors.is_empty());
        assert_eq!(
            events,
            vec![Event::Burst(frame.clone()), Event::Burst(b"plain".to_vec())]
        );
        assert_eq!(unzstd(&frame), b"a\x0Fb\x0F");
    }
    // Without zstd bursts the reader cuts at the first 0x0F, as Atomic::Pipe does.
    let (events, _) = decode_all(Mode::Mixed, false, &[&wire]);
    assert_eq!(events[0], Event::Burst(frame[..frame.len() - 3].to_vec()));
}

#[test]
fn feed_with_reads_into_the_buffer() {
    let mut wire = Vec::new();
    encode_message(Mode::Normal, Writer::new(1, 2), b"hi there", &mut wire);
    let mut d = Decoder::new(Mode::Normal);
    let mut src = &wire[..];
    while !src.is_empty() {
        let n = d
            .feed_with(5, |buf| -> Result<usize, ()> {
                let n = buf.len().min(src.len());
                buf[..n].copy_from_slice(&src[..n]);
                Ok(n)
            })
            .unwrap();
        src = &src[n..];
    }
    assert_eq!(d.feed_with(5, |_| Err::<usize, _>("boom")), Err("boom"));
    assert_eq!(
        d.next_event().unwrap(),
        Some(Event::Message {
            writer: Writer::new(1, 2),
            data: b"hi there".to_vec()
        })
    );
    assert_eq!(d.offset(), wire.len() as u64);
    assert_eq!(d.buffered(), 0);
}

#[test]
fn volume_stays_linear() {
    // 100,000 mixed-mode messages and 3,200 of 10 KB, fed in pipe-sized reads: the buffer
    // stays small and the time per byte flat (Atomic::Pipe rescans and slows to a crawl).
    let w = Writer::new(42, 0);
    for (count, size) in [(100_000usize, 100usize), (3_200, 10_000)] {
        let msg = vec![b'm'; size];
        let mut wire = Vec::new();
        for _ in 0..count {
            encode_message(Mode::Mixed, w, &msg, &mut wire);
            wire.extend_from_slice(b"a line\n");
        }
        let start = std::time::Instant::now();
        let mut d = Decoder::new(Mode::Mixed);
        let (mut msgs, mut lines, mut max_buffered) = (0, 0, 0);
        for part in wire.chunks(65_536) {
            d.feed(part);
            max_buffered = max_buffered.max(d.buffered());
            while let Some(e) = d.next_event().unwrap() {
                match e {
                    Event::Message { data, .. } => {
                        assert_eq!(data.len(), size);
                        msgs += 1;
                    }
                    Event::Line(_) => lines += 1,
                    Event::Burst(_) => panic!("no bursts"),
                }
            }
        }
        d.finish();
        assert_eq!(d.next_event().unwrap(), None);
        assert_eq!((msgs, lines), (count, count));
        assert!(max_buffered <= 2 * 65_536, "{max_buffered}");
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "{count} x {size} B mixed: {:.0} msg/s, {:.0} MiB/s",
            count as f64 / secs,
            wire.len() as f64 / secs / (1 << 20) as f64
        );
    }
}
