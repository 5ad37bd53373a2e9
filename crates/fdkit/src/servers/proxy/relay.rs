//! One direction of a connection: source socket → pipe → destination socket, with `splice`.

use super::record::Recorder;
use rustix::io::Errno;
use rustix::net::Shutdown;
use rustix::pipe::{splice, PipeFlags, SpliceFlags};
use std::os::fd::OwnedFd;

/// Splice flags for every socket ↔ pipe move: move pages rather than copy, never block.
const FLAGS: SpliceFlags = SpliceFlags::MOVE.union(SpliceFlags::NONBLOCK);

/// The most bytes asked of one splice from a socket: the kernel stops earlier when the pipe
/// is full (whatever size the pipe got) or the socket has no more.
const CHUNK: usize = 1 << 20;

/// Splices one direction makes per wakeup before the loop turns to other connections.
const ROUNDS: usize = 64;

/// The pipe size a bulk direction grows to: 1 MiB, the default `fs.pipe-max-size`. Each splice
/// then moves up to 16 times more, which is most of what a splice relay can save (the rest of
/// its CPU is the kernel's TCP work). See pipe(7).
const BULK_PIPE: usize = 1 << 20;
/// Bytes a direction moves before its pipe grows: small and interactive connections keep the
/// 64 KiB default, so thousands of them do not pin 1 MiB pipes or the user's pipe budget.
const BULK_AFTER: u64 = 1 << 20;

/// A connection's socket with the readiness epoll last reported for it. Edge-triggered
/// readiness is kept until a splice on this socket says `EAGAIN`.
pub(super) struct Side {
    pub fd: OwnedFd,
    pub readable: bool,
    pub writable: bool,
}

impl Side {
    pub fn new(fd: OwnedFd) -> Self {
        Side {
            fd,
            readable: false,
            writable: false,
        }
    }
}

/// Why a direction stopped for good before its source ended.
pub(super) enum Fault {
    /// Reading the source failed (a reset, a timeout).
    Source(Errno),
    /// Writing the destination failed (`EPIPE`, a reset).
    Destination(Errno),
    /// Writing the recording failed.
    Record(Errno),
}

/// What one [`Relay::pump`] did.
pub(super) struct Pumped {
    /// Bytes delivered to the destination.
    pub moved: usize,
    /// The source ended during this pump (counts as activity, like bytes).
    pub ended: bool,
    /// The round budget ran out with more to do: pump again soon.
    pub more: bool,
}

/// One direction: its pipe, how many bytes the pipe holds, and how far it got.
pub(super) struct Relay {
    pipe_r: OwnedFd,
    pipe_w: OwnedFd,
    /// Bytes in the pipe. Reading from the source happens only when this is 0.
    held: usize,
    /// Bytes delivered to the destination so far.
    pub moved: u64,
    /// The source reached EOF.
    eof: bool,
    /// EOF was reached, the pipe drained, and the destination was shut down for writing.
    pub done: bool,
    /// Grow the pipe to [`BULK_PIPE`] once [`BULK_AFTER`] bytes have moved.
    grow: bool,
    /// The source's side was reset: a read error counts as its end, and at the end the
    /// destination is left for the connection to reset rather than shut down.
    aborting: bool,
    record: Option<Recorder>,
}

