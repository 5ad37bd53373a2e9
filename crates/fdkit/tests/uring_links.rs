//! `fdkit::uring::Ring`'s SQE flags, linked chains, registered files and buffers, and the
//! path and message ops, against the real kernel: a linked write after a failed read is
//! cancelled, a hardlink goes on, a link_timeout cancels a receive that never gets data,
//! skip_success posts nothing on success and its slots are released (nothing left in flight),
//! fixed files and buffers round-trip.
//!
//! Each test skips (printing `SKIPPED <test>: <why>` on stderr) when io_uring, an op or a
//! feature is missing here.

use fdkit::fd::{self, Errno, OFlags};
use fdkit::uring::{probe, Completion, OpFd, OpKind, Ring, SqeFlags, Target};
use rustix::net::{RecvFlags, SendFlags};
use rustix::pipe::PipeFlags;
use std::ffi::CString;
#[allow(unused_imports)]
use std::os::fd::BorrowedFd;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

mod common;
use common::{require_uring, skip, tcp_pair};

fn ring_for(ops: &[&str]) -> Option<Ring> {
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
    Some(Ring::new(64).expect("ring setup"))
}

fn skipping_ring(ops: &[&str]) -> Option<Ring> {
    let ring = ring_for(ops)?;
    if !ring.can_skip_success() {
        skip(format_args!("IOSQE_CQE_SKIP_SUCCESS needs Linux 5.17+"));
        return None;
    }
    Some(ring)
}

/// Collects completions until nothing is in flight (bounded: 10 s).
fn drain(ring: &mut Ring) -> Vec<Completion> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    loop {
        out.extend(ring.wait(1, Some(Duration::from_millis(200))).unwrap());
        if ring.in_flight() == 0 {
            out.extend(ring.take_ready());
            return out;
        }
        assert!(Instant::now() < deadline, "still in flight: {out:?}");
    }
}

fn summary(cs: &[Completion]) -> Vec<(u64, OpKind, i32)> {
    let mut v: Vec<_> = cs.iter().map(|c| (c.user_data, c.op, c.result)).collect();
    v.sort_by_key(|x| x.0);
    v
}

fn pipe() -> (OwnedFd, OwnedFd) {
    fd::pipe2(PipeFlags::CLOEXEC).unwrap()
}

fn read8(r: &OwnedFd) -> Vec<u8> {
    let mut buf = [0u8; 8];
    let n = rustix::io::read(r, &mut buf).unwrap();
    buf[..n].to_vec()
}

/// The errno of a non-blocking read of an empty pipe (EAGAIN), without touching its flags
/// for long.
fn nothing_to_read(r: &OwnedFd) -> Option<i32> {
    let mut fds = [rustix::event::PollFd::new(r, rustix::event::PollFlags::IN)];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match rustix::event::poll(&mut fds, Some(&zero)).unwrap() {
        0 => Some(libc::EAGAIN),
        _ => None,
    }
}

const ECANCELED: i32 = -(libc::ECANCELED);

#[test]
fn a_linked_write_after_a_failed_read_is_cancelled() {
    let Some(mut ring) = ring_for(&["read", "write"]) else {
        return;
    };
    let (r, w) = pipe();
    // A read from the pipe's write end fails with EBADF; the write linked after it never runs.
    ring.with_flags(SqeFlags::IO_LINK, |ring| ring.read(w.as_fd(), 8, None, 1))
        .unwrap();
    ring.write(w.as_fd(), b"never".to_vec(), None, 2).unwrap();
    let got = summary(&drain(&mut ring));
    assert_eq!(
        got,
        vec![
            (1, OpKind::Read, -libc::EBADF),
            (2, OpKind::Write, ECANCELED)
        ]
    );
    assert_eq!(nothing_to_read(&r), Some(libc::EAGAIN));
}

