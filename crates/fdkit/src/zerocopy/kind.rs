//! What kind of file an fd is: the first thing `transfer` needs to pick a path.

use crate::fd::FileStat;
use rustix::fs::{fstat, FileType};
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

/// `fstat(fd)` and the kind it shows, with the identity (`st_dev`, `st_ino`) `transfer` uses
/// to remember what worked for a pair of files. See fstat(2), inode(7).
pub fn fd_kind(fd: BorrowedFd<'_>) -> Result<(FdKind, FileStat), Errno> {
    let st = fstat(fd)?;
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => FdKind::File,
        FileType::Fifo => FdKind::Pipe,
        FileType::Socket => FdKind::Socket,
        FileType::CharacterDevice => FdKind::CharDevice,
        FileType::BlockDevice => FdKind::BlockDevice,
        _ => FdKind::Other,
    };
    Ok((kind, FileStat::from(st)))
}
