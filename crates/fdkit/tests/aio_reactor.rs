//! `fdkit::aio::Reactor` against the real kernel, one test per behaviour of its contract (the
//! `fdkit::aio` module docs): streams (bytes in order through a small provided-buffer ring,
//! `recv`'s `max`, EOF and resets after the bytes, level-triggered reports that keep the poll
//! from sleeping), pause and resume (nothing reported, nothing lost, the hold limit and TCP
//! backpressure), `close_stream` (the peer's EOF at once, no late completion for a new stream
//! on the same fd number), listeners (many connections, the queue limit, `stop_listening`,
//! an accept error), readiness (level-triggered, `remove_interest`, an interest change), the
//! wait (report order, timeouts, signals, ops the kernel cancelled when the thread that armed
//! them exited), a tiny submission queue with many ops armed at once, and building and
//! dropping reactors without a leak.
//!
//! Each test skips (printing `SKIPPED <test>: <why>` on stderr) when io_uring is unavailable
//! or the kernel is older than 6.0 (multishot receive); with `FDKIT_REQUIRE_URING=1` a
//! missing io_uring fails the test instead. Every wait has a deadline; all traffic is on
//! loopback.

use fdkit::aio::{Interest, ListenerId, Reactor, ReactorOptions, Ready, Received, StreamId};
use fdkit::fd::{self, AddressFamily, DupFlags, Errno, PipeFlags, PollFd, PollFlags, RecvFlags};
use fdkit::fd::{SendFlags, Shutdown, SocketFlags, SocketType};
use fdkit::uring::KernelVersion;
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddrV4;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

mod common;
use common::{client, data, listener, require_uring, skip, tcp_pair, unix_pair};

/// How long any one wait for something that must happen may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// A poll that must not sleep returns well within this (its own timeout is [`TIMEOUT`]).
const AT_ONCE: Duration = Duration::from_secs(1);
/// The reactor's hold limit for a paused stream (`HOLD_LIMIT` in reactor.rs).
const HOLD_LIMIT: usize = 256 * 1024;
/// A listener's queue limit (`QUEUE_LIMIT` in listener.rs).
const QUEUE_LIMIT: usize = 256;

/// The tests that count the process's open fds or lower its fd limit hold this exclusively;
/// every other test holds it shared, so no fd opens or closes meanwhile.
static FDS: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    FDS.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    FDS.write().unwrap_or_else(|e| e.into_inner())
}

/// Whether a reactor can run here: io_uring (see `require_uring`) and Linux 6.0 (multishot
/// receive); prints the skip reason when not.
fn supported() -> bool {
    if !require_uring() {
        return false;
    }
    let kernel = KernelVersion::running();
    if !kernel.at_least(6, 0) {
        skip(format_args!(
            "the reactor's multishot receive needs Linux 6.0+, this is {}",
            kernel.release
        ));
        return false;
    }
    true
}

fn reactor_with(options: ReactorOptions) -> Option<Reactor> {
    if !supported() {
        return None;
    }
    Some(Reactor::new(options).expect("Reactor::new"))
}

fn reactor() -> Option<Reactor> {
    reactor_with(ReactorOptions::default())
}

/// Four provided buffers of 256 bytes: a few KiB run them dry many times over.
fn small_buffers() -> ReactorOptions {
    ReactorOptions {
        entries: 64,
        buffers: 4,
        buffer_size: 256,
    }
}

fn poll(r: &mut Reactor, timeout: Duration) -> Vec<Ready> {
    r.poll(Some(timeout)).expect("poll")
}

/// A poll with a long timeout that must return at once; returns its reports.
fn poll_at_once(r: &mut Reactor, why: &str) -> Vec<Ready> {
    let t = Instant::now();
    let got = poll(r, TIMEOUT);
    assert!(
        t.elapsed() < AT_ONCE,
        "{why}: the poll slept {:?}",
        t.elapsed()
    );
    got
}

/// Polls until a report satisfies `what` (at most [`TIMEOUT`]); returns that poll's reports.
fn poll_until(r: &mut Reactor, what: impl Fn(&Ready) -> bool, why: &str) -> Vec<Ready> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let got = poll(r, Duration::from_millis(100));
        if got.iter().any(&what) {
            return got;
        }
        assert!(Instant::now() < deadline, "{why}: not within {TIMEOUT:?}");
    }
}

fn fd_ready(fd: RawFd, read: bool, write: bool) -> Ready {
    Ready::Fd {
        fd,
        ready: Interest { read, write },
    }
}

/// Checks one `Received::Data`: together 1..=`max` bytes, no vector empty or larger than one
/// provided buffer (`vec_max`); returns the bytes and gives the vectors back.
fn take_data(r: &mut Reactor, chunks: Vec<Vec<u8>>, max: usize, vec_max: usize) -> Vec<u8> {
    let total: usize = chunks.iter().map(Vec::len).sum();
    assert!(
        (1..=max).contains(&total),
        "recv(max = {max}) handed over {total} bytes"
    );
    let mut out = Vec::with_capacity(total);
    for c in chunks {
        assert!(
            !c.is_empty() && c.len() <= vec_max,
            "a vector of {} bytes (provided buffers hold {vec_max})",
            c.len()
        );
        out.extend_from_slice(&c);
        r.recycle(c);
    }
    out
}

/// Reads `id` as asyncio's loop would: one `recv` (of `max()` bytes) each time a poll reports
/// it, until its end (EOF or an error), which is returned with every byte before it. Checks
/// that a report always has something to take, that no other stream is reported, and that
/// the end is handed over once.
fn read_to_end(
    r: &mut Reactor,
    id: StreamId,
    mut max: impl FnMut() -> usize,
    vec_max: usize,
) -> (Vec<u8>, Received) {
    let deadline = Instant::now() + TIMEOUT;
    let mut got = Vec::new();
    loop {
        assert!(
            Instant::now() < deadline,
            "stream {id}: {} bytes and no end within {TIMEOUT:?}",
            got.len()
        );
        let ready = poll(r, Duration::from_millis(100));
        for x in &ready {
            if let Ready::Stream(other) = x {
                assert_eq!(*other, id, "a stream nobody reads was reported");
            }
        }
        if !ready.contains(&Ready::Stream(id)) {
            continue;
        }
        let m = max();
        match r.recv(id, m) {
            Some(Received::Data(chunks)) => {
                let bytes = take_data(r, chunks, m, vec_max);
                got.extend_from_slice(&bytes);
            }
            Some(end) => {
                assert_eq!(r.recv(id, m), None, "the end is handed over once");
                return (got, end);
            }
            None => panic!("stream {id} was reported with nothing to take"),
        }
    }
}

fn send_all(to: &OwnedFd, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        match fd::send(to, bytes, SendFlags::NOSIGNAL) {
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::INTR) => {}
            Err(e) => panic!("send: {e}"),
        }
    }
}

