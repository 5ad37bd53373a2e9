//! The engine-neutral part of a connection: the receive buffer, the batch of responses being
//! sent ([`Out`]), the deadline, and turning buffered requests into responses ([`Conn::fill`]).
//!
//! A batch is a list of segments (response heads in one buffer, file bodies from their
//! mappings) sent with one `sendmsg`, optionally followed by one `sendfile` tail (a large
//! body). Pipelined requests already buffered are answered in the same batch, in order.

use super::files::FileEntry;
use super::respond::{invalid, respond, Ctx};
use crate::http::{parse_request, Parsed};
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The most responses in one batch.
const MAX_BATCH: usize = 32;
/// The most iovecs one batch may need (heads merge; each mapped body adds one).
pub(super) const MAX_SEGS: usize = 64;
/// How long a connection closing after a response keeps reading (and dropping) what the
/// client still sends, so that closing does not reset the response away (lingering close).
pub(super) const LINGER: Duration = Duration::from_secs(2);
/// The receive buffer's usual room.
pub(super) const RECV_ROOM: usize = 16 * 1024;
/// Buffered request bytes beyond which a connection stops reading until its batch is sent.
pub(super) const INBUF_MAX: usize = 64 * 1024;

pub(super) enum Seg {
    Head { start: usize, len: usize },
    Body { file: usize, off: u64, len: u64 },
}

/// A large body sent with `sendfile` after the segments.
pub(super) struct Tail {
    pub file: Rc<FileEntry>,
    pub off: u64,
    pub left: u64,
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
    fn new() -> Out {
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
        self.tail.as_ref().is_some_and(|t| t.left > 0)
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

    /// Empties the batch (keeping the buffers' capacity).
    pub fn clear(&mut self) {
        self.heads.clear();
        self.segs.clear();
        self.files.clear();
        self.tail = None;
        self.seg_bytes = 0;
        self.sent = 0;
    }
}

/// One client connection.
pub(super) struct Conn {
    pub fd: OwnedFd,
    pub inbuf: Vec<u8>,
    pub out: Out,
    /// When the connection is dropped: a request head not complete by then, a kept-alive
    /// connection silent until then, or a send that made no progress.
    pub deadline: Instant,
    /// The peer sent EOF.
    pub eof: bool,
    /// Closing: the last response is sent, our side is shut for writing, input is dropped.
    pub lingering: bool,
    /// (epoll) the socket may have more to read.
    pub readable: bool,
    /// (epoll) the peer shut its side (EPOLLRDHUP): a short read no longer means "drained",
    /// the end of stream is still to be read (it may have come in the same edge as the data).
    pub peer_closed: bool,
}

impl Conn {
    pub fn new(fd: OwnedFd, now: Instant, idle: Duration) -> Conn {
        Conn {
            fd,
            inbuf: Vec::new(),
            out: Out::new(),
            deadline: now + idle,
            eof: false,
            lingering: false,
            readable: true,
            peer_closed: false,
        }
    }

    /// Call before appending received bytes: the first byte of a request starts its deadline.
    pub fn receiving(&mut self, now: Instant, idle: Duration) {
        if self.inbuf.is_empty() && self.out.is_empty() && !self.lingering {
            self.deadline = now + idle;
        }
    }

    /// Answers the complete requests buffered (at most one batch). Returns how many; `true`
    /// in `out.close_after` when the connection must close after the batch. `stopping`: the
    /// server is stopping, the batch is the last.
    pub fn fill(&mut self, ctx: &mut Ctx<'_>, stopping: bool) -> usize {
        if self.lingering || self.out.close_after || !self.out.is_empty() {
            return 0;
        }
        let mut consumed = 0;
        let mut n = 0;
        loop {
            let buf = &self.inbuf[consumed..];
            if buf.is_empty() {
                break;
            }
            match parse_request(buf) {
                Parsed::Partial => break,
                Parsed::Invalid(status) => {
                    invalid(&mut self.out, ctx.date, status);
                    self.out.close_after = true;
                    consumed = self.inbuf.len();
                    n += 1;
                    break;
                }
                Parsed::Complete(req) => {
                    let close = respond(&req, &mut self.out, ctx);
                    consumed += req.head_len;
                    n += 1;
                    if close {
                        self.out.close_after = true;
                        break;
                    }
                    if self.out.tail.is_some()
                        || n >= MAX_BATCH
                        || self.out.segs.len() + 2 > MAX_SEGS
                    {
                        break;
                    }
                }
            }
        }
        if consumed == self.inbuf.len() {
            self.inbuf.clear();
        } else if consumed > 0 {
            self.inbuf.drain(..consumed);
        }
        if stopping && n > 0 {
            self.out.close_after = true;
        }
        n
    }

    /// Whether a partial request is buffered.
    pub fn has_partial(&self) -> bool {
        !self.inbuf.is_empty()
    }
}
