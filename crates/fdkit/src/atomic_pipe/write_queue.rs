//! Encoded bytes waiting to be written, cut into write units of at most `PIPE_BUF` bytes.
//!
//! Each unit goes out in one `write(2)`, so the kernel keeps it whole (pipe(7)). A unit holds
//! whole chunks only: several small messages' chunks share a unit while together they fit, which
//! is how a batch of 100-byte messages costs one syscall per ~35 messages instead of one each.

use super::wire::PIPE_BUF;
use std::collections::VecDeque;

/// The queue: `buf[head..]` is unwritten, in units whose lengths are in `units`.
#[derive(Debug, Default)]
pub(crate) struct WriteQueue {
    buf: Vec<u8>,
    head: usize,
    units: VecDeque<usize>,
    /// The front unit was partly written (only on fds that are not pipes): it must go out as
    /// is, never grow.
    front_started: bool,
    /// The last unit must stay alone (a burst).
    back_sealed: bool,
}

impl WriteQueue {
    /// Bytes not yet written.
    pub fn len(&self) -> usize {
        self.buf.len() - self.head
    }

    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// Appends `len` bytes that `fill` writes into the buffer, as a unit of their own or at
    /// the end of the last unit when both fit in `PIPE_BUF` together.
    pub fn push(&mut self, len: usize, fill: impl FnOnce(&mut Vec<u8>)) {
        debug_assert!(len <= PIPE_BUF);
        let before = self.buf.len();
        fill(&mut self.buf);
        debug_assert_eq!(self.buf.len() - before, len);
        let sealed = std::mem::take(&mut self.back_sealed);
        let front_alone_started = self.front_started && self.units.len() == 1;
        let can_grow = !(sealed || front_alone_started);
        match self.units.back_mut() {
            Some(last) if can_grow && *last + len <= PIPE_BUF => *last += len,
            _ => self.units.push_back(len),
        }
    }

    /// Appends a unit that shares its write with nothing before or after it.
    pub fn push_alone(&mut self, len: usize, fill: impl FnOnce(&mut Vec<u8>)) {
        self.back_sealed = true;
        self.push(len, fill);
        self.back_sealed = true;
    }

    /// The next unit to write.
    pub fn front(&self) -> Option<&[u8]> {
        let len = *self.units.front()?;
        Some(&self.buf[self.head..self.head + len])
    }

    /// Records that `n` bytes of the front unit were written.
    pub fn consume(&mut self, n: usize) {
        let Some(front) = self.units.front_mut() else {
            return;
        };
        let n = n.min(*front);
        self.head += n;
        *front -= n;
        if *front == 0 {
            self.units.pop_front();
            self.front_started = false;
        } else {
            self.front_started = true;
        }
        if self.units.is_empty() {
            self.clear();
        } else if self.head >= 1 << 16 && self.head * 2 >= self.buf.len() {
            self.buf.drain(..self.head);
            self.head = 0;
        }
    }

    /// Drops everything queued (the reader is gone).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.head = 0;
        self.units.clear();
        self.front_started = false;
        self.back_sealed = false;
    }
}
