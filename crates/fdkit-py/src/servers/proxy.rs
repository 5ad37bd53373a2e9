//! `serve_proxy`: the forwarding proxy behind `fdkit proxy`, its loop run with the GIL
//! released. Addresses are parsed (and host names resolved) here in Rust; per-connection log
//! lines go straight to fd 2 from Rust, so no Python runs while the proxy serves except the
//! signal check every 100 ms.

use super::run::run_server;
use crate::args::{i64_arg, Count, PathArg, Seconds};
use crate::errors::{io_error, io_error_named};
use fdkit::servers::proxy::{Endpoint, ProxyConfig, ProxyServer, ProxyStats, UpstreamName};
use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

/// The most connections one proxy may be asked to hold (each needs six fds).
const MAX_CONNECTIONS: i64 = 1 << 24;
/// The largest pipe size worth asking for (the kernel refuses more than `fs.pipe-max-size`).
const MAX_PIPE_SIZE: u64 = 1 << 30;

/// `serve_proxy(listen, upstream, *, record=None, max_connections=4096, idle_timeout=None,
/// connect_timeout=10.0, pipe_size=None, quiet=False, on_listen=None, resolve_every=5.0,
/// on_notice=None)`: runs the forwarding proxy until a signal handler raises (Ctrl-C:
/// `KeyboardInterrupt`).
///
/// `listen` and `upstream` are `"HOST:PORT"`, `"[V6]:PORT"`, `"unix:/PATH"` or
/// `"unix:@NAME"` (abstract). Host names are resolved here, before listening (one that does
/// not resolve fails at once); an upstream host name is resolved again every `resolve_every`
/// seconds while serving, in a background thread, and new connections go to the first address
/// of the latest answer (`None`: resolved once). `record="FILE"` writes both directions of
/// connection `n` to `FILE.<n>`, each chunk with its direction and time (the format of
/// `fdkit proxy --record`, in docs/cli.md). `on_listen(listen_addr, upstream_addr)` is called
/// once the socket listens, with the real address (port 0 replaced by the port the kernel
/// chose); an exception it raises stops the proxy before it serves, and is raised again.
/// `pipe_size` asks for relay pipes of that many bytes (the kernel rounds up to a power-of-two
/// number of pages; a refusal keeps its default of 64 KiB). `on_notice(line)` gets the notice
/// about a connection cap lowered to fit `RLIMIT_NOFILE`, before serving (without it, the
/// line goes to stderr unless `quiet`).
/// One line per connection goes to stderr unless `quiet`.
///
/// The loop runs with the GIL released and stops when a signal handler raises: the listener
/// and every connection are closed, then the handler's exception is re-raised with the run's
/// stats dict in its `proxy_stats` attribute. Bad arguments raise `ValueError`; kernel
/// errors `OSError` (a failed bind names the address).
#[pyfunction]
#[pyo3(
    signature = (
        listen,
        upstream,
        *,
        record=None,
        max_connections=4096,
        idle_timeout=None,
        connect_timeout=10.0,
        pipe_size=None,
        quiet=false,
        on_listen=None,
        resolve_every=Some(5.0),
        on_notice=None,
    ),
    text_signature = "(listen, upstream, *, record=None, max_connections=4096, \
                      idle_timeout=None, connect_timeout=10.0, pipe_size=None, quiet=False, \
                      on_listen=None, resolve_every=5.0, on_notice=None)"
)]
#[allow(clippy::too_many_arguments)]
pub fn serve_proxy<'py>(
    py: Python<'py>,
    listen: &str,
    upstream: &str,
    record: Option<&Bound<'py, PyAny>>,
    #[pyo3(from_py_with = i64_arg)] max_connections: i64,
    idle_timeout: Option<f64>,
    connect_timeout: f64,
    pipe_size: Option<Count>,
    quiet: bool,
    on_listen: Option<&Bound<'py, PyAny>>,
    resolve_every: Option<f64>,
    on_notice: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    if !(1..=MAX_CONNECTIONS).contains(&max_connections) {
        return Err(PyValueError::new_err(format!(
            "max_connections must be 1..={MAX_CONNECTIONS}, got {max_connections}"
        )));
    }
    let idle_timeout = Seconds::positive("idle_timeout").of_opt(idle_timeout)?;
    let connect_timeout = Seconds::positive("connect_timeout").of(connect_timeout)?;
    let resolve_every = Seconds::positive("resolve_every").of_opt(resolve_every)?;
    let pipe_size = match pipe_size {
        None => None,
        Some(Count(n)) if (1..=MAX_PIPE_SIZE).contains(&n) => Some(n as usize),
        Some(Count(n)) => {
            return Err(PyValueError::new_err(format!(
                "pipe_size must be 1..={MAX_PIPE_SIZE} bytes, got {n}"
            )))
        }
    };
    let record = record
        .map(|r| PathArg::extract(r).map(|p| PathBuf::from(OsStr::from_bytes(p.as_bytes()))))
        .transpose()?;
    for (name, cb) in [("on_listen", on_listen), ("on_notice", on_notice)] {
        if cb.is_some_and(|cb| !cb.is_callable()) {
            return Err(PyTypeError::new_err(format!("{name} must be callable")));
        }
    }

    // Name lookups and bind can block: without the GIL.
    let server = py.detach(|| {
        let listen_at = resolve(listen)?;
        let (upstream_at, upstream_name) = resolve_upstream(upstream, resolve_every)?;
        let mut config = ProxyConfig::new(listen_at, upstream_at);
        config.upstream_name = upstream_name;
        config.record = record;
        config.max_connections = max_connections as usize;
        config.idle_timeout = idle_timeout;
        config.connect_timeout = connect_timeout;
        config.pipe_size = pipe_size;
        // OSError(errno, strerror, filename): "[Errno 98] Address already in use: '…'".
        ProxyServer::bind(config).map_err(|e| io_error_named(&e, Some(listen.to_owned())))
    })?;
    if let Some(notice) = server.cap_notice() {
        match on_notice {
            Some(cb) => {
                cb.call1((notice,))?;
            }
            None if !quiet => super::run::write_stderr(notice),
            None => {}
        }
    }
    if let Some(cb) = on_listen {
        cb.call1((
            server.local_endpoint().to_string(),
            server.config().upstream.to_string(),
        ))?;
    }

    run_server(
        py,
        quiet,
        "proxy_stats",
        |checkpoint, log| server.run(checkpoint, log),
        stats_dict,
        |e| io_error(&e),
    )
}

