//! Zero-copy transfers: move bytes between fds inside the kernel.
//!
//! [`transfer`] picks the best path for the two fd kinds (copy_file_range, sendfile, splice,
//! splice through a pooled pipe), falls back at run time to the next one and finally to a
//! read/write loop, and says which path it took and why it left the others ([`TransferStats`]).
//! [`Pipe`] is a pipe pair with `read_from`/`write_to`/`tee`, run-to-end transfers
//! (`read_from_all`/`write_to_all`, with a userspace fallback) and a standing tee ([`Mirror`]); [`proxy`] relays both directions
//! between two stream sockets; [`relay`] moves one direction and can record it with `tee`.
//!
//! Every loop takes a `checkpoint` closure, as in [`crate::fd`]: called after `EINTR`, short
//! transfers and waits, it returns `Err` to stop (the Python binding runs signal handlers there).

mod copy_loops;
mod held;
mod job;
mod kind;
mod pipe;
mod pipe_stream;
mod pool;
mod proxy;
mod transfer;
mod wait;

pub use crate::fd::pipe_max_size;
pub use held::{held, pool_clear};
pub use job::WouldBlock;
pub use kind::{fd_kind, FdKind, FileId};
pub use pipe::Pipe;
pub use pipe_stream::{Mirror, WriteProgress};
pub use pool::{pool_idle, PooledPipe, POOL_CAPACITY, POOL_PIPE_SIZE};
pub use proxy::{proxy, proxy_all, relay, RESET_DRAIN_STALL};
pub use transfer::{
    transfer, transfer_all, transfer_nonblocking, Fallback, Path, TransferStats, SMALL_TRANSFER,
};
