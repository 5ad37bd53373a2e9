//! Mixed data mode parsing: lines, `0x0E … 0x0F` bursts and `0x0E 0x10` message chunks.
//!
//! Line data is copied into the held line as it is scanned (a line may straddle frames, as in
//! Atomic::Pipe: `print "a"; write_burst(..); print "b\n"` gives the burst, then `"ab\n"`), and
//! a burst remembers how far it looked for `0x0F`, so no byte is scanned twice. Unlike
//! Atomic::Pipe, lines come out in stream order (it returns a burst before the lines that
//! preceded it in the same read), and a burst longer than any atomic write is reported as
//! garbage instead of being waited for.

use super::decoder::{too_large, Decoder, Event, Step};
use super::protocol_error::{ProtocolError, ProtocolErrorKind};
use super::wire::{
    Mode, Writer, FRAME_END, FRAME_START, HEADER_LEN, MESSAGE_KEY, MIXED_MAX_PAYLOAD,
};
use super::zstd_frame::{zstd_frame_len, FrameScan};

impl Decoder {
    pub(crate) fn step_mixed(&mut self) -> Step {
        let at = self.pos;
        match self.buf.get(at..at + 2) {
            None if at == self.buf.len() => Step::NeedMore,
            _ if self.buf[at] != FRAME_START => self.line_data(),
            None => Step::NeedMore,
            Some(&[_, MESSAGE_KEY]) => self.mixed_chunk(),
            Some(_) => self.burst(),
        }
    }

    fn line_data(&mut self) -> Step {
        let at = self.pos;
        let rest = &self.buf[at..];
        match rest.iter().position(|&b| b == b'\n' || b == FRAME_START) {
            Some(i) if rest[i] == b'\n' => {
                let line = if self.line.is_empty() {
                    rest[..=i].to_vec()
                } else {
                    let mut line = std::mem::take(&mut self.line);
                    line.extend_from_slice(&rest[..=i]);
                    line
                };
                self.pos = at + i + 1;
                Step::Event(Event::Line(line))
            }
            Some(i) => {
                self.line.extend_from_slice(&rest[..i]);
                self.pos = at + i;
                Step::Progress
            }
            None => {
                self.line.extend_from_slice(rest);
                self.pos = self.buf.len();
                Step::NeedMore
            }
        }
    }

    fn mixed_chunk(&mut self) -> Step {
        let at = self.pos;
        let head_at = at + 2;
        let Some(header) = self.header_at(head_at) else {
            return Step::NeedMore;
        };
        if let Some(kind) = too_large(&header, MIXED_MAX_PAYLOAD) {
            return self.resync(kind, Some(header.writer));
        }
        let size = header.size as usize;
        let end = head_at + HEADER_LEN + size + 1;
        let Some(&last) = self.buf.get(end - 1) else {
            return Step::NeedMore;
        };
        if last != FRAME_END {
            let kind = ProtocolErrorKind::MissingFrameEnd { found: last };
            return self.resync(kind, Some(header.writer));
        }
        self.chunk(header, head_at + HEADER_LEN..end - 1, at, end)
    }

    fn burst(&mut self) -> Step {
        let body = self.pos + 1;
        let max = Mode::Mixed.max_burst();
        // The window where the burst's data and its 0x0F must lie.
        let window = &self.buf[body..self.buf.len().min(body + max + 1)];
        if self.zstd_bursts {
            match zstd_frame_len(window) {
                FrameScan::Complete(n) if n < window.len() && window[n] == FRAME_END => {
                    return self.emit_burst(body, body + n);
                }
                // The frame is whole but its 0x0F has not arrived.
                FrameScan::Complete(n) if n == window.len() && n < max + 1 => {
                    return Step::NeedMore;
                }
                FrameScan::Incomplete if window.len() < max + 1 => return Step::NeedMore,
                // Not a zstd frame, or not followed by 0x0F: a plain burst.
                _ => {}
            }
        }
        let from = self.burst_scanned;
        match window[from..].iter().position(|&b| b == FRAME_END) {
            Some(i) => self.emit_burst(body, body + from + i),
            None if window.len() == max + 1 => self.resync(ProtocolErrorKind::BadBurst, None),
            None => {
                self.burst_scanned = window.len();
                Step::NeedMore
            }
        }
    }

    fn emit_burst(&mut self, start: usize, end: usize) -> Step {
        let data = self.buf[start..end].to_vec();
        self.pos = end + 1;
        self.burst_scanned = 0;
        Step::Event(Event::Burst(data))
    }

    /// Reports a malformed frame and goes on: its `0x0E` becomes line data.
    fn resync(&mut self, kind: ProtocolErrorKind, writer: Option<Writer>) -> Step {
        let offset = self.stream_offset(self.pos);
        self.line.push(FRAME_START);
        self.pos += 1;
        self.burst_scanned = 0;
        Step::Error(ProtocolError::new(kind, offset, writer, false))
    }
}
