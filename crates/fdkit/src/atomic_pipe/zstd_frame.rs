//! Finds where a zstd frame ends without decompressing it (RFC 8878, "Frames").
//!
//! In mixed mode a burst ends at the first `0x0F`, so a compressed burst holding that byte is
//! cut short by Atomic::Pipe's reader. A zstd frame is self-delimiting (block headers carry
//! sizes), so a reader that knows bursts are zstd frames can find the real end and keep the wire
//! format. Decompression itself is the caller's (the `compress` layer).

/// Where a zstd frame at the start of some bytes ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameScan {
    /// The frame is complete and this many bytes long.
    Complete(usize),
    /// The bytes so far are a valid start of a frame; more are needed.
    Incomplete,
    /// Not a zstd frame (bad magic, reserved bits or block type).
    NotAFrame,
}

/// The zstd frame magic number, little-endian on the wire: `28 B5 2F FD`.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// Scans the zstd frame (or skippable frame) at the start of `data`. Steps once per block, so
/// the cost does not depend on the frame's size.
pub fn zstd_frame_len(data: &[u8]) -> FrameScan {
    match frame_len(data) {
        Ok(n) if n <= data.len() => FrameScan::Complete(n),
        Ok(_) | Err(Short) => FrameScan::Incomplete,
        Err(Invalid) => FrameScan::NotAFrame,
    }
}

enum Stop {
    Short,
    Invalid,
}
use Stop::{Invalid, Short};

fn byte(data: &[u8], i: usize) -> Result<u8, Stop> {
    data.get(i).copied().ok_or(Short)
}

fn le(data: &[u8], at: usize, n: usize) -> Result<u64, Stop> {
    let b = data.get(at..at + n).ok_or(Short)?;
    Ok(b.iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x)))
}

/// True when `prefix` (up to 4 bytes) starts a skippable frame's magic, `5? 2A 4D 18`.
fn is_skippable(prefix: &[u8]) -> bool {
    match prefix.split_first() {
        None => true,
        Some((first, rest)) => first & 0xF0 == 0x50 && [0x2A, 0x4D, 0x18].starts_with(rest),
    }
}

/// The frame's full length (may exceed `data.len()` when only block headers were needed).
fn frame_len(data: &[u8]) -> Result<usize, Stop> {
    if data.len() < 4 {
        return Err(if ZSTD_MAGIC.starts_with(data) || is_skippable(data) {
            Short
        } else {
            Invalid
        });
    }
    if is_skippable(&data[..4]) {
        // Skippable frame: magic 0x184D2A5?, a 4-byte size, then that many bytes.
        return Ok(8 + le(data, 4, 4)? as usize);
    }
    if data[..4] != ZSTD_MAGIC {
        return Err(Invalid);
    }
    let fhd = byte(data, 4)?;
    if fhd & 0x08 != 0 {
        return Err(Invalid); // reserved bit
    }
    let fcs_flag = fhd >> 6;
    let single_segment = fhd & 0x20 != 0;
    let checksum = fhd & 0x04 != 0;
    let dict_len = [0, 1, 2, 4][usize::from(fhd & 3)];
    let fcs_len = match (fcs_flag, single_segment) {
        (0, false) => 0,
        (0, true) => 1,
        (1, _) => 2,
        (2, _) => 4,
        _ => 8,
    };
    let mut at = 5 + usize::from(!single_segment) + dict_len + fcs_len;
    loop {
        let h = le(data, at, 3)? as usize;
        let last = h & 1 != 0;
        let size = h >> 3;
        let body = match (h >> 1) & 3 {
            0 | 2 => size,
            1 => 1,
            _ => return Err(Invalid),
        };
        if size > 128 * 1024 {
            return Err(Invalid);
        }
        at += 3 + body;
        if last {
            return Ok(at + if checksum { 4 } else { 0 });
        }
    }
}
