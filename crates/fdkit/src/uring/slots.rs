//! The ring's bookkeeping of ops in flight: one slot per op, keyed by the internal
//! `user_data` the kernel sees, holding everything the kernel may read or write until the op's
//! last completion arrives.
//!
//! Every resource the kernel is pointed at lives on the heap (a `Vec`'s or a `Box`'s
//! allocation), never inline in a [`Slot`]: slots move when the table grows, their heap
//! allocations do not.

use super::completion::{OpFd, OpKind};
use super::sqe::SqeFlags;
use io_uring::types::Timespec;
use rustix::net::SocketAddrAny;
use std::ffi::CString;

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
    /// Where an `accept` writes the peer's address, and its length.
    PeerAddr(Box<(libc::sockaddr_storage, libc::socklen_t)>),
    /// The path of an `openat`.
    Path(CString),
    /// The path of a `statx` and the buffer the kernel fills.
    Statx(Box<(CString, libc::statx)>),
    /// The message header, iovecs, bytes and address of a `sendmsg` or `recvmsg`.
    Msg(Box<MsgParts>),
    /// A registered buffer (its index) a `read_fixed` fills or a `write_fixed` reads.
    FixedBuf(u16),
    /// The fd a `close_fd` hands the kernel: the ring closes it itself if the op is
    /// cancelled before it ran (a failed link), so it never stays open unowned.
    Closing(std::os::fd::RawFd),
}

impl Owned {
    /// Called when the op never ran (cancelled in its chain): closes a `close_fd`'s fd.
    pub fn never_ran(&mut self) {
        if let Owned::Closing(fd) = *self {
            // SAFETY: the caller handed this fd to the ring to close and the op that would
            // have closed it never ran, so the number is still the one we were given.
            drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
            *self = Owned::Nothing;
        }
    }
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
    /// The fd the op is on, reported in its completions.
    pub target: Option<OpFd>,
    /// The SQE flags it was queued with.
    pub flags: SqeFlags,
    /// The previous and next ops of its linked chain (slot keys), if any.
    pub prev: Option<u64>,
    pub next: Option<u64>,
    /// An op the ring queued for itself (the witness ending a chain of `skip_success` ops):
    /// its completion is not reported and it is not counted in flight.
    pub internal: bool,
}

impl Slot {
    pub fn new(user_data: u64, op: OpKind, owned: Owned) -> Slot {
        Slot {
            user_data,
            op,
            owned,
            waiters: Vec::new(),
            target: None,
            flags: SqeFlags::empty(),
            prev: None,
            next: None,
            internal: false,
        }
    }

    /// The same slot, reporting `target` as the fd its op is on.
    pub fn on(mut self, target: OpFd) -> Slot {
        self.target = Some(target);
        self
    }
}

/// A slab of slots: ids are indices, freed ids are reused. Each use of an id has a
/// generation; the kernel sees the pair as the op's key ([`Slots::key`]), so a completion
/// for an op the ring already released (a chain the kernel cut short without completions,
/// see `chain.rs`) never lands on the op that reuses its id.
#[derive(Default)]
pub(crate) struct Slots {
    entries: Vec<(u32, Option<Slot>)>,
    free: Vec<usize>,
    len: usize,
    internal: usize,
}

/// Generations wrap at 2^31, so keys stay clear of the reserved values near `u64::MAX`.
const GEN_MASK: u32 = 0x7fff_ffff;

impl Slots {
    /// Stores `slot`; returns its id.
    pub fn insert(&mut self, slot: Slot) -> usize {
        self.len += 1;
        if slot.internal {
            self.internal += 1;
        }
        if let Some(id) = self.free.pop() {
            let e = &mut self.entries[id];
            e.0 = e.0.wrapping_add(1) & GEN_MASK;
            e.1 = Some(slot);
            id
        } else {
            self.entries.push((0, Some(slot)));
            self.entries.len() - 1
        }
    }

    /// The key the kernel sees for slot `id`: its generation and id.
    pub fn key(&self, id: usize) -> u64 {
        let gen = self.entries.get(id).map_or(0, |e| e.0);
        (u64::from(gen) << 32) | id as u64
    }

    /// The slot id a key names, if that use of the id is still in flight.
    pub fn id_of(&self, key: u64) -> Option<usize> {
        let id = (key & 0xffff_ffff) as usize;
        let gen = (key >> 32) as u32;
        match self.entries.get(id) {
            Some((g, Some(_))) if *g == gen => Some(id),
            _ => None,
        }
    }

    /// Removes and returns the slot `id`, if occupied.
    pub fn remove(&mut self, id: usize) -> Option<Slot> {
        let slot = self.entries.get_mut(id)?.1.take()?;
        self.len -= 1;
        if slot.internal {
            self.internal -= 1;
        }
        self.free.push(id);
        Some(slot)
    }

    pub fn get(&self, id: usize) -> Option<&Slot> {
        self.entries.get(id)?.1.as_ref()
    }

