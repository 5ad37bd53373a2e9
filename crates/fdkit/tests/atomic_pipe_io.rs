//! The atomic pipe's I/O ends against real pipes: MessageWriter → kernel → MessageReader.

use fdkit::atomic_pipe::{
    Compression, Event, MessageReader, MessageWriter, Mode, ProtocolErrorKind, ReadError, Wait,
    Writer, PIPE_BUF,
};
use fdkit::fd::{no_checkpoint, pipe2, Errno, PipeFlags};
use std::time::{Duration, Instant};

fn pair(mode: Mode) -> (MessageReader, MessageWriter) {
    let (r, w) = pipe2(PipeFlags::CLOEXEC).unwrap();
    (
        MessageReader::new(r, mode).unwrap(),
        MessageWriter::new(w, mode).unwrap(),
    )
}

fn go() -> impl FnMut() -> Result<(), Errno> {
    no_checkpoint
}

fn next_message(r: &mut MessageReader) -> Option<Vec<u8>> {
    match r.next_event(Wait::Until(None), &mut go()).unwrap()? {
        Event::Message { data, .. } => Some(data),
        other => panic!("expected a message, got {other:?}"),
    }
}

#[test]
fn messages_round_trip_across_a_writer_thread() {
    let (mut r, mut w) = pair(Mode::Normal);
    let sizes = [0usize, 1, 4079, 4080, 4081, 10_000, 1 << 20];
    let writer = std::thread::spawn(move || {
        for &n in &sizes {
            let msg: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            w.write_message(&msg, &mut go()).unwrap();
        }
        w.close(&mut go()).unwrap();
    });
    // The empty message writes nothing (as in Atomic::Pipe).
    for &n in &sizes[1..] {
        let msg = next_message(&mut r).unwrap();
        assert_eq!(msg.len(), n);
        assert!(msg.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    }
    assert_eq!(next_message(&mut r), None);
    assert!(r.is_eof());
    writer.join().unwrap();
}

#[test]
fn the_writer_is_the_calling_thread() {
    let (mut r, mut w) = pair(Mode::Normal);
    w.write_message(b"main", &mut go()).unwrap();
    let me = Writer::current();
    assert_eq!(me.pid, std::process::id() as i32);
    let other = std::thread::spawn(Writer::current).join().unwrap();
    assert_eq!(other.pid, me.pid);
    assert_ne!(other.tid, me.tid);
    assert_ne!(other.tid, 0);
    match r.next_event(Wait::Until(None), &mut go()).unwrap() {
        Some(Event::Message { writer, data }) => {
            assert_eq!(writer, me);
            assert_eq!(data, b"main");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_batch_shares_writes_and_keeps_order() {
    let (mut r, mut w) = pair(Mode::Normal);
    let msgs: Vec<Vec<u8>> = (0..5000u32).map(|i| i.to_le_bytes().repeat(25)).collect();
    let n = w
        .write_messages(msgs.iter().map(Vec::as_slice).take(400), &mut go())
        .unwrap();
    assert_eq!(n, 400);
    let mut out = Vec::new();
    r.next_events(10_000, Wait::Until(None), &mut go(), &mut out)
        .unwrap();
    assert_eq!(out.len(), 400, "one read brings the whole batch");
    for (i, e) in out.iter().enumerate() {
        assert_eq!(
            e,
            &Event::Message {
                writer: Writer::current(),
                data: msgs[i].clone()
            }
        );
    }
}

#[test]
fn a_non_blocking_writer_queues_and_flushes_with_poll() {
    let (mut r, mut w) = pair(Mode::Normal);
    w.set_blocking(false).unwrap();
    let msg = vec![7u8; 3000];
    for _ in 0..100 {
        w.write_message(&msg, &mut go()).unwrap();
    }
    assert!(w.pending_output() > 0, "a 64 KiB pipe cannot take 300 KB");
    let cpu = cpu_time();
    let t = Instant::now();
    assert!(!w
        .flush(Some(Duration::from_millis(300)), &mut go())
        .unwrap());
    assert!(t.elapsed() >= Duration::from_millis(290));
    assert!(
        cpu_time() - cpu < Duration::from_millis(100),
        "flush waits in poll(2), it does not spin"
    );
    let reader = std::thread::spawn(move || {
        let mut n = 0;
        while let Some(m) = next_message(&mut r) {
            assert_eq!(m, vec![7u8; 3000]);
            n += 1;
        }
        n
    });
    assert!(w.flush(None, &mut go()).unwrap());
    assert_eq!(w.pending_output(), 0);
    w.close(&mut go()).unwrap();
    assert_eq!(reader.join().unwrap(), 100);
}

#[test]
fn a_vanished_reader_is_epipe_not_sigpipe() {
    let (r, mut w) = pair(Mode::Normal);
    drop(r);
    // Rust ignores SIGPIPE by default; make it deadly as in a C program, for this check.
    // SAFETY: setting a standard disposition for SIGPIPE; the writer blocks it around writes.
    let old = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let got = w.write_message(b"anyone?", &mut go());
    // SAFETY: restoring the disposition read above.
    unsafe { libc::signal(libc::SIGPIPE, old) };
    assert_eq!(got, Err(Errno::PIPE));
    assert_eq!(w.pending_output(), 0);
}

#[test]
fn a_deadline_returns_none_in_time() {
    let (mut r, _w) = pair(Mode::Normal);
    let t = Instant::now();
    let got = r
        .next_event(Wait::timeout(Some(Duration::from_millis(150))), &mut go())
        .unwrap();
    assert_eq!(got, None);
    assert!(t.elapsed() >= Duration::from_millis(140));
    assert!(!r.is_eof());
    r.set_blocking(false).unwrap();
    assert_eq!(r.next_event(Wait::Never, &mut go()).unwrap(), None);
}

#[test]
fn zstd_round_trips_with_and_without_a_dictionary() {
    let dict = b"{\"level\": \"info\", \"message\": \"request served\", \"status\": 200}".repeat(4);
    for dictionary in [None, Some(dict.to_vec())] {
        let config = Compression {
            level: 3,
            dictionary,
        };
        for mode in [Mode::Normal, Mode::Mixed] {
            let (mut r, mut w) = pair(mode);
            w.set_compression(Some(&config)).unwrap();
            r.set_compression(Some(&config), false).unwrap();
            let msg = b"{\"level\": \"info\", \"message\": \"request served\", \"status\": 200}"
                .repeat(300);
            w.write_message(&msg, &mut go()).unwrap();
            w.write_message(b"", &mut go()).unwrap();
            assert!(w.write_burst(b"burst\x0f\x10", &mut go()).unwrap().is_ok());
            w.close(&mut go()).unwrap();
            assert_eq!(next_message(&mut r).unwrap(), msg);
            assert_eq!(next_message(&mut r).unwrap(), b"");
            if mode == Mode::Mixed {
                let burst = r.next_event(Wait::Until(None), &mut go()).unwrap();
                assert_eq!(burst, Some(Event::Burst(b"burst\x0f\x10".to_vec())));
            }
        }
    }
}

#[test]
fn keep_compressed_hands_back_the_message_and_its_frame() {
    let config = Compression::default();
    let (mut r, mut w) = pair(Mode::Normal);
    w.set_compression(Some(&config)).unwrap();
    r.set_compression(Some(&config), true).unwrap();
    assert_eq!(w.write_message(&[b'a'; 10_000], &mut go()).unwrap(), 1);
    assert_eq!(next_message(&mut r).unwrap(), vec![b'a'; 10_000]);
    let frame = r.take_compressed().expect("the frame is kept");
    assert_eq!(&frame[..4], &[0x28, 0xB5, 0x2F, 0xFD], "a zstd frame");
    assert_eq!(zstd::decode_all(&frame[..]).unwrap(), vec![b'a'; 10_000]);
    assert_eq!(r.take_compressed(), None, "one frame per message");
}

#[test]
fn write_message_returns_its_chunks() {
    let (mut r, mut w) = pair(Mode::Normal);
    // Perl's t/ipc.t: "dd" x PIPE_BUF takes 3 parts.
    assert_eq!(
        w.write_message(&[b'd'; 2 * PIPE_BUF], &mut go()).unwrap(),
        3
    );
    assert_eq!(w.write_message(b"x", &mut go()).unwrap(), 1);
    assert_eq!(w.write_message(b"", &mut go()).unwrap(), 0);
    assert_eq!(next_message(&mut r).unwrap().len(), 2 * PIPE_BUF);
    assert_eq!(next_message(&mut r).unwrap(), b"x");
}

#[test]
fn check_eof_looks_at_the_pipe_and_fill_buffer_reads_once() {
    let (mut r, mut w) = pair(Mode::Normal);
    assert!(!r.check_eof(&mut go()).unwrap(), "a writer is still there");
    w.write_message(b"last", &mut go()).unwrap();
    r.set_read_size(8);
    assert_eq!(r.read_size(), 8);
    let now = Wait::timeout(Some(Duration::ZERO));
    assert_eq!(r.fill_buffer(now, &mut go()).unwrap(), 8);
    drop(w);
    assert!(
        !r.check_eof(&mut go()).unwrap(),
        "a message is still to be read"
    );
    assert_eq!(next_message(&mut r).unwrap(), b"last");
    assert!(r.check_eof(&mut go()).unwrap());
    assert_eq!(r.fill_buffer(now, &mut go()).unwrap(), 0);

    let (mut r, w) = pair(Mode::Normal);
    drop(w);
    assert!(
        r.check_eof(&mut go()).unwrap(),
        "no read saw the end yet: check_eof looks"
    );
}

#[test]
fn bad_compressed_data_is_reported_and_reading_goes_on() {
    let config = Compression::default();
    let (mut r, mut w) = pair(Mode::Normal);
    r.set_compression(Some(&config), false).unwrap();
    w.write_message(b"not zstd", &mut go()).unwrap();
    w.set_compression(Some(&config)).unwrap();
    w.write_message(b"fine", &mut go()).unwrap();
    match r.next_event(Wait::Until(None), &mut go()) {
        Err(ReadError::Protocol(e)) => {
            assert!(matches!(
                e.kind(),
                ProtocolErrorKind::BadCompressedData { .. }
            ));
            assert_eq!(e.writer(), Some(Writer::current()));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(next_message(&mut r).unwrap(), b"fine");
}

#[test]
fn mixed_mode_carries_lines_bursts_and_messages() {
    let (mut r, mut w) = pair(Mode::Mixed);
    let fd = w.fd().unwrap();
    rustix::io::write(fd, b"plain line\npartial").unwrap();
    w.write_burst(b"B", &mut go()).unwrap().unwrap();
    w.write_message(&[b'm'; 9000], &mut go()).unwrap();
    assert!(w.write_burst(b"\x0fbad", &mut go()).unwrap().is_err());
    assert!(w
        .write_burst(&[b'x'; PIPE_BUF], &mut go())
        .unwrap()
        .is_err());
    let mut events = Vec::new();
    let wait = Wait::timeout(Some(Duration::from_millis(200)));
    while let Some(e) = r.next_event(wait, &mut go()).unwrap() {
        events.push(e);
    }
    assert_eq!(
        events,
        vec![
            Event::Line(b"plain line\n".to_vec()),
            Event::Burst(b"B".to_vec()),
            Event::Message {
                writer: Writer::current(),
                data: vec![b'm'; 9000]
            },
        ]
    );
    assert_eq!(r.partial_line(), b"partial");
    w.close(&mut go()).unwrap();
    assert_eq!(
        r.next_event(Wait::Until(None), &mut go()).unwrap(),
        Some(Event::Line(b"partial".to_vec()))
    );
}

#[test]
fn a_truncated_stream_errors_after_the_complete_messages() {
    let (mut r, w) = pair(Mode::Normal);
    let mut bytes = Vec::new();
    let me = Writer::new(4242, 7);
    fdkit::atomic_pipe::encode_message(Mode::Normal, me, b"complete", &mut bytes);
    let mut long = Vec::new();
    fdkit::atomic_pipe::encode_message(Mode::Normal, me, &[1u8; 9000], &mut long);
    bytes.extend_from_slice(&long[..PIPE_BUF + 100]);
    rustix::io::write(w.fd().unwrap(), &bytes).unwrap();
    drop(w);
    assert_eq!(next_message(&mut r).unwrap(), b"complete");
    let mut errors = Vec::new();
    loop {
        match r.next_event(Wait::Until(None), &mut go()) {
            Ok(None) => break,
            Ok(Some(e)) => panic!("unexpected {e:?}"),
            Err(ReadError::Protocol(e)) => errors.push(e),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(matches!(
        errors[0].kind(),
        ProtocolErrorKind::TruncatedChunk { .. }
    ));
    assert_eq!(errors[0].offset(), 24 + PIPE_BUF as u64);
    assert!(matches!(
        errors[1].kind(),
        ProtocolErrorKind::IncompleteMessage { .. }
    ));
    assert_eq!(errors[1].writer(), Some(me));
    assert!(r.is_eof());
}

fn cpu_time() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a writable timespec and the clock id is valid.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}
