//! `serve_static`: the static file server behind `fdkit serve`, its loop run with the GIL
//! released (only the signal check every 100 ms takes it back). Worker processes are forked
//! by the Python layer (`fdkit.serve`); each runs this with `reuse_port=True`.

use super::run::run_server;
use crate::args::{i64_arg, port_arg, PathArg, Seconds};
use crate::errors::{io_error, io_error_named, os_error};
use fdkit::servers::static_files::{
    EngineChoice, ServeConfig, ServeStats, StaticServer, ENGINE_NAMES,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::ffi::OsStr;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

const MAX_CONNECTIONS: i64 = 1 << 24;

/// `serve_static`'s defaults, written once: its signature takes them from here, and
/// `_fdkit.SERVE_DEFAULTS` ([`defaults_dict`]) hands them to `fdkit.serve` and `fdkit serve`.
/// The hand-written text signature and stub are held to them by a test.
pub mod defaults {
    /// Loopback only, unlike http.server: every interface must be asked for.
    pub const HOST: &str = "127.0.0.1";
    /// http.server's port.
    pub const PORT: u16 = 8000;
    /// io_uring where the kernel allows it, else epoll.
    pub const ENGINE: &str = "auto";
    /// Seconds a connection may stay silent, or take to send one request.
    pub const IDLE_TIMEOUT: f64 = 30.0;
    /// Connections at once; more are accepted and closed.
    pub const MAX_CONNECTIONS: i64 = 10_000;
    /// `SO_REUSEPORT`, for workers sharing the port.
    pub const REUSE_PORT: bool = false;
    /// Notices on stderr.
    pub const QUIET: bool = false;
    /// A directory without `index.html` answers 404.
    pub const LISTING: bool = false;
    /// No access log: it costs a write per batch of responses.
    pub const ACCESS_LOG: bool = false;
}

/// [`defaults`] as the dict `_fdkit.SERVE_DEFAULTS`, keyed by argument name.
pub fn defaults_dict(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    use defaults::*;
    let d = PyDict::new(py);
    d.set_item("host", HOST)?;
    d.set_item("port", PORT)?;
    d.set_item("engine", ENGINE)?;
    d.set_item("idle_timeout", IDLE_TIMEOUT)?;
    d.set_item("max_connections", MAX_CONNECTIONS)?;
    d.set_item("reuse_port", REUSE_PORT)?;
    d.set_item("quiet", QUIET)?;
    d.set_item("listing", LISTING)?;
    d.set_item("access_log", ACCESS_LOG)?;
    Ok(d)
}

/// The core's [`ENGINE_NAMES`] as the dict `_fdkit.ENGINE_NAMES`: every spelling of an engine
/// and the engine's name (`{"io_uring": "io_uring", "uring": "io_uring", "epoll": "epoll"}`),
/// for `fdkit.aio`, `fdkit serve` and `fdkit doctor`.
pub fn engine_names_dict(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for &(name, engine) in ENGINE_NAMES {
        d.set_item(name, engine.name())?;
    }
    Ok(d)
}

/// `serve_static(directory, *, host, port, engine, idle_timeout, max_connections, reuse_port,
/// quiet, on_listen, listing, access_log)`: serves the files under `directory` over HTTP/1.1
/// until a signal handler raises. The defaults are `SERVE_DEFAULTS` (the `defaults` module).
/// `listing`: a directory without `index.html` gets an HTML listing. `access_log`: one common
/// log format line per response on stderr (fd 2), written in batches.
///
/// `on_listen(info)` is called once the socket listens, with a dict: `host`, `port` (the real
/// one), `engine` (`"io_uring"` or `"epoll"`), `fallback` (why `auto` chose epoll, or None).
/// Notices (a lowered connection cap, accept failures) go to stderr unless `quiet`.
///
/// When a signal handler raises, the server stops gracefully (responses in flight finish)
/// and the exception is re-raised with the run's stats dict in its `serve_stats` attribute.
/// Bad arguments raise `ValueError`; kernel errors `OSError`; `engine="uring"` where io_uring
/// cannot serve raises `OSError` naming the reason.
#[pyfunction]
#[pyo3(
    signature = (
        directory,
        *,
        host=defaults::HOST,
        port=defaults::PORT,
        engine=defaults::ENGINE,
        idle_timeout=Duration::from_secs_f64(defaults::IDLE_TIMEOUT),
        max_connections=defaults::MAX_CONNECTIONS,
        reuse_port=defaults::REUSE_PORT,
        quiet=defaults::QUIET,
        on_listen=None,
        listing=defaults::LISTING,
        access_log=defaults::ACCESS_LOG,
    ),
    // A literal (PyO3 takes no constants here) that tests/test_serve_defaults.py holds to
    // `defaults`.
    text_signature = "(directory, *, host='127.0.0.1', port=8000, engine='auto', \
                      idle_timeout=30.0, max_connections=10000, reuse_port=False, quiet=False, \
                      on_listen=None, listing=False, access_log=False)"
)]
#[allow(clippy::too_many_arguments)]
pub fn serve_static<'py>(
    py: Python<'py>,
    directory: &Bound<'py, PyAny>,
    host: &str,
    #[pyo3(from_py_with = port_arg)] port: u16,
    engine: &str,
    #[pyo3(from_py_with = idle_timeout_arg)] idle_timeout: Duration,
    #[pyo3(from_py_with = i64_arg)] max_connections: i64,
    reuse_port: bool,
    quiet: bool,
    on_listen: Option<&Bound<'py, PyAny>>,
    listing: bool,
    access_log: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let root = PathBuf::from(OsStr::from_bytes(PathArg::extract(directory)?.as_bytes()));
    if !(1..=MAX_CONNECTIONS).contains(&max_connections) {
        return Err(PyValueError::new_err(format!(
            "max_connections must be 1..={MAX_CONNECTIONS}, got {max_connections}"
        )));
    }
    let engine = EngineChoice::from_name(engine).ok_or_else(|| {
        let names: Vec<String> = ENGINE_NAMES.iter().map(|(n, _)| format!("'{n}'")).collect();
        PyValueError::new_err(format!(
            "engine must be 'auto', {}, got {engine:?}",
            names.join(", ")
        ))
    })?;
    let idle = idle_timeout;
    if let Some(cb) = on_listen {
        if !cb.is_callable() {
            return Err(PyTypeError::new_err("on_listen must be callable"));
        }
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.contains('\0') {
        // getaddrinfo(3) would read the host only up to the NUL.
        return Err(PyValueError::new_err(format!(
            "host must not contain a NUL byte: {}",
            pyo3::types::PyString::new(py, host).repr()?
        )));
    }
    // The listen address as the user spelled it, for a failed bind: "0.0.0.0:80", "[::1]:80".
    let listen_at = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let host = host.to_owned();
    let server = py.detach(|| -> PyResult<StaticServer> {
        let addr = resolve(&host, port)?;
        // The directory is opened first, on its own, as the server will open it: a
        // failure there names DIR, and an errno from what follows (the socket, bind,
        // listen) names the address instead: EACCES on port 80 is the port's, not DIR's.
        check_root(&root).map_err(|e| dir_error(&e, &root))?;
        let mut config = ServeConfig::new(root.clone(), addr);
        config.engine = engine;
        config.idle_timeout = idle;
        config.max_connections = max_connections as usize;
        config.reuse_port = reuse_port;
        config.listing = listing;
        if access_log {
            // A duplicate of fd 2 (close-on-exec): the log keeps going where stderr went
            // at the start, whatever Python does with fd 2 meanwhile. See dup(2).
            let fd =
                rustix::io::fcntl_dupfd_cloexec(rustix::stdio::stderr(), 0).map_err(os_error)?;
            config.access_log = Some(std::sync::Arc::new(fd));
        }
        StaticServer::bind(config).map_err(|e| match e.raw_os_error() {
            // Only the directory can be missing (it vanished since the check).
            Some(libc::ENOENT | libc::ENOTDIR) => dir_error(&e, &root),
            // OSError(errno, strerror, filename), as `serve_proxy` raises it for its
            // listen address: "[Errno 98] Address already in use: '127.0.0.1:8000'".
            Some(_) => io_error_named(&e, Some(listen_at.clone())),
            None => io_error(&e),
        })
    })?;
    if let Some(cb) = on_listen {
        let info = PyDict::new(py);
        let local = server.local_addr();
        info.set_item("host", local.ip().to_string())?;
        info.set_item("port", local.port())?;
        info.set_item("engine", server.engine().name())?;
        info.set_item("fallback", server.fallback_reason())?;
        cb.call1((info,))?;
    }
    run_server(
        py,
        quiet,
        "serve_stats",
        |checkpoint, log| server.run(checkpoint, log),
        stats_dict,
        |e| io_error(&e),
    )
}

