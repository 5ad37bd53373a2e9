//! What kind of file an fd is: the first thing `transfer` needs to pick a path.

use rustix::fs::{statx, AtFlags, FileType, StatxFlags};
use rustix::io::Errno;
use std::os::fd::BorrowedFd;

/// The fd kinds whose kernel fast paths differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FdKind {
    /// A regular file: copy_file_range, sendfile and splice reads work, offsets apply.
    File,
    /// A pipe or FIFO: splice and tee work directly on it.
    Pipe,
    /// A socket: sendfile writes to it, splice reads from it through a pipe.
    Socket,
    /// A character device (`/dev/null`, `/dev/zero`, a tty): support varies by driver.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Anything else (a directory, an eventfd, …).
    Other,
}

/// Which file an fd refers to, stable while it exists and not reused after: device, inode and
/// birth time. The inode alone is not enough: filesystems hand a freed inode number to the
/// next new file, which must not inherit what was learnt about the old one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    /// `st_dev` (major, minor).
    pub dev: (u32, u32),
    /// `st_ino`.
    pub ino: u64,
    /// Birth time in ns, or 0 where the filesystem keeps none (sockets and pipes get fresh
    /// inode numbers from a counter instead).
    pub btime_ns: i128,
}

/// `statx(fd, "", AT_EMPTY_PATH)` for the fd's kind and identity, in one syscall.
/// See statx(2), inode(7).
pub fn fd_kind(fd: BorrowedFd<'_>) -> Result<(FdKind, FileId), Errno> {
    let st = statx(
        fd,
        c"",
        AtFlags::EMPTY_PATH,
        StatxFlags::TYPE | StatxFlags::INO | StatxFlags::BTIME,
    )?;
    let kind = match FileType::from_raw_mode(st.stx_mode.into()) {
        FileType::RegularFile => FdKind::File,
        FileType::Fifo => FdKind::Pipe,
        FileType::Socket => FdKind::Socket,
        FileType::CharacterDevice => FdKind::CharDevice,
        FileType::BlockDevice => FdKind::BlockDevice,
        _ => FdKind::Other,
    };
    let btime_ns = if StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::BTIME) {
        i128::from(st.stx_btime.tv_sec) * 1_000_000_000 + i128::from(st.stx_btime.tv_nsec)
    } else {
        0
    };
    let id = FileId {
        dev: (st.stx_dev_major, st.stx_dev_minor),
        ino: st.stx_ino,
        btime_ns,
    };
    Ok((kind, id))
}
