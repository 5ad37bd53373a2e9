//! The forwarding proxy against the real kernel: loopback TCP, unix sockets, abstract names.
//!
//! Each test runs the proxy loop in a thread whose checkpoint watches an `AtomicBool`, with
//! std-socket upstreams (echo, sink, scripted) in other threads.

use fdkit::servers::proxy::{record, Endpoint, ProxyConfig, ProxyServer, ProxyStats, UpstreamName};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

mod common;
use common::data;

const TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------- the proxy under test

struct Running {
    local: Endpoint,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<String>>>,
    /// The proxy thread's CPU time in clock ticks, sampled at every checkpoint.
    cpu_ticks: Arc<AtomicU64>,
    handle: JoinHandle<io::Result<ProxyStats>>,
}

fn start(config: ProxyConfig) -> Running {
    let server = ProxyServer::bind(config).expect("bind");
    let local = server.local_endpoint().clone();
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    let cpu_ticks = Arc::new(AtomicU64::new(0));
    let handle = {
        let (stop, log, cpu_ticks) = (stop.clone(), log.clone(), cpu_ticks.clone());
        thread::spawn(move || {
            server.run(
                || {
                    cpu_ticks.store(thread_cpu_ticks(), Ordering::SeqCst);
                    if stop.load(Ordering::SeqCst) {
                        Err(fdkit::fd::Errno::INTR)
                    } else {
                        Ok(())
                    }
                },
                |line| log.lock().unwrap().push(line.to_owned()),
            )
        })
    };
    Running {
        local,
        stop,
        log,
        cpu_ticks,
        handle,
    }
}

impl Running {
    fn stop(self) -> (ProxyStats, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let stats = self
            .handle
            .join()
            .expect("proxy thread")
            .expect("proxy run");
        let log = self.log.lock().unwrap().clone();
        (stats, log)
    }

    fn tcp_addr(&self) -> SocketAddr {
        match &self.local {
            Endpoint::Tcp(a) => *a,
            other => panic!("not TCP: {other}"),
        }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.tcp_addr()).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s
    }

    /// Waits until a log line contains `needle`; returns it.
    fn wait_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(line) = self.log.lock().unwrap().iter().find(|l| l.contains(needle)) {
                return line.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {needle:?} in {:?}",
                self.log.lock().unwrap()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }
}

fn config(listen: &str, upstream: Endpoint) -> ProxyConfig {
    ProxyConfig::new(Endpoint::parse(listen).unwrap(), upstream)
}

fn thread_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    // Fields after the command (which may hold spaces) start at field 3; utime, stime are 14, 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    num(11) + num(12)
}

// ---------------------------------------------------------------- upstreams and data

fn echo<S: Read + Write>(mut s: S, shutdown: impl FnOnce(&S)) {
    let mut buf = vec![0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
    shutdown(&s);
}

/// A TCP echo server on 127.0.0.1 (a thread per connection); echoes, then half-closes at EOF.
fn echo_tcp() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            thread::spawn(move || {
                echo(s, |s| {
                    let _ = s.shutdown(Shutdown::Write);
                })
            });
        }
    });
    addr
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fdkit-proxy-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A unix echo server at `path`.
fn echo_unix(path: &std::path::Path) {
    let l = UnixListener::bind(path).unwrap();
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            thread::spawn(move || {
                echo(s, |s| {
                    let _ = s.shutdown(Shutdown::Write);
                })
            });
        }
    });
}

/// A one-connection TCP upstream running `script` on the accepted stream.
fn scripted<T: Send + 'static>(
    script: impl FnOnce(TcpStream) -> T + Send + 'static,
) -> (SocketAddr, mpsc::Receiver<T>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        let _ = tx.send(script(s));
    });
    (addr, rx)
}

/// Sends `payload` from one thread while reading everything back in another; returns what
/// came back once the proxy closed the client's read side.
fn exchange<S>(stream: S, payload: Vec<u8>) -> Vec<u8>
where
    S: Read + Write + Send + Sync + 'static,
    for<'a> &'a S: Read + Write,
    S: ShutdownWrite,
{
    let stream = Arc::new(stream);
    let writer = {
        let stream = stream.clone();
        thread::spawn(move || {
            (&*stream).write_all(&payload).unwrap();
            stream.shutdown_write();
        })
    };
    let mut back = Vec::new();
    (&*stream).read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    back
}

