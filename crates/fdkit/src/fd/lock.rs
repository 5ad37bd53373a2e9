//! `fcntl` record locks: `F_GETLK`/`F_SETLK`/`F_SETLKW` and the open-file-description forms
//! `F_OFD_GETLK`/`F_OFD_SETLK`/`F_OFD_SETLKW`, with the `struct flock` they take typed.

use rustix::io::Errno;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `struct flock`: a byte range and the lock on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flock {
    /// `l_type`: `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub kind: i16,
    /// `l_whence`: `SEEK_SET`, `SEEK_CUR` or `SEEK_END`, what `start` counts from.
    pub whence: i16,
    /// `l_start`: the first byte.
    pub start: i64,
    /// `l_len`: how many bytes; 0 means to the end of the file, however far it grows.
    pub len: i64,
    /// `l_pid`: the holder a `GETLK` reports (-1 for an OFD lock); 0 when setting.
    pub pid: i32,
}

/// The lock commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockCmd {
    /// `F_GETLK`: would this lock conflict? The struct comes back describing the conflicting
    /// lock, or with `F_UNLCK` when there is none.
    GetLk,
    /// `F_SETLK`: take or release a process-associated lock; `EAGAIN`/`EACCES` on conflict.
    SetLk,
    /// `F_SETLKW`: `F_SETLK` that waits for the conflicting lock to go.
    SetLkW,
    /// `F_OFD_GETLK`: `F_GETLK` for open-file-description locks.
    OfdGetLk,
    /// `F_OFD_SETLK`: a lock owned by the open file description (not the process).
    OfdSetLk,
    /// `F_OFD_SETLKW`: `F_OFD_SETLK` that waits.
    OfdSetLkW,
}

impl LockCmd {
    /// Maps the kernel's command number to a lock command, or `None`.
    pub fn from_raw(cmd: i32) -> Option<Self> {
        Some(match cmd {
            libc::F_GETLK => LockCmd::GetLk,
            libc::F_SETLK => LockCmd::SetLk,
            libc::F_SETLKW => LockCmd::SetLkW,
            libc::F_OFD_GETLK => LockCmd::OfdGetLk,
            libc::F_OFD_SETLK => LockCmd::OfdSetLk,
            libc::F_OFD_SETLKW => LockCmd::OfdSetLkW,
            _ => return None,
        })
    }

    fn raw(self) -> i32 {
        match self {
            LockCmd::GetLk => libc::F_GETLK,
            LockCmd::SetLk => libc::F_SETLK,
            LockCmd::SetLkW => libc::F_SETLKW,
            LockCmd::OfdGetLk => libc::F_OFD_GETLK,
            LockCmd::OfdSetLk => libc::F_OFD_SETLK,
            LockCmd::OfdSetLkW => libc::F_OFD_SETLKW,
        }
    }

    /// Whether the command can wait (`F_SETLKW`, `F_OFD_SETLKW`).
    pub fn waits(self) -> bool {
        matches!(self, LockCmd::SetLkW | LockCmd::OfdSetLkW)
    }
}

/// `fcntl(fd, cmd, &flock)`: runs a lock command; returns the struct as the kernel left it (for
/// the `GETLK` forms, the conflicting lock or `F_UNLCK`). `EINTR` from a waiting command is
/// returned as is. See fcntl(2) ("Advisory record locking", "Open file description locks").
pub fn fcntl_lock(fd: BorrowedFd<'_>, cmd: LockCmd, lock: &Flock) -> Result<Flock, Errno> {
    // On the 64-bit targets fdkit builds for, `struct flock` has 64-bit offsets and is the
    // `flock64` the OFD commands require.
    // SAFETY: an all-zero flock is valid (plain integers).
    let mut raw: libc::flock = unsafe { std::mem::zeroed() };
    raw.l_type = lock.kind;
    raw.l_whence = lock.whence;
    raw.l_start = lock.start as _;
    raw.l_len = lock.len as _;
    raw.l_pid = lock.pid;
    // SAFETY: every LockCmd takes a pointer to a `struct flock`, which `raw` is, live and
    // writable for the call.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), cmd.raw(), &mut raw as *mut libc::flock) };
    if r < 0 {
        return Err(Errno::from_raw_os_error(super::fcntl::last_errno()));
    }
    Ok(Flock {
        kind: raw.l_type,
        whence: raw.l_whence,
        start: raw.l_start as i64,
        len: raw.l_len as i64,
        pid: raw.l_pid,
    })
}
