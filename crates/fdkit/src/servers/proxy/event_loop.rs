//! The epoll loop: accept, connect, relay, time out, stop.
//!
//! Connections live in a slab; an epoll token is `generation << 32 | index << 1 | side`, so an
//! event still queued for a connection that closed (and whose slot was reused) in the same
//! batch is recognised and dropped. Accepting happens after the batch's events are handled.

use super::conn::{connect_end, log_line, Conn, End, Serviced, State, Who};
use super::endpoint::peer_text;
use super::listener::Listener;
use super::record::{RecordFile, Recorder, CLIENT_TO_UPSTREAM, UPSTREAM_TO_CLIENT};
use super::relay::{Relay, Side};
use super::resolve::{Resolver, Update};
use super::{ProxyConfig, ProxyStats};
use crate::error::strerror;
use crate::fd::{set_linger_zero, SigpipeGuard};
use crate::servers::listen_epoll::{epoll_with_listener, LISTENER};
use crate::servers::nofile::NofileGuard;
use crate::zerocopy::RESET_DRAIN_STALL;
use rustix::buffer::spare_capacity;
use rustix::event::epoll::{self, EventData, EventFlags};
use rustix::event::Timespec;
use rustix::io::Errno;
use rustix::net::{sockopt, AddressFamily, SocketAddrAny, SocketFlags, SocketType};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// Fds one connection holds: the client, the upstream, two pipes of two ends each.
const FDS_PER_CONNECTION: usize = 6;
/// Extra fds a recorded connection holds: two mirror pipes (one per direction) of two ends
/// each, and the file.
const FDS_PER_RECORDING: usize = 5;
/// Fds kept free for everything else (epoll, the listener, the host program's own).
pub(super) const SPARE_FDS: usize = 32;

/// The fds one connection of `config` holds.
pub(super) fn fds_per_connection(config: &ProxyConfig) -> usize {
    FDS_PER_CONNECTION
        + if config.record.is_some() {
            FDS_PER_RECORDING
        } else {
            0
        }
}

/// How often the checkpoint runs and timeouts are swept.
const TICK: Duration = Duration::from_millis(100);
/// How soon a unix connect refused with `EAGAIN` (backlog full) is tried again.
const RETRY: Duration = Duration::from_millis(5);
/// How soon a reset waiting for the survivor's peer to acknowledge the last bytes looks at its
/// send queue again (no epoll event says "acknowledged").
const ACK_POLL: Duration = Duration::from_millis(5);
/// Events taken from one `epoll_wait`.
const EVENTS: usize = 1024;
/// What every connection socket is registered for, once.
const SOCKET_EVENTS: EventFlags = EventFlags::IN
    .union(EventFlags::OUT)
    .union(EventFlags::RDHUP)
    .union(EventFlags::ET);

const CLIENT: u64 = 0;
const UPSTREAM: u64 = 1;

fn token(idx: usize, gen: u32, side: u64) -> u64 {
    (u64::from(gen) << 32) | ((idx as u64) << 1) | side
}

fn untoken(token: u64) -> (usize, u32, u64) {
    (
        ((token & 0xffff_ffff) >> 1) as usize,
        (token >> 32) as u32,
        token & 1,
    )
}

fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: d.subsec_nanos().into(),
    }
}

/// A slab slot: the generation changes every time its connection closes.
struct Slot {
    gen: u32,
    conn: Option<Box<Conn>>,
}

/// The running proxy. Fields drop in order: connections and the listener close first, the
/// `RLIMIT_NOFILE` and `SIGPIPE` guards restore last.
pub(super) struct EventLoop<'a> {
    epoll: OwnedFd,
    listener: Option<Listener>,
    /// The listener had an event and `accept` has not said `EAGAIN` since.
    listener_ready: bool,
    /// Out of fds: accept again only after this.
    accept_paused_until: Option<Instant>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    live: usize,
    cap: usize,
    config: &'a ProxyConfig,
    /// Where new connections go: `config.upstream`, or the latest answer for its name.
    upstream: SocketAddrAny,
    upstream_family: AddressFamily,
    /// Resolves `config.upstream_name` again in the background.
    resolver: Option<Resolver>,
    next_id: u64,
    stats: ProxyStats,
    /// Connections whose relays ran out of round budget: pumped again next round.
    again: Vec<u64>,
    /// Unix connects that met a full backlog, and when to try them again.
    retry: Vec<u64>,
    next_retry: Instant,
    /// Resets waiting for the survivor's send queue to be acknowledged, and when to look again.
    acking: Vec<u64>,
    next_ack: Instant,
    now: Instant,
    log: &'a mut dyn FnMut(&str),
    _nofile: NofileGuard,
    _sigpipe: SigpipeGuard,
}

