//! The epoll engine: one edge-triggered epoll set, non-blocking sockets.
//!
//! Per request on a kept-alive connection: one `recv`, one `sendmsg` (head and mapped body),
//! and a share of one `epoll_wait`. A short `recv` means the socket is drained (an edge comes
//! for anything that arrives later), so no extra `recv` to see `EAGAIN`.

use super::clock::Clock;
use super::conn::{Conn, INBUF_MAX, LINGER, RECV_ROOM};
use super::files::FileCache;
use super::out::MAX_SEGS;
use super::respond::Ctx;
use super::send::{send_out, Sent};
use super::slab::Slab;
use super::{ServeStats, Shared};
use crate::servers::listen_epoll::{epoll_with_listener, LISTENER};
use rustix::event::epoll::{self, EventData, EventFlags};
use rustix::event::Timespec;
use rustix::io::Errno;
use rustix::net::{sockopt, RecvFlags, Shutdown, SocketFlags};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(100);
const EVENTS: usize = 512;

fn token(idx: usize, gen: u32) -> u64 {
    (u64::from(gen) << 32) | idx as u64
}

struct Epoll<'a> {
    epoll: OwnedFd,
    listener: Option<OwnedFd>,
    listener_ready: bool,
    conns: Slab<Conn>,
    live: usize,
    files: FileCache,
    clock: Clock,
    iovs: Vec<libc::iovec>,
    shared: Shared<'a>,
    stopping: bool,
}

/// Runs the epoll engine until `checkpoint` says stop, then finishes in-flight responses
/// (at most the grace period) and closes everything.
pub(super) fn run(
    listener: OwnedFd,
    files: FileCache,
    shared: Shared<'_>,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> io::Result<ServeStats> {
    let epoll = epoll_with_listener(&listener)?;
    let mut e = Epoll {
        epoll,
        listener: Some(listener),
        listener_ready: true,
        conns: Slab::new(),
        live: 0,
        files,
        clock: Clock::new(),
        iovs: Vec::with_capacity(MAX_SEGS),
        shared,
        stopping: false,
    };
    e.run(checkpoint)
}

