//! The fd family against the real kernel: loopback sockets, pipes, temporary files.

use fdkit::fd::{self, AddressFamily, Errno, FcntlCmd, SocketAddrAny, SocketFlags, SocketType};
use fdkit::Error;

mod common;
use common::{client, listener};
use std::net::SocketAddrV4;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

#[test]
fn accept_many_drains_pending_and_respects_max() {
    let (l, addr) = listener(true);
    assert!(fd::accept_many(l.as_fd(), 64, SocketFlags::CLOEXEC)
        .unwrap()
        .is_empty());
    let clients: Vec<OwnedFd> = (0..10).map(|_| client(&addr)).collect();
    let first = fd::accept_many(l.as_fd(), 4, SocketFlags::CLOEXEC).unwrap();
    assert_eq!(first.len(), 4);
    let rest = fd::accept_many(l.as_fd(), 64, SocketFlags::CLOEXEC).unwrap();
    assert_eq!(rest.len(), 6);
    // Every accepted peer address is one of our clients' local addresses.
    let mut peers: Vec<SocketAddrV4> = first
        .iter()
        .chain(&rest)
        .map(|(conn, peer)| {
            assert!(fd::get_cloexec(conn.as_fd()).unwrap());
            SocketAddrV4::try_from(peer.clone().unwrap()).unwrap()
        })
        .collect();
    let mut locals: Vec<SocketAddrV4> = clients
        .iter()
        .map(|c| SocketAddrV4::try_from(fd::getsockname(c).unwrap()).unwrap())
        .collect();
    peers.sort();
    locals.sort();
    assert_eq!(peers, locals);
}

