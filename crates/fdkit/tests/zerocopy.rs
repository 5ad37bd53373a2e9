//! The zero-copy family against the real kernel: `transfer` on its main paths and fallbacks,
//! `Pipe`, the pool of internal pipes (returned only empty, bounded), `proxy` and `relay`.
//!
//! The pool is process-wide and the test harness runs tests on parallel threads, so every
//! test here holds [`serial`] for its whole run: pool counts stay exact.

use fdkit::fd::{self, Errno, OFlags};
use fdkit::zerocopy::{
    fd_kind, pool_clear, pool_idle, proxy, relay, transfer, FdKind, Path, Pipe, PooledPipe,
    POOL_CAPACITY, SMALL_TRANSFER,
};
use rustix::pipe::{PipeFlags, SpliceFlags};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod common;
use common::{data, tcp_pair, unix_pair};

static SERIAL: Mutex<()> = Mutex::new(());

/// Fds kept open until the process exits: their files' inodes (and the fd numbers) cannot be
/// reused by a later test, which `transfer`'s memory of fallbacks would mistake for the same
/// pair (see `a_fallback_is_not_remembered_for_new_files_on_reused_numbers`).
static KEEP: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn tempdir() -> PathBuf {
    fd::mkdtemp(&std::env::temp_dir(), "fdkit-zc".as_ref(), "".as_ref()).unwrap()
}

/// Writes all of `bytes` to `to` from a thread, then shuts it down for writing (or closes it).
fn feed(to: OwnedFd, bytes: Vec<u8>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            match fd::write(&to, rest) {
                Ok(n) => rest = &rest[n..],
                Err(Errno::INTR) => {}
                Err(e) => panic!("feeder: {e}"),
            }
        }
        let _ = fd::shutdown(&to, fd::Shutdown::Write);
    })
}

/// Reads `from` until EOF in a thread.
fn drain(from: OwnedFd) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match fd::read(&from, &mut buf) {
                Ok(0) => return got,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(Errno::INTR) => {}
                Err(e) => panic!("drain: {e}"),
            }
        }
    })
}

fn file_with(dir: &std::path::Path, name: &str, bytes: &[u8]) -> OwnedFd {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    fd::open(&p, OFlags::RDONLY | OFlags::CLOEXEC, fd::Mode::empty()).unwrap()
}

fn new_file(dir: &std::path::Path, name: &str, extra: OFlags) -> OwnedFd {
    fd::open(
        dir.join(name),
        OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC | extra,
        fd::Mode::from_raw_mode(0o600),
    )
    .unwrap()
}

fn pos(f: &OwnedFd) -> u64 {
    fd::lseek(f, fd::SeekFrom::Current(0)).unwrap()
}