impl Epoll<'_> {
    fn run(&mut self, checkpoint: &mut dyn FnMut() -> Result<(), Errno>) -> io::Result<ServeStats> {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(EVENTS);
        let mut next_tick = Instant::now() + TICK;
        let mut grace_end = None;
        loop {
            let timeout = next_tick.saturating_duration_since(Instant::now());
            events.clear();
            let ts = Timespec {
                tv_sec: timeout.as_secs() as i64,
                tv_nsec: timeout.subsec_nanos().into(),
            };
            match epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&ts),
            ) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            self.clock.tick();
            for ev in &events {
                let t = ev.data.u64();
                if t == LISTENER {
                    self.listener_ready = true;
                } else {
                    let (idx, gen) = ((t & 0xffff_ffff) as usize, (t >> 32) as u32);
                    if let Some(c) = self.conns.get_mut(idx, gen) {
                        c.readable = true;
                        let flags = { ev.flags }; // a copy: the kernel struct is packed
                        if flags.intersects(EventFlags::RDHUP | EventFlags::HUP) {
                            c.peer_closed = true;
                        }
                        self.service(idx, gen);
                    }
                }
            }
            self.accept();
            if self.clock.now >= next_tick {
                next_tick = self.clock.now + TICK;
                self.shared.tick();
                // Accept once per tick even without an edge: after a failed accept (out of
                // fds), the clients already in the backlog announce themselves no more.
                self.listener_ready = true;
                if !self.stopping && checkpoint().is_err() {
                    self.stop();
                    grace_end = Some(self.clock.now + self.shared.grace);
                }
                self.sweep(grace_end);
                if self.stopping && self.live == 0 {
                    break;
                }
            }
        }
        Ok(self.shared.stats)
    }

    fn accept(&mut self) {
        while self.listener_ready {
            let Some(listener) = &self.listener else {
                return;
            };
            match rustix::net::accept_with(listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC) {
                Ok(fd) => {
                    self.shared.stats.connections += 1;
                    if self.live >= self.shared.cap {
                        self.shared.stats.refused += 1;
                        continue; // dropped: closed at once
                    }
                    let _ = sockopt::set_tcp_nodelay(&fd, true);
                    let mut conn = Conn::new(fd, self.clock.now, self.shared.idle);
                    if self.shared.access.is_some() {
                        conn.log_peer();
                    }
                    let (idx, gen) = self.conns.insert(conn);
                    let c = self.conns.get_mut(idx, gen).expect("just inserted");
                    let flags =
                        EventFlags::IN | EventFlags::OUT | EventFlags::RDHUP | EventFlags::ET;
                    if epoll::add(
                        &self.epoll,
                        &c.fd,
                        EventData::new_u64(token(idx, gen)),
                        flags,
                    )
                    .is_err()
                    {
                        self.conns.remove(idx);
                        continue;
                    }
                    self.live += 1;
                    self.shared.stats.peak_connections =
                        self.shared.stats.peak_connections.max(self.live);
                }
                Err(Errno::AGAIN) => self.listener_ready = false,
                Err(Errno::INTR | Errno::CONNABORTED | Errno::PROTO | Errno::PERM) => {}
                Err(e) => {
                    // Out of fds or memory: the cache gives fds back and accept goes on, or
                    // the backlog waits for the next tick (`Shared::accept_failed`).
                    if !self.shared.accept_failed(e, self.live, &mut self.files) {
                        self.listener_ready = false;
                        return;
                    }
                }
            }
        }
    }

    /// Moves a connection forward as far as it can go without blocking.
    fn service(&mut self, idx: usize, gen: u32) {
        let idle = self.shared.idle;
        let stopping = self.stopping;
        let Some(c) = self.conns.get_mut(idx, gen) else {
            return;
        };
        let mut ctx = Ctx {
            files: &mut self.files,
            date: &self.clock.date,
            now: self.clock.now,
            secs: self.clock.secs,
            log: self.shared.access.as_mut(),
        };
        let close = loop {
            if !c.out.is_empty() {
                let mut progress = false;
                match send_out(c.fd.as_fd(), &mut c.out, &mut self.iovs, &mut progress) {
                    Sent::Done => {}
                    Sent::Blocked => {
                        if progress {
                            c.deadline = ctx.now + idle;
                        }
                        break false;
                    }
                    Sent::Failed => break true,
                }
                let close_after = c.out.close_after;
                c.out.clear();
                if close_after {
                    let _ = rustix::net::shutdown(&c.fd, Shutdown::Write);
                    c.lingering = true;
                    c.out.close_after = false;
                    c.deadline = ctx.now + LINGER;
                    c.inbuf.clear();
                } else {
                    c.deadline = ctx.now + idle;
                }
            }
            if c.lingering {
                let mut sink = [0u8; 4096];
                loop {
                    match rustix::net::recv(&c.fd, &mut sink, RecvFlags::empty()) {
                        Ok((0, _)) => break,
                        Ok(_) | Err(Errno::INTR) => {}
                        Err(Errno::AGAIN) => return,
                        Err(_) => break,
                    }
                }
                break true;
            }
            let n = c.fill(&mut ctx, stopping);
            if n > 0 {
                self.shared.stats.requests += n as u64;
                continue;
            }
            if c.eof || (stopping && !c.has_partial()) {
                break true;
            }
            if !c.readable || c.inbuf.len() >= INBUF_MAX {
                break false;
            }
            c.receiving(ctx.now, idle);
            if c.inbuf.capacity() - c.inbuf.len() < 1024 {
                c.inbuf.reserve(RECV_ROOM);
            }
            let room = c.inbuf.capacity() - c.inbuf.len();
            match rustix::net::recv(
                &c.fd,
                rustix::buffer::spare_capacity(&mut c.inbuf),
                RecvFlags::empty(),
            ) {
                Ok((0, _)) => c.eof = true,
                Ok((n, _)) => {
                    // A short read drained the socket, unless the peer's FIN is still to be
                    // read: with edge triggering no further event would announce it.
                    if n < room && !c.peer_closed {
                        c.readable = false;
                    }
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => {
                    c.readable = false;
                }
                Err(_) => break true,
            }
        };
        if close {
            self.close(idx);
        }
    }

    fn close(&mut self, idx: usize) {
        if self.conns.remove(idx).is_some() {
            self.live -= 1;
        }
    }

    /// Drops connections past their deadline (or every one, past the stop's grace).
    fn sweep(&mut self, grace_end: Option<Instant>) {
        let now = self.clock.now;
        let all = grace_end.is_some_and(|g| now >= g);
        for idx in 0..self.conns.slots.len() {
            let due = match self.conns.slots[idx].val.as_deref() {
                Some(c) => all || now >= c.deadline,
                None => false,
            };
            if due {
                if !all
                    && !self.conns.slots[idx]
                        .val
                        .as_deref()
                        .is_some_and(|c| c.lingering)
                {
                    self.shared.stats.timeouts += 1;
                }
                self.close(idx);
            }
        }
    }

    /// Stops accepting; idle connections close now, busy ones after their batch.
    fn stop(&mut self) {
        self.stopping = true;
        self.listener = None;
        for idx in 0..self.conns.slots.len() {
            let gen = self.conns.slots[idx].gen;
            if self.conns.slots[idx].val.is_some() {
                self.service(idx, gen);
            }
        }
    }
}
