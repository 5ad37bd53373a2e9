//! `IORING_OP_EPOLL_WAIT` (Linux 6.15): epoll_wait(2) on an epoll instance, made by the ring.
//!
//! Not a row of [`ring_ops!`](crate::ring_ops): the Python `Ring` does not offer it. It is
//! the wait of `fdkit.aio`'s io_uring engine ([`Reactor`](crate::aio::Reactor)): the op
//! reads the epoll instance's ready list at once when it has events, and otherwise waits for
//! them inside the same io_uring_enter(2) that submitted it, so an iteration costs one
//! syscall whether it finds events, sleeps until some come or times out.

use super::completion::OpKind;
use super::probe::register_probe;
use super::ring::Ring;
use super::slots::{Owned, Slot};
use crate::error::{Error, Result};
use io_uring::{opcode, types};
use rustix::event::epoll;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The size of one event as the kernel writes it (`struct epoll_event`, which rustix's
/// [`epoll::Event`] lays out the same way on every Linux architecture).
pub(crate) const EVENT_SIZE: usize = std::mem::size_of::<epoll::Event>();

const _: () = assert!(EVENT_SIZE == std::mem::size_of::<libc::epoll_event>());

impl Ring {
    /// Whether this kernel runs `IORING_OP_EPOLL_WAIT` (`IORING_REGISTER_PROBE`; a ring
    /// whose probe is refused, by a seccomp filter for one, counts as without it).
    /// See io_uring_register(2).
    pub(crate) fn runs_epoll_wait(&self) -> bool {
        register_probe(&self.ring).is_ok_and(|p| p.is_supported(opcode::EpollWait::CODE))
    }

    /// Queues `IORING_OP_EPOLL_WAIT` on the epoll instance `epfd` for up to `max_events`
    /// events, written into `buf` (its allocation is reused: it must hold `max_events` events,
    /// or it is grown). The ring owns `buf` until the completion, whose result is the number
    /// of events and whose `data` is `buf` with exactly those events' bytes
    /// ([`EVENT_SIZE`] each). io_uring_prep_epoll_wait(3).
    pub(crate) fn queue_epoll_wait(
        &mut self,
        epfd: BorrowedFd<'_>,
        mut buf: Vec<u8>,
        max_events: u32,
        user_data: u64,
    ) -> Result<()> {
        let len = (max_events as usize)
            .checked_mul(EVENT_SIZE)
            .ok_or(Error::InvalidArgument("too many events"))?;
        buf.clear();
        buf.try_reserve_exact(len)
            .map_err(|_| Error::Os(rustix::io::Errno::NOMEM))?;
        let ptr = buf.as_mut_ptr().cast::<types::epoll_event>();
        let entry = opcode::EpollWait::new(types::Fd(epfd.as_raw_fd()), ptr, max_events).build();
        self.push(
            entry,
            Slot::new(user_data, OpKind::EpollWait, Owned::Fill(buf)),
        )
    }
}
