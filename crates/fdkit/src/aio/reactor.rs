//! [`Reactor`]: readiness, streams and listeners over one [`Ring`]. See the module docs.

use super::interest::Interest;
use super::listener::{self, Listener, ListenerId, OnError, QUEUE_LIMIT};
use super::stream::{End, Received, Stream, StreamId};
use crate::error::{Error, Result};
use crate::uring::{Completion, OpKind, Ring, RingOptions};
use rustc_hash::FxHashMap as HashMap;
use rustix::event::PollFlags;
use rustix::io::Errno;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

/// The buffer group streams receive into.
const GROUP: u16 = 0;

/// How many bytes a paused stream may receive before its receive is cancelled. A pause costs
/// nothing until then: asyncio's streams pause and resume around every read that finds their
/// buffer full, and cancelling and re-arming the multishot receive each time cost more than
/// the reads did. A cancelled receive is armed again once the inbox is below this.
const HOLD_LIMIT: usize = 256 * 1024;

/// The same for a stream that is not paused but whose owner takes its bytes (256 KiB per loop
/// iteration, as asyncio reads) more slowly than they come: the provided buffers go back to
/// the ring as soon as their bytes are copied out, so without this bound the inbox, not the
/// socket's receive buffer, would absorb a fast sender.
const BACKLOG_LIMIT: usize = 4 * HOLD_LIMIT;

/// What [`Reactor::poll`] reports ready, for the loop to run the callback that wants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    /// A readiness registration holds: the bits it asked for that hold (an error or a hang-up
    /// sets every bit it asked for, so the handler finds out by trying).
    Fd {
        /// The registered fd.
        fd: RawFd,
        /// What holds.
        ready: Interest,
    },
    /// A stream that is not paused has bytes, its EOF or its error to hand over
    /// ([`Reactor::recv`]). Reported at every poll while that holds (level-triggered).
    Stream(StreamId),
    /// A listener has connections (or the error that stopped it) to hand over
    /// ([`Reactor::accept`]). Reported at every poll while that holds.
    Listener(ListenerId),
}

/// How to build a [`Reactor`].
#[derive(Debug, Clone, Copy)]
pub struct ReactorOptions {
    /// Submission queue entries.
    pub entries: u32,
    /// Provided buffers for streams (a power of two).
    pub buffers: u16,
    /// Size of each provided buffer: the most one receive completion carries.
    pub buffer_size: u32,
}

impl Default for ReactorOptions {
    fn default() -> Self {
        ReactorOptions {
            entries: 1024,
            buffers: 256,
            buffer_size: 16 * 1024,
        }
    }
}

/// Who an op in flight works for.
#[derive(Debug, Clone, Copy)]
enum Owner {
    Poll(RawFd),
    Recv(StreamId),
    Accept(ListenerId),
    /// A cancel, or an op whose completion nobody reads.
    Nobody,
}

/// A readiness registration.
#[derive(Debug)]
struct PollReg {
    interest: Interest,
    /// The poll op armed for it, if any (its completion is the one that counts).
    armed: Option<u64>,
    /// The fd was closed under us (`EBADF`): stop re-arming until registered anew.
    dead: bool,
}

/// The loop's engine: readiness, streams and listeners over one io_uring. Its maps are keyed
/// by ids it hands out itself and by fds, never by what a peer chooses: they hash with
/// rustc-hash's Fx, several lookups per completion, where the default SipHash showed in
/// profiles.
pub struct Reactor {
    ring: Ring,
    next: u64,
    ops: HashMap<u64, Owner>,
    polls: HashMap<RawFd, PollReg>,
    /// Registrations to arm before the next wait.
    rearm: Vec<RawFd>,
    streams: HashMap<StreamId, Stream>,
    /// Streams to (re)arm before the next wait.
    rearm_streams: Vec<StreamId>,
    /// Streams that may have something to hand over (each listed once: `Stream::listed`).
    news: Vec<StreamId>,
    /// Readiness reports of the last wait.
    fd_ready: Vec<Ready>,
    listeners: HashMap<ListenerId, Listener>,
    /// Listeners to (re)arm before the next wait.
    rearm_listeners: Vec<ListenerId>,
    /// Listeners that may have something queued (each listed once: `Listener::listed`).
    accepted: Vec<ListenerId>,
    /// The fork generation the ring was set up in (see [`forked`](Reactor::forked)).
    generation: u64,
}