/// An endpoint as spelled: a wrong spelling is a `ValueError`, a host that does not resolve
/// an `OSError`.
fn resolve(s: &str) -> PyResult<Endpoint> {
    Endpoint::resolve(s).map_err(|e| address_error(s, e))
}

/// What a failed lookup of the endpoint spelled `s` raises (see [`resolve`]).
fn address_error(s: &str, e: io::Error) -> PyErr {
    if e.kind() == io::ErrorKind::InvalidInput {
        let text = e.to_string();
        let why = text.strip_prefix("invalid argument: ").unwrap_or(&text);
        return PyValueError::new_err(format!("invalid address {s:?}: {why}"));
    }
    match e.raw_os_error() {
        Some(_) => io_error(&e),
        None => PyOSError::new_err(format!("cannot resolve {s:?}: {e}")),
    }
}

/// The upstream to start with and, for a host name to follow (`every` set), the name.
fn resolve_upstream(
    s: &str,
    every: Option<Duration>,
) -> PyResult<(Endpoint, Option<UpstreamName>)> {
    let failed = |e: io::Error| address_error(s, e);
    let Some((host, port)) = Endpoint::host_name(s).map_err(|e| failed(e.into()))? else {
        return Ok((resolve(s)?, None));
    };
    let name = UpstreamName::new(host, port, every.unwrap_or(Duration::ZERO));
    let first = name.resolve().map_err(failed)?[0];
    Ok((Endpoint::Tcp(first), every.map(|_| name)))
}

fn stats_dict<'py>(py: Python<'py>, s: &ProxyStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("connections", s.connections)?;
    d.set_item("bytes_up", s.bytes_up)?;
    d.set_item("bytes_down", s.bytes_down)?;
    d.set_item("upstream_failures", s.upstream_failures)?;
    d.set_item("peak_connections", s.peak_connections)?;
    d.set_item("max_connections", s.max_connections)?;
    Ok(d)
}