impl<'a> EventLoop<'a> {
    /// Blocks `SIGPIPE` on this thread, starts the upstream name's resolver (if any) and
    /// registers the listener with a new epoll set; `cap` is the connection cap that fits
    /// `RLIMIT_NOFILE` (`nofile` puts the old limit back). See epoll_create1(2).
    pub fn new(
        listener: Listener,
        config: &'a ProxyConfig,
        cap: usize,
        nofile: NofileGuard,
        log: &'a mut dyn FnMut(&str),
    ) -> io::Result<Self> {
        let upstream = config.upstream.sockaddr()?;
        let resolver = match (&config.upstream_name, &config.upstream) {
            (Some(name), crate::servers::proxy::Endpoint::Tcp(first)) => {
                Some(Resolver::spawn(name.clone(), vec![*first])?)
            }
            _ => None,
        };
        let epoll = epoll_with_listener(&listener)?;
        let now = Instant::now();
        Ok(EventLoop {
            epoll,
            listener: Some(listener),
            listener_ready: true,
            accept_paused_until: None,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            cap,
            config,
            upstream,
            upstream_family: config.upstream.family(),
            resolver,
            next_id: 0,
            stats: ProxyStats {
                max_connections: cap,
                ..ProxyStats::default()
            },
            again: Vec::new(),
            retry: Vec::new(),
            next_retry: now,
            acking: Vec::new(),
            next_ack: now,
            now,
            log,
            _nofile: nofile,
            _sigpipe: SigpipeGuard::new(),
        })
    }

    /// Runs until `checkpoint` says stop (then `Ok`) or epoll or the listener fail (`Err`);
    /// either way every connection is closed and logged first.
    pub fn run(
        mut self,
        checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
    ) -> io::Result<ProxyStats> {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(EVENTS);
        let mut next_tick = Instant::now() + TICK;
        let outcome = loop {
            let timeout = self.timeout(next_tick);
            events.clear();
            match epoll::wait(
                &self.epoll,
                spare_capacity(&mut events),
                Some(&timespec(timeout)),
            ) {
                Ok(_) => {}
                Err(Errno::INTR) => {
                    if checkpoint().is_err() {
                        break Ok(());
                    }
                    continue;
                }
                Err(e) => break Err(io::Error::from(e)),
            }
            self.now = Instant::now();
            for event in &events {
                let (data, flags) = (event.data, event.flags);
                self.dispatch(data.u64(), flags);
            }
            self.pump_again();
            self.retry_connects();
            self.check_acks();
            if self.now >= next_tick {
                next_tick = self.now + TICK;
                if checkpoint().is_err() {
                    break Ok(());
                }
                self.sweep();
                self.follow_upstream_name();
            }
            if let Err(e) = self.accept_batch() {
                break Err(e);
            }
        };
        self.stop();
        outcome.map(|()| self.stats)
    }

    /// Takes what the resolver found since the last tick: new connections go to the first
    /// address of a changed answer; a failed lookup keeps the address in use. Each is logged.
    fn follow_upstream_name(&mut self) {
        let Some(update) = self.resolver.as_mut().and_then(Resolver::poll) else {
            return;
        };
        let config = self.config;
        let Some(name) = &config.upstream_name else {
            return;
        };
        let current = SocketAddr::try_from(self.upstream.clone()).ok();
        let shown = |a: Option<SocketAddr>| a.map_or_else(String::new, |a| a.to_string());
        match update {
            Update::Addresses(addrs) => {
                let Some(&first) = addrs.first() else {
                    return;
                };
                if Some(first) == current {
                    return;
                }
                (self.log)(&format!(
                    "upstream {}:{} now resolves to {first} (was {}): new connections go there",
                    name.host,
                    name.port,
                    shown(current)
                ));
                self.upstream = SocketAddrAny::from(first);
                self.upstream_family = match first {
                    SocketAddr::V4(_) => AddressFamily::INET,
                    SocketAddr::V6(_) => AddressFamily::INET6,
                };
            }
            Update::Failed(why) => (self.log)(&format!(
                "cannot resolve upstream {}:{} again ({why}): still forwarding to {}",
                name.host,
                name.port,
                shown(current)
            )),
        }
    }

