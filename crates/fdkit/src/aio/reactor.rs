//! [`Reactor`]: waits through one [`Ring`] for one fd to become readable, and leaves nothing
//! armed between waits. See the module docs.

use crate::error::{Error, Result};
use crate::uring::{Completion, Ring, RingOptions, CLOSE_TIMEOUT};
use rustix::event::{epoll, PollFlags};
use rustix::io::Errno;
use std::mem::ManuallyDrop;
use std::os::fd::{BorrowedFd, RawFd};
use std::time::{Duration, Instant};

/// The `user_data` of the wait's poll.
const POLL: u64 = 1;
/// The `user_data` of the cancel that takes the poll back.
const CANCEL: u64 = 2;
/// The `user_data` of the no-op that proves a new ring usable.
const PROBE: u64 = 3;
/// The `user_data` of an `IORING_OP_EPOLL_WAIT`.
const EPOLL: u64 = 4;
/// The longest a wait spends getting its cancelled poll back. A poll's cancel is answered at
/// once (the kernel removes the request from the wait queue and completes it); this bound only
/// keeps a ring that stopped answering from hanging its caller.
const SETTLE_TIMEOUT: Duration = CLOSE_TIMEOUT;

/// How to build a [`Reactor`]. The defaults ([`ReactorOptions::DEFAULT`]) are written here
/// only: the binding's `Reactor(*, entries=...)` takes them from here and exports them as
/// `_fdkit.REACTOR_DEFAULTS`, which a test holds the Python stub to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReactorOptions {
    /// Submission queue entries (1..=32768). A wait has at most two ops queued (its poll, then
    /// the poll's cancel), so a few entries are enough; the default is 8.
    pub entries: u32,
    /// Whether [`Reactor::epoll_wait`] may use `IORING_OP_EPOLL_WAIT` where the kernel runs
    /// it (Linux 6.15); `false` keeps the poll of the epoll fd that older kernels get (tests
    /// use it to run that path here too). The default is `true`.
    pub epoll_wait: bool,
}

impl ReactorOptions {
    /// The defaults: 8 entries, `IORING_OP_EPOLL_WAIT` where the kernel runs it.
    pub const DEFAULT: ReactorOptions = ReactorOptions {
        entries: 8,
        epoll_wait: true,
    };
}

impl Default for ReactorOptions {
    fn default() -> Self {
        ReactorOptions::DEFAULT
    }
}

/// A wait for one fd, made by an io_uring: `fdkit.aio`'s io_uring engine keeps every
/// registration in an epoll instance and, when that instance has nothing ready and the loop
/// iteration may sleep, sleeps here until the instance's fd becomes readable.
///
/// Each [`wait`](Reactor::wait) arms one one-shot `IORING_OP_POLL_ADD` and takes it back
/// before returning (its completion, or its cancel's), so between waits nothing is armed: no
/// completion arrives later to interrupt the thread (task work the kernel queues for it makes
/// a blocking call in that thread, epoll_wait(2) for one, fail with `EINTR`), and the ring
/// holds no reference to the fd.
///
/// Where the kernel runs `IORING_OP_EPOLL_WAIT` (Linux 6.15), [`epoll_wait`](Reactor::epoll_wait)
/// reads the epoll instance's events through the ring instead: one io_uring_enter(2) per
/// iteration, whether events are there already, come while it sleeps, or do not come before
/// the timeout (then the op is cancelled, as the poll is).
///
/// A forked child's copy shares the parent's ring (its queues, its completions): it refuses
/// to wait and, when dropped, neither cancels, reaps nor tears down anything
/// ([`forked`](Reactor::forked)).
///
/// # References
///  - [io_uring_enter(2)](https://man7.org/linux/man-pages/man2/io_uring_enter.2.html)
///  - [io_uring_setup(2)](https://man7.org/linux/man-pages/man2/io_uring_setup.2.html)
///  - [io_uring_prep_poll_add(3)](https://man7.org/linux/man-pages/man3/io_uring_prep_poll_add.3.html)
///  - [io_uring_prep_cancel(3)](https://man7.org/linux/man-pages/man3/io_uring_prep_cancel.3.html)
pub struct Reactor {
    /// Dropped in [`Drop`], unless this is a forked child's copy (then leaked: see there).
    ring: ManuallyDrop<Ring>,
    /// The fork generation the ring was set up in (see [`forked`](Reactor::forked)).
    generation: u64,
    /// Whether waits use `IORING_OP_EPOLL_WAIT` (asked for, and the kernel runs it).
    reads_epoll: bool,
    /// The buffer the kernel writes an epoll wait's events into, kept between waits. Each
    /// wait lends it to the ring (the op's slot owns it until its completion, and a ring that
    /// cannot take the op back leaks it with the op), so nothing here is ever under the kernel.
    events: Vec<u8>,
}

