//! One proxied connection: the client, the upstream, a relay each way, and how it ended.

use super::relay::{Fault, Relay, Side};
use crate::error::strerror;
use rustix::io::Errno;
use std::fmt;
use std::time::{Duration, Instant};

/// Where a connection is in its life.
pub(super) enum State {
    /// The upstream connect is in flight (`EINPROGRESS`), or waiting to be retried because a
    /// unix listener's backlog was full (`EAGAIN`).
    Connecting { deadline: Instant, retry: bool },
    /// Both sockets are connected; bytes flow.
    Relaying,
}

/// Which socket a failure came from.
#[derive(Clone, Copy)]
pub(super) enum Who {
    Client,
    Upstream,
}

/// How a connection ended, as the log line says it.
pub(super) enum End {
    /// Both directions reached EOF and drained.
    Eof,
    /// A socket failed (`ECONNRESET`/`EPIPE` read as a reset).
    Failed(Who, Errno),
    /// No byte moved for the idle timeout.
    IdleTimeout,
    /// The upstream refused the connection (or its unix socket does not exist).
    Refused(Errno),
    /// The upstream connect failed otherwise (unreachable, out of fds, …).
    ConnectFailed(Errno),
    /// The upstream connect did not finish within the connect timeout.
    ConnectTimeout,
    /// Writing the recording failed.
    Record(Errno),
    /// The proxy could not set the connection up (out of fds or pipes).
    Setup(Errno),
    /// The server is stopping.
    Stopped,
}

impl End {
    /// Whether this end counts as an upstream connect failure in the stats.
    pub fn is_upstream_failure(&self) -> bool {
        matches!(
            self,
            End::Refused(_) | End::ConnectFailed(_) | End::ConnectTimeout
        )
    }
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = |w: &Who| match w {
            Who::Client => "client",
            Who::Upstream => "upstream",
        };
        match self {
            End::Eof => write!(f, "eof"),
            End::Failed(w, e @ (Errno::CONNRESET | Errno::PIPE)) => {
                write!(f, "{} reset ({})", side(w), strerror(*e))
            }
            End::Failed(w, e) => write!(f, "{} error ({})", side(w), strerror(*e)),
            End::IdleTimeout => write!(f, "idle timeout"),
            End::Refused(e) => write!(f, "upstream refused ({})", strerror(*e)),
            End::ConnectFailed(e) => write!(f, "upstream connect failed ({})", strerror(*e)),
            End::ConnectTimeout => write!(f, "upstream connect timeout"),
            End::Record(e) => write!(f, "record error ({})", strerror(*e)),
            End::Setup(e) => write!(f, "setup failed ({})", strerror(*e)),
            End::Stopped => write!(f, "stopped"),
        }
    }
}

/// The classification of a failed `connect(2)` to the upstream.
pub(super) fn connect_end(e: Errno) -> End {
    match e {
        Errno::CONNREFUSED | Errno::NOENT => End::Refused(e),
        e => End::ConnectFailed(e),
    }
}

/// A client, its upstream, and the two directions between them.
pub(super) struct Conn {
    /// Connection number, from 1 in accept order.
    pub id: u64,
    /// The client's address as the log spells it.
    pub peer: String,
    pub started: Instant,
    pub last_active: Instant,
    pub state: State,
    pub client: Side,
    pub upstream: Side,
    /// Client → upstream.
    pub up: Relay,
    /// Upstream → client (the recorded direction).
    pub down: Relay,
    /// Already on the loop's "pump again" list.
    pub queued: bool,
}

/// What servicing a connection left it as.
pub(super) enum Serviced {
    /// Still open; `more` when a relay ran out of its round budget with work left.
    Open { more: bool },
    /// Finished or failed: close it.
    Closed(End),
}

impl Conn {
    /// Pumps both directions as far as readiness allows.
    pub fn service(&mut self, now: Instant) -> Serviced {
        let up = match self.up.pump(&mut self.client, &mut self.upstream) {
            Ok(p) => p,
            Err(f) => return Serviced::Closed(fault_end(f, Who::Client, Who::Upstream)),
        };
        let down = match self.down.pump(&mut self.upstream, &mut self.client) {
            Ok(p) => p,
            Err(f) => return Serviced::Closed(fault_end(f, Who::Upstream, Who::Client)),
        };
        if up.moved > 0 || down.moved > 0 || up.ended || down.ended {
            self.last_active = now;
        }
        if self.up.done && self.down.done {
            return Serviced::Closed(End::Eof);
        }
        Serviced::Open {
            more: up.more || down.more,
        }
    }

    /// Reads the outcome of a non-blocking connect after epoll reported the upstream:
    /// `Ok(true)` connected, `Ok(false)` still in progress, `Err` failed. See connect(2)
    /// (`SO_ERROR` after `EINPROGRESS`).
    pub fn finish_connect(&mut self, writable: bool) -> Result<bool, End> {
        match rustix::net::sockopt::socket_error(&self.upstream.fd) {
            Ok(Ok(())) if writable => {
                self.state = State::Relaying;
                Ok(true)
            }
            Ok(Ok(())) => Ok(false),
            Ok(Err(e)) | Err(e) => Err(connect_end(e)),
        }
    }

    /// The log line for this connection ending with `end`.
    pub fn log_line(&self, end: &End, now: Instant) -> String {
        log_line(
            self.id,
            &self.peer,
            (self.up.moved, self.down.moved),
            now.saturating_duration_since(self.started),
            end,
        )
    }
}

/// `conn N from PEER: U B up, D B down, T s, END`: one line per connection, as it closes.
pub(super) fn log_line(
    id: u64,
    peer: &str,
    (up, down): (u64, u64),
    took: Duration,
    end: &End,
) -> String {
    format!(
        "conn {id} from {peer}: {up} B up, {down} B down, {:.3} s, {end}",
        took.as_secs_f64()
    )
}

fn fault_end(f: Fault, src: Who, dst: Who) -> End {
    match f {
        Fault::Source(e) => End::Failed(src, e),
        Fault::Destination(e) => End::Failed(dst, e),
        Fault::Record(e) => End::Record(e),
    }
}