impl std::fmt::Debug for Reactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reactor")
            .field("ring", &self.ring)
            .field("polls", &self.polls.len())
            .field("streams", &self.streams.len())
            .field("listeners", &self.listeners.len())
            .finish()
    }
}

impl Reactor {
    /// A reactor with its own ring and provided buffers, proven usable before it is returned:
    /// the ring is set up (io_uring_setup(2)), its buffer ring registered
    /// (io_uring_register(2)) and a no-op submitted and reaped (io_uring_enter(2)), so a
    /// seccomp filter or sysctl that denies any of the three fails here with the kernel's
    /// errno (`ENOSYS`, `EPERM`), never at the first wait. Multishot receive needs Linux 6.0.
    /// See io_uring_setup(2), io_uring_register_buf_ring(3).
    pub fn new(options: ReactorOptions) -> Result<Reactor> {
        let mut ring = Ring::with_options(RingOptions {
            entries: options.entries,
            cq_entries: Some(options.entries.saturating_mul(4).min(65536)),
            // A loop may be run by one thread, then by another: the ring must accept any.
            defer_taskrun: Some(false),
        })?;
        ring.provide_buffers(GROUP, options.buffers, options.buffer_size)?;
        ring.nop(0)?;
        ring.enter(1, Some(Duration::from_secs(5)))?;
        while ring.pop_completion().is_some() {}
        Ok(Reactor {
            ring,
            next: 1,
            ops: HashMap::default(),
            polls: HashMap::default(),
            rearm: Vec::new(),
            streams: HashMap::default(),
            rearm_streams: Vec::new(),
            news: Vec::new(),
            fd_ready: Vec::new(),
            listeners: HashMap::default(),
            rearm_listeners: Vec::new(),
            accepted: Vec::new(),
            generation: crate::fd::fork_generation(),
        })
    }

    /// Whether this is a forked child's copy: the ring (its queues, its completions) is
    /// shared with the parent, so the child must not submit, reap or tear it down — reaping
    /// would steal the parent's completions. One atomic load (a `pthread_atfork` counter,
    /// not getpid(2), which is a syscall on every call). See fork(2), io_uring(7).
    pub fn forked(&self) -> bool {
        crate::fd::fork_generation() != self.generation
    }

    /// The ring's fd (for display).
    pub fn ring_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    /// Ops queued or in flight.
    pub fn in_flight(&self) -> usize {
        self.ring.in_flight()
    }

    fn token(&mut self, owner: Owner) -> u64 {
        let t = self.next;
        self.next += 1;
        self.ops.insert(t, owner);
        t
    }

    fn cancel(&mut self, target: u64) {
        let t = self.token(Owner::Nobody);
        if self.ring.cancel(target, t).is_err() {
            self.ops.remove(&t);
        }
    }

    // ---- readiness --------------------------------------------------------------------------

    /// Sets what `fd` is watched for (empty: stop watching). Takes effect at the next
    /// [`poll`](Reactor::poll). The fd must stay open while registered.
    pub fn set_interest(&mut self, fd: RawFd, interest: Interest) {
        if interest.is_empty() {
            self.remove_interest(fd);
            return;
        }
        let reg = self.polls.entry(fd).or_insert(PollReg {
            interest: Interest::default(),
            armed: None,
            dead: false,
        });
        reg.dead = false;
        if reg.interest == interest {
            if reg.armed.is_none() {
                self.rearm.push(fd);
            }
            return;
        }
        reg.interest = interest;
        let old = reg.armed.take();
        self.rearm.push(fd);
        if let Some(op) = old {
            self.cancel(op);
        }
    }

    /// Stops watching `fd`; a report already on its way is dropped.
    pub fn remove_interest(&mut self, fd: RawFd) {
        if let Some(reg) = self.polls.remove(&fd) {
            if let Some(op) = reg.armed {
                self.cancel(op);
            }
        }
    }

    fn arm_polls(&mut self) -> Result<()> {
        let mut fds = std::mem::take(&mut self.rearm);
        for &fd in &fds {
            let Some(reg) = self.polls.get(&fd) else {
                continue;
            };
            if reg.armed.is_some() || reg.dead {
                continue;
            }
            let flags = reg.interest.poll_flags();
            let t = self.token(Owner::Poll(fd));
            // SAFETY: the contract of set_interest: a registered fd stays open until it is
            // unregistered; if the caller broke it, the kernel answers EBADF (or polls
            // whatever file now has that number, a spurious wake-up the handler survives).
            let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
            match self.ring.poll_add(bfd, flags, false, t) {
                Ok(()) => {
                    if let Some(reg) = self.polls.get_mut(&fd) {
                        reg.armed = Some(t);
                    }
                }
                Err(e) => {
                    // Keep every registration for the next try (those armed are skipped).
                    self.ops.remove(&t);
                    self.rearm = fds;
                    return Err(e);
                }
            }
        }
        fds.clear();
        self.rearm = fds;
        Ok(())
    }

