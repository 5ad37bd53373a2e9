//! Linked chains: how an op is queued with `IOSQE_*` flags ([`SqeFlags`], defined in
//! `sqe.rs`), how a chain of linked ops reaches the kernel whole, and how the ring knows when
//! ops that post no completion (`IOSQE_CQE_SKIP_SUCCESS`) are finished.
//!
//! - A chain is every op queued with [`SqeFlags::IO_LINK`] or [`SqeFlags::IO_HARDLINK`] plus
//!   the first op after them without either. The kernel only links entries it takes in one
//!   io_uring_enter(2), so the ring holds a chain back until it is complete (or until the next
//!   submit, which ends it as it stands, as the kernel would) and then queues it in one piece.
//! - Linked ops run one after another: a completion of an op in a chain means every op before
//!   it in the chain has finished (a `link_timeout` aside: it runs beside the op it guards).
//!   So a `skip_success` op still in flight when a later op of its chain completes succeeded,
//!   and its slot (buffers, path, address) is released then.
//! - A `skip_success` op that posts a completion failed (the kernel only skips successes).
//!   If it was linked (not hardlinked) the kernel cancels the rest of its chain *without*
//!   completions (`REQ_F_SKIP_LINK_CQES`); those ops never started, so the ring releases them
//!   at once. A stray completion for one of them would name an old generation of its slot
//!   and is ignored.
//! - A chain whose last op (or last op before a trailing `link_timeout`) is `skip_success`
//!   would give no sign of its end: the ring links one `IORING_OP_NOP` of its own (the
//!   witness) after it, never reported and not counted in [`Ring::in_flight`].
//!
//! See io_uring_enter(2) (`IOSQE_IO_LINK`, `IOSQE_CQE_SKIP_SUCCESS`), io_uring_prep_link_timeout(3).

use super::completion::OpKind;
use super::ring::Ring;
use super::slots::{Owned, Slot};
use super::sqe::{linked, SqeFlags};
use crate::error::{Error, Result};
use io_uring::{opcode, squeue};
use rustix::io::Errno;

impl Ring {
    /// Queues the op `f` queues with the SQE `flags`: `ring.with_flags(SqeFlags::IO_LINK, |r|
    /// r.read(fd, 64, None, 1))`. Ops that queue nothing or several kernel requests
    /// (`cancel`) refuse `IO_LINK`, `IO_HARDLINK` and `SKIP_SUCCESS`.
    pub fn with_flags<T>(
        &mut self,
        flags: SqeFlags,
        f: impl FnOnce(&mut Ring) -> Result<T>,
    ) -> Result<T> {
        self.next_flags = flags;
        let r = f(self);
        self.next_flags = SqeFlags::empty();
        r
    }

    /// Whether ops are being linked (the last op queued had `IO_LINK` or `IO_HARDLINK`).
    pub fn chain_open(&self) -> bool {
        self.chain.tail.is_some()
    }

    /// The flags for the op being queued now (taken: they apply to one op).
    pub(crate) fn take_flags(&mut self) -> SqeFlags {
        std::mem::replace(&mut self.next_flags, SqeFlags::empty())
    }

    /// Checks `flags` against the op in `slot`; `multishot` for ops that stay armed.
    fn check_flags(&self, flags: SqeFlags, slot: &Slot, multishot: bool) -> Result<()> {
        if flags.intersects(SqeFlags::FIXED_FILE | SqeFlags::BUFFER_SELECT) {
            return Err(Error::InvalidArgument(
                "FIXED_FILE and BUFFER_SELECT are set by the ring (a Target::Fixed fd, a buffer group)",
            ));
        }
        if flags.contains(SqeFlags::IO_LINK | SqeFlags::IO_HARDLINK) {
            return Err(Error::InvalidArgument(
                "link and hardlink exclude each other",
            ));
        }
        let skip = flags.contains(SqeFlags::SKIP_SUCCESS);
        if skip && !self.skip_cqe {
            return Err(Error::Os(Errno::OPNOTSUPP));
        }
        if multishot && (linked(flags) || skip) {
            return Err(Error::InvalidArgument(
                "a multishot op cannot be linked or skip_success",
            ));
        }
        if skip && (slot.op.creates_fd() || slot.op == OpKind::SendZc) {
            return Err(Error::InvalidArgument(
                "skip_success would lose this op's result (a new fd, or send_zc's notification)",
            ));
        }
        if slot.op == OpKind::LinkTimeout {
            match self.chain.tail.and_then(|k| self.slots.id_of(k)) {
                Some(prev)
                    if self
                        .slots
                        .get(prev)
                        .is_some_and(|s| s.op != OpKind::LinkTimeout) => {}
                _ => {
                    return Err(Error::InvalidArgument(
                        "link_timeout must follow an op queued with link or hardlink",
                    ))
                }
            }
        }
        let chained = linked(flags) || self.chain_open() || skip;
        // The chain so far, this op and a possible witness go to the kernel in one piece.
        if chained && self.chain.entries.len() + 2 > self.sq_entries() as usize {
            return Err(Error::InvalidArgument(
                "a linked chain must fit the submission queue (entries - 1 ops)",
            ));
        }
        Ok(())
    }

