//! [`Ring`]: a safe io_uring. Ops are queued with a caller-chosen `user_data`; the ring owns
//! every buffer, address and timespec an op lends the kernel until the op's last completion
//! arrives; [`Ring::wait`] hands back [`Completion`]s.
//!
//! Internally each op gets a slot; the kernel sees the slot's id as its `user_data`, so a
//! completion always finds what it must release, and the caller may reuse `user_data` values
//! freely. The op methods live in `ops.rs`; turning completion queue entries into
//! [`Completion`]s lives in `reap.rs`.

use super::buf_ring::BufRing;
use super::completion::Completion;
use super::errno::errno;
use super::setup::{enter_timeout, Setup};
use super::slots::{Slot, Slots};
use super::sqe::{PendingChain, SqeFlags};
use super::teardown::{drain, leak, InFlight};
use crate::error::{Error, Result};
use io_uring::{cqueue, opcode, squeue, IoUring};
use rustix::io::Errno;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// The `user_data` of cancel requests sent while closing the ring (no slot).
pub(crate) const TEARDOWN: u64 = u64::MAX - 1;
/// A `user_data` no op ever has: the target of a cancel that matches nothing.
pub(crate) const NO_TARGET: u64 = u64::MAX;
/// `IORING_ENTER_GETEVENTS`.
const ENTER_GETEVENTS: u32 = 1;
/// How long closing a ring waits for the completions of the ops it cancelled.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest vector [`Ring::recycle_data`] keeps.
const MAX_POOLED: usize = 1 << 20;
/// The most submission queue entries a ring may have (`IORING_MAX_ENTRIES`).
pub const MAX_ENTRIES: u32 = 32768;

/// How to set a ring up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingOptions {
    /// Submission queue entries (1..=32768; the kernel rounds up to a power of two).
    pub entries: u32,
    /// Completion queue entries (default: twice `entries`); at least `entries`.
    pub cq_entries: Option<u32>,
    /// `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN`: `Some(true)` requires it,
    /// `Some(false)` refuses it, `None` uses it when the kernel accepts it. Such a ring may
    /// only be entered by the thread that created it (others get `EEXIST`).
    pub defer_taskrun: Option<bool>,
}

impl Default for RingOptions {
    fn default() -> Self {
        RingOptions {
            entries: 256,
            cq_entries: None,
            defer_taskrun: None,
        }
    }
}

/// A safe io_uring instance. See io_uring_setup(2), io_uring_enter(2), io_uring(7).
///
/// Queue ops with the methods named after them (`nop`, `recv`, `send`, …, see `ops.rs`),
/// submit them with [`submit`](Ring::submit) (or let [`wait`](Ring::wait) do it) and collect
/// [`Completion`]s with [`wait`](Ring::wait).
///
/// Dropping a ring with ops in flight cancels them and waits (at most [`CLOSE_TIMEOUT`]) for
/// their completions before freeing their buffers; buffers whose completion never came are
/// leaked rather than freed under the kernel.
pub struct Ring {
    pub(crate) ring: IoUring,
    pub(crate) slots: Slots,
    pub(crate) ready: VecDeque<Completion>,
    pub(crate) groups: HashMap<u16, BufRing>,
    pub(crate) scratch: Vec<cqueue::Entry>,
    /// Emptied data vectors given back with [`recycle_data`](Ring::recycle_data), reused for the
    /// bytes of the next provided-buffer completions (no malloc/free churn per chunk).
    pub(crate) data_pool: Vec<Vec<u8>>,
    /// The SQE flags for the op being queued ([`Ring::with_flags`]).
    pub(crate) next_flags: SqeFlags,
    /// The linked chain being queued (see `chain.rs`).
    pub(crate) chain: PendingChain,
    /// `IORING_FEAT_CQE_SKIP`: `IOSQE_CQE_SKIP_SUCCESS` works.
    pub(crate) skip_cqe: bool,
    /// The registered buffers, if any.
    pub(crate) fixed: Option<FixedBuffers>,
    /// How many files are registered (0: none).
    files: u32,
    defer_taskrun: bool,
    ext_arg: bool,
    closed: bool,
}

impl Ring {
    /// A ring with `entries` submission entries and the default options.
    /// See io_uring_queue_init(3).
    pub fn new(entries: u32) -> Result<Ring> {
        Ring::with_options(RingOptions {
            entries,
            ..RingOptions::default()
        })
    }