trait ShutdownWrite {
    fn shutdown_write(&self);
}

impl ShutdownWrite for TcpStream {
    fn shutdown_write(&self) {
        self.shutdown(Shutdown::Write).unwrap();
    }
}

impl ShutdownWrite for UnixStream {
    fn shutdown_write(&self) {
        self.shutdown(Shutdown::Write).unwrap();
    }
}

fn set_linger_zero(fd: impl AsFd) {
    rustix::net::sockopt::set_socket_linger(fd, Some(Duration::ZERO)).unwrap();
}

// ---------------------------------------------------------------- tests

#[test]
fn relays_bytes_both_ways_and_logs_the_connection() {
    let proxy = start(config("127.0.0.1:0", Endpoint::Tcp(echo_tcp())));
    let payload = data(4 << 20, 1);
    let back = exchange(proxy.connect(), payload.clone());
    assert!(
        back == payload,
        "echo differs ({} of {} bytes)",
        back.len(),
        payload.len()
    );
    let line = proxy.wait_log("eof");
    assert!(line.starts_with("conn 1 from 127.0.0.1:"), "{line}");
    assert!(line.contains("4194304 B up, 4194304 B down"), "{line}");
    let (stats, _) = proxy.stop();
    assert_eq!(stats.connections, 1);
    assert_eq!((stats.bytes_up, stats.bytes_down), (4 << 20, 4 << 20));
    assert_eq!(stats.upstream_failures, 0);
}

#[test]
fn ipv6_listener_and_upstream() {
    if TcpListener::bind("[::1]:0").is_err() {
        common::skip("no IPv6 loopback");
        return;
    }
    let l = TcpListener::bind("[::1]:0").unwrap();
    let up = l.local_addr().unwrap();
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            thread::spawn(move || {
                echo(s, |s| {
                    let _ = s.shutdown(Shutdown::Write);
                })
            });
        }
    });
    let proxy = start(config("[::1]:0", Endpoint::Tcp(up)));
    assert!(proxy.local.to_string().starts_with("[::1]:"));
    let back = exchange(proxy.connect(), data(100_000, 2));
    assert_eq!(back, data(100_000, 2));
    proxy.stop();
}

#[test]
fn half_close_propagates_both_ways() {
    // The upstream says hello and half-closes at once, then counts what the client sends.
    let (up, counted) = scripted(|mut s| {
        s.write_all(b"hello").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).map(|_| got.len())
    });
    let proxy = start(config("127.0.0.1:0", Endpoint::Tcp(up)));
    let mut c = proxy.connect();
    // The upstream's half-close reaches the client while the client can still send.
    let mut greeting = Vec::new();
    c.read_to_end(&mut greeting).unwrap();
    assert_eq!(greeting, b"hello");
    c.write_all(&data(300_000, 3)).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    // The client's half-close reaches the upstream after every byte.
    let n = counted.recv_timeout(TIMEOUT).unwrap().unwrap();
    assert_eq!(n, 300_000);
    let line = proxy.wait_log("conn 1 ");
    assert!(
        line.contains("300000 B up, 5 B down") && line.ends_with("eof"),
        "{line}"
    );
    proxy.stop();
}

#[test]
fn client_reset_closes_both_sides() {
    let (up, outcome) = scripted(|mut s| {
        let mut got = Vec::new();
        let r = s.read_to_end(&mut got);
        (r.map_err(|e| e.kind()), got.len())
    });
    let proxy = start(config("127.0.0.1:0", Endpoint::Tcp(up)));
    let mut c = proxy.connect();
    c.write_all(b"some bytes").unwrap();
    // Let them through, then reset.
    thread::sleep(Duration::from_millis(50));
    set_linger_zero(&c);
    drop(c);
    let (result, _) = outcome.recv_timeout(TIMEOUT).expect("upstream saw the end");
    // The upstream sees the reset passed on, never a clean EOF (nor a hang).
    assert!(
        matches!(result, Err(io::ErrorKind::ConnectionReset)),
        "{result:?}"
    );
    let line = proxy.wait_log("conn 1 ");
    assert!(line.contains("client reset"), "{line}");
    proxy.stop();
}

