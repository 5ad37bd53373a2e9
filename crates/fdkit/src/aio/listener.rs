//! A listener's accept state: the multishot accept in flight and the queue of connections it
//! accepted, kept until the loop takes them with [`Reactor::accept`](super::Reactor::accept).

use rustix::io::Errno;
use std::collections::VecDeque;
use std::os::fd::{OwnedFd, RawFd};

/// A listener's handle, unique for the reactor's life.
pub type ListenerId = u64;

/// How many accepted connections a listener keeps before its accept is cancelled until the
/// loop takes them: past this, connections wait in the kernel's backlog, as they do for a
/// loop that accepts with accept(2), and their fds are not spent yet.
pub(super) const QUEUE_LIMIT: usize = 256;

/// One listener.
#[derive(Debug)]
pub(super) struct Listener {
    pub(super) fd: RawFd,
    /// The multishot accept in flight, if any.
    pub(super) op: Option<u64>,
    /// Accepted connections (or the error that stopped accepting), oldest first.
    pub(super) queue: VecDeque<Result<OwnedFd, Errno>>,
    /// Accepting stopped for an error: never re-armed (the owner listens again to retry).
    pub(super) stopped: bool,
    /// The accept was cancelled because the queue is full: re-armed once it is taken.
    pub(super) held: bool,
    /// Whether the listener is in the reactor's list of listeners with something queued.
    pub(super) listed: bool,
}

impl Listener {
    pub(super) fn new(fd: RawFd) -> Listener {
        Listener {
            fd,
            op: None,
            queue: VecDeque::new(),
            stopped: false,
            held: false,
            listed: false,
        }
    }

    /// Ends a hold once its accept is over and the loop took the queue down to half the
    /// limit; returns whether it did (the accept is then to be armed again).
    pub(super) fn release_hold(&mut self) -> bool {
        if self.held && self.op.is_none() && self.queue.len() <= QUEUE_LIMIT / 2 {
            self.held = false;
            return !self.stopped;
        }
        false
    }

    /// Whether the accept should be (re)armed.
    pub(super) fn wants_accept(&self) -> bool {
        self.op.is_none() && !self.stopped && !self.held
    }
}

/// What an accept's error does, as asyncio's `_accept_connection` treats accept(2)'s errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnError {
    /// Nothing to say: the queue was empty, the connection went away before it was accepted
    /// (`ECONNABORTED`), a signal, or the accept was cancelled.
    Ignore,
    /// Handed to the loop, which raises it (asyncio logs it) and goes on accepting: an error of
    /// one connection, which accept(2) says to treat as a retry (`EPROTO`, a network error
    /// passed on by the kernel, `EPERM` from a firewall); the next connection may be fine.
    Report,
    /// Handed to the loop, and accepting stops until it listens again: out of fds or memory
    /// (asyncio retries after a delay), `EINVAL` (not listening, or no multishot accept: the
    /// loop falls back to readiness), or an error that would come back on every retry (the
    /// fd is no listening socket any more), where accepting again would only spin.
    Stop,
}

/// How an accept's `errno` is treated; see [`OnError`] and accept(2) ("Error handling").
pub(super) fn on_error(errno: Errno) -> OnError {
    match errno {
        Errno::AGAIN | Errno::CONNABORTED | Errno::INTR | Errno::CANCELED => OnError::Ignore,
        Errno::PROTO
        | Errno::PERM
        | Errno::NETDOWN
        | Errno::NOPROTOOPT
        | Errno::HOSTDOWN
        | Errno::NONET
        | Errno::HOSTUNREACH
        | Errno::NETUNREACH
        | Errno::TIMEDOUT => OnError::Report,
        _ => OnError::Stop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_treated_as_asyncio_treats_accepts() {
        use Errno as E;
        let table: [(&[Errno], OnError); 3] = [
            (
                &[E::AGAIN, E::CONNABORTED, E::INTR, E::CANCELED],
                OnError::Ignore,
            ),
            (
                &[E::PROTO, E::PERM, E::NETDOWN, E::HOSTUNREACH],
                OnError::Report,
            ),
            (
                &[
                    E::MFILE,
                    E::NFILE,
                    E::NOBUFS,
                    E::NOMEM,
                    E::INVAL,
                    E::BADF,
                    E::NOTSOCK,
                ],
                OnError::Stop,
            ),
        ];
        for (errnos, want) in table {
            for &e in errnos {
                assert_eq!(on_error(e), want, "{e:?}");
            }
        }
    }
}
