//! fd-native syscalls: plain fds in, plain fds out.
//!
//! Where rustix already wraps a syscall exactly as fdkit wants it (a safe signature, the errno
//! kept, no hidden extra syscalls), it is re-exported here rather than wrapped again. The
//! functions written here add something the kernel call alone does not give:
//! [`accept_many`] drains a listener in one call, [`sendfile_all`] loops over partial sends and
//! the 2 GiB cap, [`connect`] finishes a connect that a signal interrupted, [`close`] reports
//! errors, [`mkstemp`] and [`mkdtemp`] create close-on-exec temporaries, [`poll`] keeps its
//! deadline across signals, and [`getsockopt_raw`]/[`setsockopt_raw`] reach any option.
//!
//! Close-on-exec: every function that creates an fd takes its flags from the caller, the
//! rustix way; pass the `CLOEXEC` flag of that call (the Python binding always does unless the
//! caller opts out), so the fd is close-on-exec from birth, never by a later `fcntl`.
//!
//! Interruption: loops that may run long take a `checkpoint` closure, called after `EINTR` and
//! after every short transfer. It returns `Err` to stop the loop (the Python binding uses it to
//! run signal handlers, so Ctrl-C works). Rust callers that want no such hook pass
//! [`no_checkpoint`].

mod accept;
mod fcntl;
mod file;
mod fork;
mod pipe_size;
mod poll;
mod sendfile;
mod sigpipe;
mod socket;
mod sockopt;
mod stat;

pub use accept::{accept4, accept_many, Accepted};
pub use fcntl::{fcntl_int, get_blocking, get_cloexec, set_blocking, set_cloexec, FcntlCmd};
pub use file::{close, dup, dup3, mkdtemp, mkstemp};
pub use fork::fork_generation;
pub use pipe_size::{pipe_max_size, pipe_size, set_pipe_size, set_pipe_size_or_max};
pub use poll::{cancel_slice, poll, poll_cancellable, CANCEL_SLICE};
pub use sendfile::sendfile_all;
pub use sigpipe::SigpipeGuard;
pub use socket::{connect, socket, socketpair};
pub use sockopt::{
    getsockopt_int, getsockopt_raw, reset_connection, set_linger_zero, setsockopt_int,
    setsockopt_raw, siocoutq, tcp_state, MAX_SOCKOPT_LEN, TCP_CLOSE,
};
pub use stat::{fstat, lstat, stat, FileStat};

pub use rustix::fs::{open, seek as lseek, Mode, OFlags, SeekFrom};
pub use rustix::io::{pread, pwrite, read, write};
pub use rustix::io::{DupFlags, Errno, FdFlags};
pub use rustix::net::{
    bind, getpeername, getsockname, listen, shutdown, AddressFamily, Protocol, RecvFlags,
    SendFlags, Shutdown, SocketAddrAny, SocketFlags, SocketType,
};
pub use rustix::net::{recv, send};
pub use rustix::pipe::pipe_with as pipe2;
pub use rustix::pipe::PipeFlags;

/// The most bytes one `read`/`write`/`sendfile` moves: Linux caps every call at
/// `MAX_RW_COUNT` (2 GiB minus a page), whatever the caller asks. See read(2), sendfile(2).
pub const MAX_RW_COUNT: usize = 0x7fff_f000;

/// The checkpoint that never stops a loop: for Rust callers with no signals to honour.
pub fn no_checkpoint() -> Result<(), Errno> {
    Ok(())
}
