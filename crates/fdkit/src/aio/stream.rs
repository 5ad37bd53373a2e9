//! A stream's receive state: the multishot receive in flight and the inbox that keeps what it
//! brought until the loop takes it with [`Reactor::recv`](super::Reactor::recv).

use rustix::io::Errno;
use std::collections::VecDeque;
use std::os::fd::RawFd;

/// A stream's handle, unique for the reactor's life.
pub type StreamId = u64;

/// What [`Reactor::recv`](super::Reactor::recv) hands over, as recv(2) would have answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// Bytes, in order, as the receive completions brought them (together at most the `max`
    /// asked for; concatenate them for one buffer).
    Data(Vec<Vec<u8>>),
    /// The peer ended its side (recv(2) returned 0). Handed over once, after every byte.
    Eof,
    /// Receiving failed (`ECONNRESET`, …). Handed over once, after every byte.
    Error(Errno),
}

/// How a stream's receiving ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    Eof,
    Error(Errno),
}

/// One stream.
#[derive(Debug)]
pub(super) struct Stream {
    pub(super) fd: RawFd,
    /// The multishot receive in flight, if any.
    pub(super) op: Option<u64>,
    /// Whether the owner wants bytes now (not paused).
    pub(super) want: bool,
    /// EOF or an error was seen: never receive again.
    pub(super) ended: bool,
    /// Bytes received and not taken yet, in order; `front_at` of the first one were taken.
    inbox: VecDeque<Vec<u8>>,
    front_at: usize,
    /// Bytes in `inbox` not taken yet.
    pub(super) inbox_bytes: usize,
    /// How receiving ended, until handed over (after the inbox's bytes).
    end: Option<End>,
    /// Whether the stream is in the reactor's list of streams with something to hand over.
    pub(super) listed: bool,
    /// A cancel of `op` was sent (too much arrived while paused).
    pub(super) cancel_sent: bool,
}

impl Stream {
    pub(super) fn new(fd: RawFd) -> Stream {
        Stream {
            fd,
            op: None,
            want: false,
            ended: false,
            inbox: VecDeque::new(),
            front_at: 0,
            inbox_bytes: 0,
            end: None,
            listed: false,
            cancel_sent: false,
        }
    }

    /// Whether a receive should be (re)armed: none in flight, not paused, not ended, and the
    /// inbox below `hold` bytes.
    pub(super) fn wants_receive(&self, hold: usize) -> bool {
        self.op.is_none() && self.want && !self.ended && self.inbox_bytes < hold
    }

    /// Whether something waits to be handed over (bytes, or how receiving ended).
    pub(super) fn has_news(&self) -> bool {
        self.inbox_bytes > 0 || self.end.is_some()
    }

    pub(super) fn push_data(&mut self, data: Vec<u8>) {
        self.inbox_bytes += data.len();
        self.inbox.push_back(data);
    }

    pub(super) fn push_end(&mut self, end: End) {
        self.ended = true;
        self.end = Some(end);
    }

    /// Up to `max` bytes (at least one when any wait), else how receiving ended, else None.
    /// Vectors handed over whole are the completions' own (for the ring to recycle); a
    /// vector only partly taken is split, its rest kept first in line.
    pub(super) fn take(&mut self, max: usize) -> Option<Received> {
        if self.inbox_bytes == 0 {
            return self.end.take().map(|e| match e {
                End::Eof => Received::Eof,
                End::Error(errno) => Received::Error(errno),
            });
        }
        let max = max.max(1);
        let mut out = Vec::new();
        let mut taken = 0;
        while taken < max {
            let Some(front) = self.inbox.front_mut() else {
                break;
            };
            let left = front.len() - self.front_at;
            if left <= max - taken && self.front_at == 0 {
                taken += left;
                out.extend(self.inbox.pop_front());
            } else {
                let n = left.min(max - taken);
                out.push(front[self.front_at..self.front_at + n].to_vec());
                self.front_at += n;
                taken += n;
                if self.front_at == front.len() {
                    self.front_at = 0;
                    self.inbox.pop_front();
                }
            }
        }
        self.inbox_bytes -= taken;
        Some(Received::Data(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(r: Option<Received>) -> Vec<u8> {
        match r {
            Some(Received::Data(v)) => v.concat(),
            other => panic!("expected data, got {other:?}"),
        }
    }

    #[test]
    fn take_splits_and_keeps_order_then_the_end() {
        let mut s = Stream::new(3);
        s.push_data(b"hello".to_vec());
        s.push_data(b"world".to_vec());
        s.push_end(End::Error(Errno::CONNRESET));
        assert_eq!(data(s.take(3)), b"hel");
        assert_eq!(data(s.take(4)), b"lowo");
        assert!(s.has_news());
        assert_eq!(data(s.take(100)), b"rld");
        assert_eq!(s.take(100), Some(Received::Error(Errno::CONNRESET)));
        assert_eq!(s.take(100), None);
        assert!(!s.has_news());
    }

    #[test]
    fn whole_vectors_are_handed_over_as_they_came() {
        let mut s = Stream::new(3);
        s.push_data(vec![1; 10]);
        s.push_data(vec![2; 10]);
        s.push_end(End::Eof);
        match s.take(20) {
            Some(Received::Data(v)) => assert_eq!(v, vec![vec![1; 10], vec![2; 10]]),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.take(20), Some(Received::Eof));
    }
}
