//! Per-writer reassembly of message chunks: payloads appended per (pid, tid) until chunk id 0.

use super::wire::{Header, Writer};
use std::collections::HashMap;

/// The first chunk of a message reserves at most this much for the rest (ids can be garbage).
const MAX_RESERVE: usize = 1 << 20;

/// A message whose last chunk has not arrived yet.
#[derive(Debug)]
pub(crate) struct Partial {
    pub data: Vec<u8>,
    pub expected_id: u32,
    pub chunks: u32,
    pub first_offset: u64,
}

/// What one chunk did to its writer's message.
pub(crate) enum Outcome {
    /// The chunk completed a message.
    Message(Vec<u8>),
    /// The chunk was stored; more chunks are due.
    Pending,
    /// The chunk's id broke the countdown: the partial message was dropped, the chunk was not
    /// used (feed it again to start a new message).
    OutOfOrder { expected: u32, dropped: usize },
}

/// Partial messages of every writer, keyed by (pid, tid).
#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    partials: HashMap<Writer, Partial>,
}

impl Reassembly {
    /// Adds one chunk (`payload` of the chunk at stream `offset` with `header`).
    pub fn chunk(&mut self, header: Header, payload: &[u8], offset: u64) -> Outcome {
        let id = header.chunk_id;
        // Fast path: a one-chunk message while nobody has a message in flight.
        if id == 0 && self.partials.is_empty() {
            return Outcome::Message(payload.to_vec());
        }
        match self.partials.get_mut(&header.writer) {
            Some(p) if p.expected_id != id => {
                let expected = p.expected_id;
                let dropped = p.data.len();
                self.partials.remove(&header.writer);
                Outcome::OutOfOrder { expected, dropped }
            }
            Some(p) => {
                p.data.extend_from_slice(payload);
                p.chunks += 1;
                if id == 0 {
                    let p = self.partials.remove(&header.writer).expect("present");
                    Outcome::Message(p.data)
                } else {
                    p.expected_id = id - 1;
                    Outcome::Pending
                }
            }
            None if id == 0 => Outcome::Message(payload.to_vec()),
            None => {
                let whole = (id as usize + 1).saturating_mul(payload.len());
                let mut data = Vec::with_capacity(whole.min(MAX_RESERVE));
                data.extend_from_slice(payload);
                self.partials.insert(
                    header.writer,
                    Partial {
                        data,
                        expected_id: id - 1,
                        chunks: 1,
                        first_offset: offset,
                    },
                );
                Outcome::Pending
            }
        }
    }

    /// Takes every partial message, oldest first (by the offset of its first chunk).
    pub fn take_all(&mut self) -> Vec<(Writer, Partial)> {
        let mut all: Vec<_> = self.partials.drain().collect();
        all.sort_by_key(|(_, p)| p.first_offset);
        all
    }

    /// Writers with a message in flight.
    pub fn pending(&self) -> usize {
        self.partials.len()
    }
}
