//! The epoll set each server's epoll loop starts from: its listener in it.

use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
use std::io;
use std::os::fd::{AsFd, OwnedFd};

/// The listener's epoll token (no connection token can be all ones: a connection's index is
/// below 2^31).
pub(crate) const LISTENER: u64 = u64::MAX;

/// A new close-on-exec epoll set holding `listener` under [`LISTENER`], readable and
/// edge-triggered: the loop accepts until `EAGAIN` on each event. See epoll_create(2),
/// epoll_ctl(2).
pub(crate) fn epoll_with_listener(listener: impl AsFd) -> io::Result<OwnedFd> {
    let epoll = epoll::create(CreateFlags::CLOEXEC)?;
    epoll::add(
        &epoll,
        listener,
        EventData::new_u64(LISTENER),
        EventFlags::IN | EventFlags::ET,
    )?;
    Ok(epoll)
}
