//! The io_uring engine: one ring per worker, `SINGLE_ISSUER | DEFER_TASKRUN` when the kernel
//! has it, multishot accept, multishot receive on a provided-buffer ring, `sendmsg` of each
//! batch (heads and mapped bodies) as a ring op. One `io_uring_enter` per loop round submits
//! every queued op and waits for completions.
//!
//! Large bodies go out with `sendfile(2)` from the loop, with a `POLL_ADD(POLLOUT)` ring op
//! when the socket is full. Not `IORING_OP_SPLICE`: the kernel always runs splice requests on
//! io-wq worker threads (`REQ_F_FORCE_ASYNC`), a thread handoff per op that costs more CPU
//! than the data copy it saves and can block a worker per connection.
//!
//! Closing a connection shuts its socket down (which ends its receive, send or poll in
//! flight) and frees it once its last op has completed, so the kernel never sees freed
//! memory. At the end, whatever is still in flight after [`DRAIN`] is leaked, not freed.

use super::clock::Clock;
use super::conn::{Conn, INBUF_MAX, LINGER};
use super::files::FileCache;
use super::out::MAX_SEGS;
use super::respond::Ctx;
use super::send::{msghdr, send_out, Sent};
use super::slab::Slab;
use super::{ServeStats, Shared};
use crate::uring::{
    drain, enter_timeout, explain, leak, missing_op, BufRing, Built, InFlight, KernelVersion, Setup,
};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use rustix::io::Errno;
use rustix::net::{sockopt, Shutdown};
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(100);
/// How long the end of a run waits for the ops still in flight.
const DRAIN: Duration = Duration::from_secs(2);
const ENTRIES: u32 = 1024;
const BGID: u16 = 0;
const BUFFERS: u16 = 1024;
const BUFFER_SIZE: u32 = 4096;

const ACCEPT: u64 = 1;
const RECV: u64 = 2;
const SEND: u64 = 3;
const POLL: u64 = 4;
const CANCEL: u64 = 5;

fn ud(kind: u64, idx: usize, gen: u32) -> u64 {
    ((idx as u64) << 32) | (u64::from(gen & 0x00ff_ffff) << 8) | kind
}

/// A connection and the ring-facing state of it.
struct UConn {
    conn: Conn,
    /// Ops in flight that name this connection (a multishot receive counts once).
    inflight: u32,
    recv_armed: bool,
    sending: bool,
    /// Shut down; freed when `inflight` reaches 0.
    closing: bool,
    msg: libc::msghdr,
    iovs: Vec<libc::iovec>,
}

/// The ring and its buffer ring. Field order is drop order: the ring is closed before the
/// buffers it was given are freed.
pub(super) struct UringSetup {
    ring: IoUring,
    bufs: BufRing,
}

/// Whether io_uring can serve here, without binding any ring to this thread: the kernel
/// version (multishot receive), the probe, and a plain ring with a buffer ring registered.
/// The reason when not.
pub(super) fn check() -> Result<(), String> {
    setup_with(false).map(drop)
}

/// Sets the serving ring up (`SINGLE_ISSUER | DEFER_TASKRUN` when accepted: the ring then
/// belongs to this thread, and its teardown may interrupt this thread's blocking calls, so
/// only the thread that serves creates it) and registers the provided-buffer ring.
/// See io_uring_setup(2), io_uring_register_buf_ring(3).
pub(super) fn setup() -> Result<UringSetup, String> {
    setup_with(true)
}

/// The ops the engine uses, each by its name in a refusal.
const OPS: &[(&str, u8)] = &[
    ("accept", opcode::AcceptMulti::CODE),
    ("recv", opcode::RecvMulti::CODE),
    ("sendmsg", opcode::SendMsg::CODE),
    ("poll_add", opcode::PollAdd::CODE),
    ("async_cancel", opcode::AsyncCancel::CODE),
];

