//! One proxied connection: the client, the upstream, a relay each way, and how it ended.

use super::relay::{Fault, Relay, Side};
use crate::error::strerror;
use rustix::io::Errno;
use std::fmt;
use std::os::fd::AsFd;
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
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
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
    /// Whether the connection ends with a reset (`SO_LINGER {1, 0}`) rather than a FIN.
    ///
    /// Every failure does: a side that reset, an upstream that refused or could not be
    /// reached (the client's read says `ECONNRESET`, not an empty reply), a recording that
    /// could not be written (the relay stopped mid-stream). A clean end, an idle timeout
    /// (both peers alive and silent: a FIN, as socat's `-T` and nginx's stream
    /// `proxy_timeout` do) and a stopping server close with a FIN.
    pub fn is_abortive(&self) -> bool {
        matches!(
            self,
            End::Failed(..)
                | End::Refused(_)
                | End::ConnectFailed(_)
                | End::ConnectTimeout
                | End::Record(_)
                | End::Setup(_)
        )
    }

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

/// One side was reset (or failed): the bytes it sent before are being delivered to the other
/// side, which is then reset in turn (closed with `SO_LINGER {1, 0}`).
#[derive(Clone, Copy)]
pub(super) struct Abort {
    /// The side that failed.
    pub dead: Who,
    /// Its error, for the log line.
    pub error: Errno,
    /// The survivor's send queue (`SIOCOUTQ`) at the last look: shrinking counts as progress.
    unacked: usize,
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
    /// Upstream → client.
    pub down: Relay,
    /// Already on the loop's "pump again" list.
    pub queued: bool,
    /// Set once a side failed: the connection is passing the reset on.
    pub abort: Option<Abort>,
    /// Already on the loop's "waiting for acknowledgements" list.
    pub acking: bool,
}

/// What servicing a connection left it as.
pub(super) enum Serviced {
    /// Still open; `more` when a relay ran out of its round budget with work left; `acking`
    /// when a reset waits for the survivor's peer to acknowledge the last bytes (no event
    /// says so: look again soon).
    Open { more: bool, acking: bool },
    /// Finished or failed: close it.
    Closed(End),
}

impl Conn {
    /// Pumps both directions as far as readiness allows; once a side failed, only finishes
    /// passing that on (see [`Conn::abort`]).
    pub fn service(&mut self, now: Instant) -> Serviced {
        if let Some(abort) = self.abort {
            return self.service_abort(abort, now);
        }
        let up = match self.up.pump(&mut self.client, &mut self.upstream) {
            Ok(p) => p,
            Err(f) => return self.fault(f, Who::Client, Who::Upstream, now),
        };
        let down = match self.down.pump(&mut self.upstream, &mut self.client) {
            Ok(p) => p,
            Err(f) => return self.fault(f, Who::Upstream, Who::Client, now),
        };
        if up.moved > 0 || down.moved > 0 || up.ended || down.ended {
            self.last_active = now;
        }
        if self.up.done && self.down.done {
            return Serviced::Closed(End::Eof);
        }
        Serviced::Open {
            more: up.more || down.more,
            acking: false,
        }
    }

    fn fault(&mut self, f: Fault, src: Who, dst: Who, now: Instant) -> Serviced {
        match f {
            Fault::Source(e) => self.abort(src, e, now),
            Fault::Destination(e) => self.abort(dst, e, now),
            Fault::Record(e) => Serviced::Closed(End::Record(e)),
        }
    }

    /// `dead`'s socket was reset (or failed with `error`): pass it on as a reset. What its
    /// kernel still holds (Linux returns the bytes that arrived before a reset, then the error
    /// once) and what its direction's pipe holds go to the survivor first; once the survivor's
    /// peer has acknowledged them, the connection closes with `End::Failed`, which closes both
    /// sockets with `SO_LINGER {1, 0}`, so the survivor's peer reads `ECONNRESET` after a
    /// prefix of the stream rather than a clean end of file. The other direction is dropped.
    /// The loop's sweep gives up on a survivor that takes nothing for the reset stall.
    pub fn abort(&mut self, dead: Who, error: Errno, now: Instant) -> Serviced {
        let abort = self.begin_abort(dead, error, now);
        self.service_abort(abort, now)
    }

    /// Enters the state [`Conn::abort`] works in, without servicing yet.
    fn begin_abort(&mut self, dead: Who, error: Errno, now: Instant) -> Abort {
        let abort = Abort {
            dead,
            error,
            unacked: usize::MAX,
        };
        self.abort = Some(abort);
        self.last_active = now;
        let (relay, src) = match dead {
            Who::Client => (&mut self.up, &mut self.client),
            Who::Upstream => (&mut self.down, &mut self.upstream),
        };
        relay.abort();
        // A reset socket never blocks a read: it gives its last bytes, the error, or 0.
        src.readable = true;
        abort
    }

    fn service_abort(&mut self, mut abort: Abort, now: Instant) -> Serviced {
        let failed = Serviced::Closed(End::Failed(abort.dead, abort.error));
        let (relay, src, dst) = match abort.dead {
            Who::Client => (&mut self.up, &mut self.client, &mut self.upstream),
            Who::Upstream => (&mut self.down, &mut self.upstream, &mut self.client),
        };
        let pumped = match relay.pump(src, dst) {
            Ok(p) => p,
            // The survivor failed too (or the recording): nothing more can be delivered.
            Err(_) => return failed,
        };
        if pumped.moved > 0 || pumped.ended {
            self.last_active = now;
        }
        if !relay.finished() {
            return Serviced::Open {
                more: pumped.more,
                acking: false,
            };
        }
        match crate::fd::siocoutq(dst.fd.as_fd()) {
            Ok(0) | Err(_) => failed,
            Ok(n) => {
                if n < abort.unacked {
                    abort.unacked = n;
                    self.abort = Some(abort);
                    self.last_active = now;
                }
                Serviced::Open {
                    more: false,
                    acking: true,
                }
            }
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
            Ok(Err(e @ Errno::CONNRESET)) => {
                // The connect succeeded and the upstream reset before the loop saw it: the
                // bytes it sent first are still queued. Pass the reset on like any other.
                self.state = State::Relaying;
                self.begin_abort(Who::Upstream, e, Instant::now());
                Ok(true)
            }
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
