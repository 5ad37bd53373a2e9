//! The forwarding proxy behind `fdkit proxy`: one thread, one epoll set, splice through pipes.
//!
//! Each accepted client gets a non-blocking connect to the upstream and two pipes, one per
//! direction. Bytes move socket → pipe → socket with `splice(2)` (`SPLICE_F_MOVE |
//! SPLICE_F_NONBLOCK`) and never enter userspace. The loop is single-threaded and
//! edge-triggered: every socket is registered once for `EPOLLIN | EPOLLOUT | EPOLLRDHUP |
//! EPOLLET`, its readiness is remembered until a splice says `EAGAIN`, and no `epoll_ctl`
//! happens after registration.
//!
//! Backpressure: a direction reads from its source only into an empty pipe. When the
//! destination cannot take all of it (a slow reader), the bytes wait in the pipe and the source
//! is left alone until the destination is writable again, so the source's own socket buffer
//! fills and TCP flow control slows the sender. This also keeps `EAGAIN` unambiguous: reading
//! into an empty pipe can only block on the source, writing from a non-empty pipe only on the
//! destination. A pipe the kernel shrank to two pages (the per-user pipe budget,
//! `/proc/sys/fs/pipe-user-pages-soft`, ran out) moves less per call and nothing else changes.
//!
//! Half-close: when a source reaches EOF and its pipe has drained, the destination gets
//! `shutdown(SHUT_WR)`; the connection closes once both directions have. A reset or error on
//! either side closes both. `SIGPIPE` from splicing into a dead socket is blocked on the loop's
//! thread for the run (see `sigpipe`).
//!
//! Fairness: one busy connection moves at most a bounded number of chunks per wakeup before
//! the loop turns to the others; the rest of its work is queued for the next round.
//!
//! See splice(2), tee(2), epoll(7), shutdown(2).

mod conn;
mod endpoint;
mod event_loop;
mod listener;
pub mod record;
mod relay;
mod resolve;

pub use endpoint::Endpoint;
pub use resolve::{Lookup, UpstreamName};

use crate::servers::nofile::{fit_nofile, NofileGuard};
use rustix::io::Errno;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// What the proxy listens on, where it forwards, and its limits.
///
/// Build one with [`ProxyConfig::new`] and set the public fields you need.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProxyConfig {
    /// Where clients connect: a TCP address (port 0 picks a free port) or a unix socket.
    pub listen: Endpoint,
    /// Where each client is forwarded (the first address, when `upstream_name` is set).
    pub upstream: Endpoint,
    /// The host name `upstream` was resolved from, to resolve again every
    /// [`UpstreamName::every`] while serving: new connections go to the first address of the
    /// latest answer, so a name whose addresses change is followed without a restart. A failed
    /// lookup keeps the last address. `None`: `upstream` is used for the whole run.
    pub upstream_name: Option<UpstreamName>,
    /// Record both directions of connection `n` (from 1) into `RECORD.n`, each chunk with its
    /// direction and time, in the format [`record`] describes.
    pub record: Option<PathBuf>,
    /// The most connections open at once; the listener is left alone while at the cap.
    pub max_connections: usize,
    /// Close a connection that moved no byte in either direction for this long.
    pub idle_timeout: Option<Duration>,
    /// Give up on an upstream connect (and close the client) after this long.
    pub connect_timeout: Duration,
    /// Ask the kernel for pipes of this many bytes (`F_SETPIPE_SZ`; a refusal, `EPERM` over
    /// `fs.pipe-max-size`, keeps its default). `None`: pipes start at the kernel's 64 KiB and
    /// a direction that has moved 1 MiB grows its pipe to 1 MiB, so bulk transfers splice in
    /// large steps while thousands of small connections hold small pipes.
    pub pipe_size: Option<usize>,
    /// The `listen(2)` backlog; the kernel caps it at `net.core.somaxconn`.
    pub backlog: i32,
}

impl ProxyConfig {
    /// A configuration with the defaults: 4096 connections, no idle timeout, a 10 s connect
    /// timeout, pipes that grow for bulk directions, no recording.
    pub fn new(listen: Endpoint, upstream: Endpoint) -> Self {
        ProxyConfig {
            listen,
            upstream,
            upstream_name: None,
            record: None,
            max_connections: 4096,
            idle_timeout: None,
            connect_timeout: Duration::from_secs(10),
            pipe_size: None,
            backlog: 4096,
        }
    }
}

