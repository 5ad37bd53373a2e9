//! `ioctl` for the requests whose argument is an `int` (or nothing), typed one by one.

use rustix::io::Errno;
use std::os::fd::{AsRawFd, BorrowedFd};

/// How a request uses `ioctl`'s third argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoctlArg {
    /// No argument (`FIOCLEX`, `TIOCEXCL`…); the result is the call's return value.
    Nothing,
    /// An `int` passed by value (`TCSBRK`, `TCFLSH`…).
    Value,
    /// A pointer to an `int` the kernel reads (`FIONBIO`, `FIOASYNC`…).
    In,
    /// A pointer to an `int` the kernel writes (`FIONREAD`, `TIOCOUTQ`…); the result is that
    /// int.
    Out,
}

/// The requests [`ioctl_int`] runs, with how each uses its argument, and their names.
///
/// Anything else is refused: most requests take a pointer to a struct, and an integer from a
/// caller would become an address the kernel writes through.
pub const INT_REQUESTS: &[(libc::Ioctl, IoctlArg, &str)] = &[
    (libc::FIONREAD, IoctlArg::Out, "FIONREAD"),
    (libc::TIOCOUTQ, IoctlArg::Out, "TIOCOUTQ"),
    (SIOCOUTQNSD, IoctlArg::Out, "SIOCOUTQNSD"),
    (SIOCATMARK, IoctlArg::Out, "SIOCATMARK"),
    (libc::FIONBIO, IoctlArg::In, "FIONBIO"),
    (libc::FIOASYNC, IoctlArg::In, "FIOASYNC"),
    (libc::FIOCLEX, IoctlArg::Nothing, "FIOCLEX"),
    (libc::FIONCLEX, IoctlArg::Nothing, "FIONCLEX"),
    (libc::TIOCEXCL, IoctlArg::Nothing, "TIOCEXCL"),
    (libc::TIOCNXCL, IoctlArg::Nothing, "TIOCNXCL"),
    (libc::TIOCGEXCL, IoctlArg::Out, "TIOCGEXCL"),
    (libc::TIOCGETD, IoctlArg::Out, "TIOCGETD"),
    (libc::TIOCMGET, IoctlArg::Out, "TIOCMGET"),
    (libc::TIOCMSET, IoctlArg::In, "TIOCMSET"),
    (libc::TIOCMBIS, IoctlArg::In, "TIOCMBIS"),
    (libc::TIOCMBIC, IoctlArg::In, "TIOCMBIC"),
    (libc::TIOCGPGRP, IoctlArg::Out, "TIOCGPGRP"),
    (libc::TIOCSPGRP, IoctlArg::In, "TIOCSPGRP"),
    (libc::TIOCGSID, IoctlArg::Out, "TIOCGSID"),
    (libc::TIOCGPTN, IoctlArg::Out, "TIOCGPTN"),
    (libc::TIOCSPTLCK, IoctlArg::In, "TIOCSPTLCK"),
    (libc::TIOCSCTTY, IoctlArg::Value, "TIOCSCTTY"),
    (libc::TIOCNOTTY, IoctlArg::Nothing, "TIOCNOTTY"),
    (libc::TIOCSBRK, IoctlArg::Nothing, "TIOCSBRK"),
    (libc::TIOCCBRK, IoctlArg::Nothing, "TIOCCBRK"),
    (libc::TCSBRK, IoctlArg::Value, "TCSBRK"),
    (libc::TCXONC, IoctlArg::Value, "TCXONC"),
    (libc::TCFLSH, IoctlArg::Value, "TCFLSH"),
];

/// `SIOCOUTQNSD` (<linux/sockios.h>): a TCP socket's bytes not yet sent.
pub const SIOCOUTQNSD: libc::Ioctl = 0x894B;

/// `SIOCATMARK` (<asm/sockios.h>, 0x8905 on the architectures fdkit builds for): whether a
/// TCP socket's read position is at the urgent mark.
pub const SIOCATMARK: libc::Ioctl = 0x8905;

/// Requests known to take a pointer to a struct, named in refusals.
const STRUCT_REQUESTS: &[(libc::Ioctl, &str)] = &[
    (libc::TCGETS, "TCGETS"),
    (libc::TCSETS, "TCSETS"),
    (libc::TIOCGWINSZ, "TIOCGWINSZ"),
    (libc::TIOCSWINSZ, "TIOCSWINSZ"),
    (libc::SIOCGIFADDR as libc::Ioctl, "SIOCGIFADDR"),
    (libc::SIOCGIFFLAGS as libc::Ioctl, "SIOCGIFFLAGS"),
    (libc::SIOCGIFINDEX as libc::Ioctl, "SIOCGIFINDEX"),
    (libc::SIOCGIFMTU as libc::Ioctl, "SIOCGIFMTU"),
];

/// How `request` uses its argument and its name, when it is one [`ioctl_int`] runs.
pub fn int_request(request: libc::Ioctl) -> Option<(IoctlArg, &'static str)> {
    INT_REQUESTS
        .iter()
        .find(|(r, _, _)| *r == request)
        .map(|&(_, kind, name)| (kind, name))
}

/// The name of a request known to take a struct (for messages), if it is one.
pub fn struct_request_name(request: libc::Ioctl) -> Option<&'static str> {
    STRUCT_REQUESTS
        .iter()
        .find(|(r, _)| *r == request)
        .map(|&(_, name)| name)
}

/// `ioctl(fd, request, arg)` for the requests of [`INT_REQUESTS`]: an `Out` request returns
/// the int the kernel wrote, the others the call's return value. `None` for any other request
/// (nothing is called). See ioctl(2), ioctl_tty(2), tcp(7), socket(7).
pub fn ioctl_int(fd: BorrowedFd<'_>, request: libc::Ioctl, arg: i32) -> Option<Result<i32, Errno>> {
    let (kind, _) = int_request(request)?;
    let mut value: libc::c_int = arg;
    // SAFETY: `request` is one of INT_REQUESTS, whose third argument is, as `kind` says,
    // nothing, an int by value, or a pointer to one `int`: `value` is a live, writable local
    // of that type, so the kernel touches no other memory.
    let r = unsafe {
        match kind {
            IoctlArg::Nothing => libc::ioctl(fd.as_raw_fd(), request, 0 as libc::c_ulong),
            IoctlArg::Value => libc::ioctl(fd.as_raw_fd(), request, arg as libc::c_ulong),
            IoctlArg::In | IoctlArg::Out => {
                libc::ioctl(fd.as_raw_fd(), request, &mut value as *mut libc::c_int)
            }
        }
    };
    Some(if r < 0 {
        Err(Errno::from_raw_os_error(super::fcntl::last_errno()))
    } else if kind == IoctlArg::Out {
        Ok(value)
    } else {
        Ok(r)
    })
}