#[test]
fn a_reset_after_a_half_close_is_noticed_while_the_other_side_is_silent() {
    // The upstream reads to EOF, then says nothing and keeps its socket open.
    let (hold, release) = mpsc::channel::<()>();
    let (up, _) = scripted(move |mut s| {
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        let _ = release.recv();
    });
    let proxy = start(config("127.0.0.1:0", Endpoint::Tcp(up)));
    let c = proxy.connect();
    (&c).write_all(b"request").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    thread::sleep(Duration::from_millis(50));
    set_linger_zero(&c);
    drop(c);
    let t = Instant::now();
    let line = proxy.wait_log("conn 1 ");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(
        line.contains("7 B up, 0 B down") && line.contains("client reset"),
        "{line}"
    );
    drop(hold);
    proxy.stop();
}

#[test]
fn upstream_reset_closes_the_client() {
    let (up, _done) = scripted(|s| {
        let mut buf = [0u8; 4];
        (&s).read_exact(&mut buf).unwrap();
        set_linger_zero(&s);
        drop(s);
    });
    let proxy = start(config("127.0.0.1:0", Endpoint::Tcp(up)));
    let mut c = proxy.connect();
    c.write_all(b"ping").unwrap();
    let mut rest = Vec::new();
    let r = c.read_to_end(&mut rest);
    assert!(
        matches!(&r, Err(e) if e.kind() == io::ErrorKind::ConnectionReset),
        "{r:?}"
    );
    let line = proxy.wait_log("conn 1 ");
    assert!(line.contains("upstream reset"), "{line}");
    proxy.stop();
}

/// Reads `s` until it ends: the bytes, and `None` for a clean EOF or the error's kind.
fn read_until_end(mut s: impl Read) -> (Vec<u8>, Option<io::ErrorKind>) {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (got, None),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (got, Some(e.kind())),
        }
    }
}

/// The upstream sends 1 MB and resets: the client reads a prefix and then `ECONNRESET`, never
/// a clean EOF that would make the cut stream look complete. A FIN instead: every byte, EOF.
#[test]
fn an_upstream_reset_after_1_mb_reaches_the_client_as_a_reset() {
    for reset in [true, false] {
        let sent = data(1 << 20, 21);
        let to_send = sent.clone();
        let (up, _done) = scripted(move |mut s| {
            s.write_all(&to_send).unwrap();
            if reset {
                set_linger_zero(&s);
            }
            drop(s);
        });
        let proxy = start(config("127.0.0.1:0", Endpoint::Tcp(up)));
        let c = proxy.connect();
        let (got, end) = read_until_end(&c);
        if reset {
            assert_eq!(end, Some(io::ErrorKind::ConnectionReset), "{} B", got.len());
            assert!(sent.starts_with(&got), "not a prefix");
            assert!(proxy.wait_log("conn 1 ").contains("upstream reset"));
        } else {
            assert_eq!(end, None);
            assert!(got == sent);
            c.shutdown(Shutdown::Write).unwrap();
            assert!(proxy.wait_log("conn 1 ").ends_with(", eof"));
        }
        proxy.stop();
    }
}

/// The client sends 1 MB and resets: the upstream reads a prefix and then `ECONNRESET`.
#[test]
fn a_client_reset_after_1_mb_reaches_the_upstream_as_a_reset() {
    let sent = data(1 << 20, 22);
    let (up, outcome) = scripted(read_until_end);
    let proxy = start(config("127.0.0.1:0", Endpoint::Tcp(up)));
    let mut c = proxy.connect();
    c.write_all(&sent).unwrap();
    set_linger_zero(&c);
    drop(c);
    let (got, end) = outcome.recv_timeout(TIMEOUT).expect("upstream saw the end");
    assert_eq!(end, Some(io::ErrorKind::ConnectionReset), "{} B", got.len());
    assert!(sent.starts_with(&got), "not a prefix");
    assert!(proxy.wait_log("conn 1 ").contains("client reset"));
    proxy.stop();
}

