//! Bytes a non-blocking transfer took from its source but could not deliver yet.
//!
//! A splice through an internal pipe takes a chunk from the source before it knows how much
//! the destination will take. When the destination then says `EAGAIN`, the rest of the chunk
//! cannot go back to the source; a non-blocking [`super::transfer_nonblocking`] must not wait
//! for the destination either. So the bytes stay with the (source, destination) pair: parked
//! here, keyed by both fd numbers and both files' identities, and the next transfer between the
//! same two files (blocking or not) delivers them first, before it takes anything new.
//!
//! An entry whose fds were closed (the identity no longer matches) is dropped when the fd
//! numbers are used again or when parking finds the table large: those bytes went with their
//! files, as unsent data goes with a closed socket.

use super::kind::{fd_kind, FdKind, FileId};
use super::pool::{self, PooledPipe};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Undelivered bytes, in order: `front` first, then what `pipe` holds.
#[derive(Debug, Default)]
pub struct Held {
    /// Bytes in memory, delivered first.
    pub(super) front: Vec<u8>,
    /// A pipe holding the bytes after `front`.
    pub(super) pipe: Option<PooledPipe>,
}

impl Held {
    /// Bytes in an internal pipe.
    pub(super) fn from_pipe(pipe: PooledPipe) -> Held {
        Held {
            front: Vec::new(),
            pipe: Some(pipe),
        }
    }

    /// Bytes in memory.
    pub(super) fn from_bytes(front: Vec<u8>) -> Held {
        Held { front, pipe: None }
    }

    /// How many bytes are held.
    pub fn len(&self) -> usize {
        self.front.len() + self.pipe.as_ref().map_or(0, PooledPipe::held)
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A parked entry: the pair it belongs to and its bytes.
struct Parked {
    src: (i32, FileId),
    dst: (i32, FileId),
    held: Held,
}

/// Parked entries; few at a time (one per fd pair whose destination is full right now).
static PARKED: Mutex<Vec<Parked>> = Mutex::new(Vec::new());
/// `PARKED.len()`, read without the lock: the common case (nothing parked) costs one load.
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Parking with this many entries first drops those whose fds were closed.
const SWEEP_AT: usize = 64;

fn identity(fd: BorrowedFd<'_>) -> Option<(FdKind, FileId)> {
    fd_kind(fd).ok()
}

/// Whether the entry's fds still name the same files.
fn alive(p: &Parked) -> bool {
    let still = |(fd, id): (i32, FileId)| {
        // SAFETY: the number is only looked at with statx, which fails cleanly (EBADF) on a
        // closed number; a reused number names another file, which the identity check catches.
        let b = unsafe { BorrowedFd::borrow_raw(fd) };
        identity(b).is_some_and(|(_, now)| now == id)
    };
    still(p.src) && still(p.dst)
}

/// The bytes parked for this pair, if any (and the destination's kind). An entry under the
/// same fd numbers whose files changed is dropped.
pub(super) fn take(src: BorrowedFd<'_>, dst: BorrowedFd<'_>) -> Option<(Held, FdKind)> {
    if COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    let entry = {
        let mut parked = PARKED.lock().ok()?;
        let i = parked
            .iter()
            .position(|p| p.src.0 == src.as_raw_fd() && p.dst.0 == dst.as_raw_fd())?;
        let e = parked.swap_remove(i);
        COUNT.store(parked.len(), Ordering::Release);
        e
    };
    let (_, src_id) = identity(src)?;
    let (dst_kind, dst_id) = identity(dst)?;
    (entry.src.1 == src_id && entry.dst.1 == dst_id).then_some((entry.held, dst_kind))
}

/// Parks `held` for this pair (nothing when empty, or when a fd cannot be identified: then
/// the fd is bad and the bytes could not be delivered anyway).
pub(super) fn park(src: BorrowedFd<'_>, dst: BorrowedFd<'_>, held: Held) {
    if held.is_empty() {
        return;
    }
    let (Some((_, src_id)), Some((_, dst_id))) = (identity(src), identity(dst)) else {
        return;
    };
    let Ok(mut parked) = PARKED.lock() else {
        return;
    };
    if parked.len() >= SWEEP_AT {
        parked.retain(alive);
    }
    parked.push(Parked {
        src: (src.as_raw_fd(), src_id),
        dst: (dst.as_raw_fd(), dst_id),
        held,
    });
    COUNT.store(parked.len(), Ordering::Release);
}

/// Drops the parked entries whose fds were closed (their pipes close); returns how many.
fn sweep() -> usize {
    let Ok(mut parked) = PARKED.lock() else {
        return 0;
    };
    let before = parked.len();
    parked.retain(alive);
    COUNT.store(parked.len(), Ordering::Release);
    before - parked.len()
}

/// `held(src, dst)`: how many bytes an earlier non-blocking transfer took from `src` and
/// parked for delivery to `dst` (0 when none).
pub fn held(src: BorrowedFd<'_>, dst: BorrowedFd<'_>) -> u64 {
    if COUNT.load(Ordering::Acquire) == 0 {
        return 0;
    }
    let (Some((_, src_id)), Some((_, dst_id))) = (identity(src), identity(dst)) else {
        return 0;
    };
    PARKED.lock().map_or(0, |parked| {
        parked
            .iter()
            .filter(|p| p.src == (src.as_raw_fd(), src_id) && p.dst == (dst.as_raw_fd(), dst_id))
            .map(|p| p.held.len() as u64)
            .sum()
    })
}

/// Closes every idle pipe the pool holds (pipes on loan are not affected), and the pipes
/// parked by non-blocking transfers whose fds have been closed since, and returns how many it
/// closed: for a program that wants its fds back, or a test counting fds.
pub fn pool_clear() -> usize {
    sweep() + pool::close_idle()
}