/// Waits (at most `within`) until `sock` is readable, then says what recv(2) says: `Ok(0)`
/// for EOF, `Err` for a reset.
fn peer_sees(sock: &OwnedFd, within: Duration) -> Result<usize, Errno> {
    let mut fds = [PollFd::new(sock, PollFlags::IN)];
    let n = fd::poll(&mut fds, Some(within), fd::no_checkpoint).unwrap();
    assert_eq!(n, 1, "the peer saw nothing within {within:?}");
    let mut buf = [0u8; 64];
    fd::recv(sock, &mut buf, RecvFlags::DONTWAIT).map(|(n, _)| n)
}

/// A client socket's connect(2) to `addr`, its error returned.
fn try_connect(addr: &SocketAddrV4) -> Result<OwnedFd, Errno> {
    let c = fd::socket(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    fd::connect(c.as_fd(), addr, fd::no_checkpoint).map(|()| c)
}

fn local_port(sock: &OwnedFd) -> u16 {
    SocketAddrV4::try_from(fd::getsockname(sock).unwrap())
        .unwrap()
        .port()
}

fn peer_port(sock: &OwnedFd) -> u16 {
    SocketAddrV4::try_from(fd::getpeername(sock).unwrap().expect("connected"))
        .unwrap()
        .port()
}

/// Takes every connection `l` has queued now (`accept` until None).
fn take_all(r: &mut Reactor, l: ListenerId, into: &mut Vec<OwnedFd>) -> usize {
    let mut n = 0;
    while let Some(got) = r.accept(l) {
        into.push(got.expect("an accepted connection"));
        n += 1;
    }
    n
}

/// An endless byte stream whose every offset is known: a 1 MiB block of `data` repeated, of a
/// prime length so that a chunk lost, repeated or moved shows at any chunk size.
struct Pattern(Vec<u8>);

impl Pattern {
    fn new(seed: u64) -> Pattern {
        Pattern(data(1_048_573, seed))
    }

    /// Up to `n` bytes from offset `at`.
    fn at(&self, at: usize, n: usize) -> &[u8] {
        let i = at % self.0.len();
        &self.0[i..(i + n).min(self.0.len())]
    }

    fn check(&self, at: usize, got: &[u8]) {
        let mut done = 0;
        while done < got.len() {
            let want = self.at(at + done, got.len() - done);
            assert!(
                got[done..done + want.len()] == *want,
                "the bytes at offset {} are not the ones sent there",
                at + done
            );
            done += want.len();
        }
    }
}

// ---- streams ----------------------------------------------------------------------------------

#[test]
fn bytes_arrive_in_order_across_many_provided_buffers() {
    let _fds = shared();
    let options = small_buffers();
    let Some(mut r) = reactor_with(options) else {
        return;
    };
    let (c, s) = tcp_pair();
    // 256 KiB through 4 buffers of 256 bytes: the ring runs dry again and again, each
    // ENOBUFS ends the multishot receive and the reactor arms it again.
    let sent = data(256 * 1024, 1);
    let id = r.open_stream(s.as_raw_fd());
    r.resume(id);
    let writer = {
        let sent = sent.clone();
        std::thread::spawn(move || {
            send_all(&c, &sent);
            drop(c);
        })
    };
    let (got, end) = read_to_end(&mut r, id, || 4096, options.buffer_size as usize);
    writer.join().unwrap();
    assert_eq!(got.len(), sent.len());
    assert!(got == sent, "the bytes arrived out of order or changed");
    assert_eq!(end, Received::Eof);
}

#[test]
fn recv_never_hands_over_more_than_max() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (c, s) = tcp_pair();
    let sent = data(300_000, 2);
    let id = r.open_stream(s.as_raw_fd());
    r.resume(id);
    let writer = {
        let sent = sent.clone();
        std::thread::spawn(move || {
            // In pieces, so that completions of many sizes wait together in the inbox.
            for piece in sent.chunks(10_007) {
                send_all(&c, piece);
            }
            drop(c);
        })
    };
    let sizes = [
        1,
        2,
        3,
        7,
        100,
        1000,
        4095,
        4097,
        16384,
        16385,
        65536,
        1 << 20,
    ];
    let mut i = 0;
    let max = || {
        i += 1;
        sizes[i % sizes.len()]
    };
    let (got, end) = read_to_end(&mut r, id, max, 16 * 1024);
    writer.join().unwrap();
    assert!(got == sent, "the bytes arrived out of order or changed");
    assert_eq!(end, Received::Eof);
}

#[test]
fn eof_is_handed_over_once_after_every_byte() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (c, s) = tcp_pair();
    let id = r.open_stream(s.as_raw_fd());
    r.resume(id);
    poll(&mut r, Duration::ZERO);
    let sent = data(10_000, 3);
    send_all(&c, &sent);
    drop(c);
    // 1000 bytes a call: the EOF has long arrived while bytes still wait.
    let (got, end) = read_to_end(&mut r, id, || 1000, 16 * 1024);
    assert_eq!(got, sent);
    assert_eq!(end, Received::Eof);
    // Handed over once: never reported again, nothing more to take.
    for _ in 0..3 {
        assert!(!poll(&mut r, Duration::from_millis(20)).contains(&Ready::Stream(id)));
        assert_eq!(r.recv(id, 1000), None);
    }
    assert_eq!(r.in_flight(), 0, "an ended stream is not armed again");
}

/// The peer sends `sent`, waits until every byte is acknowledged, then closes with
/// `SO_LINGER {1, 0}`: an RST, no FIN.
fn send_then_reset(c: OwnedFd, sent: &[u8]) {
    send_all(&c, sent);
    let deadline = Instant::now() + TIMEOUT;
    while fd::siocoutq(c.as_fd()).unwrap() > 0 {
        assert!(Instant::now() < deadline, "bytes never acknowledged");
        std::thread::sleep(Duration::from_millis(1));
    }
    fd::set_linger_zero(c.as_fd()).unwrap();
    drop(c);
}

#[test]
fn a_reset_is_handed_over_after_the_bytes_before_it() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (c, s) = tcp_pair();
    let id = r.open_stream(s.as_raw_fd());
    r.resume(id);
    poll(&mut r, Duration::ZERO);
    let sent = data(50_000, 4);
    send_then_reset(c, &sent);
    let (got, end) = read_to_end(&mut r, id, || 3000, 16 * 1024);
    assert_eq!(got, sent);
    assert_eq!(end, Received::Error(Errno::CONNRESET));
    assert!(!poll(&mut r, Duration::from_millis(20)).contains(&Ready::Stream(id)));
    assert_eq!(r.in_flight(), 0);
}

#[test]
fn a_reset_that_came_while_paused_is_handed_over_after_the_bytes() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (c, s) = tcp_pair();
    // Opened paused: bytes and reset both wait in the socket when the receive is armed.
    let id = r.open_stream(s.as_raw_fd());
    let sent = data(50_000, 5);
    send_then_reset(c, &sent);
    r.resume(id);
    let (got, end) = read_to_end(&mut r, id, || 3000, 16 * 1024);
    assert_eq!(got, sent);
    assert_eq!(end, Received::Error(Errno::CONNRESET));
}