/// What a run did, returned when the checkpoint stops it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProxyStats {
    /// Connections accepted and closed again (every accepted one is closed by the end).
    pub connections: u64,
    /// Bytes delivered from clients to the upstream.
    pub bytes_up: u64,
    /// Bytes delivered from the upstream to clients.
    pub bytes_down: u64,
    /// Connections closed because the upstream connect failed (refused, unreachable, timeout).
    pub upstream_failures: u64,
    /// The most connections that were open at once.
    pub peak_connections: usize,
    /// The connection cap in force (lower than asked when `RLIMIT_NOFILE` could not fit it).
    pub max_connections: usize,
}

/// A bound proxy that has not started serving: lets the caller learn the real address (port
/// 0) before [`ProxyServer::run`].
#[derive(Debug)]
pub struct ProxyServer {
    listener: listener::Listener,
    config: ProxyConfig,
    /// The connection cap that fits `RLIMIT_NOFILE`, and why it is lower than asked.
    cap: usize,
    cap_notice: Option<String>,
    /// Puts the soft `RLIMIT_NOFILE` back when the server is done.
    nofile: NofileGuard,
}

impl ProxyServer {
    /// `socket` + `bind` + `listen` on `config.listen`, close-on-exec and non-blocking, and
    /// the soft `RLIMIT_NOFILE` raised toward what `max_connections` need (see
    /// [`ProxyServer::cap_notice`]).
    ///
    /// A unix socket path left behind by a dead server (nothing accepts on it) is replaced; a
    /// live one gives `EADDRINUSE`. The path is removed again when the server ends. A
    /// `record` path whose directory does not exist gives `ENOENT` here rather than on the
    /// first connection.
    pub fn bind(config: ProxyConfig) -> io::Result<Self> {
        if config.max_connections == 0 {
            return Err(crate::Error::InvalidArgument("max_connections must be at least 1").into());
        }
        if let Some(record) = &config.record {
            let dir = match record.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => std::path::Path::new("."),
            };
            if !dir.is_dir() {
                return Err(io::Error::from_raw_os_error(Errno::NOENT.raw_os_error()));
            }
        }
        let listener = listener::Listener::bind(&config.listen, config.backlog)?;
        let per_connection = event_loop::fds_per_connection(&config);
        let (cap, cap_notice, nofile) = fit_nofile(
            config.max_connections,
            per_connection,
            event_loop::SPARE_FDS,
        );
        Ok(ProxyServer {
            listener,
            config,
            cap,
            cap_notice,
            nofile,
        })
    }

    /// The most connections this server will hold: `max_connections`, or fewer when
    /// `RLIMIT_NOFILE` cannot be raised to fit them.
    pub fn max_connections(&self) -> usize {
        self.cap
    }

    /// Why [`ProxyServer::max_connections`] is lower than asked, when it is: one line for
    /// the caller to show as it sees fit ([`run`] logs it).
    pub fn cap_notice(&self) -> Option<&str> {
        self.cap_notice.as_deref()
    }

    /// The address clients connect to: the configured one with the port the kernel picked.
    pub fn local_endpoint(&self) -> &Endpoint {
        &self.listener.local
    }

    /// The configuration this server runs with.
    pub fn config(&self) -> &ProxyConfig {
        &self.config
    }

    /// Serves until `checkpoint` returns `Err`, then closes the listener and every
    /// connection and returns the stats.
    ///
    /// `checkpoint` is called at least every 100 ms and after `EINTR`; `log` gets one line
    /// per connection as it closes (number, client address, bytes each way, duration, how it
    /// ended) and notices while serving (accept paused, a changed or failed name lookup). An `Err` is a failure of the loop itself (epoll, the
    /// listener); per-connection failures are only logged.
    pub fn run(
        self,
        mut checkpoint: impl FnMut() -> Result<(), Errno>,
        mut log: impl FnMut(&str),
    ) -> io::Result<ProxyStats> {
        let ProxyServer {
            listener,
            config,
            cap,
            nofile,
            ..
        } = self;
        event_loop::EventLoop::new(listener, &config, cap, nofile, &mut log)?.run(&mut checkpoint)
    }
}

/// Binds `config.listen` and serves until `checkpoint` returns `Err`: see
/// [`ProxyServer::bind`] and [`ProxyServer::run`]. A lowered connection cap is logged first.
pub fn run(
    config: ProxyConfig,
    checkpoint: impl FnMut() -> Result<(), Errno>,
    mut log: impl FnMut(&str),
) -> io::Result<ProxyStats> {
    let server = ProxyServer::bind(config)?;
    if let Some(notice) = server.cap_notice() {
        log(notice);
    }
    server.run(checkpoint, log)
}
