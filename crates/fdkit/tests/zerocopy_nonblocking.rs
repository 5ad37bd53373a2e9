//! `transfer_nonblocking` against the real kernel: it returns at the side that would block
//! instead of polling, and bytes spliced into the internal pipe that the full destination did
//! not take are parked with the fd pair and delivered first by the next transfer between the
//! two (blocking or not), never lost, never reordered, never handed to a new file that reuses
//! a closed fd's number.

use fdkit::fd::{self, Errno, OFlags};
use fdkit::zerocopy::{held, transfer, transfer_nonblocking, Path, TransferStats, WouldBlock};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};

mod common;
use common::{data, unix_pair};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn file_with(bytes: &[u8]) -> OwnedFd {
    let dir = fd::mkdtemp(&std::env::temp_dir(), "fdkit-nb".as_ref(), "".as_ref()).unwrap();
    let p = dir.join("src");
    std::fs::write(&p, bytes).unwrap();
    let f = fd::open(&p, OFlags::RDONLY | OFlags::CLOEXEC, fd::Mode::empty()).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
    f
}

/// A non-blocking unix stream pair: (the end transfers write to, the peer tests read).
fn sink() -> (OwnedFd, OwnedFd) {
    let (a, b) = unix_pair();
    fd::set_blocking(a.as_fd(), false).unwrap();
    (a, b)
}

fn nb(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    count: Option<u64>,
    src_off: Option<&mut u64>,
) -> (u64, TransferStats) {
    let (r, stats) = transfer_nonblocking(src, dst, count, src_off, None, &mut fd::no_checkpoint);
    (r.unwrap(), stats)
}

/// Reads what the peer has now (non-blocking), appending to `got`.
fn take_some(peer: &OwnedFd, got: &mut Vec<u8>, at_most: usize) {
    let mut buf = vec![0u8; at_most];
    match fd::recv(peer, &mut buf, fd::RecvFlags::DONTWAIT) {
        Ok((n, _)) => got.extend_from_slice(&buf[..n]),
        Err(Errno::AGAIN) => {}
        Err(e) => panic!("peer: {e}"),
    }
}

#[test]
fn a_full_destination_parks_the_rest_and_the_next_call_delivers_it_first() {
    let _s = serial();
    let bytes = data(6 << 20, 1);
    let src = file_with(&bytes);
    let (dst, peer) = sink();
    let mut got = Vec::new();
    let mut total = 0u64;
    let mut parked_once = false;
    loop {
        let (moved, stats) = nb(src.as_fd(), dst.as_fd(), None, None);
        total += moved;
        assert_eq!(stats.bytes, moved);
        assert_eq!(stats.held, held(src.as_fd(), dst.as_fd()));
        match stats.would_block {
            None => break,
            Some(WouldBlock::Write) => {
                assert_eq!(stats.path, Path::SpliceViaPipe);
                parked_once |= stats.held > 0;
                // Delivered + parked never exceeds what the file had.
                assert!(total + stats.held <= bytes.len() as u64);
                take_some(&peer, &mut got, 100_000); // a slow reader: room for a little
            }
            Some(WouldBlock::Read) => panic!("a file never says EAGAIN"),
        }
    }
    assert!(
        parked_once,
        "the 1 MiB pipe chunk never outgrew the socket's room"
    );
    assert_eq!(held(src.as_fd(), dst.as_fd()), 0);
    assert_eq!(total, bytes.len() as u64);
    drop(dst);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match fd::read(&peer, &mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        got == bytes,
        "stream differs (len {} vs {})",
        got.len(),
        bytes.len()
    );
}

#[test]
fn with_an_offset_the_offset_names_the_first_undelivered_byte() {
    let _s = serial();
    let bytes = data(3 << 20, 2);
    let src = file_with(&bytes);
    let (dst, peer) = sink();
    let mut off = 0u64;
    let mut total = 0u64;
    let mut got = Vec::new();
    loop {
        let (moved, stats) = nb(src.as_fd(), dst.as_fd(), None, Some(&mut off));
        total += moved;
        assert_eq!(off, total, "held {}", stats.held);
        if stats.would_block.is_none() {
            break;
        }
        take_some(&peer, &mut got, 300_000);
    }
    assert_eq!(total, bytes.len() as u64);
    // The file position was never used.
    assert_eq!(fd::lseek(&src, fd::SeekFrom::Current(0)).unwrap(), 0);
    drop(dst);
    let mut buf = vec![0u8; 1 << 20];
    while let Ok(n @ 1..) = fd::read(&peer, &mut buf) {
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got == bytes);
}

#[test]
fn a_blocking_transfer_delivers_parked_bytes_first() {
    let _s = serial();
    let bytes = data(4 << 20, 3);
    let src = file_with(&bytes);
    let (dst, peer) = sink();
    let (first, stats) = nb(src.as_fd(), dst.as_fd(), None, None);
    assert_eq!(stats.would_block, Some(WouldBlock::Write));
    assert!(stats.held > 0, "{stats:?}");
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        while let Ok(n @ 1..) = fd::read(&peer, &mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        got
    });
    fd::set_blocking(dst.as_fd(), true).unwrap();
    let (rest, _) = transfer(
        src.as_fd(),
        dst.as_fd(),
        None,
        None,
        None,
        &mut fd::no_checkpoint,
    );
    assert_eq!(first + rest.unwrap(), bytes.len() as u64);
    drop(dst);
    assert!(reader.join().unwrap() == bytes);
}

