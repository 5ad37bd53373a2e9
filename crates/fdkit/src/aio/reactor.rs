//! [`Reactor`]: selector interest and streams over one [`Ring`]. See the module docs.

use crate::error::{Error, Result};
use crate::uring::{Completion, OpKind, Ring, RingOptions};
use rustix::event::PollFlags;
use rustix::io::Errno;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

/// The buffer group streams receive into.
const GROUP: u16 = 0;

/// Readiness as asyncio's selectors name it (`EVENT_READ` = 1, `EVENT_WRITE` = 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Interest {
    /// Wants (or got) readability: data, EOF, a pending connection, an error.
    pub read: bool,
    /// Wants (or got) writability: room in the send buffer, a finished connect, an error.
    pub write: bool,
}

impl Interest {
    /// From asyncio's mask (`1` read, `2` write).
    pub fn from_mask(mask: u32) -> Interest {
        Interest {
            read: mask & 1 != 0,
            write: mask & 2 != 0,
        }
    }

    /// As asyncio's mask.
    pub fn mask(self) -> u32 {
        u32::from(self.read) | (u32::from(self.write) << 1)
    }

    fn poll_flags(self) -> PollFlags {
        let mut f = PollFlags::empty();
        if self.read {
            f |= PollFlags::IN | PollFlags::PRI | PollFlags::RDHUP;
        }
        if self.write {
            f |= PollFlags::OUT;
        }
        f
    }

    fn is_empty(self) -> bool {
        !self.read && !self.write
    }
}

/// A stream's handle, unique for the reactor's life.
pub type StreamId = u64;

/// What a [`Reactor::poll`] reports.
#[derive(Debug)]
pub enum Event {
    /// A selector registration is ready: the bits it asked for that hold (an error or a
    /// hang-up sets every bit it asked for, so the handler finds out by trying).
    Ready {
        /// The registered fd.
        fd: RawFd,
        /// What holds.
        ready: Interest,
    },
    /// Bytes received on a stream, in order.
    Data {
        /// The stream.
        stream: StreamId,
        /// The bytes.
        data: Vec<u8>,
    },
    /// The peer ended its side of the stream (recv(2) returned 0). Reported once.
    Eof {
        /// The stream.
        stream: StreamId,
    },
    /// Receiving failed (`ECONNRESET`, …). Reported once; the stream receives no more.
    Error {
        /// The stream.
        stream: StreamId,
        /// Why.
        errno: Errno,
    },
    /// A listener accepted a connection: the new socket (close-on-exec, blocking).
    Accepted {
        /// The listener.
        listener: ListenerId,
        /// The connection.
        fd: OwnedFd,
    },
    /// Accepting failed for want of a resource (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`) or
    /// for good (`EINVAL`: not listening, or no multishot accept here): the listener stopped;
    /// [`listen`](Reactor::listen) again to retry.
    AcceptError {
        /// The listener.
        listener: ListenerId,
        /// Why.
        errno: Errno,
    },
}

/// A listener's handle, unique for the reactor's life.
pub type ListenerId = u64;

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

/// A selector registration.
#[derive(Debug)]
struct PollReg {
    interest: Interest,
    /// The poll op armed for it, if any (its completion is the one that counts).
    armed: Option<u64>,
    /// The fd was closed under us (`EBADF`): stop re-arming until registered anew.
    dead: bool,
}

/// A stream's receive state.
#[derive(Debug)]
struct Stream {
    fd: RawFd,
    /// The multishot receive in flight, if any.
    op: Option<u64>,
    /// Whether the owner wants bytes now (not paused).
    want: bool,
    /// EOF or an error was seen: never receive again.
    ended: bool,
    /// What arrived and was not handed over yet, in order: bytes, then maybe EOF or an error.
    /// Events stay here while the stream is paused; nothing is ever moved back and forth.
    inbox: VecDeque<Event>,
    /// Bytes in `inbox`.
    inbox_bytes: usize,
    /// Whether the stream's id is in the reactor's `ready` list.
    listed: bool,
    /// A cancel of `op` was sent (too much arrived while paused).
    cancel_sent: bool,
}

/// How many bytes a paused stream may receive before its receive is cancelled. A pause costs
/// nothing until then: asyncio's streams pause and resume around every read that finds their
/// buffer full, and cancelling and re-arming the multishot receive each time cost more than
/// the reads did.
const HOLD_LIMIT: usize = 256 * 1024;