#[test]
fn a_hardlinked_chain_goes_on_after_a_failure() {
    let Some(mut ring) = ring_for(&["read", "write"]) else {
        return;
    };
    let (r, w) = pipe();
    ring.with_flags(SqeFlags::IO_HARDLINK, |ring| {
        ring.read(w.as_fd(), 8, None, 1)
    })
    .unwrap();
    ring.write(w.as_fd(), b"still".to_vec(), None, 2).unwrap();
    let got = summary(&drain(&mut ring));
    assert_eq!(
        got,
        vec![(1, OpKind::Read, -libc::EBADF), (2, OpKind::Write, 5)]
    );
    assert_eq!(read8(&r), b"still");
}

#[test]
fn linked_ops_run_in_order() {
    let Some(mut ring) = ring_for(&["read", "write"]) else {
        return;
    };
    let (r, w) = pipe();
    ring.with_flags(SqeFlags::IO_LINK, |ring| {
        ring.write(w.as_fd(), b"ab".to_vec(), None, 1)
    })
    .unwrap();
    ring.with_flags(SqeFlags::IO_LINK, |ring| ring.read(r.as_fd(), 2, None, 2))
        .unwrap();
    ring.write(w.as_fd(), b"cd".to_vec(), None, 3).unwrap();
    let cs = drain(&mut ring);
    let read = cs.iter().find(|c| c.user_data == 2).unwrap();
    assert_eq!(read.data.as_deref(), Some(&b"ab"[..]));
    assert_eq!(read8(&r), b"cd");
}

#[test]
fn a_link_timeout_cancels_a_recv_that_never_gets_data() {
    let Some(mut ring) = ring_for(&["recv", "link_timeout"]) else {
        return;
    };
    let (a, _b) = tcp_pair();
    let t = Instant::now();
    ring.with_flags(SqeFlags::IO_LINK, |ring| {
        ring.recv(a.as_fd(), 16, RecvFlags::empty(), 1)
    })
    .unwrap();
    ring.link_timeout(Duration::from_millis(50), 2).unwrap();
    let cs = drain(&mut ring);
    assert!(t.elapsed() < Duration::from_secs(5));
    let recv = cs.iter().find(|c| c.user_data == 1).unwrap();
    let lt = cs.iter().find(|c| c.user_data == 2).unwrap();
    // io_uring_prep_link_timeout(3): the op is cancelled (ECANCELED, or EINTR for some);
    // the timeout reports ETIME.
    assert!([ECANCELED, -libc::EINTR].contains(&recv.result), "{recv:?}");
    assert_eq!((lt.op, lt.result), (OpKind::LinkTimeout, -libc::ETIME));
}

#[test]
fn a_link_timeout_reports_ecanceled_when_its_op_completes_first() {
    let Some(mut ring) = ring_for(&["nop", "link_timeout"]) else {
        return;
    };
    ring.with_flags(SqeFlags::IO_LINK, |ring| ring.nop(1))
        .unwrap();
    ring.link_timeout(Duration::from_secs(5), 2).unwrap();
    let got = summary(&drain(&mut ring));
    assert_eq!(
        got,
        vec![(1, OpKind::Nop, 0), (2, OpKind::LinkTimeout, ECANCELED)]
    );
}

#[test]
fn link_timeout_must_follow_a_linked_op() {
    let Some(mut ring) = ring_for(&["link_timeout"]) else {
        return;
    };
    assert!(ring.link_timeout(Duration::from_secs(1), 1).is_err());
    ring.nop(2).unwrap();
    assert!(ring.link_timeout(Duration::from_secs(1), 3).is_err());
    assert_eq!(ring.in_flight(), 1);
    drain(&mut ring);
}

