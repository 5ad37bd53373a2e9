//! The ring's bookkeeping of ops in flight: one slot per op, keyed by the internal
//! `user_data` the kernel sees, holding everything the kernel may read or write until the op's
//! last completion arrives.
//!
//! Every resource the kernel is pointed at lives on the heap (a `Vec`'s or a `Box`'s
//! allocation), never inline in a [`Slot`]: slots move when the table grows, their heap
//! allocations do not.

use super::completion::OpKind;
use io_uring::types::Timespec;
use rustix::net::SocketAddrAny;

/// What an op lends the kernel until it completes. Some variants are never read back: they
/// exist to keep an allocation alive while the kernel points into it.
#[allow(dead_code)]
pub(crate) enum Owned {
    /// Nothing (nop, close, shutdown, splice, poll, …).
    Nothing,
    /// A buffer the kernel fills (`recv`, `read`): the allocation is `capacity` bytes, the
    /// kernel writes its first `result` bytes.
    Fill(Vec<u8>),
    /// Bytes the kernel reads (`send`, `send_zc`, `write`).
    Data(Box<dyn AsRef<[u8]> + Send>),
    /// The address of a `connect`.
    Addr(Box<SocketAddrAny>),
    /// The duration of a `timeout`.
    Time(Box<Timespec>),
    /// A multishot receive's provided-buffer group.
    Group(u16),
    /// A cancel: its completion is held back until the kernel answered every cancel request
    /// it was split into and every target has completed.
    Cancel(CancelState),
}

/// The progress of one [`Owned::Cancel`].
pub(crate) struct CancelState {
    /// Kernel cancel requests not yet answered.
    pub requests_left: u32,
    /// Target ops not yet finished.
    pub targets_left: u32,
    /// The result to report: 0, or the first error the kernel answered.
    pub result: i32,
}

/// One op in flight.
pub(crate) struct Slot {
    /// The caller's `user_data`.
    pub user_data: u64,
    /// The op.
    pub op: OpKind,
    /// What it lends the kernel.
    pub owned: Owned,
    /// Cancels (slot ids) waiting for this op to finish.
    pub waiters: Vec<usize>,
}

impl Slot {
    pub fn new(user_data: u64, op: OpKind, owned: Owned) -> Slot {
        Slot {
            user_data,
            op,
            owned,
            waiters: Vec::new(),
        }
    }
}

/// A slab of slots: ids are indices, freed ids are reused.
#[derive(Default)]
pub(crate) struct Slots {
    entries: Vec<Option<Slot>>,
    free: Vec<usize>,
    len: usize,
}

impl Slots {
    /// Stores `slot`; returns its id.
    pub fn insert(&mut self, slot: Slot) -> usize {
        self.len += 1;
        if let Some(id) = self.free.pop() {
            self.entries[id] = Some(slot);
            id
        } else {
            self.entries.push(Some(slot));
            self.entries.len() - 1
        }
    }

    /// Removes and returns the slot `id`, if occupied.
    pub fn remove(&mut self, id: usize) -> Option<Slot> {
        let slot = self.entries.get_mut(id)?.take()?;
        self.len -= 1;
        self.free.push(id);
        Some(slot)
    }

    pub fn get_mut(&mut self, id: usize) -> Option<&mut Slot> {
        self.entries.get_mut(id)?.as_mut()
    }

    /// How many ops are in flight.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ids of the ops in flight whose caller `user_data` is `user_data`, cancels excluded.
    pub fn ids_with_user_data(&self, user_data: u64) -> Vec<usize> {
        self.iter()
            .filter(|(_, s)| s.user_data == user_data && s.op != OpKind::Cancel)
            .map(|(id, _)| id)
            .collect()
    }

    /// The occupied slots with their ids.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Slot)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(id, s)| s.as_ref().map(|s| (id, s)))
    }
}