#[test]
fn a_stream_is_reported_while_it_has_something_and_the_poll_does_not_sleep() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (c, s) = tcp_pair();
    let id = r.open_stream(s.as_raw_fd());
    r.resume(id);
    send_all(&c, b"0123456789");
    poll_until(&mut r, |x| *x == Ready::Stream(id), "the first bytes");
    // Nothing taken: reported again at every poll, and no poll sleeps.
    for _ in 0..3 {
        assert_eq!(poll_at_once(&mut r, "bytes wait"), vec![Ready::Stream(id)]);
    }
    let mut got = Vec::new();
    while got.len() < 10 {
        match r.recv(id, 3) {
            Some(Received::Data(chunks)) => got.extend(take_data(&mut r, chunks, 3, 16384)),
            other => panic!("{other:?}"),
        }
        if got.len() < 10 {
            assert_eq!(
                poll_at_once(&mut r, "bytes still wait"),
                vec![Ready::Stream(id)]
            );
        }
    }
    assert_eq!(got, b"0123456789");
    // Everything taken: not reported, and the poll sleeps its timeout (the receive is armed).
    let t = Instant::now();
    assert!(poll(&mut r, Duration::from_millis(200)).is_empty());
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
    // The EOF, not taken, is reported at every poll too.
    drop(c);
    poll_until(&mut r, |x| *x == Ready::Stream(id), "the EOF");
    for _ in 0..3 {
        assert_eq!(
            poll_at_once(&mut r, "the EOF waits"),
            vec![Ready::Stream(id)]
        );
    }
    assert_eq!(r.recv(id, 100), Some(Received::Eof));
    assert!(poll(&mut r, Duration::from_millis(20)).is_empty());
}

// ---- pause and resume -------------------------------------------------------------------------

#[test]
fn a_paused_stream_is_never_reported_and_keeps_what_arrives() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (c, s) = tcp_pair();
    let id = r.open_stream(s.as_raw_fd());
    r.resume(id);
    send_all(&c, b"first");
    poll_until(&mut r, |x| *x == Ready::Stream(id), "the first bytes");
    r.pause(id);
    // Bytes wait in the inbox: still, a paused stream is not reported (and the poll sleeps).
    let t = Instant::now();
    assert!(poll(&mut r, Duration::from_millis(100)).is_empty());
    assert!(
        t.elapsed() >= Duration::from_millis(50),
        "{:?}",
        t.elapsed()
    );
    // More arrives while paused (less than the hold limit: the receive stays armed).
    let more = data(100_000, 6);
    send_all(&c, &more);
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        assert!(
            poll(&mut r, Duration::from_millis(50)).is_empty(),
            "a paused stream was reported"
        );
    }
    assert_eq!(r.in_flight(), 1, "below the hold limit the receive stays");
    // Resumed: the next poll reports it at once, with every byte in order.
    r.resume(id);
    assert_eq!(
        poll_at_once(&mut r, "resumed with bytes held"),
        vec![Ready::Stream(id)]
    );
    drop(c);
    let (got, end) = read_to_end(&mut r, id, || 1 << 20, 16 * 1024);
    let mut sent = b"first".to_vec();
    sent.extend_from_slice(&more);
    assert!(got == sent, "bytes lost or reordered across the pause");
    assert_eq!(end, Received::Eof);
}

#[test]
fn pause_and_resume_around_every_recv_lose_nothing() {
    let _fds = shared();
    let options = small_buffers();
    let Some(mut r) = reactor_with(options) else {
        return;
    };
    let (c, s) = tcp_pair();
    let sent = data(200_000, 7);
    let id = r.open_stream(s.as_raw_fd());
    r.resume(id);
    let writer = {
        let sent = sent.clone();
        std::thread::spawn(move || send_all(&c, &sent))
    };
    // asyncio's streams pause when their buffer is full and resume when it is read.
    let deadline = Instant::now() + TIMEOUT;
    let mut got = Vec::new();
    let mut paused = false;
    while got.len() < sent.len() {
        assert!(
            Instant::now() < deadline,
            "{} bytes in {TIMEOUT:?}",
            got.len()
        );
        let ready = poll(&mut r, Duration::from_millis(20));
        if paused {
            assert!(ready.is_empty(), "a paused stream was reported");
            r.resume(id);
            paused = false;
            continue;
        }
        if ready.contains(&Ready::Stream(id)) {
            match r.recv(id, 777) {
                Some(Received::Data(chunks)) => got.extend(take_data(&mut r, chunks, 777, 256)),
                other => panic!("{other:?}"),
            }
            r.pause(id);
            paused = true;
        }
    }
    writer.join().unwrap();
    assert!(got == sent, "bytes lost or reordered across pauses");
}

/// Sets a socket buffer size (`SO_RCVBUF`, `SO_SNDBUF`).
fn set_buffer(sock: &OwnedFd, which: i32, bytes: i32) {
    fd::setsockopt_int(sock.as_fd(), libc::SOL_SOCKET, which, bytes).unwrap();
}

#[test]
fn past_the_hold_limit_a_paused_stream_stops_receiving_and_the_peer_meets_backpressure() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (c, s) = tcp_pair();
    // Small socket buffers: backpressure after a few hundred KiB, not after the tens of MiB
    // that tcp_rmem's autotuning allows on loopback.
    set_buffer(&s, libc::SO_RCVBUF, 128 * 1024);
    set_buffer(&c, libc::SO_SNDBUF, 128 * 1024);
    fd::set_blocking(c.as_fd(), false).unwrap();
    let id = r.open_stream(s.as_raw_fd());
    r.resume(id);
    poll(&mut r, Duration::ZERO);
    assert_eq!(r.in_flight(), 1);
    r.pause(id);

    let pattern = Pattern::new(8);
    let mut sent = 0usize;
    let mut total = usize::MAX;
    let send_some = |sent: &mut usize, total: usize| -> bool {
        let n = (total - *sent).min(64 * 1024);
        match fd::send(&c, pattern.at(*sent, n), SendFlags::NOSIGNAL) {
            Ok(n) => {
                *sent += n;
                true
            }
            Err(Errno::AGAIN) => false,
            Err(e) => panic!("send: {e}"),
        }
    };
    // Paused, the receive goes on until 256 KiB are held, then it is cancelled: nothing
    // drains the socket any more and the peer's sends meet EAGAIN.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let accepted = send_some(&mut sent, total);
        let ready = poll(&mut r, Duration::from_millis(if accepted { 0 } else { 5 }));
        assert!(ready.is_empty(), "a paused stream was reported: {ready:?}");
        if !accepted && r.in_flight() == 0 {
            break;
        }
        assert!(sent < 64 << 20, "64 MiB sent and no backpressure");
        assert!(
            Instant::now() < deadline,
            "no backpressure within {TIMEOUT:?}: {sent} bytes sent, {} ops in flight",
            r.in_flight()
        );
    }
    assert!(sent >= HOLD_LIMIT, "only {sent} bytes sent before the hold");
    // It holds: nothing is received any more, the peer stays blocked.
    let blocked_at = sent;
    for _ in 0..5 {
        assert!(poll(&mut r, Duration::from_millis(20)).is_empty());
        send_some(&mut sent, total);
    }
    assert_eq!(r.in_flight(), 0, "the receive was armed again while paused");
    assert!(
        !send_some(&mut sent, total),
        "the peer can send again while the stream is paused ({} bytes since the hold)",
        sent - blocked_at
    );

    // Resumed: what was held comes first (at least the hold limit's worth), then the rest as
    // the peer sends it, all in order.
    r.resume(id);
    assert_eq!(
        poll_at_once(&mut r, "resumed with bytes held"),
        vec![Ready::Stream(id)]
    );
    total = sent + (1 << 20);
    let mut got = 0usize;
    let mut first = true;
    let mut shut = false;
    let deadline = Instant::now() + TIMEOUT;
    loop {
        assert!(
            Instant::now() < deadline,
            "{got} of {total} bytes after resuming"
        );
        if sent < total {
            send_some(&mut sent, total);
        } else if !shut {
            fd::shutdown(&c, Shutdown::Write).unwrap();
            shut = true;
        }
        if !poll(&mut r, Duration::from_millis(5)).contains(&Ready::Stream(id)) {
            continue;
        }
        match r.recv(id, 1 << 20) {
            Some(Received::Data(chunks)) => {
                let bytes = take_data(&mut r, chunks, 1 << 20, 16 * 1024);
                if first {
                    assert!(
                        bytes.len() >= HOLD_LIMIT,
                        "only {} bytes were held at the hold limit",
                        bytes.len()
                    );
                    first = false;
                }
                pattern.check(got, &bytes);
                got += bytes.len();
            }
            Some(Received::Eof) => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, total);
}