#[test]
fn fd_kinds() {
    let _g = serial();
    let dir = tempdir();
    let f = file_with(&dir, "f", b"x");
    let (r, _w) = fd::pipe2(PipeFlags::CLOEXEC).unwrap();
    let (a, _b) = unix_pair();
    let null = fd::open("/dev/null", OFlags::WRONLY, fd::Mode::empty()).unwrap();
    let d = fd::open(&dir, OFlags::RDONLY, fd::Mode::empty()).unwrap();
    assert_eq!(fd_kind(f.as_fd()).unwrap().0, FdKind::File);
    assert_eq!(fd_kind(r.as_fd()).unwrap().0, FdKind::Pipe);
    assert_eq!(fd_kind(a.as_fd()).unwrap().0, FdKind::Socket);
    assert_eq!(fd_kind(null.as_fd()).unwrap().0, FdKind::CharDevice);
    assert_eq!(fd_kind(d.as_fd()).unwrap().0, FdKind::Other);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn file_to_file_is_copy_file_range_and_honours_offsets() {
    let _g = serial();
    let dir = tempdir();
    let bytes = data(1 << 20, 1);
    let src = file_with(&dir, "src", &bytes);
    let dst = new_file(&dir, "dst", OFlags::empty());
    let (r, stats) = transfer(
        src.as_fd(),
        dst.as_fd(),
        None,
        None,
        None,
        &mut fd::no_checkpoint,
    );
    assert_eq!(r.unwrap(), bytes.len() as u64);
    assert_eq!(stats.path, Path::CopyFileRange);
    assert!(stats.fallbacks.is_empty(), "{stats:?}");
    assert_eq!(stats.bytes, bytes.len() as u64);
    assert_eq!(std::fs::read(dir.join("dst")).unwrap(), bytes);
    assert_eq!(
        (pos(&src), pos(&dst)),
        (bytes.len() as u64, bytes.len() as u64)
    );

    // With offsets: they advance, the file positions do not move.
    let dst2 = new_file(&dir, "dst2", OFlags::empty());
    let (mut so, mut doff) = (1000u64, 10u64);
    let (r, stats) = transfer(
        src.as_fd(),
        dst2.as_fd(),
        Some(100_000),
        Some(&mut so),
        Some(&mut doff),
        &mut fd::no_checkpoint,
    );
    assert_eq!(r.unwrap(), 100_000);
    assert_eq!(stats.path, Path::CopyFileRange);
    assert_eq!((so, doff), (101_000, 100_010));
    assert_eq!(pos(&dst2), 0);
    let got = std::fs::read(dir.join("dst2")).unwrap();
    assert_eq!(&got[10..], &bytes[1000..101_000]);
    assert_eq!(&got[..10], &[0u8; 10]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn socket_paths_move_every_byte() {
    let _g = serial();
    let dir = tempdir();
    let bytes = data(4 << 20, 2);
    // file → socket
    let src = file_with(&dir, "src", &bytes);
    let (a, b) = tcp_pair();
    let reader = drain(b);
    let (r, stats) = transfer(
        src.as_fd(),
        a.as_fd(),
        None,
        None,
        None,
        &mut fd::no_checkpoint,
    );
    assert_eq!(r.unwrap(), bytes.len() as u64);
    assert!(
        matches!(stats.path, Path::SpliceViaPipe | Path::Sendfile),
        "{stats:?}"
    );
    drop(a);
    assert!(reader.join().unwrap() == bytes);

    // socket → socket: splice through a pooled pipe.
    let (far, near) = tcp_pair();
    let (out, out_far) = unix_pair();
    let feeder = feed(far, bytes.clone());
    let reader = drain(out_far);
    let (r, stats) = transfer(
        near.as_fd(),
        out.as_fd(),
        None,
        None,
        None,
        &mut fd::no_checkpoint,
    );
    assert_eq!(r.unwrap(), bytes.len() as u64);
    assert_eq!(stats.path, Path::SpliceViaPipe);
    assert!(stats.fallbacks.is_empty(), "{stats:?}");
    feeder.join().unwrap();
    drop(out);
    assert!(reader.join().unwrap() == bytes);

    // pipe → file: splice directly, at an offset.
    let (pr, pw) = fd::pipe2(PipeFlags::CLOEXEC).unwrap();
    let feeder = feed(pw, bytes.clone());
    let dst = new_file(&dir, "dst", OFlags::empty());
    let mut off = 7u64;
    let (r, stats) = transfer(
        pr.as_fd(),
        dst.as_fd(),
        None,
        None,
        Some(&mut off),
        &mut fd::no_checkpoint,
    );
    assert_eq!(r.unwrap(), bytes.len() as u64);
    assert_eq!(stats.path, Path::Splice);
    assert_eq!(off, 7 + bytes.len() as u64);
    feeder.join().unwrap();
    assert!(std::fs::read(dir.join("dst")).unwrap()[7..] == bytes[..]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn small_counts_skip_the_plan() {
    let _g = serial();
    let dir = tempdir();
    let bytes = data(100_000, 3);
    let src = file_with(&dir, "src", &bytes);
    let dst = new_file(&dir, "dst", OFlags::empty());
    let (r, stats) = transfer(
        src.as_fd(),
        dst.as_fd(),
        Some(SMALL_TRANSFER),
        None,
        None,
        &mut fd::no_checkpoint,
    );
    assert_eq!(r.unwrap(), SMALL_TRANSFER);
    assert!(!stats.remembered);
    assert!(
        matches!(stats.path, Path::SpliceViaPipe | Path::ReadWrite),
        "{stats:?}"
    );
    assert_eq!(
        std::fs::read(dir.join("dst")).unwrap(),
        &bytes[..SMALL_TRANSFER as usize]
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn append_only_destination_falls_back_and_is_remembered() {
    let _g = serial();
    let dir = tempdir();
    let bytes = data(300_000, 4);
    let src = file_with(&dir, "src", &bytes);
    std::fs::write(dir.join("log"), b"head").unwrap();
    let dst = fd::open(
        dir.join("log"),
        OFlags::WRONLY | OFlags::APPEND,
        fd::Mode::empty(),
    )
    .unwrap();
    let mut off = 0u64;
    let (r, stats) = transfer(
        src.as_fd(),
        dst.as_fd(),
        None,
        Some(&mut off),
        None,
        &mut fd::no_checkpoint,
    );
    assert_eq!(r.unwrap(), bytes.len() as u64);
    assert_eq!(stats.path, Path::ReadWrite);
    let steps: Vec<_> = stats
        .fallbacks
        .iter()
        .map(|f| (f.from, f.to, f.errno))
        .collect();
    assert_eq!(
        steps,
        [
            (Path::CopyFileRange, Path::Sendfile, Some(Errno::BADF)),
            (Path::Sendfile, Path::ReadWrite, Some(Errno::INVAL)),
        ]
    );
    assert!(stats.fallbacks.iter().all(|f| !f.reason.is_empty()));
    // The same pair again starts where it ended.
    let mut off = 0u64;
    let (r, stats) = transfer(
        src.as_fd(),
        dst.as_fd(),
        None,
        Some(&mut off),
        None,
        &mut fd::no_checkpoint,
    );
    assert_eq!(r.unwrap(), bytes.len() as u64);
    assert!(stats.remembered);
    assert_eq!(stats.path, Path::ReadWrite);
    assert!(stats.fallbacks.is_empty());
    let got = std::fs::read(dir.join("log")).unwrap();
    assert_eq!(&got[..4], b"head");
    assert!(got[4..4 + bytes.len()] == bytes[..] && got[4 + bytes.len()..] == bytes[..]);
    KEEP.lock().unwrap().extend([src, dst]);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The memory of what worked is keyed by fd number, device and inode. Once both files are
/// closed and deleted, a new pair can get the same numbers and inodes: it must not inherit
/// the old pair's read/write fallback (the old destination was O_APPEND; the new one takes
/// copy_file_range).
#[test]
fn a_fallback_is_not_remembered_for_new_files_on_reused_numbers() {
    let _g = serial();
    let dir = tempdir();
    let bytes = data(100_000, 10);
    let open_pair = |append: bool| {
        let src = file_with(&dir, "src", &bytes);
        let extra = if append {
            OFlags::APPEND
        } else {
            OFlags::TRUNC
        };
        let dst = new_file(&dir, "dst", extra);
        let ids = (
            src.as_raw_fd(),
            fd::fstat(src.as_fd()).unwrap().ino,
            dst.as_raw_fd(),
            fd::fstat(dst.as_fd()).unwrap().ino,
        );
        (src, dst, ids)
    };
    let (src, dst, old_ids) = open_pair(true);
    let (r, stats) = transfer(
        src.as_fd(),
        dst.as_fd(),
        None,
        None,
        None,
        &mut fd::no_checkpoint,
    );
    assert_eq!(r.unwrap(), bytes.len() as u64);
    assert_eq!(stats.path, Path::ReadWrite);
    drop((src, dst));
    std::fs::remove_file(dir.join("src")).unwrap();
    std::fs::remove_file(dir.join("dst")).unwrap();
    let (src, dst, new_ids) = open_pair(false);
    let (r, stats) = transfer(
        src.as_fd(),
        dst.as_fd(),
        None,
        None,
        None,
        &mut fd::no_checkpoint,
    );
    assert_eq!(r.unwrap(), bytes.len() as u64);
    assert_eq!(std::fs::read(dir.join("dst")).unwrap(), bytes);
    // Whatever this pair's memory now says, no later test may meet these numbers again.
    KEEP.lock().unwrap().extend([src, dst]);
    std::fs::remove_dir_all(&dir).unwrap();
    if new_ids == old_ids {
        assert_eq!(
            (stats.path, stats.remembered),
            (Path::CopyFileRange, false),
            "a new pair of files on reused fd numbers and inodes {new_ids:?} inherited the \
             old pair's fallback: {stats:?}"
        );
    }
}

#[test]
fn failed_transfer_reports_how_far_it_got() {
    let _g = serial();
    let (far, near) = unix_pair();
    fd::write(&far, &data(100_000, 5)).unwrap();
    drop(far);
    let (dead, peer) = unix_pair();
    drop(peer);
    let (r, stats) = transfer(
        near.as_fd(),
        dead.as_fd(),
        None,
        None,
        None,
        &mut fd::no_checkpoint,
    );
    assert_eq!(r.unwrap_err(), Errno::PIPE);
    assert_eq!(stats.bytes, 0);
    assert_eq!(stats.path, Path::SpliceViaPipe);
}

/// A SIGUSR1 handler without SA_RESTART, so a signal interrupts a blocked syscall (EINTR).
fn install_sigusr1() {
    extern "C" fn nothing(_: libc::c_int) {}
    // SAFETY: a plain sigaction with a handler that does nothing (async-signal-safe).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = nothing as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
}

#[test]
fn checkpoint_error_stops_a_waiting_transfer_and_proxy() {
    let _g = serial();
    install_sigusr1();
    for which in ["transfer", "proxy"] {
        let (_far, near) = unix_pair();
        let (out, _out_far) = unix_pair();
        fd::set_blocking(near.as_fd(), false).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let which2 = which.to_string();
        let t = std::thread::spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() } as usize).unwrap();
            let mut calls = 0;
            let mut cp = || {
                calls += 1;
                Err(Errno::CANCELED)
            };
            let r = if which2 == "transfer" {
                transfer(near.as_fd(), out.as_fd(), None, None, None, &mut cp).0
            } else {
                proxy(near.as_fd(), out.as_fd(), None, &mut cp).map(|_| 0)
            };
            (r, calls)
        });
        let tid = rx.recv().unwrap() as libc::pthread_t;
        // Signal until the thread notices (it may not be in its syscall yet).
        let start = Instant::now();
        while !t.is_finished() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{which}: not stopped"
            );
            // SAFETY: `tid` is a live thread of this process until `t` finishes; SIGUSR1 has a
            // handler installed above.
            unsafe { libc::pthread_kill(tid, libc::SIGUSR1) };
            std::thread::sleep(Duration::from_millis(20));
        }
        let (r, calls) = t.join().unwrap();
        assert_eq!(r.unwrap_err(), Errno::CANCELED, "{which}");
        assert_eq!(calls, 1, "{which}");
    }
}

#[test]
fn pipe_read_write_tee_and_sizes() {
    let _g = serial();
    let dir = tempdir();
    let bytes = data(200_000, 6);
    let src = file_with(&dir, "src", &bytes);
    let p = Pipe::new(PipeFlags::empty()).unwrap();
    let q = Pipe::new(PipeFlags::NONBLOCK).unwrap();
    assert!(p.size().unwrap() >= 4096);
    assert_eq!(p.resize(1 << 20).unwrap(), 1 << 20);
    assert_eq!(p.resize_or_max(1 << 20).unwrap(), 1 << 20);
    assert_eq!(q.resize(1 << 20).unwrap(), 1 << 20);
    let mut off = 500u64;
    let n = p
        .read_from(src.as_fd(), Some(&mut off), 100_000, SpliceFlags::empty())
        .unwrap();
    assert_eq!((n, off, pos(&src)), (100_000, 100_500, 0));
    assert_eq!(p.pending().unwrap(), 100_000);
    assert_eq!(p.tee(&q, 100_000, SpliceFlags::empty()).unwrap(), 100_000);
    assert_eq!(
        (p.pending().unwrap(), q.pending().unwrap()),
        (100_000, 100_000)
    );
    let d1 = new_file(&dir, "d1", OFlags::empty());
    let d2 = new_file(&dir, "d2", OFlags::empty());
    assert_eq!(
        p.write_to(d1.as_fd(), None, 100_000, SpliceFlags::empty())
            .unwrap(),
        100_000
    );
    let mut left = 100_000;
    while left > 0 {
        left -= q
            .write_to(d2.as_fd(), None, left, SpliceFlags::empty())
            .unwrap();
    }
    assert_eq!(std::fs::read(dir.join("d1")).unwrap(), &bytes[500..100_500]);
    assert_eq!(std::fs::read(dir.join("d2")).unwrap(), &bytes[500..100_500]);
    // Empty non-blocking pipe: EAGAIN, not a wait.
    assert_eq!(
        q.write_to(d2.as_fd(), None, 10, SpliceFlags::empty())
            .unwrap_err(),
        Errno::AGAIN
    );
    let (r, w) = p.into_fds();
    assert!(r.as_raw_fd() >= 0 && w.as_raw_fd() >= 0);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn pooled_pipes_go_back_only_empty() {
    let _g = serial();
    pool_clear();
    assert_eq!(pool_idle(), 0);

    // Filled and not drained: closed, not pooled.
    let mut p = PooledPipe::get().unwrap();
    assert!(p.capacity() >= 4096);
    assert_eq!(p.capacity(), p.pipe().size().unwrap());
    assert_eq!(fd::write(p.pipe().write_end(), b"stale").unwrap(), 5);
    p.filled(5);
    assert_eq!(p.held(), 5);
    drop(p);
    assert_eq!(pool_idle(), 0, "a pipe holding bytes went back to the pool");

    // Filled and drained: pooled, and the next loan is that same, empty pipe.
    let mut p = PooledPipe::get().unwrap();
    fd::write(p.pipe().write_end(), b"abc").unwrap();
    p.filled(3);
    let mut buf = [0u8; 3];
    fd::read(p.pipe().read_end(), &mut buf).unwrap();
    p.drained(3);
    let raw = p.pipe().read_end().as_raw_fd();
    drop(p);
    assert_eq!(pool_idle(), 1);
    let p = PooledPipe::get().unwrap();
    assert_eq!(p.pipe().read_end().as_raw_fd(), raw);
    assert_eq!(p.held(), 0);
    assert_eq!(p.pipe().pending().unwrap(), 0);
    // Pool pipes never block.
    assert!(!fd::get_blocking(p.pipe().read_end()).unwrap());
    assert!(!fd::get_blocking(p.pipe().write_end()).unwrap());
    drop(p);
    assert_eq!(pool_idle(), 1);
    assert_eq!(pool_clear(), 1);
}

#[test]
fn pool_is_bounded() {
    let _g = serial();
    pool_clear();
    let loans: Vec<PooledPipe> = (0..POOL_CAPACITY + 5)
        .map(|_| PooledPipe::get().unwrap())
        .collect();
    assert_eq!(pool_idle(), 0);
    drop(loans);
    assert_eq!(pool_idle(), POOL_CAPACITY);
    assert_eq!(pool_clear(), POOL_CAPACITY);
    assert_eq!(pool_idle(), 0);
}

#[test]
fn transfers_after_a_failure_get_only_their_own_bytes() {
    let _g = serial();
    pool_clear();
    for round in 0..10u64 {
        // Leave up to 150 KB in the internal pipe: the destination is dead.
        let (far, near) = unix_pair();
        fd::write(&far, &data(150_000, 100 + round)).unwrap();
        drop(far);
        let (dead, peer) = unix_pair();
        drop(peer);
        let (r, _) = transfer(
            near.as_fd(),
            dead.as_fd(),
            None,
            None,
            None,
            &mut fd::no_checkpoint,
        );
        assert_eq!(r.unwrap_err(), Errno::PIPE);
        // The next transfer through the pool delivers exactly its own input.
        let good = data(50_000, 200 + round);
        let (far, near) = unix_pair();
        fd::write(&far, &good).unwrap();
        drop(far);
        let (out, out_far) = unix_pair();
        let reader = drain(out_far);
        let (r, _) = transfer(
            near.as_fd(),
            out.as_fd(),
            None,
            None,
            None,
            &mut fd::no_checkpoint,
        );
        assert_eq!(r.unwrap(), good.len() as u64);
        drop(out);
        assert!(reader.join().unwrap() == good, "round {round}");
        assert!(pool_idle() <= 1);
    }
    pool_clear();
}

#[test]
fn proxy_both_directions_with_half_close() {
    let _g = serial();
    let (client, a) = tcp_pair();
    let (b, server) = tcp_pair();
    let up = data(3 << 20, 7);
    let down = data(2 << 20, 8);
    let p = std::thread::spawn(move || {
        let r = proxy(a.as_fd(), b.as_fd(), None, &mut fd::no_checkpoint);
        // Blocking mode restored.
        assert!(fd::get_blocking(a.as_fd()).unwrap());
        assert!(fd::get_blocking(b.as_fd()).unwrap());
        r
    });
    let client2 = client.try_clone().unwrap();
    let server2 = server.try_clone().unwrap();
    let f1 = feed(client, up.clone());
    let r1 = drain(server);
    f1.join().unwrap();
    // The client is half-closed; the server still sends back.
    let f2 = feed(server2, down.clone());
    let r2 = drain(client2);
    f2.join().unwrap();
    assert!(r1.join().unwrap() == up);
    assert!(r2.join().unwrap() == down);
    assert_eq!(
        p.join().unwrap().unwrap(),
        (up.len() as u64, down.len() as u64)
    );
}

#[test]
fn proxy_reset_and_idle_timeout() {
    let _g = serial();
    // A RST from the client ends the proxy with an error.
    let (client, a) = tcp_pair();
    let (b, _server) = tcp_pair();
    let p = std::thread::spawn(move || proxy(a.as_fd(), b.as_fd(), None, &mut fd::no_checkpoint));
    std::thread::sleep(Duration::from_millis(50));
    rustix::net::sockopt::set_socket_linger(&client, Some(Duration::ZERO)).unwrap();
    drop(client);
    let start = Instant::now();
    let err = p.join().unwrap().unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(err, Errno::CONNRESET | Errno::PIPE),
        "unexpected {err:?}"
    );

    // Nothing moves: ETIMEDOUT after the idle timeout.
    let (_client, a) = tcp_pair();
    let (b, _server) = tcp_pair();
    fd::set_blocking(b.as_fd(), false).unwrap();
    let start = Instant::now();
    let r = proxy(
        a.as_fd(),
        b.as_fd(),
        Some(Duration::from_millis(200)),
        &mut fd::no_checkpoint,
    );
    assert_eq!(r.unwrap_err(), Errno::TIMEDOUT);
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(190) && took < Duration::from_secs(2));
    assert!(fd::get_blocking(a.as_fd()).unwrap());
    assert!(!fd::get_blocking(b.as_fd()).unwrap());

    // Not sockets: ENOTSOCK.
    let (r, w) = fd::pipe2(PipeFlags::CLOEXEC).unwrap();
    assert_eq!(
        proxy(r.as_fd(), w.as_fd(), None, &mut fd::no_checkpoint).unwrap_err(),
        Errno::NOTSOCK
    );
}

#[test]
fn relay_records_exactly_what_it_relays() {
    let _g = serial();
    let dir = tempdir();
    let bytes = data(3 << 20, 9);
    for append in [false, true] {
        let (far, src) = tcp_pair();
        let (dst, dst_far) = unix_pair();
        let name = if append { "rec-append" } else { "rec" };
        let rec = new_file(
            &dir,
            name,
            if append {
                OFlags::APPEND
            } else {
                OFlags::empty()
            },
        );
        let feeder = feed(far, bytes.clone());
        let reader = drain(dst_far);
        let n = relay(
            src.as_fd(),
            dst.as_fd(),
            Some(rec.as_fd()),
            &mut fd::no_checkpoint,
        )
        .unwrap();
        feeder.join().unwrap();
        drop(dst);
        assert_eq!(n, bytes.len() as u64);
        assert!(reader.join().unwrap() == bytes, "append={append}");
        assert!(
            std::fs::read(dir.join(name)).unwrap() == bytes,
            "append={append}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A side half-closes (its direction is done), then resets. "A reset on either side ends
/// both": the proxy must notice although nothing flows toward that side.
#[test]
fn proxy_notices_a_reset_after_a_half_close() {
    let _g = serial();
    let (client, a) = tcp_pair();
    let (b, server) = tcp_pair();
    let p = std::thread::spawn(move || proxy(a.as_fd(), b.as_fd(), None, &mut fd::no_checkpoint));
    fd::write(&client, b"bye").unwrap();
    fd::shutdown(&client, fd::Shutdown::Write).unwrap();
    let mut buf = [0u8; 8];
    let mut got = 0;
    while let Ok(n) = fd::read(&server, &mut buf[got..]) {
        if n == 0 {
            break;
        }
        got += n;
    }
    assert_eq!(&buf[..got], b"bye");
    rustix::net::sockopt::set_socket_linger(&client, Some(Duration::ZERO)).unwrap();
    drop(client);
    let start = Instant::now();
    while !p.is_finished() && start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let ended = p.is_finished();
    if !ended {
        // Free the proxy for the cleanup: a byte toward the dead side makes it fail.
        fd::write(&server, b"x").unwrap();
    }
    let r = p.join().unwrap();
    assert!(
        ended,
        "proxy still running 2 s after a RST on a half-closed side"
    );
    assert!(r.is_err(), "{r:?}");
}

/// One side says a few bytes and shuts down; the other uploads 4 MiB into a reader that starts
/// late, so the proxy's pipe still holds bytes when the uploader shuts down too. The uploader's
/// socket is then shut down both ways (POLLHUP, which is not an error): every byte must still
/// arrive and the proxy end cleanly.
#[test]
fn proxy_delivers_everything_after_both_sides_half_closed() {
    let _g = serial();
    let (client, a) = tcp_pair();
    let (b, server) = tcp_pair();
    let p = std::thread::spawn(move || proxy(a.as_fd(), b.as_fd(), None, &mut fd::no_checkpoint));
    fd::write(&server, b"short").unwrap();
    fd::shutdown(&server, fd::Shutdown::Write).unwrap();
    let upload = data(4 << 20, 11);
    let feeder = feed(client.try_clone().unwrap(), upload.clone());
    std::thread::sleep(Duration::from_millis(300));
    let reader = drain(server);
    feeder.join().unwrap();
    let start = Instant::now();
    while !p.is_finished() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(p.is_finished(), "proxy did not end");
    let r = p.join().unwrap();
    let mut buf = [0u8; 16];
    let mut got = 0;
    while let Ok(n) = fd::read(&client, &mut buf[got..]) {
        if n == 0 {
            break;
        }
        got += n;
    }
    drop(client);
    let up = reader.join().unwrap();
    assert_eq!(
        r,
        Ok((upload.len() as u64, 5)),
        "{} of {} bytes up",
        up.len(),
        upload.len()
    );
    assert!(up == upload);
    assert_eq!(&buf[..got], b"short");
}

/// Reads `from` until it ends in a thread: the bytes, and `None` for a clean EOF or the error.
fn read_to_end_or_error(from: OwnedFd) -> JoinHandle<(Vec<u8>, Option<Errno>)> {
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match fd::read(&from, &mut buf) {
                Ok(0) => return (got, None),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(Errno::INTR) => {}
                Err(e) => return (got, Some(e)),
            }
        }
    })
}

/// Writes all of `bytes`, then closes `to` with `SO_LINGER {1, 0}`: its peer gets a RST.
fn send_then_reset(to: OwnedFd, bytes: &[u8]) {
    let mut rest = bytes;
    while !rest.is_empty() {
        rest = &rest[fd::write(&to, rest).unwrap()..];
    }
    rustix::net::sockopt::set_socket_linger(&to, Some(Duration::ZERO)).unwrap();
}

/// One end sends 1 MB and resets: the other end reads a prefix of it, then `ECONNRESET`, never
/// a clean EOF, and the proxy returns the reset. Then the same ended by a FIN: every byte and
/// a clean EOF.
#[test]
fn proxy_passes_a_reset_on_as_a_reset_and_a_fin_as_a_fin() {
    let _g = serial();
    let sent = data(1 << 20, 11);
    for (resetting_side, reset) in [("server", true), ("client", true), ("server", false)] {
        let (client, a) = tcp_pair();
        let (b, server) = tcp_pair();
        let (gone, other) = if resetting_side == "server" {
            (server, client)
        } else {
            (client, server)
        };
        let other2 = other.try_clone().unwrap();
        let reader = read_to_end_or_error(other);
        let p = std::thread::spawn(move || {
            let r = proxy(a.as_fd(), b.as_fd(), None, &mut fd::no_checkpoint);
            drop((a, b));
            r
        });
        if reset {
            send_then_reset(gone, &sent);
            let err = p.join().unwrap().unwrap_err();
            assert_eq!(err, Errno::CONNRESET, "{resetting_side}");
            let (got, end) = reader.join().unwrap();
            assert_eq!(
                end,
                Some(Errno::CONNRESET),
                "{resetting_side}: {} B",
                got.len()
            );
            assert!(sent.starts_with(&got), "{resetting_side}: not a prefix");
        } else {
            feed(gone, sent.clone()).join().unwrap();
            let (got, end) = reader.join().unwrap();
            assert_eq!(end, None);
            assert!(got == sent);
            // The reader half-closes too: the proxy ends cleanly.
            fd::shutdown(&other2, fd::Shutdown::Write).unwrap();
            assert_eq!(p.join().unwrap().unwrap(), (0, sent.len() as u64));
        }
    }
}

/// `relay`: a source reset reaches the destination's reader as a reset after a prefix.
#[test]
fn relay_passes_a_source_reset_on_as_a_reset() {
    let _g = serial();
    let sent = data(1 << 20, 12);
    let (far, src) = tcp_pair();
    let (dst, dst_far) = tcp_pair();
    let reader = read_to_end_or_error(dst_far);
    let r = std::thread::spawn(move || {
        let r = relay(src.as_fd(), dst.as_fd(), None, &mut fd::no_checkpoint);
        drop((src, dst));
        r
    });
    send_then_reset(far, &sent);
    assert_eq!(r.join().unwrap().unwrap_err(), Errno::CONNRESET);
    let (got, end) = reader.join().unwrap();
    assert_eq!(end, Some(Errno::CONNRESET), "{} B", got.len());
    assert!(sent.starts_with(&got));
}

#[test]
fn pipe_runs_to_the_end_through_a_standing_tee_after_close_write() {
    let _g = serial();
    let dir = tempdir();
    let bytes = data(600_000, 11);
    let src = file_with(&dir, "src", &bytes);
    let out = new_file(&dir, "out", OFlags::empty());
    let rec = new_file(&dir, "rec", OFlags::empty());
    let p = Pipe::new(PipeFlags::empty()).unwrap();
    let via = Pipe::new(PipeFlags::NONBLOCK).unwrap();
    let mirrors = [fdkit::zerocopy::Mirror {
        fd: rec.as_fd(),
        via: &via,
    }];
    let go = &mut fd::no_checkpoint;
    std::thread::scope(|s| {
        let producer = s.spawn(|| {
            let mut moved = 0;
            let n = p
                .read_from_all(
                    src.as_fd(),
                    None,
                    None,
                    &mut moved,
                    &[],
                    &mut fd::no_checkpoint,
                )
                .unwrap();
            p.close_write().unwrap();
            n
        });
        let mut progress = fdkit::zerocopy::WriteProgress::default();
        let n = p
            .write_to_all(
                out.as_fd(),
                None,
                None,
                false,
                &mirrors,
                &mut progress,
                &[],
                go,
            )
            .unwrap();
        assert_eq!(n, bytes.len() as u64);
        assert_eq!(producer.join().unwrap(), bytes.len() as u64);
    });
    assert!(p.is_write_closed());
    assert_eq!(fd::write(p.write_end(), b"late"), Err(Errno::PIPE));
    drop((out, rec));
    for name in ["out", "rec"] {
        assert_eq!(std::fs::read(dir.join(name)).unwrap(), bytes, "{name}");
    }
}