#[test]
fn forwards_to_a_unix_upstream() {
    let dir = temp_dir("unix-up");
    let path = dir.join("echo.sock");
    echo_unix(&path);
    let proxy = start(config("127.0.0.1:0", Endpoint::Unix(path)));
    let payload = data(2 << 20, 4);
    assert_eq!(exchange(proxy.connect(), payload.clone()), payload);
    let (stats, _) = proxy.stop();
    assert_eq!(stats.bytes_down, 2 << 20);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn listens_on_abstract_and_path_unix_sockets() {
    let up = Endpoint::Tcp(echo_tcp());
    let name = format!("fdkit-proxy-test-{}", std::process::id());
    let proxy = start(config(&format!("unix:@{name}"), up.clone()));
    assert_eq!(proxy.local.to_string(), format!("unix:@{name}"));
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let c = UnixStream::connect_addr(&addr).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    assert_eq!(exchange(c, data(500_000, 5)), data(500_000, 5));
    let line = proxy.wait_log("conn 1 from unix");
    assert!(line.contains("eof"), "{line}");
    proxy.stop();

    // A path listener replaces a stale socket file and removes its own at the end.
    let dir = temp_dir("unix-listen");
    let path = dir.join("proxy.sock");
    drop(UnixListener::bind(&path).unwrap()); // leaves a socket file nobody listens on
    let proxy = start(config(&format!("unix:{}", path.display()), up));
    let c = UnixStream::connect(&path).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    assert_eq!(exchange(c, b"x".to_vec()), b"x");
    // A second proxy on the same live path is refused.
    let err = ProxyServer::bind(config(
        &format!("unix:{}", path.display()),
        Endpoint::Tcp(echo_tcp()),
    ))
    .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(98), "{err}"); // EADDRINUSE
    proxy.stop();
    assert!(!path.exists(), "the socket file was left behind");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn upstream_refused_resets_the_client_and_is_logged() {
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = start(config("127.0.0.1:0", Endpoint::Tcp(closed)));
    let mut c = proxy.connect();
    let mut got = Vec::new();
    // The refusal is passed on as a reset: an empty clean EOF would read as an empty reply.
    let err = c.read_to_end(&mut got).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
    assert!(got.is_empty());
    let line = proxy.wait_log("conn 1 ");
    assert!(line.contains("upstream refused"), "{line}");
    // A missing unix upstream is a refusal too.
    let (stats, _) = proxy.stop();
    assert_eq!(stats.upstream_failures, 1);
    let proxy = start(config(
        "127.0.0.1:0",
        Endpoint::Unix("/nonexistent/fdkit.sock".into()),
    ));
    let mut c = proxy.connect();
    let err = c.read_to_end(&mut got).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
    assert!(proxy.wait_log("conn 1 ").contains("upstream refused"));
    proxy.stop();
}

#[test]
fn idle_connections_time_out() {
    let mut cfg = config("127.0.0.1:0", Endpoint::Tcp(echo_tcp()));
    cfg.idle_timeout = Some(Duration::from_millis(300));
    let proxy = start(cfg);
    let mut c = proxy.connect();
    c.write_all(b"x").unwrap();
    let mut one = [0u8; 1];
    c.read_exact(&mut one).unwrap();
    let t = Instant::now();
    let mut rest = Vec::new();
    assert_eq!(c.read_to_end(&mut rest).unwrap(), 0);
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    assert!(proxy.wait_log("conn 1 ").contains("idle timeout"));
    proxy.stop();
}

#[test]
fn max_connections_pauses_accepting_until_one_closes() {
    let mut cfg = config("127.0.0.1:0", Endpoint::Tcp(echo_tcp()));
    cfg.max_connections = 2;
    let proxy = start(cfg);
    let roundtrip = |c: &mut TcpStream| {
        c.write_all(b"ab").unwrap();
        let mut two = [0u8; 2];
        c.read_exact(&mut two).map(|_| two)
    };
    let mut c1 = proxy.connect();
    let mut c2 = proxy.connect();
    assert_eq!(roundtrip(&mut c1).unwrap(), *b"ab");
    assert_eq!(roundtrip(&mut c2).unwrap(), *b"ab");
    // The third is queued in the kernel's backlog, not served.
    let mut c3 = proxy.connect();
    c3.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let err = roundtrip(&mut c3).unwrap_err();
    assert!(matches!(
        err.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ));
    drop(c1);
    c3.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut two = [0u8; 2];
    c3.read_exact(&mut two).unwrap();
    assert_eq!(two, *b"ab");
    drop((c2, c3));
    let (stats, _) = proxy.stop();
    assert_eq!(stats.peak_connections, 2);
    assert_eq!(stats.connections, 3);
}

#[test]
fn stopping_closes_every_connection() {
    let proxy = start(config("127.0.0.1:0", Endpoint::Tcp(echo_tcp())));
    let mut clients: Vec<TcpStream> = (0..3).map(|_| proxy.connect()).collect();
    for c in &mut clients {
        c.write_all(b"hi").unwrap();
        let mut two = [0u8; 2];
        c.read_exact(&mut two).unwrap();
    }
    let t = Instant::now();
    let (stats, log) = proxy.stop();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(stats.connections, 3);
    assert_eq!(
        log.iter().filter(|l| l.ends_with("stopped")).count(),
        3,
        "{log:?}"
    );
    for c in &mut clients {
        let mut rest = Vec::new();
        assert_eq!(c.read_to_end(&mut rest).unwrap(), 0);
    }
}

/// One chunk of a recording: direction byte, connection number, nanoseconds since the epoch,
/// the bytes (empty: the direction's end).
type Chunk = (u8, u64, u64, Vec<u8>);

/// The chunks of a recording file, checked against the format `record` describes.
fn chunks(recorded: &[u8]) -> Vec<Chunk> {
    assert!(recorded.starts_with(record::MAGIC), "no magic");
    let mut rest = &recorded[record::MAGIC.len()..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        assert!(rest.len() >= record::CHUNK_HEADER, "a cut header");
        let (head, tail) = rest.split_at(record::CHUNK_HEADER);
        assert_eq!(head[1..4], [0, 0, 0]);
        let len = u32::from_le_bytes(head[4..8].try_into().unwrap()) as usize;
        let conn = u64::from_le_bytes(head[8..16].try_into().unwrap());
        let nanos = u64::from_le_bytes(head[16..24].try_into().unwrap());
        assert!(tail.len() >= len, "a cut chunk");
        out.push((head[0], conn, nanos, tail[..len].to_vec()));
        rest = &tail[len..];
    }
    out
}

/// The bytes a recording holds going `direction`, and whether that direction's end was seen.
fn stream_of(chunks: &[Chunk], direction: u8) -> (Vec<u8>, bool) {
    let mut bytes = Vec::new();
    let mut ended = false;
    for (d, _, _, data) in chunks.iter().filter(|c| c.0 == direction) {
        assert!(!ended, "{} bytes after the end", *d as char);
        if data.is_empty() {
            ended = true;
        }
        bytes.extend_from_slice(data);
    }
    (bytes, ended)
}

#[test]
fn records_both_directions_with_their_times() {
    let dir = temp_dir("record");
    let base = dir.join("rec");
    // Two runs, each served a different 3 MiB stream after a request, one with one-page pipes.
    for (pipe_size, seed) in [(None, 10u64), (Some(4096), 11)] {
        let (up, asked) = scripted(move |mut s| {
            let mut request = Vec::new();
            s.read_to_end(&mut request).unwrap();
            s.write_all(&data(3 << 20, seed)).unwrap();
            request
        });
        let mut cfg = config("127.0.0.1:0", Endpoint::Tcp(up));
        cfg.record = Some(base.clone());
        cfg.pipe_size = pipe_size;
        let proxy = start(cfg);
        let before = std::time::SystemTime::now();
        let mut c = proxy.connect();
        let request = data(200_000, seed + 100);
        c.write_all(&request).unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        assert!(got == data(3 << 20, seed));
        assert!(asked.recv_timeout(TIMEOUT).unwrap() == request);
        assert!(proxy.wait_log("conn 1 ").ends_with("eof"));
        proxy.stop();
        let after = std::time::SystemTime::now();
        let recorded = chunks(&std::fs::read(format!("{}.1", base.display())).unwrap());
        let sent = stream_of(&recorded, record::CLIENT_TO_UPSTREAM);
        let received = stream_of(&recorded, record::UPSTREAM_TO_CLIENT);
        assert!(
            sent == (request, true),
            "client → upstream: {} bytes",
            sent.0.len()
        );
        assert!(
            received == (got, true),
            "upstream → client: {} bytes",
            received.0.len()
        );
        // Every request chunk came before the reply (the upstream read it all first), and
        // the times run forward, within the run.
        let first_reply = recorded
            .iter()
            .position(|c| c.0 == record::UPSTREAM_TO_CLIENT);
        let last_request = recorded
            .iter()
            .rposition(|c| c.0 == record::CLIENT_TO_UPSTREAM);
        assert!(
            last_request < first_reply,
            "{last_request:?} {first_reply:?}"
        );
        let ns = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        };
        assert!(recorded.windows(2).all(|w| w[0].2 <= w[1].2));
        assert!(recorded
            .iter()
            .all(|c| c.1 == 1 && ns(before) <= c.2 && c.2 <= ns(after)));
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_recording_stops_where_the_client_stopped() {
    let dir = temp_dir("record-reset");
    let base = dir.join("rec");
    let (up, _) = scripted(|mut s| {
        let chunk = data(1 << 20, 12);
        while s.write_all(&chunk).is_ok() {}
    });
    let mut cfg = config("127.0.0.1:0", Endpoint::Tcp(up));
    cfg.record = Some(base.clone());
    let proxy = start(cfg);
    let mut c = proxy.connect();
    let mut got = vec![0u8; 5 << 20];
    c.read_exact(&mut got).unwrap();
    set_linger_zero(&c);
    drop(c);
    let line = proxy.wait_log("conn 1 ");
    assert!(line.contains("client reset"), "{line}");
    proxy.stop();
    let recorded = chunks(&std::fs::read(format!("{}.1", base.display())).unwrap());
    // The file holds what the client's socket accepted: everything it read, and a prefix of
    // the stream; the client sent nothing, and neither direction ended with a half-close.
    let (received, ended) = stream_of(&recorded, record::UPSTREAM_TO_CLIENT);
    assert!(!ended);
    assert!(stream_of(&recorded, record::CLIENT_TO_UPSTREAM) == (Vec::new(), false));
    assert!(received.len() >= got.len());
    assert!(received[..got.len()] == got[..]);
    let stream: Vec<u8> = data(1 << 20, 12).repeat(received.len().div_ceil(1 << 20));
    assert!(received[..] == stream[..received.len()]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_slow_reader_holds_the_source_without_spinning() {
    const TOTAL: usize = 64 << 20;
    let (up, _) = scripted(|mut s| {
        let chunk = data(1 << 20, 13);
        for _ in 0..TOTAL >> 20 {
            if s.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let proxy = start(config("127.0.0.1:0", Endpoint::Tcp(up)));
    let mut c = proxy.connect();
    // Nobody reads for a second: every buffer on the way fills, then the proxy must sleep.
    thread::sleep(Duration::from_millis(300));
    let before = proxy.cpu_ticks.load(Ordering::SeqCst);
    thread::sleep(Duration::from_millis(1000));
    let after = proxy.cpu_ticks.load(Ordering::SeqCst);
    let ticks_per_sec = 100; // USER_HZ
    assert!(
        after - before < ticks_per_sec / 10,
        "the proxy burned {} ticks while the client was not reading",
        after - before
    );
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), TOTAL);
    assert!(got.chunks(1 << 20).all(|ch| ch == data(1 << 20, 13)));
    proxy.stop();
}

#[test]
fn hundreds_of_concurrent_connections_through_one_page_pipes() {
    const N: usize = 200;
    let mut cfg = config("127.0.0.1:0", Endpoint::Tcp(echo_tcp()));
    cfg.pipe_size = Some(4096);
    let proxy = start(cfg);
    let addr = proxy.tcp_addr();
    let barrier = Arc::new(Barrier::new(N));
    let clients: Vec<_> = (0..N)
        .map(|i| {
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut c = TcpStream::connect(addr).unwrap();
                c.set_read_timeout(Some(TIMEOUT)).unwrap();
                let first = data(20_000, 100 + i as u64);
                c.write_all(&first).unwrap();
                let mut back = vec![0u8; first.len()];
                c.read_exact(&mut back).unwrap();
                assert!(back == first);
                // Every connection is open and relayed when the barrier lifts.
                barrier.wait();
                let second = data(30_000, 1000 + i as u64);
                exchange(c, second.clone()) == second
            })
        })
        .collect();
    for c in clients {
        assert!(c.join().unwrap());
    }
    let conn_lines = |log: &[String]| log.iter().filter(|l| l.starts_with("conn ")).count();
    let deadline = Instant::now() + TIMEOUT;
    while conn_lines(&proxy.log.lock().unwrap()) < N {
        assert!(Instant::now() < deadline, "not every connection was logged");
        thread::sleep(Duration::from_millis(5));
    }
    let (stats, log) = proxy.stop();
    assert_eq!(stats.connections, N as u64);
    assert_eq!(stats.peak_connections, N);
    assert_eq!(stats.bytes_up, (N * 50_000) as u64);
    let ends: Vec<&String> = log.iter().filter(|l| l.starts_with("conn ")).collect();
    assert_eq!(ends.len(), N);
    assert!(ends.iter().all(|l| l.ends_with("eof")), "{ends:?}");
}

#[test]
fn sigpipe_does_not_kill_the_process() {
    // Runs `sigpipe_child` in a fresh process with SIGPIPE at its default (terminate): splicing
    // into a unix socket whose peer closed raises it, and the proxy must survive.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "sigpipe_child", "--ignored", "--nocapture"])
        .env("FDKIT_PROXY_SIGPIPE_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "child: {:?}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("client reset (Broken pipe)"), "{text}");
}

#[test]
#[ignore = "run by sigpipe_does_not_kill_the_process in a child process"]
fn sigpipe_child() {
    if std::env::var_os("FDKIT_PROXY_SIGPIPE_CHILD").is_none() {
        return;
    }
    // SAFETY: restoring the default disposition of SIGPIPE is a plain sigaction; nothing in
    // this process relies on it being ignored except the code under test.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    // The upstream starts sending only once the client has shut down its read side, so the
    // proxy's first splice into the client meets `EPIPE` (a unix peer that closed with unread
    // data would give `ECONNRESET`, which raises no signal).
    let (go, wait) = mpsc::channel::<()>();
    let (up, _) = scripted(move |mut s| {
        wait.recv().unwrap();
        let _ = s.write_all(&data(1 << 20, 14));
    });
    let name = format!("fdkit-proxy-sigpipe-{}", std::process::id());
    let proxy = start(config(&format!("unix:@{name}"), Endpoint::Tcp(up)));
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let c = UnixStream::connect_addr(&addr).unwrap();
    c.shutdown(Shutdown::Read).unwrap();
    go.send(()).unwrap();
    let line = proxy.wait_log("conn 1 ");
    println!("{line}");
    let (stats, _) = proxy.stop();
    assert_eq!(stats.connections, 1);
    drop(c);
}

// ---------------------------------------------------------------- an upstream by name

/// A TCP server on `at` that sends `tag` to each connection, then echoes it.
fn tagged_tcp(at: &str, tag: u8) -> SocketAddr {
    let l = TcpListener::bind(at).unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            thread::spawn(move || {
                if s.write_all(&[tag]).is_ok() {
                    echo(s, |_| {});
                }
            });
        }
    });
    addr
}

