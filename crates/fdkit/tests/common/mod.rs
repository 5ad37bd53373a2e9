//! Helpers the integration tests share: loopback sockets and deterministic data.
//! (Each test binary uses its own subset, hence the `dead_code` allowance.)
#![allow(dead_code)]

use fdkit::fd::{self, AddressFamily, SocketFlags, SocketType};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsFd, OwnedFd};

/// Deterministic pseudo-random bytes (xorshift), different per `seed`, so reordered or
/// repeated chunks show.
pub fn data(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A TCP listener on 127.0.0.1 (a free port, backlog 1024) and its address.
pub fn listener(nonblocking: bool) -> (OwnedFd, SocketAddrV4) {
    let mut flags = SocketFlags::CLOEXEC;
    if nonblocking {
        flags |= SocketFlags::NONBLOCK;
    }
    let l = fd::socket(AddressFamily::INET, SocketType::STREAM, flags, None).unwrap();
    fd::bind(&l, &SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
    fd::listen(&l, 1024).unwrap();
    let addr = SocketAddrV4::try_from(fd::getsockname(&l).unwrap()).unwrap();
    (l, addr)
}

/// A blocking TCP client connected to `addr`.
pub fn client(addr: &SocketAddrV4) -> OwnedFd {
    let c = fd::socket(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    fd::connect(c.as_fd(), addr, fd::no_checkpoint).unwrap();
    c
}

/// Both ends of a loopback TCP connection: (client, server).
pub fn tcp_pair() -> (OwnedFd, OwnedFd) {
    let (l, addr) = listener(false);
    let c = client(&addr);
    let (s, _) = fd::accept4(l.as_fd(), SocketFlags::CLOEXEC).unwrap();
    (c, s)
}

/// A connected pair of unix stream sockets.
pub fn unix_pair() -> (OwnedFd, OwnedFd) {
    fd::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap()
}

/// Says that the running test skipped, and why, so that the run shows it: `SKIPPED <test>:
/// <reason>` goes straight to the process's stderr (libtest captures only `print!`/`eprint!`
/// of passing tests, so an `eprintln!` skip note would vanish from the summary).
pub fn skip(reason: impl std::fmt::Display) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {reason}");
}

/// Whether `FDKIT_REQUIRE_URING=1` is set: `make test` sets it on a machine that has io_uring,
/// so that a test which would skip for lack of io_uring fails instead.
pub fn uring_required() -> bool {
    std::env::var_os("FDKIT_REQUIRE_URING").is_some_and(|v| v == "1")
}

/// Skips the running test because io_uring cannot be used here (see [`skip`]), or panics when
/// [`uring_required`]: the caller returns early after it.
pub fn uring_unavailable(reason: impl std::fmt::Display) {
    assert!(
        !uring_required(),
        "FDKIT_REQUIRE_URING=1, but io_uring is unavailable: {reason}"
    );
    let reason = reason.to_string();
    if reason.starts_with("io_uring unavailable") {
        skip(reason);
    } else {
        skip(format_args!("io_uring unavailable: {reason}"));
    }
}

/// Whether io_uring can be used here (`fdkit::uring::probe`); when it cannot, the test is
/// reported skipped, or fails under `FDKIT_REQUIRE_URING=1` (see [`uring_unavailable`]).
pub fn require_uring() -> bool {
    let p = fdkit::uring::probe();
    if !p.available {
        uring_unavailable(p.reason.as_deref().unwrap_or("no reason given"));
    }
    p.available
}
