//! [`Out`]: the batch of responses being sent on a connection.
//!
//! A batch is a list of segments (response heads in one buffer, file bodies from their
//! mappings) sent with one `sendmsg`, optionally followed by one `sendfile` [`Tail`] (a large
//! body; for a `multipart/byteranges` body of a large file, every part: each later part's
//! head, then its bytes, then the closing delimiter). `respond.rs` fills it, `send.rs` sends
//! it, `conn.rs` owns one per connection.

use super::files::FileEntry;
use crate::http::{Framing, Status, Version, HTTP_DATE_LEN};
use std::rc::Rc;

/// The most iovecs one `sendmsg` carries (heads merge; each mapped body adds one). A batch
/// rarely needs more; one that does (a multipart body of a mapped file: two per part) goes
/// out in several.
pub(super) const MAX_SEGS: usize = 64;

/// The most capacity the heads buffer keeps between batches (a directory listing, whose
/// page goes out from this buffer, may make it larger for one batch).
const HEADS_KEEP: usize = 64 * 1024;

/// One part of a batch.
pub(super) enum Seg {
    Head { start: usize, len: usize },
    Body { file: usize, off: u64, len: u64 },
}

/// A large body sent with `sendfile` after the segments.
pub(super) struct Tail {
    pub file: Rc<FileEntry>,
    pub off: u64,
    pub left: u64,
    /// A multipart body's parts after the one being sent (`None` for a single body).
    pub parts: Option<Box<Parts>>,
}

/// The rest of a multipart body sent by `sendfile`: part `next`'s head (or, after the last
/// part, the closing delimiter) from `framing`, then that part's bytes from the file.
pub(super) struct Parts {
    pub framing: Framing,
    /// `(first, last)` of each part, inclusive, in sending order.
    pub spans: Vec<(u64, u64)>,
    /// The part whose head goes next (`spans.len()`: the closing delimiter).
    pub next: usize,
    /// The bytes of that head (or delimiter) already sent.
    pub sent: usize,
}

impl Parts {
    /// What goes before the next part's bytes: its head, or the closing delimiter.
    pub fn delimiter(&self) -> &[u8] {
        if self.next < self.spans.len() {
            self.framing.head(self.next)
        } else {
            self.framing.closing()
        }
    }
}

/// The batch being sent.
pub(super) struct Out {
    pub heads: Vec<u8>,
    pub segs: Vec<Seg>,
    pub files: Vec<Rc<FileEntry>>,
    pub tail: Option<Tail>,
    /// Bytes of all segments, and how many of them are sent.
    pub seg_bytes: u64,
    pub sent: u64,
    /// Close (lingering) once the batch is sent.
    pub close_after: bool,
}

impl Out {
    pub fn new() -> Out {
        Out {
            heads: Vec::with_capacity(1024),
            segs: Vec::with_capacity(8),
            files: Vec::with_capacity(4),
            tail: None,
            seg_bytes: 0,
            sent: 0,
            close_after: false,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.segs.is_empty() && self.tail.is_none()
    }

    /// Whether a `sendfile` tail with bytes left ends the batch.
    pub fn has_tail(&self) -> bool {
        self.tail
            .as_ref()
            .is_some_and(|t| t.left > 0 || t.parts.is_some())
    }

    /// Whether segments remain to be sent.
    pub fn segs_pending(&self) -> bool {
        self.sent < self.seg_bytes
    }

    /// Records `heads[start..]` as a segment (merged with a head segment just before it).
    pub fn push_head(&mut self, start: usize) {
        let len = self.heads.len() - start;
        self.seg_bytes += len as u64;
        if let Some(Seg::Head { start: s, len: l }) = self.segs.last_mut() {
            if *s + *l == start {
                *l += len;
                return;
            }
        }
        self.segs.push(Seg::Head { start, len });
    }

    /// Records `len` bytes of a mapped file from `off`.
    pub fn push_body(&mut self, entry: &Rc<FileEntry>, off: u64, len: u64) {
        let file = match self.files.last() {
            Some(last) if Rc::ptr_eq(last, entry) => self.files.len() - 1,
            _ => {
                self.files.push(entry.clone());
                self.files.len() - 1
            }
        };
        self.segs.push(Seg::Body { file, off, len });
        self.seg_bytes += len;
    }

    pub fn set_tail(&mut self, file: Rc<FileEntry>, off: u64, len: u64) {
        self.tail = Some(Tail {
            file,
            off,
            left: len,
            parts: None,
        });
    }

    /// A multipart tail: the first part's bytes (its head is already a segment), then the
    /// rest of `parts` (whose `next` is 1).
    pub fn set_parts_tail(&mut self, file: Rc<FileEntry>, parts: Box<Parts>) {
        let (first, last) = parts.spans[0];
        self.tail = Some(Tail {
            file,
            off: first,
            left: last - first + 1,
            parts: Some(parts),
        });
    }

    /// The unsent part of the segments as iovecs (into `iovs`, cleared first; never more
    /// than [`MAX_SEGS`], which `iovs` has room for, so it never reallocates).
    pub fn iovecs(&self, iovs: &mut Vec<libc::iovec>) {
        iovs.clear();
        let mut skip = self.sent;
        for seg in &self.segs {
            let (ptr, len) = match *seg {
                // Addresses only (never dereferenced here): start + len <= heads.len(), and
                // off + len <= the mapping's length.
                Seg::Head { start, len } => (self.heads.as_ptr().wrapping_add(start), len as u64),
                Seg::Body { file, off, len } => match self.files[file].map_ptr() {
                    Some(p) => (p.wrapping_add(off as usize), len),
                    None => continue,
                },
            };
            if skip >= len {
                skip -= len;
                continue;
            }
            iovs.push(libc::iovec {
                iov_base: ptr.wrapping_add(skip as usize) as *mut libc::c_void,
                iov_len: (len - skip) as usize,
            });
            skip = 0;
            if iovs.len() == MAX_SEGS {
                break;
            }
        }
    }

    /// Empties the batch (keeping the buffers' capacity, unless a directory listing made
    /// the heads buffer large).
    pub fn clear(&mut self) {
        self.heads.clear();
        if self.heads.capacity() > HEADS_KEEP {
            self.heads.shrink_to(1024);
        }
        self.segs.clear();
        self.files.clear();
        self.tail = None;
        self.seg_bytes = 0;
        self.sent = 0;
    }
}

/// Starts a response head: the status line, `Server` and `Date`.
pub(super) fn head_start(out: &mut Out, status: Status, date: &[u8; HTTP_DATE_LEN]) {
    out.heads.extend_from_slice(status.line());
    out.heads.extend_from_slice(b"Server: fdkit\r\nDate: ");
    out.heads.extend_from_slice(date);
    out.heads.extend_from_slice(b"\r\n");
}

/// The `ETag` line of `entry`.
pub(super) fn etag_header(out: &mut Out, entry: &FileEntry) {
    out.heads.extend_from_slice(b"ETag: ");
    out.heads.extend_from_slice(entry.etag.as_bytes());
    out.heads.extend_from_slice(b"\r\n");
}

/// Ends a response head: `Connection` when it differs from the version's default, then the
/// blank line.
pub(super) fn head_end(out: &mut Out, keep_alive: bool, version: Version) {
    if !keep_alive {
        out.heads.extend_from_slice(b"Connection: close\r\n");
    } else if version == Version::Http10 {
        out.heads.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.heads.extend_from_slice(b"\r\n");
}