    /// How long `epoll_wait` may sleep: not at all with work queued, never past the next tick.
    fn timeout(&self, next_tick: Instant) -> Duration {
        if !self.again.is_empty() {
            return Duration::ZERO;
        }
        let mut timeout = next_tick.saturating_duration_since(Instant::now());
        if !self.retry.is_empty() {
            timeout = timeout.min(RETRY);
        }
        if !self.acking.is_empty() {
            timeout = timeout.min(ACK_POLL);
        }
        timeout
    }

    fn conn_mut(&mut self, idx: usize, gen: u32) -> Option<&mut Conn> {
        match self.slots.get_mut(idx) {
            Some(slot) if slot.gen == gen => slot.conn.as_deref_mut(),
            _ => None,
        }
    }

    fn dispatch(&mut self, token: u64, flags: EventFlags) {
        if token == LISTENER {
            self.listener_ready = true;
            return;
        }
        let (idx, gen, side) = untoken(token);
        let Some(conn) = self.conn_mut(idx, gen) else {
            return;
        };
        let readable = flags
            .intersects(EventFlags::IN | EventFlags::RDHUP | EventFlags::HUP | EventFlags::ERR);
        let writable = flags.intersects(EventFlags::OUT | EventFlags::HUP | EventFlags::ERR);
        let s = if side == UPSTREAM {
            &mut conn.upstream
        } else {
            &mut conn.client
        };
        s.readable |= readable;
        s.writable |= writable;
        if let State::Connecting { .. } = conn.state {
            if side == UPSTREAM {
                if !writable {
                    return;
                }
                match conn.finish_connect(flags.contains(EventFlags::OUT)) {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(end) => return self.close(idx, end),
                }
            } else if flags.contains(EventFlags::ERR) {
                return self.check_error(idx, gen, side);
            } else {
                return;
            }
        }
        self.service(idx);
        if flags.contains(EventFlags::ERR) {
            self.check_error(idx, gen, side);
        }
    }

    /// A socket reported `EPOLLERR` and servicing did not trip over it: no splice touched it,
    /// because the direction reading it had ended (a reset after a half-close) or waits for the
    /// other side, and nothing was headed its way. Its pending error (`SO_ERROR`) is passed on
    /// now (see [`Conn::abort`]) rather than at the idle timeout. See socket(7).
    fn check_error(&mut self, idx: usize, gen: u32, side: u64) {
        let now = self.now;
        let Some(conn) = self.conn_mut(idx, gen) else {
            return;
        };
        let (fd, who) = if side == UPSTREAM {
            (&conn.upstream.fd, Who::Upstream)
        } else {
            (&conn.client.fd, Who::Client)
        };
        let e = match sockopt::socket_error(fd) {
            Ok(Err(e)) | Err(e) => e,
            Ok(Ok(())) => return,
        };
        match (&conn.state, conn.abort) {
            // Already passing a reset on, and now the survivor failed too: nothing to deliver.
            (_, Some(abort)) if abort.dead != who => {
                self.close(idx, End::Failed(abort.dead, abort.error));
            }
            (_, Some(_)) => {}
            (State::Relaying, None) => {
                let serviced = conn.abort(who, e, now);
                self.serviced(idx, serviced);
            }
            (State::Connecting { .. }, None) => self.close(idx, End::Failed(who, e)),
        }
    }

    fn service(&mut self, idx: usize) {
        let now = self.now;
        let slot = &mut self.slots[idx];
        let Some(conn) = slot.conn.as_deref_mut() else {
            return;
        };
        let serviced = conn.service(now);
        self.serviced(idx, serviced);
    }

    /// Queues or closes a connection after servicing, as the outcome says.
    fn serviced(&mut self, idx: usize, serviced: Serviced) {
        let slot = &mut self.slots[idx];
        let Some(conn) = slot.conn.as_deref_mut() else {
            return;
        };
        match serviced {
            Serviced::Open { more, acking } => {
                if more && !conn.queued {
                    conn.queued = true;
                    self.again.push(token(idx, slot.gen, CLIENT));
                }
                if acking && !conn.acking {
                    conn.acking = true;
                    self.acking.push(token(idx, slot.gen, CLIENT));
                }
            }
            Serviced::Closed(end) => self.close(idx, end),
        }
    }

    /// Looks again at resets waiting for their last bytes to be acknowledged.
    fn check_acks(&mut self) {
        if self.acking.is_empty() || self.now < self.next_ack {
            return;
        }
        self.next_ack = self.now + ACK_POLL;
        for tok in std::mem::take(&mut self.acking) {
            let (idx, gen, _) = untoken(tok);
            if let Some(conn) = self.conn_mut(idx, gen) {
                conn.acking = false;
                self.service(idx);
            }
        }
    }

