//! `transfer`: the best kernel path for two fds, falling back until one works.

use super::copy_loops;
use super::held;
use super::job::{Job, Step, WouldBlock};
use super::kind::{fd_kind, FdKind, FileId};
use rustix::io::Errno;
use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Mutex;

/// Transfers of at most this many bytes skip the two `statx` calls, the path plan and the
/// SIGPIPE check: they go straight through a pooled pipe (splice works from and to nearly
/// every fd kind), falling back to read/write. At small sizes splice through a pipe beats
/// read/write from every socket source, and the three extra syscalls are a visible share of
/// a TCP relay's CPU, while file → file costs the same through a pipe as with
/// copy_file_range (the `zerocopy` bench compares them).
pub const SMALL_TRANSFER: u64 = 64 << 10;

/// The ways bytes can move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// copy_file_range(2): file to file, possibly sharing extents.
    CopyFileRange,
    /// sendfile(2): file to socket (or to anything).
    Sendfile,
    /// splice(2) directly, when one side is a pipe.
    Splice,
    /// splice(2) twice, through a pooled internal pipe.
    SpliceViaPipe,
    /// read(2) and write(2) through a buffer: works for everything.
    ReadWrite,
}

impl Path {
    /// The name Python sees (`transfer_stats()["path"]`).
    pub fn name(self) -> &'static str {
        match self {
            Path::CopyFileRange => "copy_file_range",
            Path::Sendfile => "sendfile",
            Path::Splice => "splice",
            Path::SpliceViaPipe => "splice_via_pipe",
            Path::ReadWrite => "read_write",
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A path that was left, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    /// The path that did not work.
    pub from: Path,
    /// The path tried next.
    pub to: Path,
    /// The kernel's errno, when it gave one.
    pub errno: Option<Errno>,
    /// Why, in a few words.
    pub reason: &'static str,
}

/// What one transfer did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferStats {
    /// The path that finished the transfer (or was running when it failed).
    pub path: Path,
    /// Bytes delivered to the destination.
    pub bytes: u64,
    /// Every fallback taken, in order.
    pub fallbacks: Vec<Fallback>,
    /// Whether the path came from the memory of an earlier transfer between the same files.
    pub remembered: bool,
    /// [`transfer_nonblocking`]: the side that would block when it returned, `None` when it
    /// finished (count reached or source ended). Always `None` for [`transfer`].
    pub would_block: Option<WouldBlock>,
    /// Bytes taken from the source but not yet delivered, parked with the fd pair for the
    /// next transfer between them (only a non-blocking transfer parks).
    pub held: u64,
}

/// The paths to try, best first, for a source and destination kind.
fn plan(src: FdKind, dst: FdKind) -> &'static [Path] {
    use FdKind::*;
    use Path::*;
    match (src, dst) {
        (File, File) => &[CopyFileRange, Sendfile, ReadWrite],
        (Pipe, _) | (_, Pipe) => &[Splice, ReadWrite],
        // A file to a TCP socket through a 1 MiB pipe costs less CPU per byte than sendfile,
        // which splices through a small per-task pipe internally, and runs faster.
        (File | BlockDevice, Socket) => &[SpliceViaPipe, Sendfile, ReadWrite],
        (File | BlockDevice, _) => &[Sendfile, SpliceViaPipe, ReadWrite],
        _ => &[SpliceViaPipe, ReadWrite],
    }
}

/// Identifies a pair of open files across calls: fd numbers alone could be reused by other
/// files, so the key carries each file's identity (device, inode, birth time) too.
type PairKey = (i32, FileId, i32, FileId);

/// The first path that worked for a pair, so the next call skips the ones that failed.
static MEMO: Mutex<Option<HashMap<PairKey, Path>>> = Mutex::new(None);
/// Entries kept at most; the memo is cleared when full (it is only a shortcut).
const MEMO_CAPACITY: usize = 4096;

fn remembered(key: PairKey) -> Option<Path> {
    MEMO.lock().ok()?.as_ref()?.get(&key).copied()
}

fn remember(key: PairKey, path: Path) {
    if let Ok(mut memo) = MEMO.lock() {
        let map = memo.get_or_insert_with(HashMap::new);
        if map.len() >= MEMO_CAPACITY {
            map.clear();
        }
        map.insert(key, path);
    }
}