#[test]
fn accept_many_refuses_a_blocking_listener_and_zero_max() {
    let (l, _) = listener(false);
    assert_eq!(
        fd::accept_many(l.as_fd(), 8, SocketFlags::CLOEXEC).unwrap_err(),
        Error::NeedsNonBlocking("accept_many")
    );
    let (l, _) = listener(true);
    assert!(matches!(
        fd::accept_many(l.as_fd(), 0, SocketFlags::CLOEXEC),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn accept_many_on_a_non_listening_socket_is_the_kernels_error() {
    let s = fd::socket(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    assert_eq!(
        fd::accept_many(s.as_fd(), 8, SocketFlags::CLOEXEC).unwrap_err(),
        Error::Os(Errno::INVAL)
    );
}

#[test]
fn sendfile_all_sends_a_whole_file_and_honours_offset() {
    let dir = fd::mkdtemp(&std::env::temp_dir(), "fdkit-test".as_ref(), "".as_ref()).unwrap();
    let path = dir.join("data");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let (a, b) = fd::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            let n = fd::read(&b, &mut buf).unwrap();
            if n == 0 {
                break got;
            }
            got.extend_from_slice(&buf[..n]);
        }
    });
    let mut offset = 1000u64;
    let sent = fd::sendfile_all(
        a.as_fd(),
        file.as_fd(),
        Some(&mut offset),
        None,
        fd::no_checkpoint,
    )
    .unwrap();
    assert_eq!(sent, data.len() as u64 - 1000);
    assert_eq!(offset, data.len() as u64);
    // The file position is untouched when an offset is given.
    assert_eq!(fd::lseek(&file, fd::SeekFrom::Current(0)).unwrap(), 0);
    fd::close(a).unwrap();
    assert_eq!(reader.join().unwrap(), &data[1000..]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn sendfile_all_returns_the_count_before_eagain() {
    let dir = fd::mkdtemp(&std::env::temp_dir(), "fdkit-test".as_ref(), "".as_ref()).unwrap();
    let path = dir.join("big");
    std::fs::write(&path, vec![7u8; 8 << 20]).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let (a, _b) = fd::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .unwrap();
    let sent = fd::sendfile_all(a.as_fd(), file.as_fd(), None, None, fd::no_checkpoint).unwrap();
    assert!(sent > 0 && sent < 8 << 20, "sent {sent}");
    // Nothing more fits: now it is an error, not a zero.
    assert_eq!(
        fd::sendfile_all(a.as_fd(), file.as_fd(), None, None, fd::no_checkpoint).unwrap_err(),
        Errno::AGAIN
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn close_reports_ebadf() {
    let (r, _w) = fd::pipe2(fd::PipeFlags::CLOEXEC).unwrap();
    fd::close(r).unwrap();
    // Tests run on parallel threads, so a just-closed number may already be reused: use one
    // far above anything these tests open.
    const NEVER_OPENED: i32 = 19_999;
    // SAFETY: nothing in this process opens fd 19999; "owning" it only lets close report EBADF.
    let stale = unsafe { std::os::fd::FromRawFd::from_raw_fd(NEVER_OPENED) };
    assert_eq!(fd::close(stale).unwrap_err(), Errno::BADF);
}

#[test]
fn dup_and_dup3() {
    let (r, w) = fd::pipe2(fd::PipeFlags::CLOEXEC).unwrap();
    let d = fd::dup(r.as_fd(), true).unwrap();
    assert!(fd::get_cloexec(d.as_fd()).unwrap());
    let inheritable = fd::dup(r.as_fd(), false).unwrap();
    assert!(!fd::get_cloexec(inheritable.as_fd()).unwrap());
    // dup3 onto itself behaves like dup2: returns the fd.
    assert_eq!(
        fd::dup3(r.as_fd(), r.as_raw_fd(), fd::DupFlags::CLOEXEC).unwrap(),
        r.as_raw_fd()
    );
    let target = d.as_raw_fd();
    assert_eq!(
        fd::dup3(w.as_fd(), target, fd::DupFlags::CLOEXEC).unwrap(),
        target
    );
    // `d` now refers to the write end.
    assert_eq!(fd::write(&d, b"x").unwrap(), 1);
    assert_eq!(
        fd::dup3(r.as_fd(), -1, fd::DupFlags::empty()).unwrap_err(),
        Errno::BADF
    );
}

#[test]
fn fcntl_int_reads_and_sets_pipe_size() {
    let (r, _w) = fd::pipe2(fd::PipeFlags::CLOEXEC).unwrap();
    let size = fd::fcntl_int(r.as_fd(), FcntlCmd::GetPipeSz, 0).unwrap();
    assert!(size >= 4096);
    let set = fd::fcntl_int(r.as_fd(), FcntlCmd::SetPipeSz, 131072).unwrap();
    assert_eq!(set, 131072);
    assert_eq!(FcntlCmd::from_raw(libc::F_GETLK), None);
    assert_eq!(FcntlCmd::from_raw(libc::F_GETFL), Some(FcntlCmd::GetFl));
}

#[test]
fn blocking_and_cloexec_flags_round_trip() {
    let (r, _w) = fd::pipe2(fd::PipeFlags::empty()).unwrap();
    assert!(fd::get_blocking(r.as_fd()).unwrap());
    fd::set_blocking(r.as_fd(), false).unwrap();
    assert!(!fd::get_blocking(r.as_fd()).unwrap());
    assert!(!fd::get_cloexec(r.as_fd()).unwrap());
    fd::set_cloexec(r.as_fd(), true).unwrap();
    assert!(fd::get_cloexec(r.as_fd()).unwrap());
}

#[test]
fn mkstemp_and_mkdtemp_make_private_unique_names() {
    let tmp = std::env::temp_dir();
    let dir = fd::mkdtemp(&tmp, "fdkit-".as_ref(), ".d".as_ref()).unwrap();
    let meta = std::fs::metadata(&dir).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    let name = dir.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("fdkit-") && name.ends_with(".d") && name.len() == 6 + 8 + 2);
    let (f1, p1) = fd::mkstemp(&dir, "a".as_ref(), ".txt".as_ref(), true).unwrap();
    let (_f2, p2) = fd::mkstemp(&dir, "a".as_ref(), ".txt".as_ref(), false).unwrap();
    assert_ne!(p1, p2);
    assert!(fd::get_cloexec(f1.as_fd()).unwrap());
    assert!(!fd::get_cloexec(_f2.as_fd()).unwrap());
    assert_eq!(
        std::fs::metadata(&p1).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        fd::mkstemp(&dir, "a/b".as_ref(), "".as_ref(), true).unwrap_err(),
        Errno::INVAL
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn stat_reports_sizes_beyond_32_bits() {
    let dir = fd::mkdtemp(&std::env::temp_dir(), "fdkit-test".as_ref(), "".as_ref()).unwrap();
    let path = dir.join("sparse");
    let f = std::fs::File::create(&path).unwrap();
    let size = (5u64 << 30) + 123;
    f.set_len(size).unwrap();
    assert_eq!(fd::fstat(f.as_fd()).unwrap().size as u64, size);
    let st = fd::stat(&path).unwrap();
    assert_eq!(st.size as u64, size);
    let std_meta = std::fs::metadata(&path).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(st.ino, std_meta.ino());
    assert_eq!(
        st.mtime_ns,
        i128::from(std_meta.mtime()) * 1_000_000_000 + i128::from(std_meta.mtime_nsec())
    );
    std::os::unix::fs::symlink(&path, dir.join("link")).unwrap();
    assert_eq!(
        fd::lstat(dir.join("link")).unwrap().mode & libc::S_IFMT,
        libc::S_IFLNK
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn poll_times_out_and_sees_readable_pipes() {
    let (r, w) = fd::pipe2(fd::PipeFlags::CLOEXEC).unwrap();
    let start = Instant::now();
    let mut fds = [rustix::event::PollFd::new(&r, rustix::event::PollFlags::IN)];
    let n = fd::poll(&mut fds, Some(Duration::from_millis(50)), fd::no_checkpoint).unwrap();
    assert_eq!(n, 0);
    assert!(start.elapsed() >= Duration::from_millis(45));
    fd::write(&w, b"x").unwrap();
    let n = fd::poll(&mut fds, None, fd::no_checkpoint).unwrap();
    assert_eq!(n, 1);
    assert!(fds[0].revents().contains(rustix::event::PollFlags::IN));
}

#[test]
fn sockopts_as_int_and_bytes() {
    let s = fd::socket(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    fd::setsockopt_int(s.as_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1).unwrap();
    assert_eq!(
        fd::getsockopt_int(s.as_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR).unwrap(),
        1
    );
    let linger = [1u8, 0, 0, 0, 5, 0, 0, 0];
    fd::setsockopt_raw(s.as_fd(), libc::SOL_SOCKET, libc::SO_LINGER, &linger).unwrap();
    let mut out = [0u8; 8];
    let n = fd::getsockopt_raw(s.as_fd(), libc::SOL_SOCKET, libc::SO_LINGER, &mut out).unwrap();
    assert_eq!(&out[..n], &linger);
    assert_eq!(
        fd::getsockopt_int(s.as_fd(), libc::SOL_SOCKET, 9999).unwrap_err(),
        Errno::NOPROTOOPT
    );
    let mut huge = vec![0u8; fd::MAX_SOCKOPT_LEN + 1];
    assert_eq!(
        fd::getsockopt_raw(s.as_fd(), libc::SOL_SOCKET, libc::SO_LINGER, &mut huge).unwrap_err(),
        Errno::INVAL
    );
}

#[test]
fn unix_abstract_and_unnamed_addresses() {
    let l = fd::socket(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    let name = format!("fdkit-test-{}", std::process::id());
    let addr = rustix::net::SocketAddrUnix::new_abstract_name(name.as_bytes()).unwrap();
    fd::bind(&l, &addr).unwrap();
    fd::listen(&l, 8).unwrap();
    let c = fd::socket(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    fd::connect(c.as_fd(), &addr, fd::no_checkpoint).unwrap();
    let (conn, peer): (OwnedFd, Option<SocketAddrAny>) =
        fd::accept4(l.as_fd(), SocketFlags::CLOEXEC).unwrap();
    // The client never bound: its address is unnamed, just the 2-byte family field.
    assert!(peer.is_none_or(|p| p.addr_len() == 2));
    let me = rustix::net::SocketAddrUnix::try_from(fd::getsockname(&l).unwrap()).unwrap();
    assert_eq!(me.abstract_name(), Some(name.as_bytes()));
    drop(conn);
}

#[test]
fn uring_probe_is_consistent() {
    let a = fdkit::uring::probe();
    if a.available {
        assert!(a.reason.is_none());
        // nop is the oldest opcode: if a ring exists, the kernel knows it.
        assert!(a.ops.iter().any(|o| o.name == "nop" && o.supported));
    } else {
        assert!(a.reason.as_deref().unwrap().starts_with("io_uring_setup"));
        assert!(a.ops.iter().all(|o| !o.supported));
    }
}