    /// Queues `entry` for a new `slot` with the pending flags: straight into the submission
    /// queue, or into the chain being built. On failure nothing is queued and the slot (with
    /// what it owns) is released.
    pub(crate) fn push_op(
        &mut self,
        entry: squeue::Entry,
        mut slot: Slot,
        multishot: bool,
    ) -> Result<()> {
        let flags = self.take_flags();
        self.check_flags(flags, &slot, multishot)?;
        let mut entry = entry.flags(flags);
        if matches!(slot.target, Some(super::OpFd::Fixed(_))) {
            entry = entry.flags(squeue::Flags::FIXED_FILE);
        }
        slot.flags = flags;
        let chained = linked(flags) || self.chain_open() || flags.contains(SqeFlags::SKIP_SUCCESS);
        if !chained {
            let id = self.slots.insert(slot);
            let key = self.slots.key(id);
            return match self.push_entry(entry.user_data(key)) {
                Ok(()) => Ok(()),
                Err(e) => {
                    self.slots.remove(id);
                    Err(e)
                }
            };
        }
        slot.prev = self.chain.tail;
        let id = self.slots.insert(slot);
        let key = self.slots.key(id);
        if let Some(prev) = self.chain.tail.and_then(|k| self.slots.id_of(k)) {
            if let Some(p) = self.slots.get_mut(prev) {
                p.next = Some(key);
            }
        }
        self.chain.entries.push(entry.user_data(key));
        if linked(flags) {
            self.chain.tail = Some(key);
            Ok(())
        } else {
            self.chain.tail = Some(key);
            self.flush_chain()
        }
    }

    /// Ends the chain being built (as it stands) and moves it into the submission queue,
    /// with a witness when its end would post nothing. If the queue cannot make room, the
    /// chain stays pending for the next submit.
    pub(crate) fn flush_chain(&mut self) -> Result<()> {
        if self.chain.entries.is_empty() {
            self.chain.tail = None;
            return Ok(());
        }
        if self.needs_witness() {
            let prev = self.chain.tail;
            let mut nop = Slot::new(0, OpKind::Nop, Owned::Nothing);
            nop.internal = true;
            nop.prev = prev;
            let id = self.slots.insert(nop);
            let key = self.slots.key(id);
            if let Some(p) = prev.and_then(|k| self.slots.id_of(k)) {
                if let Some(p) = self.slots.get_mut(p) {
                    p.next = Some(key);
                }
            }
            if let Some(last) = self.chain.entries.pop() {
                let hard = self
                    .chain
                    .tail
                    .and_then(|k| self.slots.id_of(k))
                    .and_then(|i| self.slots.get(i))
                    .is_some_and(|s| s.flags.contains(SqeFlags::IO_HARDLINK));
                let link = if hard {
                    squeue::Flags::empty()
                } else {
                    squeue::Flags::IO_LINK
                };
                self.chain.entries.push(last.flags(link));
            }
            self.chain
                .entries
                .push(opcode::Nop::new().build().user_data(key));
            self.chain.tail = Some(key);
        }
        let n = self.chain.entries.len();
        let free = |r: &mut Ring| {
            let sq = r.ring.submission();
            sq.capacity() - sq.len()
        };
        if free(self) < n {
            self.submit_queue()?;
            if free(self) < n {
                return Ok(()); // stays pending; the next submit tries again
            }
        }
        let entries = std::mem::take(&mut self.chain.entries);
        self.chain.tail = None;
        for e in entries {
            // SAFETY: as in `push_entry`: every pointer in these entries points into an
            // allocation its slot owns until its last completion; room was checked above.
            let pushed = unsafe { self.ring.submission().push(&e) };
            if pushed.is_err() {
                return Err(Error::Os(Errno::BUSY)); // unreachable: room was checked
            }
        }
        Ok(())
    }

