//! `stat`, `fstat`, `lstat` with every field 64 bits wide.

use rustix::fs::Stat;
use rustix::io::Errno;
use std::os::fd::BorrowedFd;

/// What `stat` reports, with the widths the kernel has (no 32-bit truncation of sizes, inodes or
/// device numbers) and times as nanoseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    /// Device holding the file.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// File type and permission bits.
    pub mode: u32,
    /// Number of hard links.
    pub nlink: u64,
    /// Owner's user id.
    pub uid: u32,
    /// Owner's group id.
    pub gid: u32,
    /// Device number, for device files.
    pub rdev: u64,
    /// Size in bytes.
    pub size: i64,
    /// Preferred I/O block size.
    pub blksize: i64,
    /// 512-byte blocks allocated.
    pub blocks: i64,
    /// Last access, ns since the epoch.
    pub atime_ns: i128,
    /// Last modification, ns since the epoch.
    pub mtime_ns: i128,
    /// Last status change, ns since the epoch.
    pub ctime_ns: i128,
}

fn ns(sec: i64, nsec: u64) -> i128 {
    i128::from(sec) * 1_000_000_000 + i128::from(nsec)
}

impl From<Stat> for FileStat {
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    fn from(s: Stat) -> Self {
        FileStat {
            dev: s.st_dev as u64,
            ino: s.st_ino as u64,
            mode: s.st_mode as u32,
            nlink: s.st_nlink as u64,
            uid: s.st_uid as u32,
            gid: s.st_gid as u32,
            rdev: s.st_rdev as u64,
            size: s.st_size as i64,
            blksize: s.st_blksize as i64,
            blocks: s.st_blocks as i64,
            atime_ns: ns(s.st_atime as i64, s.st_atime_nsec as u64),
            mtime_ns: ns(s.st_mtime as i64, s.st_mtime_nsec as u64),
            ctime_ns: ns(s.st_ctime as i64, s.st_ctime_nsec as u64),
        }
    }
}

/// `stat(path)`: follows symlinks. See stat(2).
pub fn stat<P: rustix::path::Arg>(path: P) -> Result<FileStat, Errno> {
    rustix::fs::stat(path).map(FileStat::from)
}

/// `lstat(path)`: describes a symlink itself. See stat(2).
pub fn lstat<P: rustix::path::Arg>(path: P) -> Result<FileStat, Errno> {
    rustix::fs::lstat(path).map(FileStat::from)
}

/// `fstat(fd)`. See stat(2).
pub fn fstat(fd: BorrowedFd<'_>) -> Result<FileStat, Errno> {
    rustix::fs::fstat(fd).map(FileStat::from)
}