// ---- close_stream -----------------------------------------------------------------------------

#[test]
fn close_stream_cancels_the_receive_and_the_peer_sees_eof_at_once() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (c, s) = tcp_pair();
    let id = r.open_stream(s.as_raw_fd());
    r.resume(id);
    poll(&mut r, Duration::ZERO);
    assert_eq!(r.in_flight(), 1, "the receive is armed");
    // Closed by the loop: close_stream, then close(2), no poll in between.
    r.close_stream(id);
    drop(s);
    let t = Instant::now();
    assert_eq!(
        peer_sees(&c, Duration::from_secs(2)),
        Ok(0),
        "the peer's EOF"
    );
    assert!(
        t.elapsed() < AT_ONCE,
        "the peer's EOF took {:?}",
        t.elapsed()
    );
    assert_eq!(r.recv(id, 100), None);
    // The next poll reaps the cancelled receive and reports nothing.
    assert!(poll(&mut r, Duration::from_millis(50)).is_empty());
    assert_eq!(r.in_flight(), 0);
}

#[test]
fn a_late_completion_never_reaches_a_new_stream_on_the_same_fd_number() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    for round in 0..20 {
        let (ca, sa) = tcp_pair();
        let old = r.open_stream(sa.as_raw_fd());
        r.resume(old);
        poll(&mut r, Duration::ZERO);
        // Bytes for the old stream, whose completions wait, unreaped, when it is closed.
        send_all(&ca, &data(3000, 100 + round));
        if round % 2 == 1 {
            std::thread::sleep(Duration::from_millis(2));
        }
        r.close_stream(old);
        // The fd number is reused at once: dup3 puts a new connection's socket on it
        // (closing the old socket), as a loop that closes and accepts might.
        let (cb, sb) = tcp_pair();
        let number = sa.into_raw_fd();
        fd::dup3(sb.as_fd(), number, DupFlags::CLOEXEC).unwrap();
        drop(sb);
        // SAFETY: `number` was `sa`'s, given up above; dup3 made it a copy of the new socket,
        // and nothing else owns it.
        let sb = unsafe { OwnedFd::from_raw_fd(number) };
        let new = r.open_stream(number);
        assert_ne!(new, old);
        r.resume(new);
        // More for the old connection (refused or dropped), then the new one's own bytes.
        let _ = fd::send(&ca, b"late bytes for the old stream", SendFlags::NOSIGNAL);
        let own = data(5000, 200 + round);
        send_all(&cb, &own);
        drop(cb);
        let (got, end) = read_to_end(&mut r, new, || 1 << 20, 16 * 1024);
        assert!(
            got == own,
            "round {round}: the new stream got bytes not its own"
        );
        assert_eq!(end, Received::Eof);
        assert_eq!(r.recv(old, 100), None);
        r.close_stream(new);
        drop(sb);
        drop(ca);
    }
    assert!(poll(&mut r, Duration::from_millis(20)).is_empty());
    assert_eq!(r.in_flight(), 0);
}

// ---- listeners --------------------------------------------------------------------------------

#[test]
fn three_hundred_connections_are_accepted_and_reported_while_queued() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (l, addr) = listener(false);
    let lid = r.listen(l.as_raw_fd());
    let clients: Vec<OwnedFd> = (0..300).map(|_| client(&addr)).collect();
    let mut accepted = Vec::new();
    // Ten taken per report: while some are left in its queue, every poll reports the
    // listener without sleeping.
    let deadline = Instant::now() + TIMEOUT;
    let mut queued = false;
    while accepted.len() < clients.len() {
        assert!(Instant::now() < deadline, "{} accepted", accepted.len());
        let ready = if queued {
            poll_at_once(&mut r, "connections are queued")
        } else {
            poll(&mut r, Duration::from_millis(100))
        };
        if queued {
            assert_eq!(
                ready,
                vec![Ready::Listener(lid)],
                "{} taken",
                accepted.len()
            );
        } else if ready.is_empty() {
            continue;
        }
        queued = true;
        for _ in 0..10 {
            match r.accept(lid) {
                Some(got) => accepted.push(got.expect("an accepted connection")),
                None => {
                    queued = false;
                    break;
                }
            }
        }
    }
    assert!(r.accept(lid).is_none());
    assert!(poll(&mut r, Duration::from_millis(50)).is_empty());
    let want: BTreeSet<u16> = clients.iter().map(local_port).collect();
    let got: BTreeSet<u16> = accepted.iter().map(peer_port).collect();
    assert_eq!(got, want, "each client accepted once");
    for a in &accepted {
        assert!(fd::get_cloexec(a.as_fd()).unwrap(), "close-on-exec");
        assert!(fd::get_blocking(a.as_fd()).unwrap(), "blocking");
    }
    // The connections work.
    send_all(&clients[7], b"hi");
    let server = accepted
        .iter()
        .find(|a| peer_port(a) == local_port(&clients[7]))
        .unwrap();
    let mut buf = [0u8; 2];
    assert_eq!(fd::recv(server, &mut buf, RecvFlags::WAITALL).unwrap().0, 2);
    assert_eq!(&buf, b"hi");
}

