//! The static file server behind `fdkit serve`: HTTP/1.1 GET and HEAD for the files under one
//! directory, with a hot loop that never leaves Rust.
//!
//! Two engines share everything but the event loop: `uring.rs` (one io_uring per worker:
//! multishot accept, multishot receive on a provided-buffer ring, `sendmsg` ring ops) and
//! `epoll.rs` (edge-triggered epoll, `recv`/`sendmsg`). `conn.rs` turns buffered requests into
//! batches of responses (pipelined requests answered in order, in one send); `respond.rs`
//! decides each response; `files.rs` opens files beneath the root (`openat2`
//! `RESOLVE_BENEATH`) and caches them; the HTTP syntax is `crate::http`.
//!
//! Bodies never pass through a userspace buffer: small files are mapped and the kernel copies
//! them from the page cache into the socket in the same `sendmsg` as the head; large ones go
//! with `sendfile(2)`.
//!
//! Limits: request heads of at most 8 KiB and 100 header lines (431); an idle timeout that
//! is also a header deadline (a request must be complete within it of its first byte); a
//! connection cap (connections over it are accepted and closed); request bodies refused (413).
//!
//! Stopping: when the checkpoint says stop, the listener closes, idle connections close, and
//! connections with a response in flight finish it (at most [`GRACE`]) and then close.

mod clock;
mod config;
mod conn;
mod epoll;
mod files;
mod listener;
mod respond;
mod send;
mod slab;
mod stats;
mod uring;

pub use config::{Engine, EngineChoice, ServeConfig};
pub use stats::ServeStats;

use rustix::io::Errno;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::Duration;

/// Fds kept free beyond one per connection: the listener, the ring or epoll set, the files the
/// open-file cache holds, and the host program's own.
const SPARE_FDS: usize = 256;

/// How long a stopping server lets responses in flight finish.
pub const GRACE: Duration = Duration::from_secs(5);

/// What both engines share: limits, counters and the log.
pub(crate) struct Shared<'a> {
    idle: Duration,
    cap: usize,
    grace: Duration,
    stats: ServeStats,
    log: &'a mut dyn FnMut(&str),
}

/// A bound static server that has not started serving: the caller learns the real address
/// (port 0) and the engine before [`StaticServer::run`].
pub struct StaticServer {
    listener: OwnedFd,
    local: SocketAddr,
    root: files::Root,
    config: ServeConfig,
    engine: Engine,
    fallback: Option<String>,
}

impl std::fmt::Debug for StaticServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticServer")
            .field("local", &self.local)
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl StaticServer {
    /// Opens the root (which must be a directory), binds and listens, and picks the engine
    /// (`Auto` probes io_uring; [`fallback_reason`](Self::fallback_reason) says why not).
    /// `EngineChoice::Uring` where io_uring cannot serve fails with `Unsupported` and the
    /// reason.
    pub fn bind(config: ServeConfig) -> io::Result<StaticServer> {
        if config.max_connections == 0 {
            return Err(crate::Error::InvalidArgument("max_connections must be at least 1").into());
        }
        let root = files::Root::open(&config.root)?;
        let (engine, fallback) = match config.engine {
            EngineChoice::Epoll => (Engine::Epoll, None),
            EngineChoice::Uring | EngineChoice::Auto => match uring::check() {
                Ok(()) => (Engine::Uring, None),
                Err(reason) if config.engine == EngineChoice::Auto => (Engine::Epoll, Some(reason)),
                Err(reason) => {
                    return Err(io::Error::new(
                        io::ErrorKind::Unsupported,
                        format!("io_uring unavailable: {reason}"),
                    ))
                }
            },
        };
        let (listener, local) = listener::bind(config.addr, config.reuse_port, config.backlog)?;
        Ok(StaticServer {
            listener,
            local,
            root,
            config,
            engine,
            fallback,
        })
    }

    /// The address clients connect to (the port the kernel picked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The engine that will serve.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Why `Auto` chose epoll, when it did.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The configuration.
    pub fn config(&self) -> &ServeConfig {
        &self.config
    }

    /// Serves until `checkpoint` returns `Err` (it runs every 100 ms), then stops gracefully
    /// and returns the counters. `log` gets notices (a lowered connection cap, accept
    /// failures), never one line per request. `SIGPIPE` is blocked on this thread meanwhile.
    pub fn run(
        self,
        mut checkpoint: impl FnMut() -> Result<(), Errno>,
        mut log: impl FnMut(&str),
    ) -> io::Result<ServeStats> {
        let (cap, notice, _nofile) =
            crate::servers::nofile::fit_nofile(self.config.max_connections, 1, SPARE_FDS);
        if let Some(n) = notice {
            log(&n);
        }
        let _sigpipe = crate::fd::SigpipeGuard::new();
        let shared = Shared {
            idle: self.config.idle_timeout,
            cap,
            grace: GRACE,
            stats: ServeStats {
                max_connections: cap,
                ..ServeStats::default()
            },
            log: &mut log,
        };
        let files = files::FileCache::new(self.root);
        match self.engine {
            Engine::Epoll => epoll::run(self.listener, files, shared, &mut checkpoint),
            Engine::Uring => {
                let setup = uring::setup().map_err(|r| {
                    io::Error::new(
                        io::ErrorKind::Unsupported,
                        format!("io_uring unavailable: {r}"),
                    )
                })?;
                uring::run(setup, self.listener, files, shared, &mut checkpoint)
            }
        }
    }
}

/// Binds with `config` and serves until `checkpoint` says stop: see [`StaticServer::bind`]
/// and [`StaticServer::run`].
pub fn serve(
    config: ServeConfig,
    checkpoint: impl FnMut() -> Result<(), Errno>,
    log: impl FnMut(&str),
) -> io::Result<ServeStats> {
    StaticServer::bind(config)?.run(checkpoint, log)
}