#[test]
fn count_counts_delivered_bytes_parked_ones_included() {
    let _s = serial();
    let bytes = data(2 << 20, 4);
    let src = file_with(&bytes);
    let (dst, peer) = sink();
    let (first, stats) = nb(src.as_fd(), dst.as_fd(), None, None);
    assert!(stats.held > 10);
    let mut got = Vec::new();
    while got.len() < first as usize {
        take_some(&peer, &mut got, 1 << 20);
    }
    // Ten of the parked bytes, no more; the rest stay parked.
    let (ten, stats2) = nb(src.as_fd(), dst.as_fd(), Some(10), None);
    assert_eq!((ten, stats2.would_block), (10, None));
    assert_eq!(stats2.held, stats.held - 10);
    take_some(&peer, &mut got, 1 << 20);
    assert_eq!(&got[..], &bytes[..first as usize + 10]);
}

#[test]
fn an_empty_source_says_read_and_an_ended_one_says_nothing() {
    let _s = serial();
    let (feed, src) = unix_pair();
    fd::set_blocking(src.as_fd(), false).unwrap();
    let (dst, peer) = sink();
    let (moved, stats) = nb(src.as_fd(), dst.as_fd(), None, None);
    assert_eq!((moved, stats.would_block), (0, Some(WouldBlock::Read)));
    fd::write(&feed, b"hello").unwrap();
    let (moved, stats) = nb(src.as_fd(), dst.as_fd(), None, None);
    assert_eq!((moved, stats.would_block), (5, Some(WouldBlock::Read)));
    drop(feed);
    let (moved, stats) = nb(src.as_fd(), dst.as_fd(), None, None);
    assert_eq!((moved, stats.would_block, stats.held), (0, None, 0));
    let mut buf = [0u8; 16];
    assert_eq!(fd::read(&peer, &mut buf).unwrap(), 5);
    assert_eq!(&buf[..5], b"hello");
}

#[test]
fn a_direct_splice_says_which_side_would_block() {
    let _s = serial();
    let (r, w) = fd::pipe2(fd::PipeFlags::CLOEXEC | fd::PipeFlags::NONBLOCK).unwrap();
    let (feed, src) = unix_pair();
    fd::set_blocking(src.as_fd(), false).unwrap();
    // Empty socket into a pipe: the source.
    let (moved, stats) = nb(src.as_fd(), w.as_fd(), Some(1 << 20), None);
    assert_eq!((moved, stats.path), (0, Path::Splice));
    assert_eq!(stats.would_block, Some(WouldBlock::Read));
    // Offer more than the pipe holds: the destination.
    let cap = fd::pipe_size(&w).unwrap();
    let fill = data(4 * cap, 5);
    let expect = fill.clone();
    let feeder = std::thread::spawn(move || {
        let mut rest = &fill[..];
        while let Ok(n @ 1..) = fd::write(&feed, rest) {
            rest = &rest[n..];
        }
    });
    let mut total = 0;
    let stats = loop {
        let (moved, stats) = nb(src.as_fd(), w.as_fd(), Some(1 << 20), None);
        total += moved;
        if stats.would_block == Some(WouldBlock::Write) {
            break stats;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    assert!(total >= cap as u64 / 2, "{total}");
    assert_eq!(stats.held, 0, "a direct splice holds nothing");
    let mut buf = vec![0u8; total as usize];
    assert_eq!(fd::read(&r, &mut buf).unwrap(), total as usize);
    assert!(buf[..] == expect[..total as usize]);
    drop(src); // the feeder's next write fails and it ends
    feeder.join().unwrap();
}

#[test]
fn parked_bytes_never_reach_a_new_file_on_a_reused_fd_number() {
    let _s = serial();
    let bytes = data(2 << 20, 6);
    let src = file_with(&bytes);
    let (dst, peer) = sink();
    let (first, stats) = nb(src.as_fd(), dst.as_fd(), None, None);
    assert!(stats.held > 0);
    let number = dst.as_raw_fd();
    drop(dst);
    drop(peer);
    // The lowest free number is the one just closed.
    let (new_dst, new_peer) = sink();
    if new_dst.as_raw_fd() != number {
        common::skip("the closed fd number was not reused");
        return;
    }
    assert_eq!(held(src.as_fd(), new_dst.as_fd()), 0);
    let (moved, _) = nb(src.as_fd(), new_dst.as_fd(), Some(100), None);
    assert_eq!(moved, 100);
    let mut buf = [0u8; 100];
    assert_eq!(fd::read(&new_peer, &mut buf).unwrap(), 100);
    // What followed the parked bytes in the file: the old pair's bytes went with it.
    let at = (first + stats.held) as usize;
    assert_eq!(&buf[..], &bytes[at..at + 100]);
}