#[test]
fn the_queue_limit_holds_the_accept_and_taking_connections_arms_it_again() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (l, addr) = listener(false);
    let lid = r.listen(l.as_raw_fd());
    poll(&mut r, Duration::ZERO);
    assert_eq!(r.in_flight(), 1, "the multishot accept is armed");
    let mut clients: Vec<OwnedFd> = (0..300).map(|_| client(&addr)).collect();
    // Nothing taken: past QUEUE_LIMIT the accept is cancelled.
    let deadline = Instant::now() + TIMEOUT;
    while r.in_flight() > 0 {
        assert!(Instant::now() < deadline, "the accept was never held");
        let ready = poll(&mut r, Duration::from_millis(20));
        assert!(ready.is_empty() || ready == vec![Ready::Listener(lid)]);
    }
    // Later connections wait in the kernel's backlog: not accepted while the queue is full.
    clients.extend((0..100).map(|_| client(&addr)));
    for _ in 0..5 {
        assert_eq!(
            poll_at_once(&mut r, "connections queued"),
            vec![Ready::Listener(lid)]
        );
        assert_eq!(r.in_flight(), 0, "the accept was armed with the queue full");
    }
    let mut accepted = Vec::new();
    let held = take_all(&mut r, lid, &mut accepted);
    assert!(
        (QUEUE_LIMIT..=300).contains(&held),
        "{held} connections were queued when the accept was held"
    );
    // Taken: the next poll arms the accept again, and every connection is accepted.
    let deadline = Instant::now() + TIMEOUT;
    while accepted.len() < clients.len() {
        assert!(
            Instant::now() < deadline,
            "{} of {} accepted",
            accepted.len(),
            clients.len()
        );
        if poll(&mut r, Duration::from_millis(100)).contains(&Ready::Listener(lid)) {
            take_all(&mut r, lid, &mut accepted);
        }
    }
    let want: BTreeSet<u16> = clients.iter().map(local_port).collect();
    let got: BTreeSet<u16> = accepted.iter().map(peer_port).collect();
    assert_eq!(got, want, "each client accepted once");
    assert_eq!(r.in_flight(), 1, "the accept is armed again");
}

#[test]
fn stop_listening_closes_queued_connections_and_later_ones_are_refused() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (l, addr) = listener(false);
    let lid = r.listen(l.as_raw_fd());
    poll(&mut r, Duration::ZERO);
    let clients: Vec<OwnedFd> = (0..5).map(|_| client(&addr)).collect();
    poll_until(&mut r, |x| *x == Ready::Listener(lid), "connections");
    // Give the kernel's last accepts time to be filed too (nothing is taken).
    poll(&mut r, Duration::from_millis(50));
    r.stop_listening(lid);
    drop(l);
    // The queued connections are closed with the listener: each peer sees EOF (or a reset).
    for c in &clients {
        match peer_sees(c, Duration::from_secs(2)) {
            Ok(0) | Err(Errno::CONNRESET) => {}
            other => panic!("a queued connection's peer saw {other:?}"),
        }
    }
    // The listening socket is closed at once (the ring no longer holds it): refused.
    assert_eq!(try_connect(&addr).err(), Some(Errno::CONNREFUSED));
    assert!(r.accept(lid).is_none());
    assert!(poll(&mut r, Duration::from_millis(50)).is_empty());
    assert_eq!(r.in_flight(), 0);
}

#[test]
fn connections_accepted_after_stop_listening_are_closed_by_the_next_poll() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (l, addr) = listener(false);
    let lid = r.listen(l.as_raw_fd());
    poll(&mut r, Duration::ZERO);
    // Accepted by the kernel, their completions not reaped yet when the listener stops.
    let clients: Vec<OwnedFd> = (0..5).map(|_| client(&addr)).collect();
    r.stop_listening(lid);
    drop(l);
    assert!(poll(&mut r, Duration::from_millis(50)).is_empty());
    for c in &clients {
        match peer_sees(c, Duration::from_secs(2)) {
            Ok(0) | Err(Errno::CONNRESET) => {}
            other => panic!("a connection's peer saw {other:?}"),
        }
    }
    assert_eq!(try_connect(&addr).err(), Some(Errno::CONNREFUSED));
}

/// The fd numbers open now, below `upto`.
fn open_numbers(upto: RawFd) -> Vec<RawFd> {
    (0..upto)
        .filter(|&n| {
            // SAFETY: only asks whether the number is open; the kernel answers EBADF if not.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(n) };
            fd::fcntl_int(fd, fd::FcntlCmd::GetFd, 0).is_ok()
        })
        .collect()
}

/// Puts back the soft RLIMIT_NOFILE it was made with when dropped (a failed test included).
struct NofileLimit(rustix::process::Rlimit);

impl NofileLimit {
    fn set(soft: u64) -> NofileLimit {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let old = getrlimit(Resource::Nofile);
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(soft),
                maximum: old.maximum,
            },
        )
        .unwrap();
        NofileLimit(old)
    }
}

impl Drop for NofileLimit {
    fn drop(&mut self) {
        let old = rustix::process::Rlimit {
            current: self.0.current,
            maximum: self.0.maximum,
        };
        rustix::process::setrlimit(rustix::process::Resource::Nofile, old).unwrap();
    }
}

#[test]
fn an_accept_error_is_handed_over_after_the_connections_and_listen_again_retries() {
    // Exclusive: the fd limit is the process's.
    let _fds = exclusive();
    let Some(mut r) = reactor() else {
        return;
    };
    let (l, addr) = listener(false);
    let clients: Vec<OwnedFd> = (0..40).map(|_| client(&addr)).collect();
    // A soft limit just above the two lowest free fd numbers: room for two more fds.
    let open = open_numbers(1 << 16);
    let free: Vec<RawFd> = (0..).filter(|n| !open.contains(n)).take(2).collect();
    let limit = free[1] as u64 + 1;
    let room = 2;
    let mut accepted = Vec::new();
    let lid = {
        let _limit = NofileLimit::set(limit);
        // Armed under the limit (the kernel reads it when the accept is queued): the accept
        // fills the room, then fails with EMFILE, which stops it.
        let lid = r.listen(l.as_raw_fd());
        let deadline = Instant::now() + TIMEOUT;
        poll(&mut r, Duration::ZERO);
        while r.in_flight() > 0 {
            assert!(Instant::now() < deadline, "the accept never failed");
            poll(&mut r, Duration::from_millis(20));
        }
        assert_eq!(
            poll_at_once(&mut r, "connections and an error wait"),
            vec![Ready::Listener(lid)]
        );
        for _ in 0..room {
            accepted.push(r.accept(lid).expect("a connection").expect("not an error"));
        }
        assert_eq!(r.accept(lid).map(|x| x.err()), Some(Some(Errno::MFILE)));
        lid
    };
    // The error is handed over once; the listener is not armed again by itself.
    assert!(r.accept(lid).is_none());
    assert!(poll(&mut r, Duration::from_millis(50)).is_empty());
    assert_eq!(r.in_flight(), 0);
    // Listening again (the limit back) accepts the connections left in the backlog.
    r.stop_listening(lid);
    let lid = r.listen(l.as_raw_fd());
    let deadline = Instant::now() + TIMEOUT;
    while accepted.len() < clients.len() {
        assert!(Instant::now() < deadline, "{} accepted", accepted.len());
        if poll(&mut r, Duration::from_millis(100)).contains(&Ready::Listener(lid)) {
            take_all(&mut r, lid, &mut accepted);
        }
    }
    let want: BTreeSet<u16> = clients.iter().map(local_port).collect();
    let got: BTreeSet<u16> = accepted.iter().map(peer_port).collect();
    assert_eq!(got, want, "each client accepted once");
}

