//! Reaping: completion queue entries become [`Completion`]s, slots are released when their
//! op's last completion arrives, and cancels are released only after their targets.
//!
//! Nothing is lost on a completion queue overflow: with `IORING_FEAT_NODROP` the kernel keeps
//! the extra entries and raises `IORING_SQ_CQ_OVERFLOW`; reaping then enters the kernel with
//! `GETEVENTS` to flush them, and repeats until the flag is gone. See io_uring_enter(2)
//! (`IORING_FEAT_NODROP`), io_uring_peek_cqe(3).

use super::completion::{flags_from_cqe, Completion, CompletionFlags, OpKind};
use super::ring::{Ring, TEARDOWN};
use super::slots::Owned;
use crate::error::Result;
use io_uring::cqueue;
use std::os::fd::{FromRawFd, OwnedFd};

impl Ring {
    /// Moves every posted completion into the ready queue (running deferred task work and
    /// flushing overflowed entries first when needed).
    pub(crate) fn reap(&mut self) -> Result<()> {
        if self.defer_taskrun()
            || self.ring.submission().taskrun()
            || self.ring.submission().cq_overflow()
        {
            self.get_events()?;
        }
        loop {
            let mut batch = std::mem::take(&mut self.scratch);
            batch.extend(self.ring.completion());
            for cqe in batch.drain(..) {
                self.complete(cqe);
            }
            self.scratch = batch;
            if !self.ring.submission().cq_overflow() {
                return Ok(());
            }
            self.get_events()?;
        }
    }

    /// Handles one completion queue entry.
    fn complete(&mut self, cqe: cqueue::Entry) {
        let id = cqe.user_data();
        if id >= TEARDOWN {
            return;
        }
        let id = id as usize;
        let res = cqe.result();
        let raw_flags = cqe.flags();
        let Some(slot) = self.slots.get_mut(id) else {
            return;
        };
        if let Owned::Cancel(state) = &mut slot.owned {
            state.requests_left = state.requests_left.saturating_sub(1);
            if res < 0 && state.result == 0 {
                state.result = res;
            }
            self.finish_cancel_if_done(id);
            return;
        }
        let flags = flags_from_cqe(raw_flags);
        let mut c = Completion {
            user_data: slot.user_data,
            op: slot.op,
            result: res,
            flags,
            buffer_id: None,
            data: None,
            fd: None,
        };
        if let Some(bid) = cqueue::buffer_select(raw_flags) {
            c.buffer_id = Some(bid);
            if let Owned::Group(group) = slot.owned {
                if let Some(ring) = self.groups.get_mut(&group) {
                    let mut data = self.data_pool.pop().unwrap_or_default();
                    if ring.take_into(bid, res.max(0) as usize, &mut data) {
                        c.data = Some(data);
                    }
                }
            }
        } else if slot.op == OpKind::RecvMulti && res >= 0 {
            c.data = Some(Vec::new());
        }
        if slot.op.creates_fd() && res >= 0 {
            // SAFETY: for socket and accept a non-negative result is a new fd the kernel just
            // installed for this op; nothing else in the process knows its number yet.
            c.fd = Some(unsafe { OwnedFd::from_raw_fd(res) });
        }
        if flags.contains(CompletionFlags::MORE) {
            self.ready.push_back(c);
            return;
        }
        let Some(slot) = self.slots.remove(id) else {
            return;
        };
        if let Owned::Fill(mut buf) = slot.owned {
            if res >= 0 {
                let n = (res as usize).min(buf.capacity());
                // SAFETY: the kernel wrote `res` bytes at the start of the allocation (a
                // receive or read never reports more than the length it was given, which was
                // the capacity), so the first `n` bytes are initialised.
                unsafe { buf.set_len(n) };
                c.data = Some(buf);
            }
        }
        // Whatever else the op lent the kernel (data, address, timespec) is released here.
        self.ready.push_back(c);
        for waiter in slot.waiters {
            if let Some(w) = self.slots.get_mut(waiter) {
                if let Owned::Cancel(state) = &mut w.owned {
                    state.targets_left = state.targets_left.saturating_sub(1);
                }
            }
            self.finish_cancel_if_done(waiter);
        }
    }

    /// Releases a cancel's completion once the kernel answered all its requests and all its
    /// targets completed.
    pub(crate) fn finish_cancel_if_done(&mut self, id: usize) {
        let Some(slot) = self.slots.get_mut(id) else {
            return;
        };
        let Owned::Cancel(state) = &slot.owned else {
            return;
        };
        if state.requests_left > 0 || state.targets_left > 0 {
            return;
        }
        let result = state.result;
        let user_data = slot.user_data;
        self.slots.remove(id);
        self.ready.push_back(Completion {
            user_data,
            op: OpKind::Cancel,
            result,
            flags: CompletionFlags::empty(),
            buffer_id: None,
            data: None,
            fd: None,
        });
    }
}