fn setup_with(defer_taskrun: bool) -> Result<UringSetup, String> {
    KernelVersion::running().check_min("multishot receive")?;
    // A failed setup says why in the probe's words (seccomp, the sysctl, ENOSYS).
    let Built { ring, .. } = Setup::new(ENTRIES)
        .cq_entries(Some(ENTRIES * 8))
        .defer_taskrun(if defer_taskrun { None } else { Some(false) })
        .build()
        .map_err(explain)?;
    match missing_op(&ring, OPS) {
        Err(e) => return Err(format!("IORING_REGISTER_PROBE: {e}")),
        Ok(Some(name)) => return Err(format!("the kernel lacks the io_uring {name} op")),
        Ok(None) => {}
    }
    if !ring.params().is_feature_ext_arg() || !ring.params().is_feature_nodrop() {
        return Err("the kernel lacks IORING_FEAT_EXT_ARG or NODROP".into());
    }
    let mut bufs = BufRing::new(BUFFERS, BUFFER_SIZE).map_err(|e| e.to_string())?;
    // SAFETY: `bufs` goes into `UringSetup` beside the ring, and from there into the engine,
    // which drops it only after the ring (field order) once nothing is in flight, or leaks it
    // (`drain`).
    unsafe { bufs.register(&ring, BGID) }
        .map_err(|e| format!("io_uring_register_buf_ring: {e}"))?;
    Ok(UringSetup { ring, bufs })
}

struct Uring<'a> {
    ring: IoUring,
    bufs: BufRing,
    listener: Option<OwnedFd>,
    accept_armed: bool,
    conns: Slab<UConn>,
    live: usize,
    files: FileCache,
    clock: Clock,
    shared: Shared<'a>,
    stopping: bool,
    cqes: Vec<(u64, i32, u32)>,
    scratch: Vec<u8>,
}

/// Runs the io_uring engine until `checkpoint` says stop, then finishes in-flight responses
/// (at most the grace period) and closes everything.
pub(super) fn run(
    setup: UringSetup,
    listener: OwnedFd,
    files: FileCache,
    shared: Shared<'_>,
    checkpoint: &mut dyn FnMut() -> Result<(), Errno>,
) -> io::Result<ServeStats> {
    let UringSetup { ring, bufs } = setup;
    let mut u = Uring {
        ring,
        bufs,
        listener: Some(listener),
        accept_armed: false,
        conns: Slab::new(),
        live: 0,
        files,
        clock: Clock::new(),
        shared,
        stopping: false,
        cqes: Vec::with_capacity(1024),
        scratch: Vec::with_capacity(BUFFER_SIZE as usize),
    };
    let result = u.run(checkpoint);
    u.finish();
    result
}