impl std::fmt::Debug for Reactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reactor")
            .field("ring", &*self.ring)
            .field("forked", &self.forked())
            .field("reads_epoll", &self.reads_epoll)
            .finish()
    }
}

impl Reactor {
    /// A reactor with its own ring, proven usable before it is returned: the ring is set up
    /// (io_uring_setup(2)) and a no-op submitted and reaped (io_uring_enter(2)), so a seccomp
    /// filter or sysctl that denies either fails here with the kernel's errno (`ENOSYS`,
    /// `EPERM`), never at the first wait. The ring refuses `SINGLE_ISSUER | DEFER_TASKRUN`:
    /// an event loop may be run by one thread, then by another.
    ///
    /// # References
    ///  - [io_uring_setup(2)](https://man7.org/linux/man-pages/man2/io_uring_setup.2.html)
    ///  - [io_uring_enter(2)](https://man7.org/linux/man-pages/man2/io_uring_enter.2.html)
    pub fn new(options: ReactorOptions) -> Result<Reactor> {
        let mut ring = Ring::with_options(RingOptions {
            entries: options.entries,
            cq_entries: None,
            defer_taskrun: Some(false),
        })?;
        ring.nop(PROBE)?;
        ring.enter(1, Some(Duration::from_secs(5)))?;
        match ring.pop_completion() {
            Some(c) if c.user_data == PROBE && c.result == 0 => {}
            Some(c) => return Err(Error::Os(c.error().unwrap_or(Errno::IO))),
            None => return Err(Error::Os(Errno::TIMEDOUT)),
        }
        let reads_epoll = options.epoll_wait && ring.runs_epoll_wait();
        Ok(Reactor {
            ring: ManuallyDrop::new(ring),
            generation: crate::fd::fork_generation(),
            reads_epoll,
            events: Vec::new(),
        })
    }

    /// Whether [`epoll_wait`](Reactor::epoll_wait) runs here (the options asked for it and
    /// the kernel runs `IORING_OP_EPOLL_WAIT`, Linux 6.15); if not, waits go through
    /// [`wait`](Reactor::wait) and the caller reads the events with epoll_wait(2).
    pub fn reads_epoll(&self) -> bool {
        self.reads_epoll
    }

    /// Whether this is a forked child's copy: the ring (its queues, its completions) is
    /// shared with the parent, so the child must not submit, reap or tear it down — reaping
    /// would steal the parent's completions. One atomic load (a `pthread_atfork` counter,
    /// not getpid(2), which is a syscall on every call). See fork(2), io_uring(7).
    pub fn forked(&self) -> bool {
        crate::fd::fork_generation() != self.generation
    }

    /// The ring's fd (for display, and for reading its fdinfo in tests).
    pub fn ring_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    /// Ops queued or in flight: 0 whenever no [`wait`](Reactor::wait) runs, unless a wait
    /// failed before it could take its poll back (the next wait takes it back first).
    pub fn in_flight(&self) -> usize {
        self.ring.in_flight()
    }