    /// Whether the chain being flushed ends in ops that may post nothing: some op is
    /// `skip_success` and no plain op (neither `skip_success` nor a `link_timeout`) follows it.
    fn needs_witness(&self) -> bool {
        let mut key = self.chain.tail;
        while let Some(id) = key.and_then(|k| self.slots.id_of(k)) {
            let Some(s) = self.slots.get(id) else { break };
            if s.flags.contains(SqeFlags::SKIP_SUCCESS) {
                return true;
            }
            if s.op != OpKind::LinkTimeout {
                return false;
            }
            key = s.prev;
        }
        false
    }

    /// Chain bookkeeping for a completion of slot `id` (called before it is handled):
    /// earlier `skip_success` ops of its chain are done; a `skip_success` op that posts has
    /// failed, and when it was linked the rest of its chain was cancelled without completions.
    pub(crate) fn chain_complete(&mut self, id: usize) {
        let Some(slot) = self.slots.get(id) else {
            return;
        };
        if slot.prev.is_none() && slot.next.is_none() {
            return;
        }
        let (op, flags, prev, next) = (slot.op, slot.flags, slot.prev, slot.next);
        if op != OpKind::LinkTimeout {
            let mut key = prev;
            while let Some(p) = key.and_then(|k| self.slots.id_of(k)) {
                let Some(s) = self.slots.get(p) else { break };
                key = s.prev;
                if s.flags.contains(SqeFlags::SKIP_SUCCESS) {
                    self.release(p, false);
                }
            }
            // A skip_success link_timeout guarding this op posts nothing once it is disarmed.
            if let Some(n) = next.and_then(|k| self.slots.id_of(k)) {
                if self.slots.get(n).is_some_and(|s| {
                    s.op == OpKind::LinkTimeout && s.flags.contains(SqeFlags::SKIP_SUCCESS)
                }) {
                    self.release(n, false);
                }
            }
        }
        if flags.contains(SqeFlags::SKIP_SUCCESS) && !flags.contains(SqeFlags::IO_HARDLINK) {
            let mut key = next;
            while let Some(n) = key.and_then(|k| self.slots.id_of(k)) {
                let Some(s) = self.slots.get(n) else { break };
                key = s.next;
                self.release(n, true);
            }
        }
    }

    /// Releases slot `id` without a completion (the kernel posts none for it), unlinking it
    /// from its chain and letting cancels waiting for it go on; `cancelled`: it never ran.
    fn release(&mut self, id: usize, cancelled: bool) {
        let Some(mut slot) = self.slots.remove(id) else {
            return;
        };
        if cancelled {
            slot.owned.never_ran();
        }
        let (prev, next) = (slot.prev, slot.next);
        if let Some(p) = prev.and_then(|k| self.slots.id_of(k)) {
            if let Some(p) = self.slots.get_mut(p) {
                p.next = next;
            }
        }
        if let Some(n) = next.and_then(|k| self.slots.id_of(k)) {
            if let Some(n) = self.slots.get_mut(n) {
                n.prev = prev;
            }
        }
        self.notify_waiters(slot.waiters);
    }

    /// Unlinks a slot just removed after its last completion from its chain.
    pub(crate) fn unlink(&mut self, slot: &Slot) {
        if let Some(p) = slot.prev.and_then(|k| self.slots.id_of(k)) {
            if let Some(p) = self.slots.get_mut(p) {
                p.next = slot.next;
            }
        }
        if let Some(n) = slot.next.and_then(|k| self.slots.id_of(k)) {
            if let Some(n) = self.slots.get_mut(n) {
                n.prev = slot.prev;
            }
        }
    }
}
