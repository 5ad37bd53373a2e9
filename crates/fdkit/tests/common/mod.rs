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