    /// Waits until `fd` is readable (`POLLIN`) or `timeout` passes (`None`: no limit; zero:
    /// just look), in one io_uring_enter(2) that submits a one-shot `IORING_OP_POLL_ADD` and
    /// sleeps. Returns whether `fd` became ready.
    ///
    /// A signal ends the wait early (`Ok(false)`), as it ends epoll_wait(2), so the caller
    /// can run its signal handlers. When the wait ended without the poll's completion
    /// (timeout, signal), the poll is cancelled (`IORING_OP_ASYNC_CANCEL` by `user_data`) and
    /// the completions are reaped until the poll's has arrived: nothing is left armed when
    /// this returns, whatever it returns. A poll that completed in the meantime still counts
    /// (`Ok(true)`).
    ///
    /// Errors: the kernel's errno from io_uring_enter(2), or the poll's own (`EBADF` for a
    /// closed fd); [`Error::InvalidArgument`] in a forked child's copy
    /// ([`forked`](Reactor::forked)), which submits nothing.
    ///
    /// # References
    ///  - [io_uring_enter(2)](https://man7.org/linux/man-pages/man2/io_uring_enter.2.html)
    ///  - [io_uring_prep_poll_add(3)](https://man7.org/linux/man-pages/man3/io_uring_prep_poll_add.3.html)
    ///  - [io_uring_prep_cancel(3)](https://man7.org/linux/man-pages/man3/io_uring_prep_cancel.3.html)
    pub fn wait(&mut self, fd: BorrowedFd<'_>, timeout: Option<Duration>) -> Result<bool> {
        self.begin_wait()?;
        self.ring.poll_add(fd, PollFlags::IN, false, POLL)?;
        match self.end_wait(POLL, timeout)? {
            None => Ok(false),
            Some(c) => match c.error() {
                None => Ok(c.result > 0),
                Some(Errno::CANCELED) => Ok(false),
                Some(errno) => Err(Error::Os(errno)),
            },
        }
    }