// ---- readiness --------------------------------------------------------------------------------

fn pipe() -> (OwnedFd, OwnedFd) {
    fd::pipe2(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).unwrap()
}

fn read_some(from: &OwnedFd, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    let k = fd::read(from, &mut buf).unwrap();
    buf.truncate(k);
    buf
}

#[test]
fn a_pipe_is_reported_readable_while_data_remains() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (rd, wr) = pipe();
    let fd = rd.as_raw_fd();
    r.set_interest(fd, Interest::from_mask(1));
    assert!(poll(&mut r, Duration::from_millis(50)).is_empty(), "empty");
    fd::write(&wr, b"abc").unwrap();
    assert_eq!(
        poll_until(&mut r, |x| matches!(x, Ready::Fd { .. }), "readable"),
        vec![fd_ready(fd, true, false)]
    );
    // Level-triggered: reported at every poll while data remains, without sleeping.
    for _ in 0..3 {
        assert_eq!(
            poll_at_once(&mut r, "data remains"),
            vec![fd_ready(fd, true, false)]
        );
    }
    assert_eq!(read_some(&rd, 1), b"a");
    assert_eq!(
        poll_at_once(&mut r, "data remains"),
        vec![fd_ready(fd, true, false)]
    );
    assert_eq!(read_some(&rd, 10), b"bc");
    assert!(
        poll(&mut r, Duration::from_millis(50)).is_empty(),
        "drained"
    );
    fd::write(&wr, b"d").unwrap();
    assert_eq!(
        poll_until(&mut r, |x| matches!(x, Ready::Fd { .. }), "readable again"),
        vec![fd_ready(fd, true, false)]
    );
    // The writer closed: a hang-up is readable (read says EOF).
    assert_eq!(read_some(&rd, 10), b"d");
    drop(wr);
    assert_eq!(
        poll_until(&mut r, |x| matches!(x, Ready::Fd { .. }), "hang-up"),
        vec![fd_ready(fd, true, false)]
    );
    assert_eq!(read_some(&rd, 10), b"");
}

#[test]
fn remove_interest_stops_reports_even_one_already_on_its_way() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (rd, wr) = pipe();
    let fd = rd.as_raw_fd();
    r.set_interest(fd, Interest::from_mask(1));
    poll(&mut r, Duration::ZERO);
    assert_eq!(r.in_flight(), 1, "the poll is armed");
    // The poll completes in the kernel; its completion is not reaped yet.
    fd::write(&wr, b"x").unwrap();
    r.remove_interest(fd);
    for _ in 0..3 {
        assert!(
            poll(&mut r, Duration::from_millis(30)).is_empty(),
            "reported after remove_interest"
        );
    }
    assert_eq!(r.in_flight(), 0);
    // Registered and removed before any poll: never armed, never reported.
    r.set_interest(fd, Interest::from_mask(1));
    r.remove_interest(fd);
    assert!(poll(&mut r, Duration::from_millis(30)).is_empty());
    assert_eq!(r.in_flight(), 0);
    // Registered again: reported (the byte is still there).
    r.set_interest(fd, Interest::from_mask(1));
    assert_eq!(
        poll_at_once(&mut r, "readable"),
        vec![fd_ready(fd, true, false)]
    );
}

#[test]
fn an_interest_change_takes_effect_at_the_next_poll() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (a, b) = unix_pair();
    let fd = a.as_raw_fd();
    // Read: nothing to read, not reported.
    r.set_interest(fd, Interest::from_mask(1));
    assert!(poll(&mut r, Duration::from_millis(50)).is_empty());
    // Read → write: writable at once, and read is not claimed.
    r.set_interest(fd, Interest::from_mask(2));
    assert_eq!(
        poll_at_once(&mut r, "writable"),
        vec![fd_ready(fd, false, true)]
    );
    // Write → read, data arrives: readable only.
    r.set_interest(fd, Interest::from_mask(1));
    fd::write(&b, b"data").unwrap();
    assert_eq!(
        poll_until(&mut r, |x| matches!(x, Ready::Fd { .. }), "readable"),
        vec![fd_ready(fd, true, false)]
    );
    // Both: both hold.
    r.set_interest(fd, Interest::from_mask(3));
    assert_eq!(
        poll_at_once(&mut r, "readable and writable"),
        vec![fd_ready(fd, true, true)]
    );
    // A report already on its way when the interest changes is stale: handed over neither
    // as it is nor read against the new interest. Here the read poll fires, the bytes are
    // read away, and the interest becomes read and write: only write holds.
    assert_eq!(read_some(&a, 10), b"data");
    r.set_interest(fd, Interest::from_mask(1));
    assert!(poll(&mut r, Duration::from_millis(30)).is_empty());
    fd::write(&b, b"more").unwrap();
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(read_some(&a, 10), b"more");
    r.set_interest(fd, Interest::from_mask(3));
    // The stale completion, already posted, may end the next poll with nothing to report (a
    // wake-up that files only bookkeeping); the write report follows at once.
    let t = Instant::now();
    loop {
        assert!(t.elapsed() < AT_ONCE, "no write report");
        let got = poll(&mut r, TIMEOUT);
        if !got.is_empty() {
            assert_eq!(got, vec![fd_ready(fd, false, true)]);
            break;
        }
    }
    // Stale reports of cancelled polls never come later either.
    r.remove_interest(fd);
    assert!(poll(&mut r, Duration::from_millis(30)).is_empty());
    assert_eq!(r.in_flight(), 0);
}

// ---- the wait ----------------------------------------------------------------------------------