#[test]
fn skip_success_posts_nothing_and_releases_its_slot() {
    let Some(mut ring) = skipping_ring(&["nop", "write"]) else {
        return;
    };
    let (r, w) = pipe();
    // Alone: the ring's witness tells it when the op is done.
    ring.with_flags(SqeFlags::SKIP_SUCCESS, |ring| {
        ring.write(w.as_fd(), b"quiet".to_vec(), None, 1)
    })
    .unwrap();
    assert_eq!(ring.in_flight(), 1);
    assert_eq!(drain(&mut ring).len(), 0);
    assert_eq!(ring.in_flight(), 0);
    assert_eq!(read8(&r), b"quiet");
    // In a chain: only the last op reports.
    for i in 0..3 {
        ring.with_flags(SqeFlags::IO_LINK | SqeFlags::SKIP_SUCCESS, |ring| {
            ring.nop(10 + i)
        })
        .unwrap();
    }
    ring.nop(20).unwrap();
    assert_eq!(summary(&drain(&mut ring)), vec![(20, OpKind::Nop, 0)]);
    // Many, so slot ids are reused across generations.
    for i in 0..200 {
        ring.with_flags(SqeFlags::SKIP_SUCCESS, |ring| ring.nop(i))
            .unwrap();
    }
    ring.nop(999).unwrap();
    assert_eq!(summary(&drain(&mut ring)), vec![(999, OpKind::Nop, 0)]);
}

#[test]
fn a_failed_skip_success_op_reports_and_its_chain_is_released() {
    let Some(mut ring) = skipping_ring(&["read", "write", "nop"]) else {
        return;
    };
    let (r, w) = pipe();
    ring.with_flags(SqeFlags::IO_LINK | SqeFlags::SKIP_SUCCESS, |ring| {
        ring.read(w.as_fd(), 8, None, 1)
    })
    .unwrap();
    ring.with_flags(SqeFlags::IO_LINK, |ring| {
        ring.write(w.as_fd(), b"x".to_vec(), None, 2)
    })
    .unwrap();
    ring.nop(3).unwrap();
    // The kernel posts the failure and skips the cancelled ops' completions.
    let got = summary(&drain(&mut ring));
    assert_eq!(got, vec![(1, OpKind::Read, -libc::EBADF)]);
    assert_eq!(ring.in_flight(), 0);
    assert_eq!(nothing_to_read(&r), Some(libc::EAGAIN));
    // The ring still works, and reused slots get no stray completions.
    ring.nop(4).unwrap();
    assert_eq!(summary(&drain(&mut ring)), vec![(4, OpKind::Nop, 0)]);
}

#[test]
fn skip_success_is_refused_where_it_would_lose_a_result() {
    let Some(mut ring) = skipping_ring(&["accept"]) else {
        return;
    };
    let (a, _b) = tcp_pair();
    assert!(ring
        .with_flags(SqeFlags::SKIP_SUCCESS, |r| r.accept(
            a.as_fd(),
            false,
            false,
            1
        ))
        .is_err());
    assert!(ring
        .with_flags(SqeFlags::IO_LINK, |r| r.accept(a.as_fd(), true, false, 1))
        .is_err());
    assert!(ring
        .with_flags(SqeFlags::IO_LINK | SqeFlags::IO_HARDLINK, |r| r.nop(1))
        .is_err());
    // The flags the ring sets itself (a fixed fd, a buffer group) are not the caller's.
    for own in [SqeFlags::FIXED_FILE, SqeFlags::BUFFER_SELECT] {
        assert!(ring.with_flags(own, |r| r.nop(1)).is_err());
    }
    assert_eq!(ring.in_flight(), 0);
    // Flags apply to one op only.
    ring.nop(5).unwrap();
    assert_eq!(summary(&drain(&mut ring)), vec![(5, OpKind::Nop, 0)]);
}

#[test]
fn drain_and_async_flags_complete_normally() {
    let Some(mut ring) = ring_for(&["nop", "write"]) else {
        return;
    };
    let (r, w) = pipe();
    ring.with_flags(SqeFlags::ASYNC, |ring| {
        ring.write(w.as_fd(), b"a".to_vec(), None, 1)
    })
    .unwrap();
    ring.with_flags(SqeFlags::IO_DRAIN, |ring| ring.nop(2))
        .unwrap();
    let got = summary(&drain(&mut ring));
    assert_eq!(got, vec![(1, OpKind::Write, 1), (2, OpKind::Nop, 0)]);
    assert_eq!(read8(&r), b"a");
}

