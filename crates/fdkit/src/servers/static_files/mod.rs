//! The static file server behind `fdkit serve`: HTTP/1.1 GET and HEAD for the files under one
//! directory, with a hot loop that never leaves Rust.
//!
//! Two engines share everything but the event loop: `uring.rs` (one io_uring per worker:
//! multishot accept, multishot receive on a provided-buffer ring, `sendmsg` ring ops) and
//! `epoll.rs` (edge-triggered epoll, `recv`/`sendmsg`). `conn.rs` turns buffered requests into
//! batches of responses (`out.rs`: pipelined requests answered in order, in one send);
//! `respond.rs` decides each response (`multipart.rs`: a 206 of several ranges); `files.rs`
//! opens files beneath the root (`openat2` `RESOLVE_BENEATH`) and caches them; the HTTP
//! syntax is `crate::http`.
//!
//! Bodies never pass through a userspace buffer: small files are mapped and the kernel copies
//! them from the page cache into the socket in the same `sendmsg` as the head; large ones go
//! with `sendfile(2)`.
//!
//! Limits: request heads of at most 8 KiB and 100 header lines (431); an idle timeout that
//! is also a header deadline (a request must be complete within it of its first byte); a
//! connection cap (connections over it are accepted and closed); request bodies never read
//! (413 on GET and HEAD, then the connection closes).
//!
//! Methods: GET and HEAD; OPTIONS answered with `Allow: GET, HEAD, OPTIONS`; any other method
//! 405 with the same `Allow`, and the connection closes after it (`respond.rs`).
//!
//! Fds: `RLIMIT_NOFILE` (per process: each `SO_REUSEPORT` worker fits its own) is shared out
//! at the start of [`StaticServer::run`]: first the connections (the cap is lowered until
//! `SPARE_FDS` are left), then the open-file cache gets what is left but `RESERVE_FDS`
//! (at most `files::CACHE_MAX`). The soft limit is raised toward all of that when the hard
//! limit allows. So a full cache and a full connection table never push `accept` into
//! `EMFILE`; when something else does (the host program's own fds, files held by responses in
//! flight), the cache gives back idle fds and `accept` is tried again, or accepting pauses
//! until the next tick (the clients wait in the backlog), never spinning and never for good.
//!
//! Optional: a directory without an index file answered with a listing (`files.rs`), and an
//! access log in the common log format (`access_log.rs`), both off by default.
//!
//! Stopping: when the checkpoint says stop, the listener closes, idle connections close, and
//! connections with a response in flight finish it (at most [`GRACE`]) and then close.

mod access_log;
mod clock;
mod config;
mod conn;
mod epoll;
mod files;
mod listener;
mod lru;
mod multipart;
mod out;
mod respond;
mod send;
mod slab;
mod stats;
mod uring;

pub use config::{Engine, EngineChoice, ServeConfig, ENGINE_NAMES};
pub use stats::ServeStats;

use rustix::io::Errno;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// Fds the connection cap always leaves free (for the cache and the reserve), when it has to
/// be lowered to fit `RLIMIT_NOFILE`.
const SPARE_FDS: usize = 256;
/// Fds never given to the open-file cache: the ring or epoll set, the host program's own,
/// headroom for `accept`, a directory opened on the way to its `index.html`.
const RESERVE_FDS: usize = 64;
/// How often a failing `accept` is logged at most.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);

/// How long a stopping server lets responses in flight finish.
pub const GRACE: Duration = Duration::from_secs(5);

/// What both engines share: limits, counters and the log.
pub(crate) struct Shared<'a> {
    idle: Duration,
    cap: usize,
    grace: Duration,
    stats: ServeStats,
    log: &'a mut dyn FnMut(&str),
    /// When a failing `accept` was last logged.
    accept_logged: Option<Instant>,
    /// The access log, when it is on.
    access: Option<access_log::AccessLog>,
}

impl Shared<'_> {
    /// The engine's tick: writes the access log lines buffered since the last one.
    fn tick(&mut self) {
        if let Some(log) = &mut self.access {
            log.flush();
        }
    }

    /// `accept(2)` failed with `e` (not `EAGAIN` nor a client's error). Out of fds
    /// (`EMFILE`, `ENFILE`): the cache closes idle files, and when that freed any, the caller
    /// accepts again at once (true). Otherwise (nothing to give back, or out of memory) the
    /// caller stops accepting until the next tick: the clients wait in the backlog, and the
    /// loop neither spins on the error nor stops accepting for good. Logged at most every
    /// [`ACCEPT_LOG_EVERY`]. See accept(2) (`EMFILE`).
    fn accept_failed(&mut self, e: Errno, live: usize, files: &mut files::FileCache) -> bool {
        if matches!(e, Errno::MFILE | Errno::NFILE) && files.shed() > 0 {
            return true;
        }
        let now = Instant::now();
        let due = match self.accept_logged {
            Some(t) => now.saturating_duration_since(t) >= ACCEPT_LOG_EVERY,
            None => true,
        };
        if due {
            self.accept_logged = Some(now);
            (self.log)(&format!(
                "accept: {} ({live} connection{} open); trying again every 100 ms",
                io::Error::from(e),
                if live == 1 { "" } else { "s" }
            ));
        }
        false
    }
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
        let fit = crate::servers::nofile::fit_nofile_with(
            self.config.max_connections,
            1,
            SPARE_FDS,
            files::CACHE_MAX + RESERVE_FDS,
        );
        let (cap, _nofile) = (fit.cap, fit.guard);
        if let Some(n) = fit.notice {
            log(&n);
        }
        let cache_budget = fit.left.saturating_sub(RESERVE_FDS);
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
            accept_logged: None,
            access: self
                .config
                .access_log
                .clone()
                .map(access_log::AccessLog::new),
        };
        let files = files::FileCache::new(self.root, cache_budget, self.config.listing);
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