/// `transfer(src, dst, count, src_off, dst_off, checkpoint)`: moves up to `count` bytes (all,
/// until the source ends, when `None`) from `src` to `dst` by the best kernel path for the two
/// fd kinds.
///
/// The full form; [`transfer_all`] is the everyday one. The path is chosen from the fd kinds
/// (copy_file_range for file → file, splice through a pooled pipe for file → socket, splice
/// when one side is a pipe, sendfile, …) and falls back at run time to the next path and
/// finally to read/write. With an offset, that side is read or written at the offset (which
/// advances) and its file position is left alone; without, the file position is used.
///
/// Non-blocking fds are waited on with poll, on the side that would block. `checkpoint` runs
/// after `EINTR`, waits and short transfers; its `Err` stops the transfer with that error
/// (pass [`crate::fd::no_checkpoint`] for none). Returns the bytes delivered with what
/// happened; on error the stats still say how far it got. A peer that is gone gives `EPIPE`:
/// `SIGPIPE`, which splice and sendfile raise with no way to opt out, is blocked on this
/// thread for the call unless the process ignores it (as Python does). Transfers of
/// [`SMALL_TRANSFER`] bytes or less skip that check to stay cheap.
///
/// # Example
///
/// The last 5 bytes of a file, at an offset, into a pipe; the file position is not moved:
///
/// ```
/// use fdkit::fd::{no_checkpoint, pipe2, read, PipeFlags};
/// use fdkit::zerocopy::{transfer, Path};
/// use std::os::fd::AsFd;
///
/// # fn main() -> std::io::Result<()> {
/// let file = fdkit_doc_tempfile(b"hello, world")?;
/// let (r, w) = pipe2(PipeFlags::CLOEXEC)?;
/// let mut offset = 7;
/// let (moved, stats) = transfer(
///     file.as_fd(),
///     w.as_fd(),
///     None,              // count: until the source ends
///     Some(&mut offset), // read the file at this offset
///     None,              // write the pipe at its (nonexistent) position
///     &mut no_checkpoint,
/// );
/// assert_eq!(moved?, 5);
/// assert_eq!(offset, 12);
/// assert_eq!(stats.path, Path::Splice);
/// let mut buf = [0; 16];
/// let n = read(&r, &mut buf)?;
/// assert_eq!(&buf[..n], b"world");
/// # Ok(())
/// # }
/// # fn fdkit_doc_tempfile(data: &[u8]) -> std::io::Result<std::fs::File> {
/// #     use std::io::Write;
/// #     let (fd, path) = fdkit::fd::mkstemp(&std::env::temp_dir(), "fdkit-doc-".as_ref(), "".as_ref(), true)?;
/// #     std::fs::remove_file(path)?;
/// #     let mut f = std::fs::File::from(fd);
/// #     f.write_all(data)?;
/// #     Ok(f)
/// # }
/// ```
///
/// # References
///  - [copy_file_range(2)](https://man7.org/linux/man-pages/man2/copy_file_range.2.html)
///  - [sendfile(2)](https://man7.org/linux/man-pages/man2/sendfile.2.html)
///  - [splice(2)](https://man7.org/linux/man-pages/man2/splice.2.html)
///  - [read(2)](https://man7.org/linux/man-pages/man2/read.2.html),
///    [write(2)](https://man7.org/linux/man-pages/man2/write.2.html)
///  - [poll(2)](https://man7.org/linux/man-pages/man2/poll.2.html)
pub fn transfer(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    count: Option<u64>,
    src_off: Option<&mut u64>,
    dst_off: Option<&mut u64>,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> (Result<u64, Errno>, TransferStats) {
    transfer_impl(src, dst, count, src_off, dst_off, checkpoint, false)
}

/// `transfer_nonblocking(src, dst, count, src_off, dst_off, checkpoint)`: [`transfer`] for
/// event loops: the same paths and fallbacks, but where [`transfer`] would wait with poll it
/// returns at once with the bytes delivered so far and the side that would block
/// ([`TransferStats::would_block`]; `None` means finished: count reached or source ended).
///
/// The fds themselves should be `O_NONBLOCK` (a blocking socket still sleeps inside sendfile
/// or splice); regular files never report `EAGAIN`. Nothing is lost when the destination
/// fills in the middle of a chunk spliced through the internal pipe: the bytes taken from the
/// source and not delivered stay with the (src, dst) pair ([`TransferStats::held`],
/// [`held`](super::held)) and the next transfer between the same two files, blocking or not,
/// delivers them first. `count` counts delivered bytes, those included. With `src_off`, the
/// offset is left at the first byte not yet delivered (so `offset + moved` is where the next
/// call starts, whatever was parked); the file position, when used, is past the parked bytes.
///
/// # References
///  - [splice(2)](https://man7.org/linux/man-pages/man2/splice.2.html),
///    [sendfile(2)](https://man7.org/linux/man-pages/man2/sendfile.2.html)
pub fn transfer_nonblocking(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    count: Option<u64>,
    src_off: Option<&mut u64>,
    dst_off: Option<&mut u64>,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> (Result<u64, Errno>, TransferStats) {
    transfer_impl(src, dst, count, src_off, dst_off, checkpoint, true)
}

fn transfer_impl(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    count: Option<u64>,
    src_off: Option<&mut u64>,
    dst_off: Option<&mut u64>,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    nonblocking: bool,
) -> (Result<u64, Errno>, TransferStats) {
    let mut stats = TransferStats {
        path: Path::ReadWrite,
        bytes: 0,
        fallbacks: Vec::new(),
        remembered: false,
        would_block: None,
        held: 0,
    };
    let mut job = Job {
        src,
        dst,
        dst_kind: FdKind::Other,
        remaining: count,
        src_off,
        dst_off,
        moved: 0,
        checkpoint,
        nonblocking,
        held: None,
    };
    // Bytes an earlier non-blocking transfer took from this source for this destination go
    // first.
    if let Some((mut held, dst_kind)) = held::take(src, dst) {
        stats.path = Path::SpliceViaPipe;
        job.dst_kind = dst_kind;
        let _sigpipe = (dst_kind == FdKind::Socket)
            .then(crate::fd::SigpipeGuard::if_needed)
            .flatten();
        let before = job.moved;
        let r = copy_loops::deliver_held(&mut held, &mut job);
        if let Some(off) = job.src_off.as_deref_mut() {
            *off += job.moved - before; // the offset named the first undelivered byte
        }
        stats.bytes = job.moved;
        // Kept for the next call unless the destination failed: a checkpoint's stop (a
        // signal handler that raised: EINTR, ECANCELED) is no reason to drop them.
        if matches!(r, Ok(_) | Err(Errno::INTR | Errno::CANCELED)) {
            stats.held = held.len() as u64;
            held::park(src, dst, held);
        }
        match r {
            Ok(Some(side)) => {
                stats.would_block = Some(side);
                return (Ok(job.moved), stats);
            }
            Ok(None) if stats.held > 0 || job.finished() => return (Ok(job.moved), stats),
            Ok(None) => {}
            Err(e) => return (Err(e), stats),
        }
    }
    let (result, stats) = choose_and_run(&mut job, count, stats);
    finish(job, result, stats)
}

/// Parks what a non-blocking job held (moving its source offset back to the first byte not
/// delivered) and fills in the stats.
fn finish(
    mut job: Job<'_>,
    result: Result<Option<WouldBlock>, Errno>,
    mut stats: TransferStats,
) -> (Result<u64, Errno>, TransferStats) {
    stats.bytes = job.moved;
    if let Some(held) = job.held.take() {
        stats.held = held.len() as u64;
        if let Some(off) = job.src_off.as_deref_mut() {
            *off -= stats.held;
        }
        held::park(job.src, job.dst, held);
    }
    match result {
        Ok(side) => {
            stats.would_block = side;
            (Ok(job.moved), stats)
        }
        Err(e) => (Err(e), stats),
    }
}

/// Picks the path for the fd kinds and runs it, falling back; `Ok(Some(side))` when a
/// non-blocking job stopped at a side that would block.
fn choose_and_run(
    job: &mut Job<'_>,
    count: Option<u64>,
    mut stats: TransferStats,
) -> (Result<Option<WouldBlock>, Errno>, TransferStats) {
    let (src, dst) = (job.src, job.dst);
    let small = count.is_some_and(|c| c <= SMALL_TRANSFER);
    let kinds = if small {
        None
    } else {
        match (fd_kind(src), fd_kind(dst)) {
            (Ok(s), Ok(d)) => Some((s, d)),
            (Err(e), _) | (_, Err(e)) => return (Err(e), stats),
        }
    };
    job.dst_kind = kinds.as_ref().map_or(FdKind::Other, |(_, (k, _))| *k);
    let Some(((src_kind, src_st), (dst_kind, dst_st))) = kinds else {
        return small_transfer(job, stats);
    };
    let key: PairKey = (src.as_raw_fd(), src_st, dst.as_raw_fd(), dst_st);
    // Splice and sendfile into a socket whose peer is gone raise SIGPIPE (no MSG_NOSIGNAL
    // there); hold it off on this thread unless the process ignores it already.
    let _sigpipe = (dst_kind == FdKind::Socket)
        .then(crate::fd::SigpipeGuard::if_needed)
        .flatten();
    let paths = plan(src_kind, dst_kind);
    let start = match remembered(key).and_then(|p| paths.iter().position(|&q| q == p)) {
        Some(i) => {
            stats.remembered = true;
            i
        }
        None => 0,
    };
    for (i, &path) in paths.iter().enumerate().skip(start) {
        stats.path = path;
        let step = match path {
            Path::CopyFileRange => copy_loops::copy_file_range(job),
            Path::Sendfile => copy_loops::sendfile(job),
            Path::Splice => copy_loops::splice_direct(job),
            Path::SpliceViaPipe => copy_loops::splice_via_pipe(job, None),
            Path::ReadWrite => copy_loops::read_write(job),
        };
        stats.bytes = job.moved;
        match step {
            Ok(done @ (Step::Done | Step::Blocked(_))) => {
                if i != start || !stats.remembered {
                    remember(key, path);
                }
                let side = match done {
                    Step::Blocked(side) => Some(side),
                    _ => None,
                };
                return (Ok(side), stats);
            }
            Ok(Step::Unsupported(errno, reason)) => {
                // The last path is read/write, which never reports Unsupported.
                let to = paths.get(i + 1).copied().unwrap_or(Path::ReadWrite);
                stats.fallbacks.push(Fallback {
                    from: path,
                    to,
                    errno,
                    reason,
                });
            }
            Err(e) => return (Err(e), stats),
        }
    }
    (Ok(None), stats)
}

/// `transfer_all(src, dst)`: moves everything from `src` to `dst`, until `src` ends, by the
/// best kernel path.
///
/// The simple form of [`transfer`]: no byte count, both file positions used (and advanced),
/// `EINTR` retried, the stats left out. Takes anything that lends an fd (`&File`,
/// `&TcpStream`, `&OwnedFd`, [`BorrowedFd`]). Returns the bytes delivered.
///
/// # Example
///
/// ```
/// use fdkit::zerocopy::transfer_all;
/// use std::io::{Read, Seek, Write};
///
/// # fn main() -> std::io::Result<()> {
/// let dir = std::env::temp_dir();
/// let mut src = fdkit_doc_tempfile(&dir)?;
/// let mut dst = fdkit_doc_tempfile(&dir)?;
/// src.write_all(&[7u8; 100_000])?;
/// src.rewind()?;
///
/// assert_eq!(transfer_all(&src, &dst)?, 100_000); // copy_file_range, in the kernel
///
/// let mut copy = Vec::new();
/// dst.rewind()?;
/// dst.read_to_end(&mut copy)?;
/// assert_eq!(copy, [7u8; 100_000]);
/// # Ok(())
/// # }
/// # fn fdkit_doc_tempfile(dir: &std::path::Path) -> std::io::Result<std::fs::File> {
/// #     let (fd, path) = fdkit::fd::mkstemp(dir, "fdkit-doc-".as_ref(), "".as_ref(), true)?;
/// #     std::fs::remove_file(path)?;
/// #     Ok(std::fs::File::from(fd))
/// # }
/// ```
///
/// # References
///  - [copy_file_range(2)](https://man7.org/linux/man-pages/man2/copy_file_range.2.html)
///  - [sendfile(2)](https://man7.org/linux/man-pages/man2/sendfile.2.html)
///  - [splice(2)](https://man7.org/linux/man-pages/man2/splice.2.html)
pub fn transfer_all(src: impl AsFd, dst: impl AsFd) -> Result<u64, Errno> {
    transfer(
        src.as_fd(),
        dst.as_fd(),
        None,
        None,
        None,
        &mut crate::fd::no_checkpoint,
    )
    .0
}

/// The small-transfer path: through a pooled pipe, else read/write.
fn small_transfer(
    job: &mut Job<'_>,
    mut stats: TransferStats,
) -> (Result<Option<WouldBlock>, Errno>, TransferStats) {
    stats.path = Path::SpliceViaPipe;
    let side = |step: Step| match step {
        Step::Blocked(side) => Some(side),
        _ => None,
    };
    let r = match copy_loops::splice_via_pipe(job, None) {
        Ok(Step::Unsupported(errno, reason)) => {
            stats.fallbacks.push(Fallback {
                from: Path::SpliceViaPipe,
                to: Path::ReadWrite,
                errno,
                reason,
            });
            stats.path = Path::ReadWrite;
            copy_loops::read_write(job).map(side)
        }
        Ok(step) => Ok(side(step)),
        Err(e) => Err(e),
    };
    stats.bytes = job.moved;
    (r, stats)
}