#[test]
fn one_poll_reports_readiness_then_listeners_then_streams_each_once() {
    let _fds = shared();
    let Some(mut r) = reactor_with(small_buffers()) else {
        return;
    };
    let (rd, wr) = pipe();
    r.set_interest(rd.as_raw_fd(), Interest::from_mask(1));
    let (l, addr) = listener(false);
    let lid = r.listen(l.as_raw_fd());
    let mut peers = Vec::new();
    let mut ids = Vec::new();
    for i in 0..3 {
        let (c, s) = tcp_pair();
        let id = r.open_stream(s.as_raw_fd());
        r.resume(id);
        ids.push(id);
        peers.push((c, s, i));
    }
    poll(&mut r, Duration::ZERO);
    // Several completions each (256-byte buffers), several connections: all wait, none taken.
    for (c, _, i) in &peers {
        send_all(c, &data(2000, *i));
    }
    let _clients: Vec<OwnedFd> = (0..3).map(|_| client(&addr)).collect();
    fd::write(&wr, b"x").unwrap();
    let deadline = Instant::now() + TIMEOUT;
    let ready = loop {
        assert!(Instant::now() < deadline, "not everything became ready");
        let ready = poll(&mut r, Duration::from_millis(50));
        if ready.len() == 5 {
            break ready;
        }
    };
    // Readiness first, then listeners, then streams (in no set order among themselves).
    assert_eq!(
        ready[..2],
        [fd_ready(rd.as_raw_fd(), true, false), Ready::Listener(lid)]
    );
    let mut streams: Vec<Ready> = ready[2..].to_vec();
    streams.sort_by_key(|x| match x {
        Ready::Stream(id) => *id,
        other => panic!("{other:?} among the streams"),
    });
    assert_eq!(
        streams,
        ids.iter().map(|&id| Ready::Stream(id)).collect::<Vec<_>>()
    );
}

#[test]
fn a_zero_timeout_just_looks_and_no_timeout_waits_for_what_comes() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (c, s) = tcp_pair();
    let id = r.open_stream(s.as_raw_fd());
    r.resume(id);
    let t = Instant::now();
    for _ in 0..10 {
        assert!(poll(&mut r, Duration::ZERO).is_empty());
    }
    assert!(
        t.elapsed() < AT_ONCE,
        "zero-timeout polls slept {:?}",
        t.elapsed()
    );
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        send_all(&c, b"late");
        c
    });
    let t = Instant::now();
    let deadline = t + TIMEOUT;
    // Should the bytes never wake it, a signal ends the wait and the deadline fails the test.
    let watchdog = Interrupter::after(TIMEOUT);
    while !r.poll(None).expect("poll").contains(&Ready::Stream(id)) {
        assert!(Instant::now() < deadline, "poll(None) missed the bytes");
    }
    drop(watchdog);
    assert!(
        t.elapsed() >= Duration::from_millis(40),
        "{:?}",
        t.elapsed()
    );
    let _c = writer.join().unwrap();
    match r.recv(id, 100) {
        Some(Received::Data(chunks)) => assert_eq!(chunks.concat(), b"late"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_poll_with_nothing_in_flight_sleeps_its_timeout() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    // Nothing registered.
    let t = Instant::now();
    assert!(poll(&mut r, Duration::from_millis(200)).is_empty());
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "nothing registered: a 200 ms poll returned after {:?}",
        t.elapsed()
    );
    // Only a paused stream (opened paused: no receive armed).
    let (_c, s) = tcp_pair();
    let _id = r.open_stream(s.as_raw_fd());
    let t = Instant::now();
    assert!(poll(&mut r, Duration::from_millis(200)).is_empty());
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "only a paused stream: a 200 ms poll returned after {:?}",
        t.elapsed()
    );
}

extern "C" fn on_sigusr1(_: libc::c_int) {}

/// Installs a SIGUSR1 handler that does nothing (once), so that the signal interrupts a wait
/// (no `SA_RESTART`) without killing the process. Nothing else in this binary uses SIGUSR1.
fn catch_sigusr1() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction is valid (no flags, empty mask filled in next); the
        // handler does nothing, so it is async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigusr1 as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            assert_eq!(
                libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
                0
            );
        }
    });
}

/// Once `after` has passed, sends SIGUSR1 to the thread that made it every 50 ms, until it is
/// dropped: ends a wait that would otherwise go on.
struct Interrupter {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Interrupter {
    fn after(after: Duration) -> Interrupter {
        catch_sigusr1();
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let done = done.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                    if start.elapsed() >= after {
                        // SAFETY: `me` is alive until `done` is set: the guard's drop, on
                        // that thread, joins this one first.
                        unsafe { libc::pthread_kill(me, libc::SIGUSR1) };
                        std::thread::sleep(Duration::from_millis(40));
                    }
                }
            })
        };
        Interrupter {
            done,
            thread: Some(thread),
        }
    }
}

