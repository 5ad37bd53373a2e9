//! `fdkit::uring::Ring` against the real kernel: every op on pipes, loopback sockets and
//! files, errors as errnos, multishot accept and receive with a provided-buffer ring running
//! dry, cancel ordering, timeouts, completion queue overflow, a full submission queue, and
//! closing a ring with ops in flight.
//!
//! Each test skips (printing `SKIPPED <test>: <why>` on stderr) when io_uring or the op it needs
//! is missing here; with `FDKIT_REQUIRE_URING=1` a missing io_uring fails the test instead.

use fdkit::fd::{self, AddressFamily, Errno, OFlags, SocketFlags, SocketType};
use fdkit::uring::{probe, Completion, KernelVersion, OpKind, Ring, RingOptions};
use rustix::event::PollFlags;
use rustix::net::{RecvFlags, SendFlags, Shutdown, SocketAddrAny};
use rustix::pipe::{PipeFlags, SpliceFlags};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

mod common;
use common::{client, data, listener, require_uring, skip, tcp_pair};

/// A ring, or None (with the reason printed) when io_uring or one of `ops` is unavailable.
fn ring_for(ops: &[&str]) -> Option<Ring> {
    ring_with(ops, RingOptions::default())
}

fn ring_with(ops: &[&str], options: RingOptions) -> Option<Ring> {
    if !require_uring() {
        return None;
    }
    let p = probe();
    for op in ops {
        if !p.ops.iter().any(|o| o.name == *op && o.supported) {
            skip(format_args!("this kernel lacks io_uring op {op}"));
            return None;
        }
    }
    Some(Ring::with_options(options).expect("ring setup"))
}

/// Whether the kernel is at least `major.minor` (multishot ops and buffer rings need 5.19 or
/// 6.0); prints the skip reason when not.
fn kernel_at_least(major: u32, minor: u32, what: &str) -> bool {
    let kernel = KernelVersion::running();
    if !kernel.at_least(major, minor) {
        skip(format_args!(
            "{what} needs Linux {major}.{minor}+, this is {}",
            kernel.release
        ));
        return false;
    }
    true
}

/// Waits (bounded: 10 s) until `n` completions have arrived; returns them in order.
fn wait_n(ring: &mut Ring, n: usize) -> Vec<Completion> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} completions within 10 s: {out:?}",
            out.len()
        );
        match ring.wait(n - out.len(), Some(Duration::from_millis(500))) {
            Ok(c) => out.extend(c),
            Err(fdkit::Error::Os(Errno::INTR)) => {}
            Err(e) => panic!("wait: {e}"),
        }
    }
    out
}

fn one(ring: &mut Ring) -> Completion {
    let mut c = wait_n(ring, 1);
    assert_eq!(c.len(), 1, "{c:?}");
    c.pop().unwrap()
}

fn pipe() -> (OwnedFd, OwnedFd) {
    fd::pipe2(PipeFlags::CLOEXEC).unwrap()
}