    /// `io_uring_setup(2)` with `options`; `IORING_SETUP_SUBMIT_ALL` when the kernel has it
    /// (an op that fails to queue does not stop the ones after it).
    /// See io_uring_queue_init_params(3).
    pub fn with_options(options: RingOptions) -> Result<Ring> {
        if options.entries == 0 || options.entries > MAX_ENTRIES {
            return Err(Error::InvalidArgument("entries must be in 1..=32768"));
        }
        if let Some(cq) = options.cq_entries {
            if cq < options.entries || cq > 2 * MAX_ENTRIES {
                return Err(Error::InvalidArgument(
                    "cq_entries must be at least entries and at most 65536",
                ));
            }
        }
        let built = Setup::new(options.entries)
            .cq_entries(options.cq_entries)
            .defer_taskrun(options.defer_taskrun)
            .build()?;
        let ext_arg = built.ring.params().is_feature_ext_arg();
        let skip_cqe = built.ring.params().is_feature_skip_cqe_on_success();
        Ok(Ring {
            ring: built.ring,
            slots: Slots::default(),
            ready: VecDeque::new(),
            groups: HashMap::new(),
            scratch: Vec::new(),
            data_pool: Vec::new(),
            next_flags: SqeFlags::empty(),
            chain: PendingChain::default(),
            skip_cqe,
            fixed: None,
            files: 0,
            defer_taskrun: built.defer_taskrun,
            ext_arg,
            closed: false,
        })
    }

    /// Whether the ring runs with `SINGLE_ISSUER | DEFER_TASKRUN`.
    pub fn defer_taskrun(&self) -> bool {
        self.defer_taskrun
    }

    /// The ring's own fd (for `poll`ing it, or for display).
    pub fn as_raw_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    /// Submission queue size, as the kernel rounded it.
    pub fn sq_entries(&self) -> u32 {
        self.ring.params().sq_entries()
    }

    /// Completion queue size, as the kernel rounded it.
    pub fn cq_entries(&self) -> u32 {
        self.ring.params().cq_entries()
    }

    /// Ops queued or in flight whose last completion has not been reaped yet (a
    /// `skip_success` op counts until the ring knows it finished: see `chain.rs`).
    ///
    /// After [`wait`](Ring::wait) returned no completion, `in_flight() == 0` tells "nothing
    /// was left to wait for" from "the timeout passed".
    pub fn in_flight(&self) -> usize {
        self.slots.user_len()
    }

    /// Whether `IOSQE_CQE_SKIP_SUCCESS` works here (`IORING_FEAT_CQE_SKIP`, Linux 5.17).
    pub fn can_skip_success(&self) -> bool {
        self.skip_cqe
    }

    /// Completions reaped and waiting to be taken by [`wait`](Ring::wait) or
    /// [`pop_completion`](Ring::pop_completion).
    pub fn ready(&self) -> usize {
        self.ready.len()
    }

    /// Submits the queued ops: io_uring_enter(2) without waiting. Returns how many the
    /// kernel took. See io_uring_submit(3).
    pub fn submit(&mut self) -> Result<usize> {
        self.flush_chain()?;
        self.submit_queue()
    }

    /// Submits what is in the submission queue (a chain still being built stays back).
    pub(crate) fn submit_queue(&mut self) -> Result<usize> {
        if self.ring.submission().is_empty() {
            return Ok(0);
        }
        loop {
            match self.ring.submit() {
                Ok(n) => return Ok(n),
                Err(e) => match errno(&e) {
                    Errno::INTR => continue,
                    // Older kernels refuse new work while completions sit in the overflow
                    // list: flush them into our queue, then try once more.
                    Errno::BUSY => {
                        self.reap()?;
                        return self.ring.submit().map_err(|e| Error::Os(errno(&e)));
                    }
                    other => return Err(Error::Os(other)),
                },
            }
        }
    }

    /// Submits the queued ops and waits until at least `min_complete` completions are ready,
    /// `timeout` passes, or no op is left in flight; then returns every ready completion
    /// (possibly none). A signal ends the wait with `EINTR`; completions reaped so far stay
    /// ready for the next call. See io_uring_submit_and_wait_timeout(3).
    pub fn wait(
        &mut self,
        min_complete: usize,
        timeout: Option<Duration>,
    ) -> Result<Vec<Completion>> {
        self.wait_ready(min_complete, timeout)?;
        Ok(self.ready.drain(..).collect())
    }

