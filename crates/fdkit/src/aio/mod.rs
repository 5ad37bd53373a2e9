//! The native parts of `fdkit.aio`, the asyncio event loop: the [`Reactor`] its io_uring engine
//! waits with, through one io_uring. (The loop's timer heap is asyncio's own `_scheduled` list,
//! kept in the binding, where the Python objects are.)
//!
//! The io_uring engine keeps every registration (`add_reader`/`add_writer`, the transports'
//! reads and writes, the listeners) in an epoll instance, so that they keep epoll's semantics
//! exactly: a closed fd leaves the set, a regular file is refused, and nothing is read or
//! accepted before asyncio's callback asks for it (bytes and connections stay in the kernel,
//! where a paused transport, another process or `RLIMIT_NOFILE` can see them). Where the kernel
//! runs `IORING_OP_EPOLL_WAIT` (Linux 6.15) the [`Reactor`] reads the instance's events itself,
//! in the io_uring_enter(2) that sleeps: one syscall per wait. Elsewhere the loop reads what is
//! ready with epoll_wait(2) without waiting, and only when nothing is and the iteration may
//! sleep does the [`Reactor`] wait, in one io_uring_enter(2), for the epoll instance's fd to
//! become readable, with the iteration's timeout. Each wait arms one one-shot op and takes it
//! back before returning, so nothing of the ring is armed while the loop runs its callbacks.
//!
//! # References
//!  - [io_uring_enter(2)](https://man7.org/linux/man-pages/man2/io_uring_enter.2.html)
//!  - [epoll(7)](https://man7.org/linux/man-pages/man7/epoll.7.html)

mod reactor;

pub use reactor::{Reactor, ReactorOptions};
