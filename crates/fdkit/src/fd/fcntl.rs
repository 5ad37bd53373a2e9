//! `fcntl` commands that take and return plain integers, and the blocking/cloexec helpers.

use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
use rustix::io::{fcntl_getfd, fcntl_setfd, Errno, FdFlags};
use std::os::fd::{AsRawFd, BorrowedFd};

// Linux's numbers for F_SETSIG/F_GETSIG (fcntl.h); the libc crate does not export them.
const F_SETSIG: i32 = 10;
const F_GETSIG: i32 = 11;

/// The `fcntl` commands whose argument and result are plain integers.
///
/// Commands that take a pointer (`F_GETLK`, `F_SETOWN_EX`, …) are deliberately absent: an
/// integer from Python would become an address the kernel writes through, which could corrupt
/// this process's memory. Those needs get typed functions instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FcntlCmd {
    /// `F_DUPFD`: duplicate to the lowest fd ≥ arg (not close-on-exec; prefer `F_DUPFD_CLOEXEC`).
    DupFd,
    /// `F_DUPFD_CLOEXEC`: duplicate to the lowest fd ≥ arg, close-on-exec.
    DupFdCloexec,
    /// `F_GETFD`: the fd flags (`FD_CLOEXEC`).
    GetFd,
    /// `F_SETFD`: set the fd flags.
    SetFd,
    /// `F_GETFL`: the file status flags (`O_NONBLOCK`, `O_APPEND`, access mode…).
    GetFl,
    /// `F_SETFL`: set the file status flags.
    SetFl,
    /// `F_GETOWN`: the process receiving `SIGIO`.
    GetOwn,
    /// `F_SETOWN`: set the process receiving `SIGIO`.
    SetOwn,
    /// `F_GETSIG`: the signal sent when I/O is possible.
    GetSig,
    /// `F_SETSIG`: set the signal sent when I/O is possible.
    SetSig,
    /// `F_GETLEASE`: the lease held on the file.
    GetLease,
    /// `F_SETLEASE`: take or drop a lease.
    SetLease,
    /// `F_NOTIFY`: directory change notification.
    Notify,
    /// `F_GETPIPE_SZ`: a pipe's capacity.
    GetPipeSz,
    /// `F_SETPIPE_SZ`: resize a pipe.
    SetPipeSz,
    /// `F_ADD_SEALS`: add memfd seals.
    AddSeals,
    /// `F_GET_SEALS`: the memfd seals.
    GetSeals,
}

impl FcntlCmd {
    /// Maps the kernel's command number to a command, or `None` for pointer-taking and unknown
    /// commands.
    pub fn from_raw(cmd: i32) -> Option<Self> {
        use FcntlCmd::*;
        Some(match cmd {
            libc::F_DUPFD => DupFd,
            libc::F_DUPFD_CLOEXEC => DupFdCloexec,
            libc::F_GETFD => GetFd,
            libc::F_SETFD => SetFd,
            libc::F_GETFL => GetFl,
            libc::F_SETFL => SetFl,
            libc::F_GETOWN => GetOwn,
            libc::F_SETOWN => SetOwn,
            F_GETSIG => GetSig,
            F_SETSIG => SetSig,
            libc::F_GETLEASE => GetLease,
            libc::F_SETLEASE => SetLease,
            libc::F_NOTIFY => Notify,
            libc::F_GETPIPE_SZ => GetPipeSz,
            libc::F_SETPIPE_SZ => SetPipeSz,
            libc::F_ADD_SEALS => AddSeals,
            libc::F_GET_SEALS => GetSeals,
            _ => return None,
        })
    }

    fn raw(self) -> i32 {
        use FcntlCmd::*;
        match self {
            DupFd => libc::F_DUPFD,
            DupFdCloexec => libc::F_DUPFD_CLOEXEC,
            GetFd => libc::F_GETFD,
            SetFd => libc::F_SETFD,
            GetFl => libc::F_GETFL,
            SetFl => libc::F_SETFL,
            GetOwn => libc::F_GETOWN,
            SetOwn => libc::F_SETOWN,
            GetSig => F_GETSIG,
            SetSig => F_SETSIG,
            GetLease => libc::F_GETLEASE,
            SetLease => libc::F_SETLEASE,
            Notify => libc::F_NOTIFY,
            GetPipeSz => libc::F_GETPIPE_SZ,
            SetPipeSz => libc::F_SETPIPE_SZ,
            AddSeals => libc::F_ADD_SEALS,
            GetSeals => libc::F_GET_SEALS,
        }
    }
}

/// `fcntl(fd, cmd, arg)` for the integer-only commands of [`FcntlCmd`].
///
/// The escape hatch for commands rustix types one by one; the result is the kernel's return
/// value (a new fd for the dup commands: the caller owns it). See fcntl(2).
pub fn fcntl_int(fd: BorrowedFd<'_>, cmd: FcntlCmd, arg: i32) -> Result<i32, Errno> {
    // SAFETY: every command in `FcntlCmd` takes an `int` argument (or none) and never
    // dereferences it, so no argument value can make the kernel touch our memory.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), cmd.raw(), arg) };
    if r < 0 {
        Err(Errno::from_raw_os_error(last_errno()))
    } else {
        Ok(r)
    }
}

/// The errno the C library left after a failed libc call.
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `fcntl(F_GETFL) & O_NONBLOCK == 0`: whether calls on `fd` block. See fcntl(2).
pub fn get_blocking(fd: BorrowedFd<'_>) -> Result<bool, Errno> {
    Ok(!fcntl_getfl(fd)?.contains(OFlags::NONBLOCK))
}

/// Sets or clears `O_NONBLOCK` with `F_GETFL`/`F_SETFL`, skipping the write when already so.
/// See fcntl(2).
pub fn set_blocking(fd: BorrowedFd<'_>, blocking: bool) -> Result<(), Errno> {
    let flags = fcntl_getfl(fd)?;
    let wanted = if blocking {
        flags - OFlags::NONBLOCK
    } else {
        flags | OFlags::NONBLOCK
    };
    if wanted != flags {
        fcntl_setfl(fd, wanted)?;
    }
    Ok(())
}

/// `fcntl(F_GETFD) & FD_CLOEXEC`. See fcntl(2).
pub fn get_cloexec(fd: BorrowedFd<'_>) -> Result<bool, Errno> {
    Ok(fcntl_getfd(fd)?.contains(FdFlags::CLOEXEC))
}

/// Sets or clears `FD_CLOEXEC`. For fds fdkit did not create; fdkit's own are born with it.
/// See fcntl(2).
pub fn set_cloexec(fd: BorrowedFd<'_>, cloexec: bool) -> Result<(), Errno> {
    let flags = fcntl_getfd(fd)?;
    let wanted = if cloexec {
        flags | FdFlags::CLOEXEC
    } else {
        flags - FdFlags::CLOEXEC
    };
    if wanted != flags {
        fcntl_setfd(fd, wanted)?;
    }
    Ok(())
}
