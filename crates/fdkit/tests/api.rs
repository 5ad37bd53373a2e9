//! The crate's Rust face: every public error type converts into `std::io::Error` with `?`
//! (the errno kept, fdkit's own errors kept as the payload), and the simple entry points
//! (`transfer_all`, `proxy_all`, `stop_when`) against the real kernel on loopback.

use fdkit::atomic_pipe::{
    encode_burst, BurstError, Compression, Decompressor, MessageReader, Mode, ProtocolError,
    ReadError, Wait,
};
use fdkit::fd::{self, no_checkpoint, stop_when, Errno, OFlags, PipeFlags, SocketFlags};
use fdkit::servers::proxy::{Endpoint, ProxyConfig, ProxyServer};
use fdkit::zerocopy::{proxy_all, transfer_all, SMALL_TRANSFER};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::{data, listener, tcp_pair, unix_pair};

/// `?` from any fdkit error into `io::Error`: what a Rust caller's `main` does.
fn lift<T, E>(r: Result<T, E>) -> io::Result<T>
where
    io::Error: From<E>,
{
    Ok(r?)
}

#[test]
fn kernel_errors_keep_their_errno_through_question_mark() {
    let e = lift::<(), _>(Err(Errno::PIPE)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPIPE));
    let e = lift::<(), _>(Err(fdkit::Error::Os(Errno::BADF))).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBADF));
    let e = lift::<(), _>(Err(ReadError::Os(Errno::AGAIN))).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
    assert_eq!(fdkit::Error::Os(Errno::BADF).errno(), Some(Errno::BADF));
    assert_eq!(fdkit::Error::InvalidArgument("x").errno(), None);
}

#[test]
fn a_misuse_rides_in_the_io_error_and_can_be_taken_back() {
    // A blocking listener: accept_many refuses it rather than sleep on an empty backlog.
    let (l, _) = listener(false);
    let refused = fd::accept_many(l.as_fd(), 8, SocketFlags::CLOEXEC).unwrap_err();
    assert_eq!(refused, fdkit::Error::NeedsNonBlocking("accept_many"));
    let e = lift::<(), _>(Err(refused)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(e.raw_os_error(), None);
    assert_eq!(e.to_string(), refused.to_string());
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<fdkit::Error>());
    assert_eq!(inner, Some(&refused));
}

#[test]
fn a_broken_atomic_pipe_stream_is_invalid_data_carrying_the_protocol_error() {
    let (r, w) = fd::pipe2(PipeFlags::CLOEXEC).unwrap();
    fd::write(&w, &[1, 2, 3, 4, 5]).unwrap(); // five bytes of a 16-byte chunk header
    drop(w);
    let mut reader = MessageReader::new(r, Mode::Normal).unwrap();
    let wait = Wait::timeout(Some(Duration::from_secs(10)));
    let err = reader.next_event(wait, &mut no_checkpoint).unwrap_err();
    let ReadError::Protocol(protocol) = err.clone() else {
        panic!("expected a protocol error, got {err:?}");
    };
    let e = lift::<(), _>(Err(err)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<ProtocolError>());
    assert_eq!(inner, Some(&protocol));
}