#[test]
fn fixed_files_and_buffers_round_trip() {
    let Some(mut ring) = ring_for(&["read_fixed", "write_fixed", "read", "write"]) else {
        return;
    };
    let (r, w) = pipe();
    ring.register_files(&[r.as_raw_fd(), w.as_raw_fd()])
        .unwrap();
    assert_eq!(ring.registered_files(), 2);
    ring.write(Target::Fixed(1), b"via index".to_vec(), None, 1)
        .unwrap();
    let c = drain(&mut ring).pop().unwrap();
    assert_eq!((c.result, c.target), (9, Some(OpFd::Fixed(1))));
    ring.read(Target::Fixed(0), 64, None, 2).unwrap();
    let c = drain(&mut ring).pop().unwrap();
    assert_eq!(c.data.as_deref(), Some(&b"via index"[..]));
    // An index past the table is the kernel's EBADF.
    ring.read(Target::Fixed(7), 8, None, 3).unwrap();
    assert_eq!(drain(&mut ring).pop().unwrap().result, -libc::EBADF);

    ring.register_buffers(2, 4096).unwrap();
    ring.fill_fixed(0, 0, b"fixed bytes").unwrap();
    // write_fixed from buffer 0 into the pipe, then read_fixed into buffer 1, linked.
    ring.with_flags(SqeFlags::IO_LINK, |ring| {
        ring.write_fixed(Target::Fixed(1), 0, 11.into(), None, 4)
    })
    .unwrap();
    ring.read_fixed(r.as_fd(), 1, 64, None, 5).unwrap();
    let cs = drain(&mut ring);
    let read = cs.iter().find(|c| c.user_data == 5).unwrap();
    assert_eq!((read.op, read.result), (OpKind::ReadFixed, 11));
    assert_eq!(read.data.as_deref(), Some(&b"fixed bytes"[..]));
    assert_eq!(ring.fixed_bytes(1, 0..11).unwrap(), b"fixed bytes");
    assert!(ring.fixed_bytes(2, 0..1).is_err());
    assert!(ring.read_fixed(r.as_fd(), 0, 4097, None, 6).is_err());
    // Busy while in flight: a read_fixed waiting on an empty pipe holds buffer 0.
    ring.read_fixed(r.as_fd(), 0, 8, None, 7).unwrap();
    ring.submit().unwrap();
    assert!(matches!(
        ring.unregister_buffers(),
        Err(fdkit::Error::Os(Errno::BUSY))
    ));
    assert!(matches!(
        ring.fill_fixed(0, 0, b"no"),
        Err(fdkit::Error::Os(Errno::BUSY))
    ));
    rustix::io::write(&w, b"late").unwrap();
    let c = drain(&mut ring).pop().unwrap();
    assert_eq!(c.data.as_deref(), Some(&b"late"[..]));
    ring.unregister_buffers().unwrap();
    ring.unregister_files().unwrap();
    assert_eq!(ring.registered_files(), 0);
}