    /// [`wait`](Ring::wait) without taking the completions: returns how many are ready.
    pub fn wait_ready(&mut self, min_complete: usize, timeout: Option<Duration>) -> Result<usize> {
        self.submit()?;
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            self.reap()?;
            if self.ready.len() >= min_complete || self.slots.is_empty() {
                return Ok(self.ready.len());
            }
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(self.ready.len()),
                },
            };
            self.enter_wait(min_complete - self.ready.len(), left)?;
        }
    }

    /// [`wait_ready`](Ring::wait_ready) in one io_uring_enter(2): what is already posted is
    /// reaped first; if that is enough (or `timeout` is zero) the queued ops are only
    /// submitted, else they are submitted by the same call that sleeps. An event loop's one
    /// syscall per iteration. A signal ends the wait with `EINTR`.
    /// See io_uring_submit_and_wait_timeout(3).
    pub fn enter(&mut self, min_complete: usize, timeout: Option<Duration>) -> Result<usize> {
        self.reap()?;
        if self.ready.len() >= min_complete
            || self.slots.is_empty()
            || timeout.is_some_and(|t| t.is_zero())
        {
            self.submit()?;
            if !self.ready.is_empty() || self.slots.is_empty() {
                return Ok(self.ready.len());
            }
            self.reap()?;
            return Ok(self.ready.len());
        }
        self.enter_wait(min_complete - self.ready.len(), timeout)?;
        self.reap()?;
        Ok(self.ready.len())
    }

    /// Whether the kernel holds completions that did not fit the completion queue
    /// (`IORING_SQ_CQ_OVERFLOW`); the next [`wait`](Ring::wait) flushes them, none is lost.
    pub fn cq_overflow_pending(&mut self) -> bool {
        self.ring.submission().cq_overflow()
    }

    /// Takes the oldest ready completion, without entering the kernel.
    pub fn pop_completion(&mut self) -> Option<Completion> {
        self.ready.pop_front()
    }

    /// Takes every ready completion, without entering the kernel.
    pub fn take_ready(&mut self) -> Vec<Completion> {
        self.ready.drain(..).collect()
    }

    /// Registers a provided-buffer ring for `group`: `count` buffers (a power of two up to
    /// 32768) of `size` bytes, for [`recv_multishot`](Ring::recv_multishot). Received bytes are
    /// copied out of a buffer into the completion and the buffer goes straight back to the
    /// ring. See io_uring_register_buf_ring(3), io_uring_setup_buf_ring(3).
    pub fn provide_buffers(&mut self, group: u16, count: u16, size: u32) -> Result<()> {
        if self.groups.contains_key(&group) {
            return Err(Error::InvalidArgument(
                "this buffer group is already provided",
            ));
        }
        let mut ring = BufRing::new(count, size)?;
        // SAFETY: `ring` goes into `self.groups` and is freed only after the group is
        // unregistered, or leaked when that fails or the ring's ops never completed
        // (`teardown`), so the kernel never sees freed memory.
        unsafe { ring.register(&self.ring, group) }.map_err(|e| Error::Os(errno(&e)))?;
        self.groups.insert(group, ring);
        Ok(())
    }

    /// Gives back the `data` of a provided-buffer completion once read, for the next ones to
    /// reuse: with many chunks per wait, allocating and freeing each made the allocator hand
    /// memory back to the kernel and fault it in again, a visible share of a streaming loop's
    /// CPU. The pool keeps at most one vector per provided buffer.
    pub fn recycle_data(&mut self, mut data: Vec<u8>) {
        let limit: usize = self.groups.values().map(|g| g.len()).sum();
        if self.data_pool.len() < limit && data.capacity() <= MAX_POOLED {
            data.clear();
            self.data_pool.push(data);
        }
    }

    /// Whether buffer group `group` is registered.
    pub fn has_group(&self, group: u16) -> bool {
        self.groups.contains_key(&group)
    }

    /// Cancels every op in flight, waits up to `timeout` for their completions, then
    /// releases everything. Returns whether every op completed (if not, the buffers of those
    /// that did not are leaked, never freed under the kernel). Dropping the ring does the
    /// same with [`CLOSE_TIMEOUT`].
    pub fn close(mut self, timeout: Duration) -> bool {
        self.teardown(timeout)
    }

    /// Queues one prepared entry for a new slot, with the pending SQE flags; on failure the
    /// slot (and what it owns) is released, since the kernel never saw it.
    pub(crate) fn push(&mut self, entry: squeue::Entry, slot: Slot) -> Result<()> {
        self.push_op(entry, slot, false)
    }

    /// Lets the cancels waiting for a finished op go on.
    pub(crate) fn notify_waiters(&mut self, waiters: Vec<usize>) {
        for waiter in waiters {
            if let Some(w) = self.slots.get_mut(waiter) {
                if let super::slots::Owned::Cancel(state) = &mut w.owned {
                    state.targets_left = state.targets_left.saturating_sub(1);
                }
            }
            self.finish_cancel_if_done(waiter);
        }
    }

    /// `IORING_REGISTER_FILES`: registers `fds` (-1 leaves a slot empty) as the ring's
    /// fixed files; ops then take an index ([`Target::Fixed`](super::Target::Fixed)) instead
    /// of an fd. The kernel holds its own reference to each file: closing an fd afterwards
    /// does not unregister it. See io_uring_register_files(3).
    pub fn register_files(&mut self, fds: &[RawFd]) -> Result<()> {
        if self.files > 0 {
            return Err(Error::InvalidArgument(
                "files are already registered (unregister_files first)",
            ));
        }
        if fds.is_empty() {
            return Err(Error::InvalidArgument("register at least one file"));
        }
        self.ring
            .submitter()
            .register_files(fds)
            .map_err(|e| Error::Os(errno(&e)))?;
        self.files = fds.len() as u32;
        Ok(())
    }

    /// `IORING_UNREGISTER_FILES`. Ops in flight on a fixed file keep their reference until
    /// they complete. See io_uring_unregister_files(3).
    pub fn unregister_files(&mut self) -> Result<()> {
        if self.files == 0 {
            return Err(Error::Os(Errno::NXIO));
        }
        self.ring
            .submitter()
            .unregister_files()
            .map_err(|e| Error::Os(errno(&e)))?;
        self.files = 0;
        Ok(())
    }

    /// How many files are registered.
    pub fn registered_files(&self) -> u32 {
        self.files
    }

    /// `IORING_REGISTER_BUFFERS`: `count` zeroed buffers of `size` bytes, owned by the ring
    /// and pinned by the kernel, for [`read_fixed`](Ring::read_fixed) and
    /// [`write_fixed`](Ring::write_fixed). Their bytes are only ever copied in
    /// ([`fill_fixed`](Ring::fill_fixed)) and out ([`fixed_bytes`](Ring::fixed_bytes), a
    /// `read_fixed` completion): no caller holds a pointer the kernel writes through.
    /// See io_uring_register_buffers(3).
    pub fn register_buffers(&mut self, count: u16, size: u32) -> Result<()> {
        if self.fixed.is_some() {
            return Err(Error::InvalidArgument(
                "buffers are already registered (unregister_buffers first)",
            ));
        }
        if count == 0 || size == 0 || size > 1 << 30 {
            return Err(Error::InvalidArgument(
                "count must be at least 1, size in 1..=1 GiB",
            ));
        }
        if u64::from(count) * u64::from(size) > 1 << 30 {
            return Err(Error::InvalidArgument("count * size must be at most 1 GiB"));
        }
        let mut bufs = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let mut b = Vec::new();
            b.try_reserve_exact(size as usize)
                .map_err(|_| Error::Os(Errno::NOMEM))?;
            b.resize(size as usize, 0u8);
            bufs.push(b.into_boxed_slice());
        }
        let iov: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: the buffers live in `self.fixed` until `unregister_buffers` succeeded, or
        // are leaked when ops that use them never completed (`teardown`); they never move
        // (boxed slices).
        unsafe { self.ring.submitter().register_buffers(&iov) }
            .map_err(|e| Error::Os(errno(&e)))?;
        self.fixed = Some(FixedBuffers { bufs });
        Ok(())
    }

    /// `IORING_UNREGISTER_BUFFERS` and frees them; `EBUSY` while an op using one is in
    /// flight (the kernel may still write into it). See io_uring_unregister_buffers(3).
    pub fn unregister_buffers(&mut self) -> Result<()> {
        if self.fixed.is_none() {
            return Err(Error::Os(Errno::NXIO));
        }
        if self.fixed_in_use(None) {
            return Err(Error::Os(Errno::BUSY));
        }
        self.ring
            .submitter()
            .unregister_buffers()
            .map_err(|e| Error::Os(errno(&e)))?;
        self.fixed = None;
        Ok(())
    }

    /// How many buffers are registered, and their size.
    pub fn registered_buffers(&self) -> Option<(u16, u32)> {
        self.fixed.as_ref().map(|f| {
            (
                f.bufs.len() as u16,
                f.bufs.first().map_or(0, |b| b.len() as u32),
            )
        })
    }

    /// Copies `data` into registered buffer `index` at `at`; `EBUSY` while an op using
    /// that buffer is in flight.
    pub fn fill_fixed(&mut self, index: u16, at: usize, data: &[u8]) -> Result<()> {
        self.fixed_ptr(index, 0)?;
        if self.fixed_in_use(Some(index)) {
            return Err(Error::Os(Errno::BUSY));
        }
        let buf = &mut self.fixed.as_mut().expect("checked above").bufs[usize::from(index)];
        let end = at
            .checked_add(data.len())
            .filter(|&e| e <= buf.len())
            .ok_or(Error::InvalidArgument("data does not fit the buffer"))?;
        buf[at..end].copy_from_slice(data);
        Ok(())
    }

    /// A copy of bytes `range` of registered buffer `index`; `EBUSY` while an op using that
    /// buffer is in flight.
    pub fn fixed_bytes(&self, index: u16, range: std::ops::Range<usize>) -> Result<Vec<u8>> {
        let f = self
            .fixed
            .as_ref()
            .ok_or(Error::InvalidArgument("no buffers registered"))?;
        let buf = f
            .bufs
            .get(usize::from(index))
            .ok_or(Error::InvalidArgument("no such registered buffer"))?;
        if self.fixed_in_use(Some(index)) {
            return Err(Error::Os(Errno::BUSY));
        }
        buf.get(range)
            .map(<[u8]>::to_vec)
            .ok_or(Error::InvalidArgument("range out of the buffer"))
    }

    /// The address of registered buffer `index`, checked to hold `len` bytes.
    pub(crate) fn fixed_ptr(&mut self, index: u16, len: usize) -> Result<*mut u8> {
        let f = self.fixed.as_mut().ok_or(Error::InvalidArgument(
            "no buffers registered (register_buffers first)",
        ))?;
        let buf = f
            .bufs
            .get_mut(usize::from(index))
            .ok_or(Error::InvalidArgument("no such registered buffer"))?;
        if len > buf.len() {
            return Err(Error::InvalidArgument("length is larger than the buffer"));
        }
        Ok(buf.as_mut_ptr())
    }

    /// Whether an op in flight uses registered buffer `index` (None: any).
    pub(crate) fn fixed_in_use(&self, index: Option<u16>) -> bool {
        self.slots.iter().any(|(_, s)| match s.owned {
            super::slots::Owned::FixedBuf(i) => index.is_none_or(|x| x == i),
            _ => false,
        })
    }

    /// Puts `entry` in the submission queue; a full queue is submitted and the push retried
    /// once, then the error is `EBUSY`.
    pub(crate) fn push_entry(&mut self, entry: squeue::Entry) -> Result<()> {
        // SAFETY: every pointer in an entry built by this module points into a heap
        // allocation owned by the op's slot (or by a registered buffer group), which stays
        // alive and in place until the op's last completion has been reaped (or is leaked).
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_ok() {
            return Ok(());
        }
        self.submit()?;
        // SAFETY: as above.
        unsafe { self.ring.submission().push(&entry) }.map_err(|_| Error::Os(Errno::BUSY))
    }

    /// Runs pending task work and flushes overflowed completions into the completion queue:
    /// io_uring_enter(2) with `IORING_ENTER_GETEVENTS`, submitting nothing, waiting for nothing.
    pub(crate) fn get_events(&self) -> Result<()> {
        // SAFETY: no argument pointer is passed (`None`), so the kernel reads nothing of ours
        // beyond the rings it mapped; to_submit = 0 queues nothing.
        let r = unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(0, 0, ENTER_GETEVENTS, None)
        };
        match r {
            Ok(_) => Ok(()),
            Err(e) => match errno(&e) {
                Errno::INTR | Errno::AGAIN | Errno::BUSY => Ok(()),
                other => Err(Error::Os(other)),
            },
        }
    }

    /// Submits and sleeps in the kernel until `want` completions are posted or `timeout`
    /// passes (`ETIME` is not an error here).
    fn enter_wait(&mut self, want: usize, timeout: Option<Duration>) -> Result<()> {
        self.flush_chain()?;
        let want = want.clamp(1, self.cq_entries() as usize);
        let r = match timeout {
            None => self.ring.submitter().submit_and_wait(want),
            Some(t) if self.ext_arg => {
                return enter_timeout(&self.ring, want, t).map_err(Error::Os)
            }
            Some(t) => return self.poll_wait(t),
        };
        match r {
            Ok(_) => Ok(()),
            Err(e) => match errno(&e) {
                Errno::TIME | Errno::BUSY | Errno::AGAIN => Ok(()),
                other => Err(Error::Os(other)),
            },
        }
    }

    /// Kernels before 5.11 (no `IORING_ENTER_EXT_ARG`): wait on the ring fd with poll(2).
    fn poll_wait(&mut self, timeout: Duration) -> Result<()> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        self.submit()?;
        let ts = Timespec {
            tv_sec: timeout.as_secs() as _,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        let mut fds = [PollFd::from_borrowed_fd(
            // SAFETY: the ring fd is open for as long as `self.ring` lives, which outlasts
            // this call.
            unsafe { std::os::fd::BorrowedFd::borrow_raw(self.ring.as_raw_fd()) },
            PollFlags::IN,
        )];
        match poll(&mut fds, Some(&ts)) {
            Ok(_) => Ok(()),
            Err(e) => Err(Error::Os(e)),
        }
    }

    /// Cancels everything in flight and waits (bounded) for the completions; then frees what
    /// the ops owned, or leaks what the kernel may still use.
    fn teardown(&mut self, timeout: Duration) -> bool {
        if self.closed {
            return true;
        }
        self.closed = true;
        let _ = self.submit();
        let targets: Vec<usize> = self
            .slots
            .iter()
            .filter(|(_, s)| s.op != super::OpKind::Cancel)
            .map(|(id, _)| id)
            .collect();
        for id in targets {
            let cancel = opcode::AsyncCancel::new(self.slots.key(id))
                .build()
                .user_data(TEARDOWN);
            if self.push_entry(cancel).is_err() {
                break;
            }
        }
        let complete = drain(self, timeout);
        // Completions nobody will read: dropping them closes fds that accepts created.
        self.ready.clear();
        if !complete {
            return false;
        }
        for (group, ring) in std::mem::take(&mut self.groups) {
            if self.ring.submitter().unregister_buf_ring(group).is_err() {
                leak(ring);
            }
        }
        if let Some(fixed) = self.fixed.take() {
            if self.ring.submitter().unregister_buffers().is_err() {
                leak(fixed);
            }
        }
        true
    }
}

