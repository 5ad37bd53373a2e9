//! The engine-neutral part of a connection: the receive buffer, the batch of responses being
//! sent ([`Out`], in `out.rs`), the deadline, and turning buffered requests into responses
//! ([`Conn::fill`]). Pipelined requests already buffered are answered in the same batch, in
//! order.

use super::out::{Out, MAX_SEGS};
use super::respond::{invalid, respond, Ctx};
use crate::http::{parse_request, Parsed, MAX_HEAD_BYTES};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// The most responses in one batch.
const MAX_BATCH: usize = 32;
/// How long a connection closing after a response keeps reading (and dropping) what the
/// client still sends, so that closing does not reset the response away (lingering close).
pub(super) const LINGER: Duration = Duration::from_secs(2);
/// The receive buffer's usual room.
pub(super) const RECV_ROOM: usize = 16 * 1024;
/// Buffered request bytes beyond which a connection stops reading until its batch is sent.
pub(super) const INBUF_MAX: usize = 64 * 1024;

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
    /// The client's address as the access log writes it (empty when the log is off).
    pub peer: Box<[u8]>,
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
            peer: Box::default(),
        }
    }

    /// Notes the client's address for the access log. See getpeername(2).
    pub fn log_peer(&mut self) {
        let text = match rustix::net::getpeername(&self.fd) {
            Ok(Some(addr)) => match std::net::SocketAddr::try_from(addr) {
                Ok(a) => match a.ip() {
                    std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                        Some(v4) => v4.to_string(),
                        None => v6.to_string(),
                    },
                    ip => ip.to_string(),
                },
                Err(_) => return,
            },
            _ => return,
        };
        self.peer = text.into_bytes().into_boxed_slice();
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
                    let a = invalid(&mut self.out, ctx.date, status);
                    if let Some(log) = ctx.log.as_deref_mut() {
                        let line = &buf[..buf.len().min(MAX_HEAD_BYTES)];
                        log.record(&self.peer, ctx.secs, line, a.status.code(), a.body);
                    }
                    self.out.close_after = true;
                    consumed = self.inbuf.len();
                    n += 1;
                    break;
                }
                Parsed::Complete(req) => {
                    let a = respond(&req, &mut self.out, ctx);
                    if let Some(log) = ctx.log.as_deref_mut() {
                        log.record(&self.peer, ctx.secs, req.head, a.status.code(), a.body);
                    }
                    consumed += req.head_len;
                    n += 1;
                    if a.close {
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
