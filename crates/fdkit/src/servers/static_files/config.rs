//! What `fdkit serve` is asked to do: [`ServeConfig`], [`EngineChoice`], [`Engine`] and
//! the names engines go by ([`ENGINE_NAMES`]).

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Which event engine to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineChoice {
    /// io_uring when the kernel allows it (probed at bind), else epoll.
    Auto,
    /// io_uring or fail.
    Uring,
    /// epoll.
    Epoll,
}

/// The engine a server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// One ring: multishot accept, multishot receive on a provided-buffer ring, sendmsg.
    Uring,
    /// One edge-triggered epoll set.
    Epoll,
}

/// Every spelling of an engine fdkit accepts, and the engine it names: `io_uring`, its alias
/// `uring`, and `epoll`. The one list: `fdkit serve --engine`, `serve_static(engine=...)` and
/// `fdkit.aio`'s `EventLoop(engine=...)` read it (from Python, as `_fdkit.ENGINE_NAMES`).
pub const ENGINE_NAMES: &[(&str, Engine)] = &[
    ("io_uring", Engine::Uring),
    ("uring", Engine::Uring),
    ("epoll", Engine::Epoll),
];

impl Engine {
    /// `"io_uring"` or `"epoll"`.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Uring => "io_uring",
            Engine::Epoll => "epoll",
        }
    }

    /// The engine `name` spells ([`ENGINE_NAMES`]), if any.
    pub fn from_name(name: &str) -> Option<Engine> {
        ENGINE_NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, engine)| engine)
    }
}

impl EngineChoice {
    /// `"auto"`, or an engine's name ([`ENGINE_NAMES`]).
    pub fn from_name(name: &str) -> Option<EngineChoice> {
        match (name, Engine::from_name(name)) {
            ("auto", _) => Some(EngineChoice::Auto),
            (_, Some(Engine::Uring)) => Some(EngineChoice::Uring),
            (_, Some(Engine::Epoll)) => Some(EngineChoice::Epoll),
            (_, None) => None,
        }
    }
}

/// The static server's configuration. Build one with [`ServeConfig::new`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeConfig {
    /// The directory served; nothing outside it is ever opened.
    pub root: PathBuf,
    /// Where to listen (port 0 picks a free port).
    pub addr: SocketAddr,
    /// The engine.
    pub engine: EngineChoice,
    /// A connection is dropped when a request head is not complete this long after its first
    /// byte (slow clients), when a kept-alive connection sends nothing for this long, or when
    /// a response makes no progress for this long.
    pub idle_timeout: Duration,
    /// The most connections open at once; more are accepted and closed at once.
    pub max_connections: usize,
    /// `SO_REUSEPORT`, so several worker processes can listen on the same port.
    pub reuse_port: bool,
    /// The `listen(2)` backlog (the kernel caps it at `net.core.somaxconn`).
    pub backlog: i32,
    /// A directory without `index.html` or `index.htm` is answered with an HTML listing of
    /// its entries (off: 404, whose body says listings are off). Entries that are symlinks
    /// leading outside the root are left out.
    pub listing: bool,
    /// Where the access log goes: one common log format line per response
    /// (`127.0.0.1 - - [23/Nov/2026:17:00:00 +0000] "GET /x HTTP/1.1" 200 1234`), written in
    /// batches of whole lines at least every 100 ms and when the server stops. `None`: no
    /// log (the fastest).
    pub access_log: Option<Arc<OwnedFd>>,
}

impl ServeConfig {
    /// The defaults: auto engine, 30 s idle timeout, 10,000 connections, no `SO_REUSEPORT`,
    /// no directory listings, no access log.
    pub fn new(root: impl Into<PathBuf>, addr: SocketAddr) -> Self {
        ServeConfig {
            root: root.into(),
            addr,
            engine: EngineChoice::Auto,
            idle_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            reuse_port: false,
            backlog: 4096,
            listing: false,
            access_log: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_name_reads_back() {
        for &(name, engine) in ENGINE_NAMES {
            assert_eq!(Engine::from_name(name), Some(engine));
            assert_eq!(Engine::from_name(engine.name()), Some(engine));
        }
        assert_eq!(EngineChoice::from_name("uring"), Some(EngineChoice::Uring));
        assert_eq!(EngineChoice::from_name("auto"), Some(EngineChoice::Auto));
        assert_eq!(EngineChoice::from_name("epoll"), Some(EngineChoice::Epoll));
        assert_eq!(EngineChoice::from_name("kqueue"), None);
        assert_eq!(Engine::from_name("auto"), None);
    }
}