    /// epoll_wait(2) on the epoll instance `epfd` through the ring: waits until it has events
    /// or `timeout` passes (`None`: no limit), then puts up to `max_events` of them in `out`
    /// (emptied first) and returns how many. One io_uring_enter(2) submits the
    /// `IORING_OP_EPOLL_WAIT` and sleeps: the op takes the events at once when some are ready,
    /// else when they come. The events are epoll_wait(2)'s own (the same ready list, order
    /// and `maxevents`), so a caller sees what epoll_wait(2) would have shown.
    ///
    /// A signal ends the wait early (`Ok(0)` unless events came), as it ends epoll_wait(2).
    /// When the wait ended without the op's completion (timeout, signal) the op is cancelled
    /// and reaped: nothing is left armed when this returns; events it took in the meantime
    /// are returned.
    ///
    /// Errors: [`Error::InvalidArgument`] where [`reads_epoll`](Reactor::reads_epoll) is
    /// false, for `max_events` 0 or above `i32::MAX`, and in a forked child's copy; the
    /// kernel's errno from io_uring_enter(2) or from the op (`EBADF`, `EINVAL` for an fd that
    /// is not an epoll instance).
    ///
    /// # References
    ///  - [epoll_wait(2)](https://man7.org/linux/man-pages/man2/epoll_wait.2.html)
    ///  - [io_uring_prep_epoll_wait(3)](https://man7.org/linux/man-pages/man3/io_uring_prep_epoll_wait.3.html)
    pub fn epoll_wait(
        &mut self,
        epfd: BorrowedFd<'_>,
        out: &mut Vec<epoll::Event>,
        max_events: usize,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        out.clear();
        if !self.reads_epoll {
            return Err(Error::InvalidArgument(
                "this reactor does not read epoll through the ring",
            ));
        }
        let max = match u32::try_from(max_events) {
            Ok(m) if m > 0 && m <= i32::MAX as u32 => m,
            _ => return Err(Error::InvalidArgument("max_events must be 1 to 2**31-1")),
        };
        self.begin_wait()?;
        let buf = std::mem::take(&mut self.events);
        self.ring.queue_epoll_wait(epfd, buf, max, EPOLL)?;
        let Some(mut c) = self.end_wait(EPOLL, timeout)? else {
            return Ok(0);
        };
        let data = c.data.take();
        let result = match c.error() {
            None => {
                let bytes = data.as_deref().unwrap_or_default();
                let n = bytes.len() / crate::uring::EPOLL_EVENT_SIZE;
                out.reserve(n);
                // SAFETY: `bytes` holds `n` events as the kernel wrote them (`struct
                // epoll_event`, which `epoll::Event` lays out the same way: plain data, any
                // bit pattern valid), and `out` has room for `n` after the reserve; the
                // regions cannot overlap (`out` is the caller's, `bytes` the ring's).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr(),
                        out.as_mut_ptr().cast::<u8>(),
                        n * crate::uring::EPOLL_EVENT_SIZE,
                    );
                    out.set_len(n);
                }
                Ok(n)
            }
            Some(Errno::CANCELED) => Ok(0),
            Some(errno) => Err(Error::Os(errno)),
        };
        if let Some(buf) = data {
            self.events = buf;
        }
        result
    }

    /// The start of every wait: refuses a forked child's copy (it submits nothing), then takes
    /// back what a failed wait left in flight (its report is stale).
    fn begin_wait(&mut self) -> Result<()> {
        if self.forked() {
            return Err(Error::InvalidArgument(
                "a forked child's copy of a reactor cannot wait (the ring is its parent's)",
            ));
        }
        // Every completion reaped here is dropped, whichever op it was.
        self.settle(CANCEL, &mut None)
    }

    /// The end of every wait: submits the wait's one queued op (`user_data`) and sleeps in the
    /// same io_uring_enter(2) until its completion, `timeout` or a signal. An op still in
    /// flight then (timed out, interrupted, or the enter failed) is cancelled and reaped, so
    /// nothing is left armed. Returns the op's completion if it came, also while it was
    /// being cancelled.
    fn end_wait(
        &mut self,
        user_data: u64,
        timeout: Option<Duration>,
    ) -> Result<Option<Completion>> {
        let entered = match self.ring.enter(1, timeout) {
            Ok(_) | Err(Error::Os(Errno::INTR)) => Ok(()),
            Err(e) => Err(e),
        };
        let mut done = None;
        self.collect(user_data, &mut done);
        if self.ring.in_flight() > 0 {
            let cancelled = self.ring.cancel(user_data, CANCEL);
            let settled = self.settle(user_data, &mut done);
            cancelled?;
            settled?;
        }
        entered?;
        Ok(done)
    }

    /// Takes the ready completions, keeping the one of `user_data` in `kept`.
    fn collect(&mut self, user_data: u64, kept: &mut Option<Completion>) {
        while let Some(c) = self.ring.pop_completion() {
            if c.user_data == user_data {
                *kept = Some(c);
            }
        }
    }

    /// Reaps until nothing is in flight (a signal does not end this: the cancel's answer is
    /// immediate), at most [`SETTLE_TIMEOUT`] (then `ETIMEDOUT`), keeping the completion of
    /// `user_data` in `kept`.
    fn settle(&mut self, user_data: u64, kept: &mut Option<Completion>) -> Result<()> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        while self.ring.in_flight() > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Os(Errno::TIMEDOUT));
            }
            match self.ring.enter(1, Some(left)) {
                Ok(_) | Err(Error::Os(Errno::INTR)) => {}
                Err(e) => return Err(e),
            }
            self.collect(user_data, kept);
        }
        Ok(())
    }
}

impl Drop for Reactor {
    /// Closes the ring (nothing is in flight between waits, so this is at once), or, in a
    /// forked child's copy, leaks it: tearing it down would cancel and reap the parent's ops.
    /// The child's mappings and fd go when it exits or execs (the ring fd is close-on-exec).
    fn drop(&mut self) {
        if !self.forked() {
            // SAFETY: `ring` is dropped here once, and never used again (this is `drop`).
            unsafe { ManuallyDrop::drop(&mut self.ring) };
        }
    }
}

// A reactor may move to another thread (a loop may be run by one thread, then another).
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<Reactor>();
};