/// `idle_timeout`: positive seconds (an int or a float), at most
/// [`crate::args::MAX_SECONDS`].
fn idle_timeout_arg(obj: &Bound<'_, PyAny>) -> PyResult<Duration> {
    Seconds::positive("idle_timeout").extract(obj)
}

/// An error from opening the directory: only a missing or forbidden directory is named, the
/// other errnos are not DIR's.
fn dir_error(e: &io::Error, root: &std::path::Path) -> PyErr {
    let names_dir = matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::EACCES)
    );
    let path = names_dir.then(|| root.to_string_lossy().into_owned());
    io_error_named(e, path)
}

/// Opens `root` as the server's `Root::open` does (`O_PATH | O_DIRECTORY`, then its real
/// path), only to see whether it can. See open(2), realpath(3).
fn check_root(root: &std::path::Path) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    drop(rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?);
    std::fs::canonicalize(root).map(drop)
}

fn resolve(host: &str, port: u16) -> PyResult<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| PyValueError::new_err(format!("cannot resolve host {host:?}: {e}")))?
        .next()
        .ok_or_else(|| PyValueError::new_err(format!("host {host:?} has no address")))
}

fn stats_dict<'py>(py: Python<'py>, s: &ServeStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("requests", s.requests)?;
    d.set_item("connections", s.connections)?;
    d.set_item("timeouts", s.timeouts)?;
    d.set_item("refused", s.refused)?;
    d.set_item("peak_connections", s.peak_connections)?;
    d.set_item("max_connections", s.max_connections)?;
    Ok(d)
}