#[test]
fn codec_errors_convert_with_their_kind() {
    let mut out = Vec::new();
    let burst = encode_burst(Mode::Normal, &[0u8; 5000], &mut out).unwrap_err();
    assert!(matches!(burst, BurstError::TooLarge { len: 5000, .. }));
    let e = lift::<(), _>(Err(burst)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(
        e.get_ref().and_then(|i| i.downcast_ref::<BurstError>()),
        Some(&burst)
    );

    let mut d = Decompressor::new(&Compression::default()).unwrap();
    let bad = d.decompress(b"not a zstd frame").unwrap_err();
    assert_eq!(bad.to_string(), "not a zstd frame");
    let e = lift::<(), _>(Err(bad)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert_eq!(e.to_string(), "not a zstd frame");
}

fn temp_file(bytes: &[u8]) -> OwnedFd {
    let dir = std::env::temp_dir();
    let (f, path) = fd::mkstemp(&dir, "fdkit-api-".as_ref(), "".as_ref(), true).unwrap();
    std::fs::remove_file(path).unwrap();
    let mut at = 0;
    while at < bytes.len() {
        at += fd::write(&f, &bytes[at..]).unwrap();
    }
    fd::lseek(&f, fd::SeekFrom::Start(0)).unwrap();
    f
}

fn read_all_at(f: &OwnedFd) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = fd::pread(f, &mut buf, out.len() as u64).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn transfer_all_copies_a_file_to_the_end_and_advances_both_positions() {
    let bytes = data(3 * SMALL_TRANSFER as usize + 12345, 1);
    let src = temp_file(&bytes);
    let dst = temp_file(b"");
    fd::lseek(&src, fd::SeekFrom::Start(10)).unwrap();
    assert_eq!(transfer_all(&src, &dst).unwrap(), bytes.len() as u64 - 10);
    assert_eq!(read_all_at(&dst), &bytes[10..]);
    let end = |f: &OwnedFd| fd::lseek(f, fd::SeekFrom::Current(0)).unwrap();
    assert_eq!(end(&src), bytes.len() as u64);
    assert_eq!(end(&dst), bytes.len() as u64 - 10);
}

#[test]
fn transfer_all_reads_a_socket_until_its_peer_shuts_down() {
    let (feeder, source) = unix_pair();
    let dst = temp_file(b"");
    let bytes = data(1 << 20, 2);
    let sent = bytes.clone();
    let writer = std::thread::spawn(move || {
        let mut at = 0;
        while at < sent.len() {
            at += fd::write(&feeder, &sent[at..]).unwrap();
        }
        fd::shutdown(&feeder, fd::Shutdown::Write).unwrap();
        feeder // kept open: the end of the stream is the shutdown, not a close
    });
    assert_eq!(transfer_all(&source, &dst).unwrap(), bytes.len() as u64);
    drop(writer.join().unwrap());
    assert_eq!(read_all_at(&dst), bytes);
}

#[test]
fn transfer_all_reports_the_kernels_errno() {
    let (r, w) = fd::pipe2(PipeFlags::CLOEXEC).unwrap();
    fd::write(&w, b"x").unwrap(); // something to move: an empty pipe would wait for a writer
    let read_only = fd::open(
        "/dev/null",
        OFlags::RDONLY | OFlags::CLOEXEC,
        fd::Mode::empty(),
    );
    let e = transfer_all(&r, read_only.unwrap()).unwrap_err();
    assert_eq!(e, Errno::BADF); // not open for writing
}

#[test]
fn proxy_all_relays_both_ways_until_both_end() {
    let (client, a) = tcp_pair();
    let (b, server) = tcp_pair();
    let up = data(2 << 20, 3);
    let down = data(1 << 20, 4);
    let relay = std::thread::spawn(move || proxy_all(&a, &b));
    let talk = |sock: OwnedFd, out: Vec<u8>| {
        std::thread::spawn(move || {
            let reader = fd::dup(sock.as_fd(), true).unwrap();
            let got = std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    let n = fd::read(&reader, &mut buf).unwrap();
                    if n == 0 {
                        return got;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
            });
            let mut at = 0;
            while at < out.len() {
                at += fd::write(&sock, &out[at..]).unwrap();
            }
            fd::shutdown(&sock, fd::Shutdown::Write).unwrap();
            got.join().unwrap()
        })
    };
    let at_client = talk(client, up.clone());
    let at_server = talk(server, down.clone());
    assert_eq!(at_server.join().unwrap(), up);
    assert_eq!(at_client.join().unwrap(), down);
    assert_eq!(
        relay.join().unwrap().unwrap(),
        (up.len() as u64, down.len() as u64)
    );
}

#[test]
fn proxy_all_refuses_what_is_not_a_socket() {
    let (r, w) = fd::pipe2(PipeFlags::CLOEXEC).unwrap();
    assert_eq!(proxy_all(&r, &w), Err(Errno::NOTSOCK));
}

#[test]
fn stop_when_stops_a_running_server_from_another_thread() {
    let (_upstream, addr) = listener(false);
    let listen = Endpoint::parse("127.0.0.1:0").unwrap();
    let config = ProxyConfig::new(listen, Endpoint::Tcp(addr.into()));
    let server = ProxyServer::bind(config).unwrap();
    let stop = AtomicBool::new(false);
    let stats = std::thread::scope(|s| {
        let run = s.spawn(|| server.run(stop_when(&stop), |_| {}));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!run.is_finished(), "the server runs until told to stop");
        let asked = Instant::now();
        stop.store(true, Ordering::Relaxed);
        let stats = run.join().unwrap().unwrap();
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{:?}",
            asked.elapsed()
        );
        stats
    });
    assert_eq!(stats.connections, 0);
}