    fn pump_again(&mut self) {
        if self.again.is_empty() {
            return;
        }
        let mut batch = std::mem::take(&mut self.again);
        for &tok in &batch {
            let (idx, gen, _) = untoken(tok);
            if let Some(conn) = self.conn_mut(idx, gen) {
                conn.queued = false;
                self.service(idx);
            }
        }
        if self.again.is_empty() {
            batch.clear();
            self.again = batch;
        }
    }

    fn accept_batch(&mut self) -> io::Result<()> {
        if let Some(until) = self.accept_paused_until {
            if self.now < until {
                return Ok(());
            }
            self.accept_paused_until = None;
        }
        while self.listener_ready && self.live < self.cap {
            let Some(listener) = &self.listener else {
                return Ok(());
            };
            match rustix::net::acceptfrom_with(
                listener,
                SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            ) {
                Ok((fd, peer)) => self.open(fd, peer.as_ref()),
                Err(Errno::AGAIN) => self.listener_ready = false,
                // The client gave up before we got to it, or a firewall said no: next one.
                Err(Errno::INTR | Errno::CONNABORTED | Errno::PROTO | Errno::PERM) => {}
                Err(e @ (Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM)) => {
                    // Out of fds or memory: the pending clients wait in the backlog until a
                    // connection closes or a tick passes, instead of spinning on the error.
                    (self.log)(&format!(
                        "accept paused: {} ({} connection{} open)",
                        strerror(e),
                        self.live,
                        if self.live == 1 { "" } else { "s" }
                    ));
                    self.accept_paused_until = Some(self.now + TICK);
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Sets up an accepted client: upstream socket, pipes, recording, epoll, connect.
    fn open(&mut self, client: OwnedFd, peer: Option<&SocketAddrAny>) {
        self.next_id += 1;
        let id = self.next_id;
        let peer = peer_text(peer);
        let conn = match self.build(id, peer, client) {
            Ok(conn) => conn,
            Err((peer, end)) => {
                self.stats.connections += 1;
                if end.is_upstream_failure() {
                    self.stats.upstream_failures += 1;
                }
                (self.log)(&log_line(id, &peer, (0, 0), Duration::ZERO, &end));
                return;
            }
        };
        let idx = match self.free.pop() {
            Some(idx) => idx,
            None => {
                self.slots.push(Slot { gen: 0, conn: None });
                self.slots.len() - 1
            }
        };
        let gen = self.slots[idx].gen;
        let client_token = token(idx, gen, CLIENT);
        let registered = epoll::add(
            &self.epoll,
            &conn.client.fd,
            EventData::new_u64(client_token),
            SOCKET_EVENTS,
        );
        self.slots[idx].conn = Some(Box::new(conn));
        self.live += 1;
        self.stats.peak_connections = self.stats.peak_connections.max(self.live);
        match registered {
            Ok(()) => self.connect_upstream(idx),
            Err(e) => self.close(idx, End::Setup(e)),
        }
    }

    fn build(&self, id: u64, peer: String, client: OwnedFd) -> Result<Conn, (String, End)> {
        let config = self.config;
        if config.listen.is_tcp() {
            // Relayed bytes must not wait for Nagle: the endpoints already chose their sizes.
            let _ = sockopt::set_tcp_nodelay(&client, true);
        }
        let built = (|| {
            let upstream = rustix::net::socket_with(
                self.upstream_family,
                SocketType::STREAM,
                SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
                None,
            )
            .map_err(End::Setup)?;
            if config.upstream.is_tcp() {
                let _ = sockopt::set_tcp_nodelay(&upstream, true);
            }
            let mut up = Relay::new(config.pipe_size).map_err(End::Setup)?;
            let mut down = Relay::new(config.pipe_size).map_err(End::Setup)?;
            if let Some(base) = &config.record {
                let file = RecordFile::create(base, id).map_err(End::Record)?;
                let record = |direction, relay: &Relay| {
                    Recorder::create(&file, direction, relay.pipe_w()).map_err(End::Record)
                };
                up.record_into(record(CLIENT_TO_UPSTREAM, &up)?);
                down.record_into(record(UPSTREAM_TO_CLIENT, &down)?);
            }
            Ok((upstream, up, down))
        })();
        let (upstream, up, down) = match built {
            Ok(parts) => parts,
            Err(end) => return Err((peer, end)),
        };
        Ok(Conn {
            id,
            peer,
            started: self.now,
            last_active: self.now,
            state: State::Connecting {
                deadline: self.now + config.connect_timeout,
                retry: false,
            },
            client: Side::new(client),
            upstream: Side::new(upstream),
            up,
            down,
            queued: false,
            abort: None,
            acking: false,
        })
    }

    /// `connect(2)` to the upstream, then registers the socket (after, so that epoll never
    /// reports the unconnected socket's `EPOLLHUP`).
    fn connect_upstream(&mut self, idx: usize) {
        let gen = self.slots[idx].gen;
        let upstream_token = token(idx, gen, UPSTREAM);
        let Some(conn) = self.slots[idx].conn.as_deref_mut() else {
            return;
        };
        let connected = match rustix::net::connect(&conn.upstream.fd, &self.upstream) {
            Ok(()) => true,
            // A non-blocking connect cannot be interrupted mid-way; treat it as in flight.
            Err(Errno::INPROGRESS | Errno::INTR) => false,
            Err(Errno::AGAIN) => {
                // A unix listener with a full backlog: the socket is still unconnected.
                if let State::Connecting { retry, .. } = &mut conn.state {
                    *retry = true;
                }
                self.retry.push(upstream_token);
                return;
            }
            Err(e) => return self.close(idx, connect_end(e)),
        };
        if let State::Connecting { retry, .. } = &mut conn.state {
            *retry = false;
        }
        if let Err(e) = epoll::add(
            &self.epoll,
            &conn.upstream.fd,
            EventData::new_u64(upstream_token),
            SOCKET_EVENTS,
        ) {
            return self.close(idx, End::Setup(e));
        }
        if connected {
            conn.state = State::Relaying;
            conn.upstream.writable = true;
            self.service(idx);
        }
    }

    fn retry_connects(&mut self) {
        if self.retry.is_empty() || self.now < self.next_retry {
            return;
        }
        self.next_retry = self.now + RETRY;
        for tok in std::mem::take(&mut self.retry) {
            let (idx, gen, _) = untoken(tok);
            if self.conn_mut(idx, gen).is_some() {
                self.connect_upstream(idx);
            }
        }
    }

    /// Closes connections past their connect deadline or idle timeout, and resets whose
    /// survivor took nothing for the reset stall (see [`RESET_DRAIN_STALL`]).
    fn sweep(&mut self) {
        let now = self.now;
        let idle = self.config.idle_timeout;
        let stall = idle.map_or(RESET_DRAIN_STALL, |t| t.min(RESET_DRAIN_STALL));
        for idx in 0..self.slots.len() {
            let end = match self.slots[idx].conn.as_deref() {
                Some(
                    c @ Conn {
                        abort: Some(abort), ..
                    },
                ) if now.saturating_duration_since(c.last_active) >= stall => {
                    End::Failed(abort.dead, abort.error)
                }
                Some(Conn { abort: Some(_), .. }) => continue,
                Some(Conn {
                    state: State::Connecting { deadline, .. },
                    ..
                }) if now >= *deadline => End::ConnectTimeout,
                Some(
                    c @ Conn {
                        state: State::Relaying,
                        ..
                    },
                ) if idle.is_some_and(|t| now.saturating_duration_since(c.last_active) >= t) => {
                    End::IdleTimeout
                }
                _ => continue,
            };
            self.close(idx, end);
        }
    }

    fn close(&mut self, idx: usize, end: End) {
        let slot = &mut self.slots[idx];
        let Some(conn) = slot.conn.take() else {
            return;
        };
        slot.gen = slot.gen.wrapping_add(1);
        self.free.push(idx);
        self.live -= 1;
        self.stats.connections += 1;
        self.stats.bytes_up += conn.up.moved;
        self.stats.bytes_down += conn.down.moved;
        if end.is_upstream_failure() {
            self.stats.upstream_failures += 1;
        }
        (self.log)(&conn.log_line(&end, self.now));
        if end.is_abortive() {
            // A failure is passed on as a reset, never as a FIN that would make a cut (or
            // never-started) stream look complete: both sockets close abortively. See
            // socket(7) (SO_LINGER).
            let _ = set_linger_zero(conn.client.fd.as_fd());
            let _ = set_linger_zero(conn.upstream.fd.as_fd());
        }
        // Dropping `conn` closes both sockets and every pipe; closing removes them from epoll.
    }

    /// Stops accepting, closes the listener, then every connection.
    fn stop(&mut self) {
        self.listener = None;
        self.now = Instant::now();
        for idx in 0..self.slots.len() {
            self.close(idx, End::Stopped);
        }
    }
}