/// Connects through the proxy and returns the upstream's tag, after one echoed byte.
fn tag_through(proxy: &Running) -> (TcpStream, u8) {
    let mut c = proxy.connect();
    let mut tag = [0u8; 2];
    c.write_all(b"x").unwrap();
    c.read_exact(&mut tag).unwrap();
    assert_eq!(tag[1], b'x');
    (c, tag[0])
}

#[test]
fn a_name_upstream_is_followed_when_its_address_changes() {
    // The answer a name lookup gives is this test's to change, as a DNS record changes; the
    // proxy's loop, its resolver thread and the sockets are the real ones.
    let a = tagged_tcp("127.0.0.1:0", b'A');
    // The second address is IPv6 when this host has ::1: the upstream socket's family follows.
    let b = TcpListener::bind("[::1]:0").map(drop).map_or_else(
        |_| tagged_tcp("127.0.0.1:0", b'B'),
        |()| tagged_tcp("[::1]:0", b'B'),
    );
    let answer: Arc<Mutex<io::Result<Vec<SocketAddr>>>> = Arc::new(Mutex::new(Ok(vec![a])));
    let lookups = Arc::new(AtomicU64::new(0));
    let name = {
        let (answer, lookups) = (answer.clone(), lookups.clone());
        UpstreamName::new("upstream.test", 9, Duration::from_millis(20)).with_lookup(
            move |host, port| {
                assert_eq!((host, port), ("upstream.test", 9));
                lookups.fetch_add(1, Ordering::SeqCst);
                match &*answer.lock().unwrap() {
                    Ok(addrs) => Ok(addrs.clone()),
                    Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                }
            },
        )
    };
    let mut cfg = config("127.0.0.1:0", Endpoint::Tcp(name.resolve().unwrap()[0]));
    cfg.upstream_name = Some(name);
    let proxy = start(cfg);

    let (held, tag) = tag_through(&proxy);
    assert_eq!(tag, b'A');
    // A rotation of the same set, and a longer answer with the same first address: no change.
    *answer.lock().unwrap() = Ok(vec![a, a]);
    let seen = lookups.load(Ordering::SeqCst);
    while lookups.load(Ordering::SeqCst) < seen + 3 {
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(tag_through(&proxy).1, b'A');

    *answer.lock().unwrap() = Ok(vec![b, a]);
    let line = proxy.wait_log("now resolves to");
    assert_eq!(
        line,
        format!("upstream upstream.test:9 now resolves to {b} (was {a}): new connections go there")
    );
    assert_eq!(tag_through(&proxy).1, b'B');
    // The connection made before the change still reaches its upstream.
    let mut held = held;
    held.write_all(b"y").unwrap();
    let mut back = [0u8; 1];
    held.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"y");

    // A failed lookup keeps the address in use, and says so once.
    *answer.lock().unwrap() = Err(io::Error::new(io::ErrorKind::NotFound, "no such host"));
    let line = proxy.wait_log("cannot resolve");
    assert_eq!(
        line,
        format!(
            "cannot resolve upstream upstream.test:9 again (no such host): still forwarding to {b}"
        )
    );
    assert_eq!(tag_through(&proxy).1, b'B');
    drop(held);
    let (stats, log) = proxy.stop();
    assert_eq!(stats.upstream_failures, 0);
    assert_eq!(
        log.iter().filter(|l| l.contains("cannot resolve")).count(),
        1,
        "{log:?}"
    );
}

#[test]
fn a_lowered_cap_is_the_callers_to_show() {
    let mut cfg = config("127.0.0.1:0", Endpoint::Tcp(echo_tcp()));
    cfg.max_connections = 1 << 24;
    let server = ProxyServer::bind(cfg).unwrap();
    let notice = server
        .cap_notice()
        .expect("no RLIMIT_NOFILE fits 16M connections")
        .to_owned();
    assert!(
        notice.starts_with("max connections lowered from 16777216 to "),
        "{notice}"
    );
    assert!(server.max_connections() < 1 << 24);
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let stats = {
        let log = log.clone();
        let mut ticks = 0;
        server
            .run(
                || {
                    ticks += 1;
                    if ticks > 2 {
                        Err(fdkit::fd::Errno::INTR)
                    } else {
                        Ok(())
                    }
                },
                |line| log.lock().unwrap().push(line.to_owned()),
            )
            .unwrap()
    };
    assert!(stats.max_connections < 1 << 24);
    assert!(log.lock().unwrap().is_empty(), "{:?}", log.lock().unwrap());
}