impl Uring<'_> {
    fn push(&mut self, entry: squeue::Entry) {
        // SAFETY: every pointer an entry carries (a connection's msghdr and iovecs, the heads
        // and mappings they point to) lives in a boxed connection that is freed only after
        // its op's last completion (`inflight`), or is leaked at the end.
        while unsafe { self.ring.submission().push(&entry) }.is_err() {
            if let Err(e) = self.ring.submit() {
                if e.raw_os_error() != Some(libc::EINTR) && e.raw_os_error() != Some(libc::EBUSY) {
                    (self.shared.log)(&format!("io_uring_enter: {e}"));
                    break;
                }
            }
        }
    }

    fn arm_accept(&mut self) {
        let Some(l) = &self.listener else {
            return;
        };
        let e = opcode::AcceptMulti::new(types::Fd(l.as_raw_fd()))
            .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            .build()
            .user_data(ud(ACCEPT, 0, 0));
        self.push(e);
        self.accept_armed = true;
    }

    fn run(&mut self, checkpoint: &mut dyn FnMut() -> Result<(), Errno>) -> io::Result<ServeStats> {
        self.arm_accept();
        let mut next_tick = Instant::now() + TICK;
        let mut grace_end = None;
        loop {
            let timeout = next_tick.saturating_duration_since(Instant::now());
            self.enter(timeout)?;
            self.clock.tick();
            self.reap();
            if self.clock.now >= next_tick {
                next_tick = self.clock.now + TICK;
                self.shared.tick();
                if !self.stopping && checkpoint().is_err() {
                    self.stop();
                    grace_end = Some(self.clock.now + self.shared.grace);
                }
                if !self.stopping && !self.accept_armed {
                    self.arm_accept();
                }
                self.sweep(grace_end);
                if self.stopping && self.live == 0 {
                    break;
                }
            }
        }
        Ok(self.shared.stats)
    }

    /// Submits everything queued and waits (at most `timeout`) for one completion.
    fn enter(&mut self, timeout: Duration) -> io::Result<()> {
        match enter_timeout(&self.ring, 1, timeout.max(Duration::from_micros(1))) {
            Ok(()) | Err(Errno::INTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn reap(&mut self) {
        loop {
            self.cqes.clear();
            self.cqes.extend(
                self.ring
                    .completion()
                    .map(|c| (c.user_data(), c.result(), c.flags())),
            );
            if self.cqes.is_empty() {
                return;
            }
            let cqes = std::mem::take(&mut self.cqes);
            for &(data, res, flags) in &cqes {
                self.complete(data, res, flags);
            }
            self.cqes = cqes;
        }
    }

    fn complete(&mut self, data: u64, res: i32, flags: u32) {
        let kind = data & 0xff;
        if kind == ACCEPT {
            return self.accepted(res, flags);
        }
        if kind == CANCEL {
            return;
        }
        let idx = (data >> 32) as usize;
        let gen = ((data >> 8) & 0x00ff_ffff) as u32;
        let Some(slot) = self.conns.slots.get(idx) else {
            return;
        };
        if slot.gen & 0x00ff_ffff != gen || slot.val.is_none() {
            return;
        }
        match kind {
            RECV => self.received(idx, res, flags),
            SEND => self.sent(idx, res),
            POLL => self.polled(idx),
            _ => {}
        }
    }

    fn conn(&mut self, idx: usize) -> &mut UConn {
        self.conns.slots[idx].val.as_deref_mut().expect("live slot")
    }

    fn accepted(&mut self, res: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accept_armed = false;
        }
        if res < 0 {
            // An error ends the multishot accept. A client's own error: arm it again now. Out
            // of fds: the cache gives fds back and it is armed again now, or at the next tick
            // (`Shared::accept_failed`).
            let again = match -res {
                libc::ECANCELED => false,
                libc::ECONNABORTED | libc::EINTR | libc::EPROTO | libc::EPERM => true,
                e => {
                    let e = Errno::from_raw_os_error(e);
                    self.shared.accept_failed(e, self.live, &mut self.files)
                }
            };
            if again && !self.accept_armed && !self.stopping {
                self.arm_accept();
            }
            return;
        }
        // SAFETY: a successful accept completion's result is a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(res as RawFd) };
        self.shared.stats.connections += 1;
        if self.live >= self.shared.cap || self.stopping {
            self.shared.stats.refused += 1;
            return; // closed at once
        }
        let _ = sockopt::set_tcp_nodelay(&fd, true);
        let raw = fd.as_raw_fd();
        let mut conn = Conn::new(fd, self.clock.now, self.shared.idle);
        if self.shared.access.is_some() {
            conn.log_peer();
        }
        let conn = UConn {
            conn,
            inflight: 0,
            recv_armed: false,
            sending: false,
            closing: false,
            msg: msghdr(&mut []),
            iovs: Vec::with_capacity(MAX_SEGS),
        };
        let (idx, _) = self.conns.insert(conn);
        self.live += 1;
        self.shared.stats.peak_connections = self.shared.stats.peak_connections.max(self.live);
        self.arm_recv(idx, raw);
    }

    fn arm_recv(&mut self, idx: usize, raw: RawFd) {
        let gen = self.conns.slots[idx].gen;
        let e = opcode::RecvMulti::new(types::Fd(raw), BGID)
            .build()
            .user_data(ud(RECV, idx, gen));
        self.push(e);
        let c = self.conn(idx);
        c.inflight += 1;
        c.recv_armed = true;
    }

    fn received(&mut self, idx: usize, res: i32, flags: u32) {
        let now = self.clock.now;
        let idle = self.shared.idle;
        let bid = cqueue::buffer_select(flags);
        let more = cqueue::more(flags);
        let Uring {
            conns,
            bufs,
            scratch,
            ..
        } = self;
        let c = conns.slots[idx].val.as_deref_mut().expect("live slot");
        if !more {
            c.recv_armed = false;
            c.inflight -= 1;
        }
        if res > 0 {
            if let Some(bid) = bid {
                if c.closing || c.conn.lingering {
                    scratch.clear();
                    bufs.take_into(bid, res as usize, scratch);
                } else {
                    c.conn.receiving(now, idle);
                    bufs.take_into(bid, res as usize, &mut c.conn.inbuf);
                }
            }
        } else if res == 0 {
            c.conn.eof = true;
        } else if res != -libc::ENOBUFS {
            c.conn.eof = true;
            if !c.closing {
                return self.close(idx);
            }
        }
        if c.closing {
            return self.maybe_free(idx);
        }
        if c.conn.lingering && c.conn.eof {
            return self.close(idx);
        }
        if c.conn.inbuf.len() > INBUF_MAX * 16 {
            // A client pipelining far ahead of what it reads: stop it.
            return self.close(idx);
        }
        if !c.recv_armed && !c.conn.eof {
            let raw = c.conn.fd.as_raw_fd();
            self.arm_recv(idx, raw);
        }
        self.drive(idx);
    }

    /// Starts the next batch when none is being sent.
    fn drive(&mut self, idx: usize) {
        let stopping = self.stopping;
        let Uring {
            conns,
            files,
            clock,
            shared,
            ..
        } = self;
        let c = conns.slots[idx].val.as_deref_mut().expect("live slot");
        if c.closing || c.sending || c.conn.lingering || !c.conn.out.is_empty() {
            return;
        }
        let mut ctx = Ctx {
            files,
            date: &clock.date,
            now: clock.now,
            secs: clock.secs,
            log: shared.access.as_mut(),
        };
        let n = c.conn.fill(&mut ctx, stopping);
        shared.stats.requests += n as u64;
        if n == 0 {
            if c.conn.eof || (stopping && !c.conn.has_partial()) {
                self.close(idx);
            }
            return;
        }
        self.send(idx);
    }

    /// Queues a `sendmsg` of the batch's unsent segments; a batch that ends in a large
    /// file goes out from the loop instead (`sendmsg` + `sendfile`, see `send_tail`).
    fn send(&mut self, idx: usize) {
        let gen = self.conns.slots[idx].gen;
        let c = self.conn(idx);
        if !c.conn.out.segs_pending() || c.conn.out.has_tail() {
            return self.send_tail(idx);
        }
        c.conn.out.iovecs(&mut c.iovs);
        c.msg = msghdr(&mut c.iovs);
        let e = opcode::SendMsg::new(types::Fd(c.conn.fd.as_raw_fd()), &c.msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(ud(SEND, idx, gen));
        c.inflight += 1;
        c.sending = true;
        self.push(e);
    }

    fn sent(&mut self, idx: usize, res: i32) {
        let now = self.clock.now;
        let idle = self.shared.idle;
        let c = self.conn(idx);
        c.inflight -= 1;
        c.sending = false;
        if c.closing {
            return self.maybe_free(idx);
        }
        if res <= 0 {
            return self.close(idx);
        }
        c.conn.out.sent += res as u64;
        c.conn.deadline = now + idle;
        self.send(idx);
    }

    fn polled(&mut self, idx: usize) {
        let c = self.conn(idx);
        c.inflight -= 1;
        if c.closing {
            return self.maybe_free(idx);
        }
        self.send_tail(idx);
    }

    /// A batch ending in a large file, from the loop: the head (and any small responses
    /// before it) with `sendmsg`, then `sendfile`, as the epoll engine does. A ring
    /// `SendMsg` for the head would cost a completion round trip per response before the body
    /// could start, more CPU per large request than nginx spends. A full socket
    /// queues a `POLL_ADD(POLLOUT)`.
    fn send_tail(&mut self, idx: usize) {
        let now = self.clock.now;
        let idle = self.shared.idle;
        let gen = self.conns.slots[idx].gen;
        let c = self.conn(idx);
        let mut progress = false;
        let r = send_out(
            c.conn.fd.as_fd(),
            &mut c.conn.out,
            &mut c.iovs,
            &mut progress,
        );
        if progress {
            c.conn.deadline = now + idle;
        }
        match r {
            Sent::Done => self.batch_done(idx),
            Sent::Failed => self.close(idx),
            Sent::Blocked => {
                let e =
                    opcode::PollAdd::new(types::Fd(c.conn.fd.as_raw_fd()), libc::POLLOUT as u32)
                        .build()
                        .user_data(ud(POLL, idx, gen));
                c.inflight += 1;
                self.push(e);
            }
        }
    }

    fn batch_done(&mut self, idx: usize) {
        let now = self.clock.now;
        let idle = self.shared.idle;
        let c = self.conn(idx);
        let close_after = c.conn.out.close_after;
        c.conn.out.clear();
        if close_after {
            let _ = rustix::net::shutdown(&c.conn.fd, Shutdown::Write);
            c.conn.lingering = true;
            c.conn.out.close_after = false;
            c.conn.deadline = now + LINGER;
            c.conn.inbuf.clear();
            if c.conn.eof {
                self.close(idx);
            }
            return;
        }
        c.conn.deadline = now + idle;
        self.drive(idx);
    }

    /// Shuts the socket down (ending its ops in flight) and frees it once they completed.
    fn close(&mut self, idx: usize) {
        let c = self.conn(idx);
        if c.closing {
            return;
        }
        c.closing = true;
        let _ = rustix::net::shutdown(&c.conn.fd, Shutdown::Both);
        self.live -= 1;
        self.maybe_free(idx);
    }

    fn maybe_free(&mut self, idx: usize) {
        if self.conn(idx).inflight == 0 {
            self.conns.remove(idx);
        }
    }

    fn sweep(&mut self, grace_end: Option<Instant>) {
        let now = self.clock.now;
        let all = grace_end.is_some_and(|g| now >= g);
        for idx in 0..self.conns.slots.len() {
            let (due, lingering) = match self.conns.slots[idx].val.as_deref() {
                Some(c) if !c.closing => (all || now >= c.conn.deadline, c.conn.lingering),
                _ => continue,
            };
            if due {
                if !all && !lingering {
                    self.shared.stats.timeouts += 1;
                }
                self.close(idx);
            }
        }
    }

    /// Stops accepting (cancels the multishot accept, closes the listener); idle connections
    /// close now, busy ones after their batch.
    fn stop(&mut self) {
        self.stopping = true;
        if self.accept_armed {
            let e = opcode::AsyncCancel::new(ud(ACCEPT, 0, 0))
                .build()
                .user_data(ud(CANCEL, 0, 0));
            self.push(e);
        }
        self.listener = None;
        for idx in 0..self.conns.slots.len() {
            if self.conns.slots[idx].val.is_some() {
                self.drive(idx);
            }
        }
    }

    /// Closes every connection and waits (at most [`DRAIN`]) for their ops; leaks what is
    /// still in flight after that.
    fn finish(&mut self) {
        for idx in 0..self.conns.slots.len() {
            if self.conns.slots[idx]
                .val
                .as_deref()
                .is_some_and(|c| !c.closing)
            {
                self.close(idx);
            }
        }
        drain(self, DRAIN);
    }
}

impl InFlight for Uring<'_> {
    fn in_flight(&self) -> bool {
        self.conns.slots.iter().any(|s| s.val.is_some())
    }

    fn complete_some(&mut self, max: Duration) -> bool {
        if self.enter(max).is_err() {
            return false;
        }
        self.reap();
        true
    }

    fn leak_in_flight(&mut self) {
        (self.shared.log)("io_uring: ops still in flight at the end; their memory is leaked");
        leak(std::mem::replace(&mut self.conns, Slab::new()));
        leak(std::mem::replace(
            &mut self.bufs,
            BufRing::new(1, 1).expect("tiny"),
        ));
    }
}
