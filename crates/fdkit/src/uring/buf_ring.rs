//! A provided-buffer ring (`IORING_REGISTER_PBUF_RING`): `count` buffers of `size` bytes the
//! kernel picks from for multishot receives.
//!
//! The ring of [`BufRingEntry`]s and the buffers are two page-aligned allocations this type
//! owns. The kernel consumes entries from its head; we publish entries by advancing the tail
//! (the `resv` field of entry 0, as io_uring_buf_ring_add(3) does). A buffer the kernel filled
//! is copied out and given straight back, so the ring only runs dry when more data arrives in
//! one go than it holds (the multishot receive then ends with `ENOBUFS`, data stays queued in
//! the socket). See io_uring_register_buf_ring(3), io_uring_buf_ring_advance(3).

use crate::error::{Error, Result};
use io_uring::types::BufRingEntry;
use io_uring::IoUring;
use rustix::io::Errno;
use std::alloc::Layout;
use std::sync::atomic::{AtomicU16, Ordering};

/// The most entries a buffer ring may have (the kernel's limit).
pub const MAX_BUFFERS: u16 = 32768;

/// A zeroed, page-aligned heap allocation, freed on drop.
struct PageAlloc {
    ptr: *mut u8,
    layout: Layout,
}

impl PageAlloc {
    fn zeroed(size: usize) -> Result<PageAlloc> {
        let layout = Layout::from_size_align(size.max(1), 4096)
            .map_err(|_| Error::InvalidArgument("buffer ring too large"))?;
        // SAFETY: `layout` has a non-zero size (max(1)) and a valid power-of-two alignment.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::Os(Errno::NOMEM));
        }
        Ok(PageAlloc { ptr, layout })
    }
}

impl Drop for PageAlloc {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed(layout)` and is freed once, here.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// One registered buffer group.
pub(crate) struct BufRing {
    entries: PageAlloc,
    bufs: PageAlloc,
    count: u16,
    size: u32,
    tail: u16,
}

// SAFETY: the raw pointers are the sole owners of their two heap allocations (nothing else in
// this process aliases them); the kernel's concurrent access is bounded by the ring protocol,
// which does not depend on which thread owns the `BufRing`.
unsafe impl Send for BufRing {}

impl BufRing {
    /// Allocates `count` (a power of two, 1..=32768) buffers of `size` bytes (1..=2^31) and
    /// their ring. Not yet registered nor filled.
    pub fn new(count: u16, size: u32) -> Result<BufRing> {
        if count == 0 || count > MAX_BUFFERS || !count.is_power_of_two() {
            return Err(Error::InvalidArgument(
                "buffer count must be a power of two in 1..=32768",
            ));
        }
        if size == 0 || size > i32::MAX as u32 {
            return Err(Error::InvalidArgument("buffer size must be in 1..=2**31-1"));
        }
        let total = (count as usize)
            .checked_mul(size as usize)
            .ok_or(Error::InvalidArgument("buffer ring too large"))?;
        let entries = PageAlloc::zeroed(count as usize * std::mem::size_of::<BufRingEntry>())?;
        let bufs = PageAlloc::zeroed(total)?;
        Ok(BufRing {
            entries,
            bufs,
            count,
            size,
            tail: 0,
        })
    }

    /// Registers this ring as buffer group `group` of `ring` (`IORING_REGISTER_PBUF_RING`)
    /// and hands every buffer to the kernel. See io_uring_register_buf_ring(3).
    ///
    /// # Safety
    ///
    /// `self` must not be freed (nor moved out of its allocations, which it never is: they
    /// are heap pointers) while the kernel may use it: not before the group is unregistered
    /// or `ring` is closed and its requests are done; when that cannot be known, leak it.
    pub unsafe fn register(&mut self, ring: &IoUring, group: u16) -> std::io::Result<()> {
        // SAFETY: the entries are a live, page-aligned, zeroed allocation of `count` entries
        // owned by `self`, which the caller keeps alive for as long as the kernel may use it.
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                self.entries.ptr as u64,
                self.count,
                group,
                0,
            )
        }?;
        self.fill();
        Ok(())
    }

    /// Hands every buffer to the kernel (after registration).
    fn fill(&mut self) {
        for bid in 0..self.count {
            self.write_entry(bid);
        }
        self.publish();
    }

    /// How many buffers the ring holds.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Appends the first `len` bytes of buffer `bid` to `out` (no allocation when `out` has
    /// room) and gives the buffer back to the kernel. `false` when `bid` is not one of ours.
    pub fn take_into(&mut self, bid: u16, len: usize, out: &mut Vec<u8>) -> bool {
        if bid >= self.count {
            return false;
        }
        let len = len.min(self.size as usize);
        // SAFETY: as in `take`: buffer `bid` spans `size` initialised bytes inside `bufs`, the
        // kernel filled `len <= size` of them and does not touch the buffer until it is given
        // back below.
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(self.buf_ptr(bid), len) });
        self.write_entry(bid);
        self.publish();
        true
    }

    fn buf_ptr(&self, bid: u16) -> *mut u8 {
        // SAFETY: bid < count, so the offset stays inside the `count * size` allocation.
        unsafe { self.bufs.ptr.add(bid as usize * self.size as usize) }
    }

    /// Writes buffer `bid` into the entry at the local tail and advances the local tail.
    fn write_entry(&mut self, bid: u16) {
        let index = (self.tail & (self.count - 1)) as usize;
        let base = self.entries.ptr.cast::<BufRingEntry>();
        // SAFETY: index < count, inside the entries allocation. The kernel reads only the
        // entries between its head and the published tail, and at most `count - 1` buffers
        // are there while we hold `bid`, so the entry at the tail is ours to write. The
        // setters write `addr`, `len` and `bid`, never `resv` (entry 0's `resv` is the tail).
        let entry = unsafe { &mut *base.add(index) };
        entry.set_addr(self.buf_ptr(bid) as u64);
        entry.set_len(self.size);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes the local tail to the kernel (a release store, after the entry writes).
    fn publish(&self) {
        let base = self.entries.ptr.cast::<BufRingEntry>();
        // SAFETY: `base` is the first entry of a live, initialised ring; `tail` returns the
        // address of its `resv` field, a 2-byte-aligned u16 the kernel reads with acquire
        // semantics, so it is accessed atomically here.
        let tail = unsafe { &*(BufRingEntry::tail(base) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }
}