    fn poll_done(&mut self, fd: RawFd, c: Completion) {
        let Some(reg) = self.polls.get_mut(&fd) else {
            return;
        };
        if reg.armed != Some(c.user_data) {
            return; // an op replaced or cancelled since: its report is stale
        }
        reg.armed = None;
        let asked = reg.interest;
        let ready = match c.error() {
            Some(Errno::CANCELED) => {
                self.rearm.push(fd);
                return;
            }
            Some(Errno::BADF) => {
                reg.dead = true;
                asked
            }
            Some(_) => asked,
            None => asked.answered_by(PollFlags::from_bits_truncate(c.result as u16)),
        };
        if !reg.dead {
            // Level-triggered: armed again before the next wait, after the handler ran.
            self.rearm.push(fd);
        }
        if !ready.is_empty() {
            self.fd_ready.push(Ready::Fd { fd, ready });
        }
    }

    // ---- streams ----------------------------------------------------------------------------

    /// Starts tracking the connected socket `fd` as a stream (paused: call
    /// [`resume`](Reactor::resume) to receive). The fd must stay open until
    /// [`close_stream`](Reactor::close_stream).
    pub fn open_stream(&mut self, fd: RawFd) -> StreamId {
        let id = self.next;
        self.next += 1;
        self.streams.insert(id, Stream::new(fd));
        id
    }

    /// Receive on `stream` (asyncio's `resume_reading`): what arrived while it was paused is
    /// reported by the next poll, which then does not sleep.
    pub fn resume(&mut self, stream: StreamId) {
        let Some(s) = self.streams.get_mut(&stream) else {
            return;
        };
        if s.want {
            return;
        }
        s.want = true;
        if s.has_news() && !s.listed {
            s.listed = true;
            self.news.push(stream);
        }
        if s.op.is_none() && !s.ended {
            self.rearm_streams.push(stream);
        }
    }

    /// Stop receiving on `stream` (asyncio's `pause_reading`): polls report it no more; what
    /// arrives meanwhile waits in its inbox, and once that passes 256 KiB the receive is
    /// cancelled, so the peer meets TCP's own backpressure (as it does past 1 MiB for a stream
    /// whose owner reads more slowly than the peer sends).
    pub fn pause(&mut self, stream: StreamId) {
        if let Some(s) = self.streams.get_mut(&stream) {
            s.want = false;
        }
    }

    /// Takes what `stream` received, as recv(2) with `max` would: up to `max` bytes (at least
    /// one byte when any wait), or, once every byte was taken, its EOF or error (once); None
    /// when nothing waits (or no such stream). Give the vectors back with
    /// [`recycle`](Reactor::recycle) once copied.
    pub fn recv(&mut self, stream: StreamId, max: usize) -> Option<Received> {
        let s = self.streams.get_mut(&stream)?;
        let got = s.take(max);
        if got.is_some() && s.wants_receive(HOLD_LIMIT) {
            // A receive cancelled for holding too much while paused: room again.
            self.rearm_streams.push(stream);
        }
        got
    }

    /// Gives back the bytes of a [`Received::Data`] once copied, for reuse (see
    /// [`Ring::recycle_data`]).
    pub fn recycle(&mut self, data: Vec<u8>) {
        self.ring.recycle_data(data);
    }

    /// Forgets `stream`: its receive is cancelled and what it held is dropped. The caller may
    /// close the fd right after (the kernel holds the file until the cancel, which is
    /// submitted now: until then the peer would not get its FIN).
    pub fn close_stream(&mut self, stream: StreamId) {
        if let Some(s) = self.streams.remove(&stream) {
            if let Some(op) = s.op {
                self.cancel(op);
                let _ = self.ring.submit();
            }
        }
    }