/// The loop's engine: selector interest and streams over one io_uring.
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
    /// Streams with something in their inbox for [`next_event`](Reactor::next_event).
    ready: VecDeque<StreamId>,
    /// Streams resumed since the last poll: listed as ready at the next one.
    resumed: Vec<StreamId>,
    /// Events that belong to no stream (readiness, accepts), for `next_event`.
    general: VecDeque<Event>,
    /// Listeners: their fd and the multishot accept in flight.
    listeners: HashMap<ListenerId, (RawFd, Option<u64>)>,
    /// Listeners to (re)arm before the next wait.
    rearm_listeners: Vec<ListenerId>,
    /// The fork generation the ring was set up in (see [`forked`](Reactor::forked)).
    generation: u64,
}

impl std::fmt::Debug for Reactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reactor")
            .field("ring", &self.ring)
            .field("polls", &self.polls.len())
            .field("streams", &self.streams.len())
            .finish()
    }
}

impl Reactor {
    /// A reactor with its own ring and provided buffers. Fails with the kernel's errno where
    /// io_uring is missing or denied (`ENOSYS`, `EPERM`): the loop then runs on epoll.
    /// Multishot receive needs Linux 6.0. See io_uring_setup(2), io_uring_register_buf_ring(3).
    pub fn new(options: ReactorOptions) -> Result<Reactor> {
        let mut ring = Ring::with_options(RingOptions {
            entries: options.entries,
            cq_entries: Some(options.entries.saturating_mul(4).min(65536)),
            // A loop may be run by one thread, then by another: the ring must accept any.
            defer_taskrun: Some(false),
        })?;
        ring.provide_buffers(GROUP, options.buffers, options.buffer_size)?;
        Ok(Reactor {
            ring,
            next: 1,
            ops: HashMap::new(),
            polls: HashMap::new(),
            rearm: Vec::new(),
            streams: HashMap::new(),
            rearm_streams: Vec::new(),
            ready: VecDeque::new(),
            resumed: Vec::new(),
            general: VecDeque::new(),
            listeners: HashMap::new(),
            rearm_listeners: Vec::new(),
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

    // ---- selector interest ----------------------------------------------------------------

    /// Sets what `fd` is watched for (empty: stop watching). Takes effect at the next
    /// [`poll`](Reactor::poll). The fd must stay open while registered (asyncio's rule).
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
            // SAFETY: asyncio's contract: a registered fd stays open until unregistered; if
            // the caller broke it, the kernel answers EBADF (or polls whatever file now has
            // that number, a spurious wake-up the handler survives).
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

    // ---- streams ----------------------------------------------------------------------------

    /// Starts tracking the connected socket `fd` as a stream (paused: call
    /// [`resume`](Reactor::resume) to receive). The fd must stay open until
    /// [`close_stream`](Reactor::close_stream).
    pub fn open_stream(&mut self, fd: RawFd) -> StreamId {
        let id = self.next;
        self.next += 1;
        self.streams.insert(
            id,
            Stream {
                fd,
                op: None,
                want: false,
                ended: false,
                inbox: VecDeque::new(),
                inbox_bytes: 0,
                listed: false,
                cancel_sent: false,
            },
        );
        id
    }

    /// Receive on `stream` (asyncio's `resume_reading`): what arrived while it was paused
    /// comes first, from the next poll on.
    pub fn resume(&mut self, stream: StreamId) {
        let Some(s) = self.streams.get_mut(&stream) else {
            return;
        };
        if s.want {
            return;
        }
        s.want = true;
        if !s.inbox.is_empty() {
            self.resumed.push(stream);
        }
        if s.op.is_none() && !s.ended {
            self.rearm_streams.push(stream);
        }
    }

    /// Stop receiving on `stream` (asyncio's `pause_reading`): [`next_event`](Reactor::next_event)
    /// hands over nothing more of it, at once, even from a batch already reaped; what arrives
    /// meanwhile waits in its inbox, and once that passes 256 KiB the receive is
    /// cancelled, so the peer meets TCP's own backpressure.
    pub fn pause(&mut self, stream: StreamId) {
        if let Some(s) = self.streams.get_mut(&stream) {
            s.want = false;
        }
    }

    /// Forgets `stream`: its receive is cancelled and nothing more is reported for it. The
    /// caller may close the fd right after (the kernel holds the file until the cancel).
    pub fn close_stream(&mut self, stream: StreamId) {
        if let Some(s) = self.streams.remove(&stream) {
            if let Some(op) = s.op {
                self.cancel(op);
                // Now: until the cancel runs, the ring holds the socket, so closing the fd
                // would not yet send the peer its FIN.
                let _ = self.ring.submit();
            }
        }
    }

    /// The next event to hand over, or None when there is none: called one event at a time,
    /// with user code running in between that may pause, resume or close any stream; each
    /// stream's events come in order, never one of a paused or closed stream. Readiness and
    /// accepts first, then the streams' inboxes, a chunk each in turn.
    pub fn next_event(&mut self) -> Option<Event> {
        if let Some(e) = self.general.pop_front() {
            return Some(e);
        }
        while let Some(id) = self.ready.pop_front() {
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            if !s.want {
                s.listed = false;
                continue;
            }
            let Some(e) = s.inbox.pop_front() else {
                s.listed = false;
                continue;
            };
            if let Event::Data { data, .. } = &e {
                s.inbox_bytes -= data.len();
            }
            if s.inbox.is_empty() {
                s.listed = false;
            } else {
                self.ready.push_back(id);
            }
            return Some(e);
        }
        None
    }

    /// For a dispatcher that just took an [`Event::Data`] of `stream` from
    /// [`next_event`](Reactor::next_event): the bytes right behind it in the stream's inbox,
    /// up to about `max` more, so that they go over in one piece (asyncio hands a protocol up
    /// to 256 KiB per `data_received`; a chunk per provided buffer would mean up to sixteen
    /// calls where asyncio makes one).
    pub fn take_more_data(&mut self, stream: StreamId, max: usize) -> Vec<Vec<u8>> {
        let mut more = Vec::new();
        let Some(s) = self.streams.get_mut(&stream) else {
            return more;
        };
        let mut total = 0;
        while s.want && total < max {
            match s.inbox.front() {
                Some(Event::Data { data, .. }) if total + data.len() <= max => {}
                _ => break,
            }
            if let Some(Event::Data { data, .. }) = s.inbox.pop_front() {
                total += data.len();
                s.inbox_bytes -= data.len();
                more.push(data);
            }
        }
        more
    }

    /// Gives back the bytes of an [`Event::Data`] once handed over, for reuse (see
    /// [`Ring::recycle_data`]).
    pub fn recycle(&mut self, data: Vec<u8>) {
        self.ring.recycle_data(data);
    }

    /// Whether events wait for [`next_event`](Reactor::next_event) (or resumed streams for the
    /// next poll): then the next poll must not sleep.
    fn backlog(&self) -> bool {
        !self.general.is_empty() || !self.ready.is_empty() || !self.resumed.is_empty()
    }

    fn arm_streams(&mut self) -> Result<()> {
        let ids = std::mem::take(&mut self.rearm_streams);
        for (i, &id) in ids.iter().enumerate() {
            let Some(s) = self.streams.get(&id) else {
                continue;
            };
            if s.op.is_some() || !s.want || s.ended {
                continue;
            }
            let fd = s.fd;
            let t = self.token(Owner::Recv(id));
            // SAFETY: the stream's owner keeps the fd open until close_stream (the contract
            // of open_stream); the kernel takes its own reference at submission.
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

    // ---- listeners ----------------------------------------------------------------------------

    /// Accepts connections on the listening socket `fd` with one multishot accept until
    /// [`stop_listening`](Reactor::stop_listening); each arrives as [`Event::Accepted`]. The fd
    /// must stay open until then. See io_uring_prep_multishot_accept(3).
    pub fn listen(&mut self, fd: RawFd) -> ListenerId {
        let id = self.next;
        self.next += 1;
        self.listeners.insert(id, (fd, None));
        self.rearm_listeners.push(id);
        id
    }

    /// Stops accepting on `listener`; connections the kernel accepted before the cancel took
    /// effect are closed, never reported.
    pub fn stop_listening(&mut self, listener: ListenerId) {
        if let Some((_, Some(op))) = self.listeners.remove(&listener) {
            self.cancel(op);
            // Now, not at the next wait: until the cancel runs, the ring holds the socket and
            // the kernel keeps accepting connections nobody will serve.
            let _ = self.ring.submit();
        }
        self.general.retain(|e| {
            !matches!(e, Event::Accepted { listener: l, .. } | Event::AcceptError { listener: l, .. } if *l == listener)
        });
    }

    fn arm_listeners(&mut self) -> Result<()> {
        let ids = std::mem::take(&mut self.rearm_listeners);
        for (i, &id) in ids.iter().enumerate() {
            let Some(&(fd, None)) = self.listeners.get(&id) else {
                continue;
            };
            let t = self.token(Owner::Accept(id));
            // SAFETY: the listener's owner keeps the fd open until stop_listening (the
            // contract of listen); the kernel takes its own reference at submission.
            let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
            if let Err(e) = self.ring.accept_multishot(bfd, t) {
                self.ops.remove(&t);
                self.rearm_listeners.extend(ids[i..].iter().copied());
                return Err(e);
            }
            if let Some(l) = self.listeners.get_mut(&id) {
                l.1 = Some(t);
            }
        }
        Ok(())
    }

    fn accept_done(&mut self, id: ListenerId, mut c: Completion, last: bool) {
        let Some(l) = self.listeners.get_mut(&id) else {
            return; // stopped: dropping the completion closes its fd
        };
        if last && l.1 == Some(c.user_data) {
            l.1 = None;
        }
        if let Some(fd) = c.take_fd() {
            self.general.push_back(Event::Accepted { listener: id, fd });
        } else {
            match c.error() {
                None | Some(Errno::CANCELED) => {}
                // The connection went away before it was accepted, or a signal: go on.
                Some(
                    Errno::AGAIN | Errno::CONNABORTED | Errno::INTR | Errno::PROTO | Errno::PERM,
                ) => {}
                Some(errno) => {
                    self.listeners.remove(&id);
                    self.general.push_back(Event::AcceptError {
                        listener: id,
                        errno,
                    });
                    return;
                }
            }
        }
        if last && self.listeners.get(&id).is_some_and(|l| l.1.is_none()) {
            self.rearm_listeners.push(id);
        }
    }

    // ---- the wait -----------------------------------------------------------------------------

    /// Submits what changed and waits, in one io_uring_enter(2), until something is ready or
    /// `timeout` passes (`None`: no limit; zero: just look; no wait at all while events are
    /// still waiting to be handed over). What happened is then taken one event at a time with
    /// [`next_event`](Reactor::next_event). A signal ends the wait early (`Ok`), as selectors
    /// do.
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<()> {
        for id in std::mem::take(&mut self.resumed) {
            if let Some(s) = self.streams.get_mut(&id) {
                if s.want && !s.listed && !s.inbox.is_empty() {
                    s.listed = true;
                    self.ready.push_back(id);
                }
            }
        }
        self.arm_polls()?;
        self.arm_streams()?;
        self.arm_listeners()?;
        let timeout = if self.backlog() {
            Some(Duration::ZERO)
        } else {
            timeout
        };
        match self.ring.enter(1, timeout) {
            Ok(_) | Err(Error::Os(Errno::INTR)) => {}
            Err(e) => return Err(e),
        }
        while let Some(c) = self.ring.pop_completion() {
            self.complete(c);
        }
        Ok(())
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
            None => {
                let got = PollFlags::from_bits_truncate(c.result as u16);
                let trouble = got.intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL);
                Interest {
                    read: asked.read
                        && (trouble
                            || got.intersects(PollFlags::IN | PollFlags::PRI | PollFlags::RDHUP)),
                    write: asked.write && (trouble || got.contains(PollFlags::OUT)),
                }
            }
        };
        if !reg.dead {
            // Level-triggered: armed again before the next wait, after the handler ran.
            self.rearm.push(fd);
        }
        if !ready.is_empty() {
            self.general.push_back(Event::Ready { fd, ready });
        }
    }

    fn recv_done(&mut self, id: StreamId, c: Completion, last: bool) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if last && s.op == Some(c.user_data) {
            s.op = None;
            s.cancel_sent = false;
        }
        let event = if c.result > 0 {
            match c.data {
                Some(data) if !data.is_empty() => Some(Event::Data { stream: id, data }),
                _ => None,
            }
        } else if c.result == 0 && c.op == OpKind::RecvMulti {
            s.ended = true;
            Some(Event::Eof { stream: id })
        } else {
            match c.error() {
                // Paused, or the buffers ran dry (the bytes wait in the socket): no news.
                Some(Errno::CANCELED) | Some(Errno::NOBUFS) | None => None,
                Some(errno) => {
                    s.ended = true;
                    Some(Event::Error { stream: id, errno })
                }
            }
        };
        let mut cancel = None;
        if let Some(e) = event {
            if let Event::Data { data, .. } = &e {
                s.inbox_bytes += data.len();
            }
            s.inbox.push_back(e);
            if s.want && !s.listed {
                s.listed = true;
                self.ready.push_back(id);
            }
            if !s.want && s.inbox_bytes >= HOLD_LIMIT && !s.cancel_sent {
                if let Some(op) = s.op {
                    s.cancel_sent = true;
                    cancel = Some(op);
                }
            }
        }
        if s.op.is_none() && s.want && !s.ended {
            self.rearm_streams.push(id);
        }
        if let Some(op) = cancel {
            self.cancel(op);
        }
    }
}