#[test]
fn openat_statx_fsync_on_a_file() {
    let Some(mut ring) = ring_for(&["openat", "statx", "fsync", "write"]) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("fdkit-uring-links-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f");
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    let flags = (OFlags::CREATE | OFlags::WRONLY | OFlags::TRUNC).bits() as i32;
    ring.openat(cpath.clone(), flags, 0o600, None, 1).unwrap();
    let mut c = drain(&mut ring).pop().unwrap();
    assert_eq!(c.op, OpKind::OpenAt);
    let file = c.take_fd().expect("an fd");
    let fl = rustix::io::fcntl_getfd(&file).unwrap();
    assert!(fl.contains(fd::FdFlags::CLOEXEC));
    ring.with_flags(SqeFlags::IO_LINK, |ring| {
        ring.write(file.as_fd(), b"hello".to_vec(), Some(0), 2)
    })
    .unwrap();
    ring.fsync(file.as_fd(), true, 3).unwrap();
    let got = summary(&drain(&mut ring));
    assert_eq!(got, vec![(2, OpKind::Write, 5), (3, OpKind::Fsync, 0)]);
    ring.statx(cpath, None, 0, libc::STATX_BASIC_STATS, 4)
        .unwrap();
    let c = drain(&mut ring).pop().unwrap();
    let st = c.statx.expect("statx");
    let meta = std::fs::metadata(&path).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((st.size, st.ino, st.mode), (5, meta.ino(), meta.mode()));
    let missing = CString::new(dir.join("missing").to_str().unwrap()).unwrap();
    ring.openat(missing, libc::O_RDONLY, 0, None, 5).unwrap();
    assert_eq!(drain(&mut ring).pop().unwrap().result, -libc::ENOENT);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sendmsg_recvmsg_over_udp_and_accept_with_address() {
    let Some(mut ring) = ring_for(&["sendmsg", "recvmsg", "accept"]) else {
        return;
    };
    use rustix::net::{bind, getsockname, ipproto, socket, AddressFamily, SocketType};
    let a = socket(AddressFamily::INET, SocketType::DGRAM, Some(ipproto::UDP)).unwrap();
    let b = socket(AddressFamily::INET, SocketType::DGRAM, Some(ipproto::UDP)).unwrap();
    let lo = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0);
    bind(&a, &lo).unwrap();
    bind(&b, &lo).unwrap();
    let a_addr = getsockname(&a).unwrap();
    let b_addr = getsockname(&b).unwrap();
    ring.recvmsg(b.as_fd(), 64, RecvFlags::empty(), 1).unwrap();
    let parts: Vec<Box<dyn AsRef<[u8]> + Send>> =
        vec![Box::new(b"dgram ".to_vec()), Box::new(b"parts".to_vec())];
    ring.sendmsg(
        a.as_fd(),
        parts,
        Some(b_addr.clone()),
        SendFlags::empty(),
        2,
    )
    .unwrap();
    let cs = drain(&mut ring);
    let got = cs.iter().find(|c| c.user_data == 1).unwrap();
    assert_eq!(got.data.as_deref(), Some(&b"dgram parts"[..]));
    assert_eq!(got.address.as_ref(), Some(&a_addr));
    assert_eq!(got.target, Some(OpFd::Raw(b.as_raw_fd())));

    let (l, addr) = common::listener(false);
    ring.accept(l.as_fd(), false, true, 3).unwrap();
    ring.submit().unwrap();
    let client = common::client(&addr);
    let mut c = drain(&mut ring).pop().unwrap();
    assert!(c.take_fd().is_some());
    assert_eq!(c.address, Some(getsockname(&client).unwrap()));
}

#[test]
fn a_chain_must_fit_the_submission_queue() {
    if !require_uring() {
        return;
    }
    let mut ring = Ring::new(4).unwrap();
    let n = ring.sq_entries() as u64;
    for i in 0..n - 1 {
        ring.with_flags(SqeFlags::IO_LINK, |r| r.nop(i)).unwrap();
    }
    // One more linked op (and a witness) would not fit one submission: refused, queued nothing.
    assert!(ring.with_flags(SqeFlags::IO_LINK, |r| r.nop(99)).is_err());
    ring.nop(100).unwrap_err();
    // Submitting ends the chain as it stands (the kernel would do the same).
    ring.submit().unwrap();
    assert_eq!(drain(&mut ring).len(), (n - 1) as usize);
    if ring.can_skip_success() {
        let mut tiny = Ring::new(1).unwrap();
        assert!(tiny
            .with_flags(SqeFlags::SKIP_SUCCESS, |r| r.nop(1))
            .is_err());
        assert_eq!(tiny.in_flight(), 0);
    }
}