    pub fn get_mut(&mut self, id: usize) -> Option<&mut Slot> {
        self.entries.get_mut(id)?.1.as_mut()
    }

    /// How many ops are in flight (the ring's own witnesses included).
    pub fn len(&self) -> usize {
        self.len
    }

    /// How many of the caller's ops are in flight.
    pub fn user_len(&self) -> usize {
        self.len - self.internal
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ids of the ops in flight whose caller `user_data` is `user_data`, cancels excluded.
    pub fn ids_with_user_data(&self, user_data: u64) -> Vec<usize> {
        self.iter()
            .filter(|(_, s)| s.user_data == user_data && s.op != OpKind::Cancel && !s.internal)
            .map(|(id, _)| id)
            .collect()
    }

    /// The occupied slots with their ids.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Slot)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(id, s)| s.1.as_ref().map(|s| (id, s)))
    }
}

/// What a `sendmsg` or `recvmsg` lends the kernel: the header, its iovecs, the bytes (sent,
/// or the buffer filled) and the address. Boxed: the header points into the box.
pub(crate) struct MsgParts {
    pub hdr: libc::msghdr,
    pub iov: Vec<libc::iovec>,
    pub data: Vec<Box<dyn AsRef<[u8]> + Send>>,
    pub fill: Vec<u8>,
    pub addr: libc::sockaddr_storage,
}

// SAFETY: the raw pointers in `hdr` and `iov` point into this same box (`addr`, `iov`) or
// into the heap allocations of `data` and `fill`, which move with it; nothing is shared.
unsafe impl Send for MsgParts {}

impl MsgParts {
    pub(super) fn new() -> MsgParts {
        MsgParts {
            // SAFETY: msghdr and sockaddr_storage are plain C structs; zeroes are valid
            // (null pointers, zero lengths, AF_UNSPEC).
            hdr: unsafe { std::mem::zeroed() },
            iov: Vec::new(),
            data: Vec::new(),
            fill: Vec::new(),
            // SAFETY: as above: an all-zero sockaddr_storage is AF_UNSPEC.
            addr: unsafe { std::mem::zeroed() },
        }
    }

    /// A `sendmsg`'s parts: `buffers` as one message, to `addr` when given (the header points
    /// into the box, so it is built there). At most 1024 buffers (`IOV_MAX`).
    pub(super) fn to_send(
        buffers: Vec<Box<dyn AsRef<[u8]> + Send>>,
        addr: Option<&SocketAddrAny>,
    ) -> crate::Result<Box<MsgParts>> {
        if buffers.len() > 1024 {
            return Err(crate::Error::InvalidArgument(
                "at most 1024 buffers (IOV_MAX)",
            ));
        }
        let mut parts = Box::new(MsgParts::new());
        parts.iov = buffers
            .iter()
            .map(|b| {
                let s = (**b).as_ref();
                libc::iovec {
                    iov_base: s.as_ptr() as *mut libc::c_void,
                    iov_len: s.len(),
                }
            })
            .collect();
        parts.data = buffers;
        if let Some(a) = addr {
            let len = a.addr_len() as usize;
            // SAFETY: `a` is valid for `addr_len()` bytes, which fit a sockaddr_storage.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    a.as_ptr().cast::<u8>(),
                    (&raw mut parts.addr).cast::<u8>(),
                    len,
                )
            };
            parts.hdr.msg_name = (&raw mut parts.addr).cast();
            parts.hdr.msg_namelen = len as libc::socklen_t;
        }
        parts.hdr.msg_iov = parts.iov.as_mut_ptr();
        parts.hdr.msg_iovlen = parts.iov.len() as _;
        Ok(parts)
    }

    /// A `recvmsg`'s parts: `fill`, of which the first `len` bytes may be received, and room
    /// for the sender's address.
    pub(super) fn to_receive(fill: Vec<u8>, len: usize) -> Box<MsgParts> {
        let mut parts = Box::new(MsgParts::new());
        parts.fill = fill;
        parts.iov = vec![libc::iovec {
            iov_base: parts.fill.as_mut_ptr().cast(),
            iov_len: len,
        }];
        parts.hdr.msg_iov = parts.iov.as_mut_ptr();
        parts.hdr.msg_iovlen = 1;
        parts.hdr.msg_name = (&raw mut parts.addr).cast();
        parts.hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as _;
        parts
    }

    /// The sender's address a `recvmsg` collected, if the kernel wrote one.
    pub fn address_of(&self) -> Option<SocketAddrAny> {
        let len = self.hdr.msg_namelen as usize;
        if len < std::mem::size_of::<libc::sa_family_t>()
            || len > std::mem::size_of::<libc::sockaddr_storage>()
            || self.addr.ss_family == 0
        {
            return None;
        }
        // SAFETY: the kernel wrote `len` bytes of a socket address into `addr`.
        Some(unsafe { SocketAddrAny::read((&raw const self.addr).cast(), len as u32) })
    }
}
