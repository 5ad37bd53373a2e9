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
        let key = cqe.user_data();
        if key >= TEARDOWN {
            return;
        }
        // A key of a slot already released (a chain the kernel cut short) names nothing.
        let Some(id) = self.slots.id_of(key) else {
            return;
        };
        let res = cqe.result();
        let raw_flags = cqe.flags();
        if let Some(Owned::Cancel(state)) = self.slots.get_mut(id).map(|s| &mut s.owned) {
            state.requests_left = state.requests_left.saturating_sub(1);
            if res < 0 && state.result == 0 {
                state.result = res;
            }
            self.finish_cancel_if_done(id);
            return;
        }
        self.chain_complete(id);
        let Some(slot) = self.slots.get_mut(id) else {
            return;
        };
        let flags = flags_from_cqe(raw_flags);
        let mut c = Completion {
            user_data: slot.user_data,
            op: slot.op,
            result: res,
            flags,
            buffer_id: None,
            data: None,
            target: slot.target,
            address: None,
            statx: None,
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
            // SAFETY: for socket, accept and openat a non-negative result is a new fd the
            // kernel just installed for this op; nothing else in the process knows its
            // number yet.
            c.fd = Some(unsafe { OwnedFd::from_raw_fd(res) });
        }
        if flags.contains(CompletionFlags::MORE) {
            self.ready.push_back(c);
            return;
        }
        let Some(slot) = self.slots.remove(id) else {
            return;
        };
        self.unlink(&slot);
        let mut slot = slot;
        if res == -libc::ECANCELED {
            slot.owned.never_ran();
        }
        match slot.owned {
            Owned::Fill(mut buf) if res >= 0 => {
                let written = match slot.op {
                    // The result counts events, each EVENT_SIZE bytes.
                    OpKind::EpollWait => {
                        (res as usize).saturating_mul(super::epoll_wait::EVENT_SIZE)
                    }
                    _ => res as usize,
                };
                let n = written.min(buf.capacity());
                // SAFETY: the kernel wrote `written` bytes at the start of the allocation (a
                // receive or read never reports more than the length it was given, an epoll
                // wait never more events than it was given room for: the capacity), so the
                // first `n` bytes are initialised.
                unsafe { buf.set_len(n) };
                c.data = Some(buf);
            }
            Owned::PeerAddr(addr) if res >= 0 => {
                let len = addr.1 as usize;
                if len >= std::mem::size_of::<libc::sa_family_t>()
                    && len <= std::mem::size_of::<libc::sockaddr_storage>()
                {
                    // SAFETY: the kernel wrote a `len`-byte address of the peer.
                    c.address = Some(unsafe {
                        rustix::net::SocketAddrAny::read((&raw const addr.0).cast(), len as u32)
                    });
                }
            }
            Owned::Statx(parts) if res >= 0 => {
                c.statx = Some(super::completion::Statx::from_raw(&parts.1));
            }
            Owned::Msg(mut parts) if res >= 0 && slot.op == OpKind::RecvMsg => {
                c.address = parts.address_of();
                let mut buf = std::mem::take(&mut parts.fill);
                let n = (res as usize).min(buf.capacity());
                // SAFETY: as for `Fill`: the kernel wrote the first `res` bytes.
                unsafe { buf.set_len(n) };
                c.data = Some(buf);
            }
            Owned::FixedBuf(index) if res >= 0 && slot.op == OpKind::ReadFixed => {
                if let Some(f) = &self.fixed {
                    if let Some(b) = f.bufs.get(usize::from(index)) {
                        c.data = Some(b[..(res as usize).min(b.len())].to_vec());
                    }
                }
            }
            // Whatever else the op lent the kernel (data, address, timespec, path) is
            // released here.
            _ => {}
        }
        if !slot.internal {
            self.ready.push_back(c);
        }
        self.notify_waiters(slot.waiters);
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
            target: None,
            address: None,
            statx: None,
            fd: None,
        });
    }
}