impl Drop for Interrupter {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn a_signal_ends_the_wait_early_without_an_error() {
    let _fds = shared();
    let Some(mut r) = reactor() else {
        return;
    };
    let (_c, s) = tcp_pair();
    let id = r.open_stream(s.as_raw_fd());
    r.resume(id);
    poll(&mut r, Duration::ZERO);
    // Signals every 50 ms until the poll is over: one sent before it sleeps would be missed.
    let interrupter = Interrupter::after(Duration::from_millis(50));
    let t = Instant::now();
    let got = r.poll(Some(TIMEOUT));
    drop(interrupter);
    assert_eq!(got.expect("a signal is not an error"), vec![]);
    assert!(t.elapsed() < AT_ONCE, "the signal did not end the wait");
}

#[test]
fn ops_armed_by_a_thread_that_exited_are_armed_again() {
    let _fds = shared();
    if !supported() {
        return;
    }
    // A loop may be run by one thread, then by another. When the thread that submitted an
    // op exits, the kernel ends the op with ECANCELED (at its next wake-up): the reactor must
    // arm it again, from the thread that polls now, without a report going missing.
    let (rd, wr) = pipe();
    let (c, s) = tcp_pair();
    let (l, addr) = listener(false);
    let (rfd, sfd, lfd) = (rd.as_raw_fd(), s.as_raw_fd(), l.as_raw_fd());
    let (mut r, id, lid) = std::thread::spawn(move || {
        let mut r = Reactor::new(ReactorOptions::default()).expect("Reactor::new");
        r.set_interest(rfd, Interest::from_mask(1));
        let id = r.open_stream(sfd);
        r.resume(id);
        let lid = r.listen(lfd);
        poll(&mut r, Duration::ZERO);
        assert_eq!(r.in_flight(), 3);
        (r, id, lid)
    })
    .join()
    .unwrap();
    fd::write(&wr, b"x").unwrap();
    send_all(&c, b"bytes");
    let peer = client(&addr);
    let deadline = Instant::now() + TIMEOUT;
    let (mut readable, mut got, mut accepted) = (false, Vec::new(), Vec::new());
    while !(readable && got == b"bytes" && accepted.len() == 1) {
        assert!(
            Instant::now() < deadline,
            "after the arming thread exited: readable {readable}, {} bytes, {} accepted",
            got.len(),
            accepted.len()
        );
        for x in poll(&mut r, Duration::from_millis(100)) {
            match x {
                Ready::Fd { fd, ready } => {
                    assert_eq!((fd, ready), (rfd, Interest::from_mask(1)));
                    readable = true;
                }
                Ready::Stream(sid) => {
                    assert_eq!(sid, id);
                    match r.recv(id, 100) {
                        Some(Received::Data(chunks)) => got.extend(chunks.concat()),
                        other => panic!("{other:?}"),
                    }
                }
                Ready::Listener(x) => {
                    assert_eq!(x, lid);
                    take_all(&mut r, lid, &mut accepted);
                }
            }
        }
    }
    assert_eq!(peer_port(&accepted[0]), local_port(&peer));
    // And the stream goes on working from this thread.
    send_all(&c, b" more");
    let mut more = Vec::new();
    while more.len() < 5 {
        poll_until(&mut r, |x| *x == Ready::Stream(id), "more bytes");
        match r.recv(id, 100) {
            Some(Received::Data(chunks)) => more.extend(chunks.concat()),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(more, b" more");
    drop(s);
}

// ---- a tiny submission queue ----------------------------------------------------------------

#[test]
fn with_a_tiny_submission_queue_every_registration_is_armed_and_served() {
    let _fds = shared();
    // 2 submission entries, 8 completion entries: arming 100 ops at once fills the
    // submission queue fifty times over, and completions overflow the completion queue.
    let options = ReactorOptions {
        entries: 2,
        buffers: 8,
        buffer_size: 512,
    };
    let Some(mut r) = reactor_with(options) else {
        return;
    };
    const STREAMS: usize = 64;
    const PIPES: usize = 16;
    const CONNECTIONS: usize = 20;
    let mut peers = Vec::new();
    let mut streams = HashMap::new();
    let mut want = HashMap::new();
    for i in 0..STREAMS {
        let (c, s) = tcp_pair();
        let id = r.open_stream(s.as_raw_fd());
        let bytes = data(8192, 300 + i as u64);
        send_all(&c, &bytes);
        drop(c);
        r.resume(id);
        want.insert(id, bytes);
        streams.insert(id, (s, Vec::new(), false));
    }
    let mut pipes = HashMap::new();
    for _ in 0..PIPES {
        let (rd, wr) = pipe();
        fd::write(&wr, b"ready").unwrap();
        r.set_interest(rd.as_raw_fd(), Interest::from_mask(1));
        pipes.insert(rd.as_raw_fd(), (rd, wr, false));
    }
    let (l, addr) = listener(false);
    let lid = r.listen(l.as_raw_fd());
    for _ in 0..CONNECTIONS {
        peers.push(client(&addr));
    }
    let mut accepted = Vec::new();
    let mut errors = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let streams_done = streams.values().filter(|s| s.2).count();
        let pipes_done = pipes.values().filter(|p| p.2).count();
        if streams_done == STREAMS && pipes_done == PIPES && accepted.len() == CONNECTIONS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "within {TIMEOUT:?}: {streams_done} of {STREAMS} streams ended, {pipes_done} of \
             {PIPES} pipes reported, {} of {CONNECTIONS} connections accepted; poll errors: \
             {errors:?}",
            accepted.len()
        );
        // Were a poll to fail to submit, what it could not arm would stay for the next one:
        // go on polling, so that a loss would show too.
        let ready = match r.poll(Some(Duration::from_millis(50))) {
            Ok(ready) => ready,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        for x in ready {
            match x {
                Ready::Stream(id) => {
                    let (_, got, ended) = streams.get_mut(&id).expect("a stream of ours");
                    assert!(!*ended, "reported after its end");
                    match r.recv(id, 4096) {
                        Some(Received::Data(chunks)) => {
                            got.extend(take_data(&mut r, chunks, 4096, 512));
                        }
                        Some(Received::Eof) => *ended = true,
                        other => panic!("stream {id}: {other:?}"),
                    }
                }
                Ready::Fd { fd, ready } => {
                    assert_eq!(ready, Interest::from_mask(1));
                    let p = pipes.get_mut(&fd).expect("a pipe of ours");
                    assert_eq!(read_some(&p.0, 10), b"ready");
                    p.2 = true;
                    r.remove_interest(fd);
                }
                Ready::Listener(id) => {
                    assert_eq!(id, lid);
                    take_all(&mut r, lid, &mut accepted);
                }
            }
        }
    }
    for (id, (_, got, _)) in &streams {
        assert!(*got == want[id], "stream {id}: bytes lost or reordered");
    }
    // What Ring does with a full submission queue (ring.rs, push_entry): it submits the queue
    // and pushes again, so arming never fails for it.
    assert!(
        errors.is_empty(),
        "polls failed with a full submission queue: {errors:?}"
    );
}

// ---- building and dropping ----------------------------------------------------------------------

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn reactors_are_built_and_dropped_without_leaking_fds() {
    let _fds = exclusive();
    if !supported() {
        return;
    }
    let before = open_fds();
    let t = Instant::now();
    for i in 0..200 {
        let options = if i % 2 == 0 {
            ReactorOptions::default()
        } else {
            small_buffers()
        };
        // Reactor::new proves the ring usable (a no-op round trip) before returning it.
        let mut r = Reactor::new(options).expect("Reactor::new");
        assert_eq!(r.in_flight(), 0, "the no-op was reaped");
        assert!(r.ring_fd() >= 0 && !r.forked());
        assert!(r.poll(Some(Duration::ZERO)).unwrap().is_empty());
    }
    assert!(t.elapsed() < TIMEOUT, "200 reactors took {:?}", t.elapsed());
    assert_eq!(open_fds(), before, "fds leaked by building reactors");
    // Options that cannot work are an error, and the ring set up before the error is closed.
    let bad = [
        ReactorOptions {
            entries: 0,
            ..ReactorOptions::default()
        },
        ReactorOptions {
            buffers: 3,
            ..ReactorOptions::default()
        },
        ReactorOptions {
            buffers: 0,
            ..ReactorOptions::default()
        },
        ReactorOptions {
            buffer_size: 0,
            ..ReactorOptions::default()
        },
    ];
    for options in bad.iter().cycle().take(40) {
        assert!(
            matches!(
                Reactor::new(*options),
                Err(fdkit::Error::InvalidArgument(_))
            ),
            "{options:?}"
        );
    }
    assert_eq!(open_fds(), before, "fds leaked by reactors that failed");
    // One dropped with a stream, a listener and a readiness registration armed: its ops end
    // with it, the caller's fds stay open and usable, and its own fds are gone.
    let (c, s) = tcp_pair();
    let (l, addr) = listener(false);
    let (rd, wr) = pipe();
    let with_fds = open_fds();
    {
        let mut r = Reactor::new(ReactorOptions::default()).expect("Reactor::new");
        let id = r.open_stream(s.as_raw_fd());
        r.resume(id);
        r.listen(l.as_raw_fd());
        r.set_interest(rd.as_raw_fd(), Interest::from_mask(1));
        poll(&mut r, Duration::ZERO);
        assert_eq!(r.in_flight(), 3);
    }
    assert_eq!(
        open_fds(),
        with_fds,
        "fds leaked by a reactor with ops armed"
    );
    send_all(&c, b"still mine");
    let mut buf = [0u8; 10];
    assert_eq!(fd::recv(&s, &mut buf, RecvFlags::WAITALL).unwrap().0, 10);
    let c2 = client(&addr);
    let (a2, _) = fd::accept4(l.as_fd(), SocketFlags::CLOEXEC).unwrap();
    assert_eq!(peer_port(&a2), local_port(&c2));
    fd::write(&wr, b"x").unwrap();
    assert_eq!(read_some(&rd, 1), b"x");
}