fn read_exact(from: &OwnedFd, n: usize) -> Vec<u8> {
    let mut got = vec![0u8; n];
    let mut at = 0;
    while at < n {
        match fd::read(from, &mut got[at..]) {
            Ok(0) => break,
            Ok(k) => at += k,
            Err(Errno::INTR) => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    got.truncate(at);
    got
}

/// An fd number far above anything open (and above the usual RLIMIT_NOFILE): EBADF.
fn bad_fd() -> BorrowedFd<'static> {
    // SAFETY: the number is never open in this test process; the kernel answers EBADF.
    unsafe { BorrowedFd::borrow_raw(1 << 20) }
}

#[test]
fn nop_completes_with_its_user_data() {
    let Some(mut ring) = ring_for(&["nop"]) else {
        return;
    };
    ring.nop(7).unwrap();
    ring.nop(u64::MAX).unwrap();
    let c = wait_n(&mut ring, 2);
    let uds: Vec<u64> = c.iter().map(|c| c.user_data).collect();
    assert_eq!(uds, vec![7, u64::MAX]);
    assert!(c
        .iter()
        .all(|c| c.result == 0 && c.error().is_none() && c.op == OpKind::Nop));
    assert_eq!(ring.in_flight(), 0);
}

#[test]
fn wait_with_nothing_in_flight_returns_at_once() {
    let Some(mut ring) = ring_for(&[]) else {
        return;
    };
    let t = Instant::now();
    assert!(ring.wait(1, None).unwrap().is_empty());
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
fn write_then_read_through_a_pipe() {
    let Some(mut ring) = ring_for(&["read", "write"]) else {
        return;
    };
    let (r, w) = pipe();
    ring.write(w.as_fd(), b"hello ring".to_vec(), None, 1)
        .unwrap();
    let c = one(&mut ring);
    assert_eq!((c.user_data, c.result), (1, 10));
    ring.read(r.as_fd(), 64, None, 2).unwrap();
    let c = one(&mut ring);
    assert_eq!(c.result, 10);
    assert_eq!(c.data.as_deref(), Some(&b"hello ring"[..]));
}

#[test]
fn read_and_write_a_file_at_offsets() {
    let Some(mut ring) = ring_for(&["read", "write"]) else {
        return;
    };
    let dir = fd::mkdtemp(&std::env::temp_dir(), "fdkit-ring".as_ref(), "".as_ref()).unwrap();
    let path = dir.join("f");
    let f = fd::open(
        &path,
        OFlags::CREATE | OFlags::RDWR | OFlags::CLOEXEC,
        fd::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    ring.write(f.as_fd(), b"0123456789".to_vec(), Some(0), 1)
        .unwrap();
    assert_eq!(one(&mut ring).result, 10);
    ring.write(f.as_fd(), &b"AB"[..], Some(4), 2).unwrap();
    assert_eq!(one(&mut ring).result, 2);
    ring.read(f.as_fd(), 100, Some(2), 3).unwrap();
    assert_eq!(one(&mut ring).data.unwrap(), b"23AB6789");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn socket_connect_accept_send_recv_shutdown_close_on_loopback() {
    let Some(mut ring) = ring_for(&[
        "socket", "connect", "accept", "send", "recv", "shutdown", "close",
    ]) else {
        return;
    };
    let (l, addr) = listener(false);
    ring.socket(AddressFamily::INET, SocketType::STREAM, None, 1)
        .unwrap();
    let mut c = one(&mut ring);
    assert_eq!(c.op, OpKind::Socket);
    let cfd = c.take_fd().expect("socket op gives an fd");
    assert!(
        fd::get_cloexec(cfd.as_fd()).unwrap(),
        "ring sockets are close-on-exec"
    );
    assert_eq!(c.result, cfd.as_raw_fd());

    ring.accept(l.as_fd(), false, false, 2).unwrap();
    ring.connect(cfd.as_fd(), SocketAddrAny::from(addr), 3)
        .unwrap();
    let mut got = wait_n(&mut ring, 2);
    got.sort_by_key(|c| c.user_data);
    assert_eq!(got[1].result, 0, "connect: {:?}", got[1]);
    let sfd = got[0].take_fd().expect("accept gives an fd");
    assert!(fd::get_cloexec(sfd.as_fd()).unwrap());

    ring.send(cfd.as_fd(), b"ping".to_vec(), SendFlags::NOSIGNAL, 4)
        .unwrap();
    assert_eq!(one(&mut ring).result, 4);
    ring.recv(sfd.as_fd(), 16, RecvFlags::empty(), 5).unwrap();
    assert_eq!(one(&mut ring).data.unwrap(), b"ping");

    ring.shutdown(cfd.as_fd(), Shutdown::Write, 6).unwrap();
    assert_eq!(one(&mut ring).result, 0);
    ring.recv(sfd.as_fd(), 16, RecvFlags::empty(), 7).unwrap();
    let eof = one(&mut ring);
    assert_eq!((eof.result, eof.data.as_deref()), (0, Some(&b""[..])));

    let raw = sfd.as_raw_fd();
    ring.close_fd(sfd, 8).map_err(|(e, _)| e).unwrap();
    assert_eq!(one(&mut ring).result, 0);
    assert_eq!(
        fd::fcntl_int(
            // SAFETY: probing a closed number; the kernel answers EBADF.
            unsafe { BorrowedFd::borrow_raw(raw) },
            fd::FcntlCmd::GetFd,
            0
        ),
        Err(Errno::BADF)
    );
}

#[test]
fn errors_come_back_as_errnos() {
    let Some(mut ring) = ring_for(&["recv", "connect", "socket"]) else {
        return;
    };
    ring.recv(bad_fd(), 8, RecvFlags::empty(), 1).unwrap();
    let c = one(&mut ring);
    assert_eq!(c.error(), Some(Errno::BADF));
    assert!(c.data.is_none());

    // A port nobody listens on: bind one, note it, close it.
    let (l, addr) = listener(false);
    drop(l);
    let s = fd::socket(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    ring.connect(s.as_fd(), SocketAddrAny::from(addr), 2)
        .unwrap();
    assert_eq!(one(&mut ring).error(), Some(Errno::CONNREFUSED));

    ring.socket(AddressFamily::from_raw(12345), SocketType::STREAM, None, 3)
        .unwrap();
    let c = one(&mut ring);
    assert!(c.error().is_some() && c.fd().is_none(), "{c:?}");
}

#[test]
fn misuse_is_an_error_not_a_crash() {
    let Some(mut ring) = ring_for(&["recv"]) else {
        return;
    };
    assert!(matches!(
        Ring::new(0),
        Err(fdkit::Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Ring::new(1 << 20),
        Err(fdkit::Error::InvalidArgument(_))
    ));
    let (c, _s) = tcp_pair();
    assert!(matches!(
        ring.recv(c.as_fd(), usize::MAX, RecvFlags::empty(), 1),
        Err(fdkit::Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ring.recv_multishot(c.as_fd(), 9, 1),
        Err(fdkit::Error::InvalidArgument(_))
    ));
    assert!(
        ring.provide_buffers(1, 3, 16).is_err(),
        "count must be a power of two"
    );
    assert!(
        ring.provide_buffers(1, 4, 0).is_err(),
        "size must be positive"
    );
    assert_eq!(ring.in_flight(), 0);
}

#[test]
fn a_full_submission_queue_is_submitted_and_the_push_retried() {
    let Some(mut ring) = ring_with(
        &["nop"],
        RingOptions {
            entries: 4,
            ..RingOptions::default()
        },
    ) else {
        return;
    };
    for i in 0..50 {
        ring.nop(i).unwrap();
    }
    let got = wait_n(&mut ring, 50);
    let mut uds: Vec<u64> = got.iter().map(|c| c.user_data).collect();
    uds.sort_unstable();
    assert_eq!(uds, (0..50).collect::<Vec<_>>());
}

#[test]
fn a_full_queue_that_cannot_be_submitted_is_a_clear_error() {
    // A SINGLE_ISSUER ring refuses io_uring_enter from any thread but its creator (EEXIST):
    // once its queue is full, a push must fail with an error, and nothing may crash.
    if !require_uring() {
        return;
    }
    if !probe().defer_taskrun {
        skip("SINGLE_ISSUER|DEFER_TASKRUN rings unsupported here");
        return;
    }
    let Some(ring) = ring_with(
        &["nop"],
        RingOptions {
            entries: 4,
            cq_entries: None,
            defer_taskrun: Some(true),
        },
    ) else {
        return;
    };
    assert!(ring.defer_taskrun());
    let outcome = std::thread::spawn(move || {
        let mut ring = ring;
        let mut queued = 0;
        let err = loop {
            match ring.nop(queued) {
                Ok(()) => queued += 1,
                Err(e) => break e,
            }
            assert!(queued <= 4, "a 4-entry queue took {queued} ops");
        };
        assert!(ring.submit().is_err());
        (queued, err)
    })
    .join()
    .expect("no panic");
    assert_eq!(outcome.0, 4);
    assert_eq!(outcome.1, fdkit::Error::Os(Errno::EXIST));
}

#[test]
fn multishot_accept_takes_many_connections_then_cancel_ends_it() {
    if !kernel_at_least(5, 19, "multishot accept") {
        return;
    }
    let Some(mut ring) = ring_for(&["accept", "cancel"]) else {
        return;
    };
    let (l, addr) = listener(false);
    ring.accept(l.as_fd(), true, false, 42).unwrap();
    ring.submit().unwrap();
    let clients: Vec<OwnedFd> = (0..200).map(|_| client(&addr)).collect();
    let mut accepted = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while accepted.len() < clients.len() {
        assert!(Instant::now() < deadline, "accepted {}", accepted.len());
        for mut c in ring.wait(1, Some(Duration::from_millis(200))).unwrap() {
            assert_eq!(c.user_data, 42);
            assert!(c.more(), "multishot accept ended early: {c:?}");
            accepted.push(c.take_fd().unwrap());
        }
    }
    ring.cancel(42, 43).unwrap();
    let got = wait_n(&mut ring, 2);
    assert_eq!(got[0].user_data, 42, "the target completes first: {got:?}");
    assert_eq!(got[0].error(), Some(Errno::CANCELED));
    assert!(!got[0].more());
    assert_eq!(
        (got[1].user_data, got[1].op, got[1].result),
        (43, OpKind::Cancel, 0)
    );
    assert_eq!(ring.in_flight(), 0);
}

#[test]
fn multishot_recv_survives_an_exhausted_buffer_ring_without_losing_data() {
    if !kernel_at_least(6, 0, "multishot receive") {
        return;
    }
    let Some(mut ring) = ring_for(&["recv"]) else {
        return;
    };
    if let Err(e) = ring.provide_buffers(5, 2, 16) {
        skip(format_args!("provided-buffer rings unavailable: {e}"));
        return;
    }
    let (c, s) = tcp_pair();
    let sent = data(4000, 1);
    let mut received = Vec::new();
    let mut enobufs = 0;
    ring.recv_multishot(s.as_fd(), 5, 9).unwrap();
    let mut rest = &sent[..];
    let deadline = Instant::now() + Duration::from_secs(10);
    while received.len() < sent.len() {
        assert!(Instant::now() < deadline, "received {}", received.len());
        if !rest.is_empty() {
            // Much more than the two 16-byte buffers hold, in one go.
            let n = fd::send(&c, &rest[..rest.len().min(1000)], SendFlags::empty()).unwrap();
            rest = &rest[n..];
        }
        for comp in ring.wait(1, Some(Duration::from_millis(200))).unwrap() {
            if let Some(d) = &comp.data {
                assert!(d.len() <= 16);
                assert!(comp.buffer_id.is_some_and(|b| b < 2) || d.is_empty());
                received.extend_from_slice(d);
            }
            if !comp.more() {
                assert_eq!(comp.error(), Some(Errno::NOBUFS), "{comp:?}");
                enobufs += 1;
                ring.recv_multishot(s.as_fd(), 5, 9).unwrap();
            }
        }
    }
    assert_eq!(received, sent);
    assert!(enobufs > 0, "the buffer ring never ran dry");
    drop(c);
    // End of stream ends the multishot receive with result 0.
    let fin = one(&mut ring);
    assert_eq!((fin.result, fin.more()), (0, false));
}

#[test]
fn send_zc_reports_the_result_then_the_notification() {
    let Some(mut ring) = ring_for(&["send_zc"]) else {
        return;
    };
    let (c, s) = tcp_pair();
    let payload = data(100_000, 2);
    ring.send_zc(c.as_fd(), payload.clone(), SendFlags::empty(), 11)
        .unwrap();
    let reader = std::thread::spawn(move || read_exact(&s, 100_000));
    let got = wait_n(&mut ring, 2);
    assert_eq!(got[0].result, 100_000, "{got:?}");
    assert!(got[0].more() && !got[0].notif());
    assert!(got[1].notif() && !got[1].more());
    assert!(got.iter().all(|c| c.user_data == 11));
    assert_eq!(reader.join().unwrap(), payload);
}

#[test]
fn splice_and_tee_between_pipes() {
    let Some(mut ring) = ring_for(&["splice", "tee"]) else {
        return;
    };
    let (r1, w1) = pipe();
    let (r2, w2) = pipe();
    let (r3, w3) = pipe();
    fd::write(&w1, b"spliced bytes").unwrap();
    ring.tee(r1.as_fd(), w3.as_fd(), 100, SpliceFlags::empty(), 1)
        .unwrap();
    assert_eq!(one(&mut ring).result, 13);
    ring.splice(
        r1.as_fd(),
        w2.as_fd(),
        100,
        None,
        None,
        SpliceFlags::empty(),
        2,
    )
    .unwrap();
    assert_eq!(one(&mut ring).result, 13);
    assert_eq!(read_exact(&r2, 13), b"spliced bytes");
    assert_eq!(read_exact(&r3, 13), b"spliced bytes");
    // splice refuses two non-pipes.
    let (a, b) = tcp_pair();
    ring.splice(
        a.as_fd(),
        b.as_fd(),
        10,
        None,
        None,
        SpliceFlags::empty(),
        3,
    )
    .unwrap();
    assert_eq!(one(&mut ring).error(), Some(Errno::INVAL));
}

#[test]
fn poll_add_reports_readiness() {
    let Some(mut ring) = ring_for(&["poll_add"]) else {
        return;
    };
    let (r, w) = pipe();
    ring.poll_add(r.as_fd(), PollFlags::IN, false, 1).unwrap();
    assert!(ring
        .wait(1, Some(Duration::from_millis(100)))
        .unwrap()
        .is_empty());
    fd::write(&w, b"x").unwrap();
    let c = one(&mut ring);
    assert!(PollFlags::from_bits_truncate(c.result as u16).contains(PollFlags::IN));
}

#[test]
fn timeout_expires_with_etime_and_wait_timeouts_are_honoured() {
    let Some(mut ring) = ring_for(&["timeout"]) else {
        return;
    };
    let t = Instant::now();
    ring.timeout(Duration::from_millis(50), 0, 1).unwrap();
    let c = one(&mut ring);
    let took = t.elapsed();
    assert_eq!(c.error(), Some(Errno::TIME));
    assert!(took >= Duration::from_millis(45), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");

    ring.timeout(Duration::from_secs(3600), 0, 2).unwrap();
    let t = Instant::now();
    assert!(ring
        .wait(1, Some(Duration::from_millis(80)))
        .unwrap()
        .is_empty());
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(75) && took < Duration::from_secs(2),
        "{took:?}"
    );
    // Cancelling the hour-long timeout: target first (ECANCELED), then the cancel (0).
    ring.cancel(2, 3).unwrap();
    let got = wait_n(&mut ring, 2);
    assert_eq!(
        (got[0].user_data, got[0].error()),
        (2, Some(Errno::CANCELED))
    );
    assert_eq!((got[1].user_data, got[1].result), (3, 0));
}

#[test]
fn cancel_waits_for_its_target_and_reports_enoent_for_none() {
    let Some(mut ring) = ring_for(&["recv", "cancel"]) else {
        return;
    };
    ring.cancel(999, 1).unwrap();
    assert_eq!(one(&mut ring).error(), Some(Errno::NOENT));
    let (_c, s) = tcp_pair();
    // Two ops with the same user_data: one cancel takes both.
    ring.recv(s.as_fd(), 8, RecvFlags::empty(), 5).unwrap();
    ring.recv(s.as_fd(), 8, RecvFlags::empty(), 5).unwrap();
    ring.submit().unwrap();
    ring.cancel(5, 6).unwrap();
    let got = wait_n(&mut ring, 3);
    let uds: Vec<u64> = got.iter().map(|c| c.user_data).collect();
    assert_eq!(uds, vec![5, 5, 6], "{got:?}");
    assert!(got[..2].iter().all(|c| c.error() == Some(Errno::CANCELED)));
    assert_eq!(got[2].result, 0);
    assert_eq!(ring.in_flight(), 0);
}

#[test]
fn completion_queue_overflow_loses_nothing() {
    let Some(mut ring) = ring_with(
        &["nop"],
        RingOptions {
            entries: 8,
            cq_entries: Some(16),
            defer_taskrun: Some(false),
        },
    ) else {
        return;
    };
    assert_eq!(ring.cq_entries(), 16);
    // 8 at a time (the queue's size), never reaped until all 200 are submitted.
    for i in 0..200 {
        ring.nop(i).unwrap();
        if i % 8 == 7 {
            ring.submit().unwrap();
        }
    }
    ring.submit().unwrap();
    assert!(
        ring.cq_overflow_pending(),
        "200 completions fit a 16-entry queue?"
    );
    // Even a wait that asks for nothing flushes the overflow list completely.
    let got = ring.wait(0, None).unwrap();
    let uds: Vec<u64> = got.iter().map(|c| c.user_data).collect();
    assert_eq!(uds, (0..200).collect::<Vec<_>>());
    assert!(!ring.cq_overflow_pending());
}

#[test]
fn completion_queue_overflow_loses_nothing_with_defer_taskrun() {
    if !require_uring() {
        return;
    }
    if !probe().defer_taskrun {
        skip("DEFER_TASKRUN unsupported here");
        return;
    }
    let Some(mut ring) = ring_with(
        &["nop"],
        RingOptions {
            entries: 8,
            cq_entries: Some(16),
            defer_taskrun: Some(true),
        },
    ) else {
        return;
    };
    for i in 0..100 {
        ring.nop(i).unwrap();
    }
    let got = wait_n(&mut ring, 100);
    let uds: Vec<u64> = got.iter().map(|c| c.user_data).collect();
    assert_eq!(uds, (0..100).collect::<Vec<_>>());
}

#[test]
fn closing_a_ring_with_ops_in_flight_cancels_and_reaps_them() {
    if !kernel_at_least(6, 0, "multishot receive") {
        return;
    }
    let Some(mut ring) = ring_for(&["recv", "accept", "timeout", "read"]) else {
        return;
    };
    let (l, _addr) = listener(false);
    let (_c, s) = tcp_pair();
    let (r, _w) = pipe();
    ring.provide_buffers(1, 4, 64).unwrap();
    ring.recv(s.as_fd(), 1 << 16, RecvFlags::empty(), 1)
        .unwrap();
    ring.recv_multishot(s.as_fd(), 1, 2).unwrap();
    ring.accept(l.as_fd(), true, false, 3).unwrap();
    ring.timeout(Duration::from_secs(3600), 0, 4).unwrap();
    ring.read(r.as_fd(), 100, None, 5).unwrap();
    ring.submit().unwrap();
    ring.nop(6).unwrap(); // queued, never submitted by the caller
    assert_eq!(ring.in_flight(), 6);
    let t = Instant::now();
    assert!(ring.close(Duration::from_secs(5)), "every op completed");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // The fds the ops used are untouched and still work.
    fd::write(&_w, b"still open").unwrap();
    assert_eq!(read_exact(&r, 10), b"still open");
}

#[test]
fn accepted_fds_nobody_took_are_closed_with_their_completion_or_ring() {
    let Some(mut ring) = ring_for(&["accept"]) else {
        return;
    };
    let (l, addr) = listener(false);
    // A completion dropped without take_fd closes the fd: the client reads end of stream.
    let c1 = client(&addr);
    ring.accept(l.as_fd(), false, false, 1).unwrap();
    drop(wait_n(&mut ring, 1));
    assert_eq!(read_exact(&c1, 1), b"");
    // A completion still unreaped when the ring is dropped: the same.
    let c2 = client(&addr);
    ring.accept(l.as_fd(), false, false, 2).unwrap();
    ring.submit().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while ring
        .wait_ready(1, Some(Duration::from_millis(100)))
        .unwrap()
        == 0
    {
        assert!(Instant::now() < deadline);
    }
    drop(ring);
    assert_eq!(read_exact(&c2, 1), b"");
}