impl Relay {
    /// A direction with a fresh pipe (`pipe2(O_CLOEXEC | O_NONBLOCK)`), sized to `pipe_size`
    /// when given and the kernel agrees; without one, the pipe starts at the kernel's default
    /// and grows to 1 MiB once the direction proves to be bulk. See pipe(7) for
    /// `F_SETPIPE_SZ`.
    pub fn new(pipe_size: Option<usize>) -> Result<Self, Errno> {
        let (pipe_r, pipe_w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        if let Some(size) = pipe_size {
            // EPERM (over fs.pipe-max-size or the user's pipe budget) keeps the default size.
            let _ = rustix::pipe::fcntl_setpipe_size(&pipe_w, size);
        }
        Ok(Relay {
            pipe_r,
            pipe_w,
            held: 0,
            moved: 0,
            eof: false,
            done: false,
            grow: pipe_size.is_none(),
            aborting: false,
            record: None,
        })
    }

    /// Tees everything this direction delivers into `recorder`. The pipe then keeps its size:
    /// the recorder's mirror pipe was sized to match it.
    pub fn record_into(&mut self, recorder: Recorder) {
        self.record = Some(recorder);
        self.grow = false;
    }

    /// The source's side was reset: from now on a read error on it is its end (Linux reports a
    /// reset once, after the bytes that arrived before it), and the destination is no longer
    /// shut down at the end (the connection resets it instead, once [`Relay::finished`]).
    pub fn abort(&mut self) {
        self.aborting = true;
    }

    /// The source has ended and the pipe is empty: every byte read was delivered.
    pub fn finished(&self) -> bool {
        self.eof && self.held == 0
    }

    /// The pipe's write end (the recorder sizes its own pipe to match).
    pub fn pipe_w(&self) -> &OwnedFd {
        &self.pipe_w
    }

    /// Moves what the sockets' readiness allows, for at most [`ROUNDS`] splices.
    ///
    /// With bytes in the pipe, only the destination is written; once it is empty, the source
    /// is read. `EAGAIN` clears the readiness of the socket that returned it, so the loop
    /// waits for epoll to report it again: no retry without an event, no busy loop. At EOF
    /// with an empty pipe the destination gets `shutdown(SHUT_WR)` (an error there means the
    /// peer is gone, which its own direction will report).
    pub fn pump(&mut self, src: &mut Side, dst: &mut Side) -> Result<Pumped, Fault> {
        let mut out = Pumped {
            moved: 0,
            ended: false,
            more: false,
        };
        for _ in 0..ROUNDS {
            if self.held > 0 {
                if !dst.writable {
                    return Ok(out);
                }
                match splice(&self.pipe_r, None, &dst.fd, None, self.held, FLAGS) {
                    // A non-empty pipe that moves nothing: treat as "would block".
                    Ok(0) | Err(Errno::AGAIN) => {
                        dst.writable = false;
                        return Ok(out);
                    }
                    Ok(n) => {
                        if let Some(r) = &mut self.record {
                            r.commit(n).map_err(Fault::Record)?;
                        }
                        self.held -= n;
                        self.moved += n as u64;
                        out.moved += n;
                        if self.grow && self.moved >= BULK_AFTER {
                            // Once: a refusal (EPERM past fs.pipe-max-size) keeps the size.
                            self.grow = false;
                            let _ = rustix::pipe::fcntl_setpipe_size(&self.pipe_w, BULK_PIPE);
                        }
                    }
                    Err(Errno::INTR) => {}
                    Err(e) => return Err(Fault::Destination(e)),
                }
            } else if self.eof {
                if !self.done && !self.aborting {
                    self.done = true;
                    let _ = rustix::net::shutdown(&dst.fd, Shutdown::Write);
                    if let Some(r) = &mut self.record {
                        r.end().map_err(Fault::Record)?;
                    }
                }
                return Ok(out);
            } else {
                if !src.readable {
                    return Ok(out);
                }
                match splice(&src.fd, None, &self.pipe_w, None, CHUNK, FLAGS) {
                    Ok(0) => {
                        self.eof = true;
                        out.ended = true;
                    }
                    Ok(n) => {
                        self.held = n;
                        if let Some(r) = &mut self.record {
                            r.tee(&self.pipe_r, n).map_err(Fault::Record)?;
                        }
                    }
                    Err(Errno::AGAIN) => {
                        src.readable = false;
                        return Ok(out);
                    }
                    Err(Errno::INTR) => {}
                    Err(_) if self.aborting => {
                        self.eof = true;
                        out.ended = true;
                    }
                    Err(e) => return Err(Fault::Source(e)),
                }
            }
        }
        out.more = true;
        Ok(out)
    }
}