    fn arm_streams(&mut self) -> Result<()> {
        let ids = std::mem::take(&mut self.rearm_streams);
        for (i, &id) in ids.iter().enumerate() {
            let Some(s) = self.streams.get(&id) else {
                continue;
            };
            if !s.wants_receive(HOLD_LIMIT) {
                continue;
            }
            let fd = s.fd;
            let t = self.token(Owner::Recv(id));
            // SAFETY: the contract of open_stream: the fd stays open until close_stream; the
            // kernel takes its own reference at submission.
            let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
            if let Err(e) = self.ring.recv_multishot(bfd, GROUP, t) {
                self.ops.remove(&t);
                self.rearm_streams.extend(ids[i..].iter().copied());
                return Err(e);
            }
            if let Some(s) = self.streams.get_mut(&id) {
                s.op = Some(t);
            }
        }
        Ok(())
    }

    fn recv_done(&mut self, id: StreamId, c: Completion, last: bool) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if last && s.op == Some(c.user_data) {
            s.op = None;
            s.cancel_sent = false;
        }
        let mut news = false;
        if c.result > 0 {
            if let Some(data) = c.data.filter(|d| !d.is_empty()) {
                s.push_data(data);
                news = true;
            }
        } else if c.result == 0 && c.op == OpKind::RecvMulti {
            s.push_end(End::Eof);
            news = true;
        } else {
            match c.error() {
                // Paused, or the buffers ran dry (the bytes wait in the socket): no news.
                Some(Errno::CANCELED) | Some(Errno::NOBUFS) | None => {}
                Some(errno) => {
                    s.push_end(End::Error(errno));
                    news = true;
                }
            }
        }
        if news && !s.listed {
            s.listed = true;
            self.news.push(id);
        }
        let mut cancel = None;
        let limit = if s.want { BACKLOG_LIMIT } else { HOLD_LIMIT };
        if s.inbox_bytes >= limit && !s.cancel_sent {
            if let Some(op) = s.op {
                s.cancel_sent = true;
                cancel = Some(op);
            }
        }
        if s.wants_receive(HOLD_LIMIT) {
            self.rearm_streams.push(id);
        }
        if let Some(op) = cancel {
            self.cancel(op);
        }
    }

    // ---- listeners --------------------------------------------------------------------------

    /// Accepts connections on the listening socket `fd` with one multishot accept until
    /// [`stop_listening`](Reactor::stop_listening); polls report the listener while accepted
    /// connections wait in its queue ([`accept`](Reactor::accept)). The fd must stay open
    /// until then. See io_uring_prep_multishot_accept(3).
    pub fn listen(&mut self, fd: RawFd) -> ListenerId {
        let id = self.next;
        self.next += 1;
        self.listeners.insert(id, Listener::new(fd));
        self.rearm_listeners.push(id);
        id
    }

    /// Takes the oldest connection `listener` accepted (a close-on-exec, blocking socket), or
    /// an accept's error: one that stopped it accepting (`EMFILE`, `ENFILE`, `ENOBUFS`,
    /// `ENOMEM`, or `EINVAL`: not listening, or no multishot accept on this kernel; [`listen`]
    /// again to retry), or one connection's (`EPROTO`, `EPERM`, ...: accepting goes on); None
    /// when nothing waits.
    ///
    /// [`listen`]: Reactor::listen
    pub fn accept(&mut self, listener: ListenerId) -> Option<std::result::Result<OwnedFd, Errno>> {
        let l = self.listeners.get_mut(&listener)?;
        let got = l.queue.pop_front();
        if l.release_hold() {
            self.rearm_listeners.push(listener);
        }
        got
    }

    /// Stops accepting on `listener`: its accept is cancelled (submitted now: until the cancel
    /// runs, the ring holds the socket and the kernel keeps accepting connections nobody will
    /// serve) and the connections it queued are closed.
    pub fn stop_listening(&mut self, listener: ListenerId) {
        if let Some(l) = self.listeners.remove(&listener) {
            if let Some(op) = l.op {
                self.cancel(op);
                let _ = self.ring.submit();
            }
        }
    }

    fn arm_listeners(&mut self) -> Result<()> {
        let ids = std::mem::take(&mut self.rearm_listeners);
        for (i, &id) in ids.iter().enumerate() {
            let Some(l) = self.listeners.get(&id) else {
                continue;
            };
            if !l.wants_accept() {
                continue;
            }
            let fd = l.fd;
            let t = self.token(Owner::Accept(id));
            // SAFETY: the contract of listen: the fd stays open until stop_listening; the
            // kernel takes its own reference at submission.
            let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
            if let Err(e) = self.ring.accept_multishot(bfd, t) {
                self.ops.remove(&t);
                self.rearm_listeners.extend(ids[i..].iter().copied());
                return Err(e);
            }
            if let Some(l) = self.listeners.get_mut(&id) {
                l.op = Some(t);
            }
        }
        Ok(())
    }

    fn accept_done(&mut self, id: ListenerId, mut c: Completion, last: bool) {
        let Some(l) = self.listeners.get_mut(&id) else {
            return; // stopped: dropping the completion closes its fd
        };
        if last && l.op == Some(c.user_data) {
            l.op = None;
        }
        let mut news = false;
        if let Some(fd) = c.take_fd() {
            l.queue.push_back(Ok(fd));
            news = true;
        } else {
            if let Some(errno) = c.error() {
                match listener::on_error(errno) {
                    OnError::Ignore => {}
                    OnError::Report => {
                        l.queue.push_back(Err(errno));
                        news = true;
                    }
                    OnError::Stop => {
                        l.stopped = true;
                        l.queue.push_back(Err(errno));
                        news = true;
                    }
                }
            }
        }
        if news && !l.listed {
            l.listed = true;
            self.accepted.push(id);
        }
        let mut cancel = None;
        if l.queue.len() >= QUEUE_LIMIT && !l.held {
            l.held = true;
            cancel = l.op;
        }
        l.release_hold();
        if l.wants_accept() {
            self.rearm_listeners.push(id);
        }
        if let Some(op) = cancel {
            self.cancel(op);
        }
    }

    // ---- the wait -----------------------------------------------------------------------------

    /// Whether something waits to be taken already: then the next poll must not sleep.
    fn backlog(&self) -> bool {
        self.news
            .iter()
            .any(|id| self.streams.get(id).is_some_and(|s| s.want && s.has_news()))
            || self
                .accepted
                .iter()
                .any(|id| self.listeners.get(id).is_some_and(|l| !l.queue.is_empty()))
    }

    /// Submits what changed and waits, in one io_uring_enter(2), until something is ready or
    /// `timeout` passes (`None`: no limit; zero: just look; no sleep at all while something
    /// reported before is still waiting to be taken), files what completed, and returns what
    /// is ready: readiness reports, then listeners, then streams, each once. Nothing is taken
    /// from a stream or a listener until the caller asks ([`recv`](Reactor::recv),
    /// [`accept`](Reactor::accept)). A signal ends the wait early (`Ok`), as selectors do.
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<Vec<Ready>> {
        self.arm_polls()?;
        self.arm_streams()?;
        self.arm_listeners()?;
        let timeout = if self.backlog() {
            Some(Duration::ZERO)
        } else {
            timeout
        };
        if self.ring.in_flight() == 0 && timeout != Some(Duration::ZERO) {
            // Nothing can complete: io_uring_enter(2) would return at once. Sleep the timeout
            // (or until a signal), as epoll_wait(2) does with an empty set.
            let timespec = timeout.map(|t| rustix::event::Timespec {
                tv_sec: t.as_secs().try_into().unwrap_or(i64::MAX),
                tv_nsec: t.subsec_nanos().into(),
            });
            match rustix::event::poll(&mut [], timespec.as_ref()) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        match self.ring.enter(1, timeout) {
            Ok(_) | Err(Error::Os(Errno::INTR)) => {}
            Err(e) => return Err(e),
        }
        while let Some(c) = self.ring.pop_completion() {
            self.complete(c);
        }
        let mut out = std::mem::take(&mut self.fd_ready);
        let listeners = &mut self.listeners;
        self.accepted.retain(|id| match listeners.get_mut(id) {
            Some(l) if !l.queue.is_empty() => {
                out.push(Ready::Listener(*id));
                true
            }
            Some(l) => {
                l.listed = false;
                false
            }
            None => false,
        });
        let streams = &mut self.streams;
        self.news.retain(|id| match streams.get_mut(id) {
            Some(s) if s.has_news() => {
                if s.want {
                    out.push(Ready::Stream(*id));
                }
                true
            }
            Some(s) => {
                s.listed = false;
                false
            }
            None => false,
        });
        Ok(out)
    }

    fn complete(&mut self, c: Completion) {
        let last = !c.more();
        let owner = if last {
            self.ops.remove(&c.user_data)
        } else {
            self.ops.get(&c.user_data).copied()
        };
        match owner {
            Some(Owner::Poll(fd)) => self.poll_done(fd, c),
            Some(Owner::Recv(id)) => self.recv_done(id, c, last),
            Some(Owner::Accept(id)) => self.accept_done(id, c, last),
            Some(Owner::Nobody) | None => {}
        }
    }
}