impl InFlight for Ring {
    fn in_flight(&self) -> bool {
        !self.slots.is_empty()
    }

    fn complete_some(&mut self, max: Duration) -> bool {
        match self.enter_wait(1, Some(max)) {
            Ok(()) | Err(Error::Os(Errno::INTR)) => {}
            Err(_) => return false,
        }
        let reaped = self.reap();
        // Completions nobody will read: dropping them closes fds that accepts created.
        self.ready.clear();
        reaped.is_ok()
    }

    fn leak_in_flight(&mut self) {
        // The kernel may still write into these: never free them.
        leak(std::mem::take(&mut self.slots));
        leak(std::mem::take(&mut self.groups));
        leak(self.fixed.take());
    }
}

/// The ring's registered buffers: boxed slices, never moved or freed while registered.
pub(crate) struct FixedBuffers {
    pub bufs: Vec<Box<[u8]>>,
}

// A ring may move to another thread (the Python binding keeps it behind a mutex).
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<Ring>();
};

impl Drop for Ring {
    fn drop(&mut self) {
        self.teardown(CLOSE_TIMEOUT);
    }
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("fd", &self.ring.as_raw_fd())
            .field("sq_entries", &self.sq_entries())
            .field("cq_entries", &self.cq_entries())
            .field("defer_taskrun", &self.defer_taskrun)
            .field("in_flight", &self.slots.len())
            .field("ready", &self.ready.len())
            .finish()
    }
}
