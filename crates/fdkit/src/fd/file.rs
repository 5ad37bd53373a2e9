//! Closing, duplicating, and creating temporary files and directories.

use rustix::fs::{mkdir, open, Mode, OFlags};
use rustix::io::{fcntl_dupfd_cloexec, fcntl_getfd, DupFlags, Errno};
use rustix::rand::{getrandom, GetRandomFlags};
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `close(fd)`, reporting the kernel's error (`OwnedFd`'s drop ignores it).
///
/// `EINTR` counts as success: on Linux the fd is released before close returns, so a retry
/// could close an fd another thread has just been given. See close(2).
pub fn close(fd: OwnedFd) -> Result<(), Errno> {
    let raw = fd.into_raw_fd();
    // SAFETY: `raw` came from an `OwnedFd` we consumed, so nobody else closes it.
    match unsafe { rustix::io::try_close(raw) } {
        Err(Errno::INTR) => Ok(()),
        other => other,
    }
}

/// `fcntl(F_DUPFD_CLOEXEC)` (or `dup` when `cloexec` is false): a new fd for the same file.
/// See dup(2).
pub fn dup(fd: BorrowedFd<'_>, cloexec: bool) -> Result<OwnedFd, Errno> {
    if cloexec {
        fcntl_dupfd_cloexec(fd, 0)
    } else {
        rustix::io::dup(fd)
    }
}

/// `dup3(fd, newfd, flags)` with `dup2`'s meaning when `fd == newfd` (dup3 alone says EINVAL).
///
/// `newfd` is a raw number because the target need not be open; whatever it held is closed
/// atomically. The caller owns `newfd` afterwards. See dup2(2).
pub fn dup3(fd: BorrowedFd<'_>, newfd: RawFd, flags: DupFlags) -> Result<RawFd, Errno> {
    if newfd < 0 {
        return Err(Errno::BADF);
    }
    if fd.as_raw_fd() == newfd {
        // dup2's rule: a valid fd duplicated onto itself is a no-op that returns it.
        fcntl_getfd(fd)?;
        return Ok(newfd);
    }
    // SAFETY: dup3 takes two integers and a flag word; no memory is passed.
    let r = unsafe { libc::dup3(fd.as_raw_fd(), newfd, flags.bits() as i32) };
    if r < 0 {
        Err(Errno::from_raw_os_error(super::fcntl::last_errno()))
    } else {
        Ok(r)
    }
}

/// How many names `mkstemp`/`mkdtemp` try before giving up with `EEXIST`.
const TEMP_ATTEMPTS: usize = 100;

/// Creates a new file `dir/prefix + 8 random chars + suffix` with `O_CREAT|O_EXCL|O_RDWR`, mode
/// 0600, and returns its fd and path.
///
/// The fd is close-on-exec from birth unless `cloexec` is false. The name is random from
/// getrandom(2); a clash retries with a fresh name. See mkstemp(3), open(2).
pub fn mkstemp(
    dir: &Path,
    prefix: &OsStr,
    suffix: &OsStr,
    cloexec: bool,
) -> Result<(OwnedFd, PathBuf), Errno> {
    let mut flags = OFlags::CREATE | OFlags::EXCL | OFlags::RDWR;
    if cloexec {
        flags |= OFlags::CLOEXEC;
    }
    with_temp_name(dir, prefix, suffix, |path| {
        open(path, flags, Mode::RUSR | Mode::WUSR)
    })
}

/// Creates a new directory `dir/prefix + 8 random chars + suffix` with mode 0700 and returns its
/// path. See mkdtemp(3), mkdir(2).
pub fn mkdtemp(dir: &Path, prefix: &OsStr, suffix: &OsStr) -> Result<PathBuf, Errno> {
    with_temp_name(dir, prefix, suffix, |path| mkdir(path, Mode::RWXU)).map(|((), path)| path)
}

fn with_temp_name<T>(
    dir: &Path,
    prefix: &OsStr,
    suffix: &OsStr,
    mut create: impl FnMut(&Path) -> Result<T, Errno>,
) -> Result<(T, PathBuf), Errno> {
    // A separator in the prefix or suffix would create the file somewhere other than `dir`.
    if prefix.as_bytes().contains(&b'/') || suffix.as_bytes().contains(&b'/') {
        return Err(Errno::INVAL);
    }
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    for _ in 0..TEMP_ATTEMPTS {
        let mut random = [0u8; 8];
        getrandom(&mut random, GetRandomFlags::empty())?;
        let mut name = prefix.as_bytes().to_vec();
        name.extend(random.iter().map(|b| ALPHABET[(b & 31) as usize]));
        name.extend_from_slice(suffix.as_bytes());
        let path = dir.join(OsStr::from_bytes(&name));
        match create(&path) {
            Ok(v) => return Ok((v, path)),
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::EXIST)
}
