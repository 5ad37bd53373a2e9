//! fd-native syscalls: plain fds in, plain fds out.
//!
//! Where rustix already wraps a syscall exactly as fdkit wants it (a safe signature, the errno
//! kept, no hidden extra syscalls), it is re-exported here rather than wrapped again. The
//! functions written here add something the kernel call alone does not give:
//! [`accept_many`] drains a listener in one call, [`sendfile_all`] loops over partial sends and
//! the 2 GiB cap, [`connect`] finishes a connect that a signal interrupted, [`close`] reports
//! errors, [`mkstemp`] and [`mkdtemp`] create close-on-exec temporaries, [`poll`] keeps its
//! deadline across signals, [`getsockopt_raw`]/[`setsockopt_raw`] reach any option,
//! [`sendmsg`]/[`recvmsg`] carry control messages ([`send_fds`]/[`recv_fds`] pass fds),
//! [`fcntl_lock`] types record locks and [`ioctl_int`] runs the int-argument ioctls.
//!
//! Close-on-exec: every function that creates an fd takes its flags from the caller, the
//! rustix way; pass the `CLOEXEC` flag of that call (the Python binding always does unless the
//! caller opts out), so the fd is close-on-exec from birth, never by a later `fcntl`.
//!
//! Interruption: loops that may run long take a `checkpoint` closure, called after `EINTR` and
//! after every short transfer. It returns `Err` to stop the loop (the Python binding uses it to
//! run signal handlers, so Ctrl-C works). Rust callers that want no such hook pass
//! [`no_checkpoint`], or [`stop_when`] to stop from another thread.
//!
//! Errors: the kernel's [`Errno`], as rustix returns it; [`accept_many`], which also refuses a
//! blocking listener, returns [`crate::Result`]. Both convert into [`std::io::Error`] with `?`.
//!
//! # Example
//!
//! A non-blocking listener on loopback, two clients, and one [`accept_many`] call that takes
//! both connections:
//!
//! ```
//! use fdkit::fd::{
//!     accept_many, bind, getsockname, listen, no_checkpoint, poll, socket, AddressFamily,
//!     PollFd, PollFlags, SocketFlags, SocketType,
//! };
//! use std::net::{SocketAddr, TcpStream};
//! use std::os::fd::AsFd;
//! use std::time::Duration;
//!
//! # fn main() -> std::io::Result<()> {
//! let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
//! let listener = socket(AddressFamily::INET, SocketType::STREAM, flags, None)?;
//! bind(&listener, &SocketAddr::from(([127, 0, 0, 1], 0)))?;
//! listen(&listener, 128)?;
//! let addr = SocketAddr::try_from(getsockname(&listener)?).expect("an IPv4 address");
//!
//! let _clients = [TcpStream::connect(addr)?, TcpStream::connect(addr)?];
//! let mut accepted = Vec::new();
//! while accepted.len() < 2 {
//!     let mut ready = [PollFd::new(&listener, PollFlags::IN)];
//!     assert_eq!(poll(&mut ready, Some(Duration::from_secs(10)), no_checkpoint)?, 1);
//!     accepted.extend(accept_many(listener.as_fd(), 64, SocketFlags::CLOEXEC)?);
//! }
//! for (conn, peer) in &accepted {
//!     let peer = SocketAddr::try_from(peer.clone().expect("a TCP peer has an address"));
//!     assert_eq!(peer.expect("an IPv4 peer").ip(), addr.ip());
//!     assert!(fdkit::fd::get_cloexec(conn.as_fd())?);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # References
//!  - [accept4(2)](https://man7.org/linux/man-pages/man2/accept4.2.html)
//!  - [socket(2)](https://man7.org/linux/man-pages/man2/socket.2.html)
//!  - [poll(2)](https://man7.org/linux/man-pages/man2/poll.2.html)

mod accept;
mod fcntl;
mod file;
mod fork;
mod ioctl;
mod lock;
mod msg;
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
pub use ioctl::{int_request, ioctl_int, struct_request_name, IoctlArg, INT_REQUESTS};
pub use lock::{fcntl_lock, Flock, LockCmd};
pub use msg::{
    cmsg_len, cmsg_space, recv_fds, recvfrom, recvmsg, send_fds, sendmsg, sendto, take_fds,
    ControlMessage, Received, ReceivedFds, MAX_CONTROL_LEN, SCM_MAX_FD,
};
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

pub use rustix::event::{PollFd, PollFlags};
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
pub use rustix::pipe::{splice, tee, SpliceFlags};

use std::sync::atomic::{AtomicBool, Ordering};

/// The most bytes one `read`/`write`/`sendfile` moves: Linux caps every call at
/// `MAX_RW_COUNT` (2 GiB minus a page), whatever the caller asks. See read(2), sendfile(2).
pub const MAX_RW_COUNT: usize = 0x7fff_f000;

/// `no_checkpoint()`: the checkpoint that never stops a loop, for Rust callers with no
/// signals to honour (`EINTR` is then simply retried).
pub fn no_checkpoint() -> Result<(), Errno> {
    Ok(())
}

/// `stop_when(&flag)`: a checkpoint that stops the loop with `EINTR` once `flag` is set.
///
/// How a Rust program stops a long call from another thread. The servers' `run` calls its
/// checkpoint at least every 100 ms, so setting the flag stops a server within that and it
/// returns its stats. The transfer, proxy and atomic pipe loops call theirs only after `EINTR`
/// and between chunks: the flag stops them at the next of those, but does not wake a wait.
///
/// # Example
///
/// ```
/// use fdkit::fd::stop_when;
/// use std::sync::atomic::{AtomicBool, Ordering};
///
/// let stop = AtomicBool::new(false);
/// let mut checkpoint = stop_when(&stop);
/// assert_eq!(checkpoint(), Ok(()));
/// stop.store(true, Ordering::Relaxed);
/// assert_eq!(checkpoint(), Err(fdkit::Errno::INTR));
/// ```
pub fn stop_when(flag: &AtomicBool) -> impl FnMut() -> Result<(), Errno> + Send + '_ {
    move || {
        if flag.load(Ordering::Relaxed) {
            Err(Errno::INTR)
        } else {
            Ok(())
        }
    }
}
