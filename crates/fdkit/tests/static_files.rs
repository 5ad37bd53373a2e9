//! The static file server against real sockets on 127.0.0.1 (port 0), on both engines: every
//! status, keep-alive, pipelining, ranges, HEAD, conditional requests, traversal attempts,
//! slow clients, graceful stop. The io_uring engine is skipped (`SKIPPED <test>: <why>` on
//! stderr) where the kernel cannot run it, or fails with `FDKIT_REQUIRE_URING=1`.

use fdkit::servers::static_files::{EngineChoice, ServeConfig, ServeStats, StaticServer};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod common;

struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<ServeStats>>,
    dir: PathBuf,
}

impl Server {
    fn stop(mut self) -> ServeStats {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tree(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fdkit-static-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("root/sub")).unwrap();
    std::fs::create_dir_all(dir.join("root/noindex")).unwrap();
    std::fs::write(dir.join("root/hallo.txt"), b"hallo\n").unwrap();
    std::fs::write(dir.join("root/sub/index.html"), b"<p>sub</p>\n").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(dir.join("root/big.bin"), &big).unwrap();
    std::fs::write(dir.join("root/mid.bin"), &big[..60_000]).unwrap();
    std::fs::write(dir.join("secret.txt"), b"SECRET\n").unwrap();
    std::os::unix::fs::symlink(dir.join("secret.txt"), dir.join("root/out-link")).unwrap();
    std::os::unix::fs::symlink("../secret.txt", dir.join("root/rel-link")).unwrap();
    std::os::unix::fs::symlink("hallo.txt", dir.join("root/in-link")).unwrap();
    dir
}

/// Starts a server, or `None` (printed) when the engine cannot run here.
fn start(engine: EngineChoice, name: &str, idle: Duration) -> Option<Server> {
    start_with(engine, name, idle, |_, _| {})
}

/// [`start`], with `configure(config, dir)` run on the configuration before the bind.
fn start_with(
    engine: EngineChoice,
    name: &str,
    idle: Duration,
    configure: impl FnOnce(&mut ServeConfig, &std::path::Path),
) -> Option<Server> {
    let dir = tree(name);
    let mut config = ServeConfig::new(dir.join("root"), "127.0.0.1:0".parse().unwrap());
    config.engine = engine;
    config.idle_timeout = idle;
    configure(&mut config, &dir);
    let server = match StaticServer::bind(config) {
        Ok(s) => s,
        Err(e) if engine == EngineChoice::Uring => {
            let _ = std::fs::remove_dir_all(&dir);
            common::uring_unavailable(e);
            return None;
        }
        Err(e) => panic!("bind: {e}"),
    };
    let addr = server.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        server
            .run(
                || {
                    if flag.load(Ordering::SeqCst) {
                        Err(rustix::io::Errno::INTR)
                    } else {
                        Ok(())
                    }
                },
                |_| {},
            )
            .unwrap()
    });
    Some(Server {
        addr,
        stop,
        thread: Some(thread),
        dir,
    })
}

fn connect(s: &Server) -> TcpStream {
    let c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

/// One response off the stream: (status, headers lowercased, body); `head` for HEAD requests.
fn response(c: &mut TcpStream, head: bool) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        // read_exact retries EINTR; so does this (a socket read with a timeout returns EINTR
        // when io_uring's task work notifies this thread, which happens here now and then).
        match c.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            other => panic!("{other:?} in head: {:?}", String::from_utf8_lossy(&buf)),
        }
    }
    let text = String::from_utf8(buf).unwrap();
    let mut lines = text.split("\r\n");
    let status: u16 = lines.next().unwrap()[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, v) = l.split_once(": ").unwrap();
            (k.to_ascii_lowercase(), v.to_owned())
        })
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0u8; if head || status == 304 { 0 } else { len }];
    c.read_exact(&mut body).unwrap();
    (status, headers, body)
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn get(s: &Server, target: &[u8], extra: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut c = connect(s);
    let mut req = b"GET ".to_vec();
    req.extend_from_slice(target);
    req.extend_from_slice(format!(" HTTP/1.1\r\nHost: x\r\n{extra}\r\n").as_bytes());
    c.write_all(&req).unwrap();
    response(&mut c, false)
}

fn get_head(s: &Server, target: &[u8], extra: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut c = connect(s);
    let mut req = b"HEAD ".to_vec();
    req.extend_from_slice(target);
    req.extend_from_slice(format!(" HTTP/1.1\r\nHost: x\r\n{extra}\r\n").as_bytes());
    c.write_all(&req).unwrap();
    response(&mut c, true)
}

fn eof_within(c: &mut TcpStream, limit: Duration) -> bool {
    c.set_read_timeout(Some(limit)).unwrap();
    let mut b = [0u8; 64];
    loop {
        match c.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// The engines to test: both, or the one named by `FDKIT_TEST_ENGINE` (`uring`, `epoll`).
fn engines() -> Vec<EngineChoice> {
    match std::env::var("FDKIT_TEST_ENGINE").as_deref() {
        Ok("uring") => vec![EngineChoice::Uring],
        Ok("epoll") => vec![EngineChoice::Epoll],
        _ => vec![EngineChoice::Uring, EngineChoice::Epoll],
    }
}

fn each_engine(name: &str, idle: Duration, f: impl Fn(&Server)) {
    for engine in engines() {
        if let Some(s) = start(engine, &format!("{name}-{engine:?}"), idle) {
            f(&s);
            s.stop();
        }
    }
}

#[test]
fn statuses_and_headers() {
    each_engine("statuses", Duration::from_secs(30), |s| {
        let (st, h, body) = get(s, b"/hallo.txt", "");
        assert_eq!((st, &body[..]), (200, &b"hallo\n"[..]));
        assert_eq!(
            header(&h, "content-type"),
            Some("text/plain; charset=utf-8")
        );
        assert_eq!(header(&h, "server"), Some("fdkit"));
        assert!(header(&h, "date").unwrap().ends_with(" GMT"));
        let lm = header(&h, "last-modified").unwrap().to_owned();
        assert_eq!(
            get(s, b"/hallo.txt", &format!("If-Modified-Since: {lm}\r\n")).0,
            304
        );
        let old = "If-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n";
        assert_eq!(get(s, b"/hallo.txt", old).0, 200);
        let (st, _, body) = get(s, b"/sub/", "");
        assert_eq!((st, &body[..]), (200, &b"<p>sub</p>\n"[..]));
        let (st, h, _) = get(s, b"/sub?x=1", "");
        assert_eq!((st, header(&h, "location")), (301, Some("/sub/?x=1")));
        assert_eq!(get(s, b"/noindex/", "").0, 404);
        assert_eq!(get(s, b"/missing", "").0, 404);
        assert_eq!(get(s, b"/in-link", "").2, b"hallo\n");
        let (st, _, body) = get(s, b"/big.bin", "");
        assert_eq!((st, body.len()), (200, 300_000));
        assert_eq!(body[299_999], (299_999u32 * 7 % 251) as u8);
        let mut c = connect(s);
        c.write_all(b"PUT /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let (st, h, _) = response(&mut c, false);
        assert_eq!((st, header(&h, "allow")), (405, Some("GET, HEAD, OPTIONS")));
        let mut c = connect(s);
        c.write_all(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody")
            .unwrap();
        assert_eq!(response(&mut c, false).0, 413);
        let mut c = connect(s);
        let mut big = b"GET / HTTP/1.1\r\nHost: x\r\nX: ".to_vec();
        big.resize(9000, b'a');
        big.extend_from_slice(b"\r\n\r\n");
        c.write_all(&big).unwrap();
        assert_eq!(response(&mut c, false).0, 431);
        let mut c = connect(s);
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nbad header\r\n\r\n")
            .unwrap();
        assert_eq!(response(&mut c, false).0, 400);
        let mut c = connect(s);
        c.write_all(b"GET / HTTP/3.0\r\n\r\n").unwrap();
        assert_eq!(response(&mut c, false).0, 505);
    });
}

#[test]
fn ranges_and_head() {
    each_engine("ranges", Duration::from_secs(30), |s| {
        let (st, h, body) = get(s, b"/hallo.txt", "Range: bytes=1-3\r\n");
        assert_eq!((st, &body[..]), (206, &b"all"[..]));
        assert_eq!(header(&h, "content-range"), Some("bytes 1-3/6"));
        assert_eq!(get(s, b"/hallo.txt", "Range: bytes=-2\r\n").2, b"o\n");
        assert_eq!(get(s, b"/hallo.txt", "Range: bytes=4-\r\n").2, b"o\n");
        let (st, h, _) = get(s, b"/hallo.txt", "Range: bytes=6-\r\n");
        assert_eq!((st, header(&h, "content-range")), (416, Some("bytes */6")));
        // Two ranges a byte apart: coalesced into one part (RFC 9110 §15.3.7.2).
        let (st, h, body) = get(s, b"/hallo.txt", "Range: bytes=0-1,3-4\r\n");
        assert_eq!((st, &body[..]), (206, &b"hallo"[..]));
        assert_eq!(header(&h, "content-range"), Some("bytes 0-4/6"));
        // RFC 9110 §14.2: Range is ignored on HEAD.
        let (st, h, _) = get_head(s, b"/hallo.txt", "Range: bytes=1-3\r\n");
        assert_eq!((st, header(&h, "content-length")), (200, Some("6")));
        assert_eq!(header(&h, "content-range"), None);
        let (st, _, body) = get(s, b"/big.bin", "Range: bytes=100000-100009\r\n");
        assert_eq!(st, 206);
        let want: Vec<u8> = (100_000..100_010u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(body, want);
        let mut c = connect(s);
        c.write_all(
            b"HEAD /big.bin HTTP/1.1\r\nHost: x\r\n\r\nGET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .unwrap();
        let (st, h, body) = response(&mut c, true);
        assert_eq!(
            (st, header(&h, "content-length"), body.len()),
            (200, Some("300000"), 0)
        );
        assert_eq!(response(&mut c, false).2, b"hallo\n");
    });
}

/// RFC 9110 §14.6: several ranges far apart, of a mapped file and of a file sent by
/// `sendfile`, in one `multipart/byteranges` body each, the parts in the order asked.
#[test]
fn multipart_ranges() {
    each_engine("multipart", Duration::from_secs(30), |s| {
        let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for (target, len, parts) in [
            (
                "/big.bin",
                300_000u64,
                [(200_000, 200_009), (0, 9), (299_995, 299_999)],
            ),
            (
                "/mid.bin",
                60_000,
                [(50_000, 50_009), (0, 9), (59_995, 59_999)],
            ),
        ] {
            let ((a, b), (c, d), (e, _)) = (parts[0], parts[1], parts[2]);
            let spec = format!("Range: bytes={a}-{b}, {c}-{d}, -{}\r\n", len - e);
            let (st, h, body) = get(s, target.as_bytes(), &spec);
            assert_eq!((st, header(&h, "content-range")), (206, None));
            let boundary = header(&h, "content-type")
                .and_then(|t| t.strip_prefix("multipart/byteranges; boundary="))
                .expect("a multipart content type");
            let mut want = Vec::new();
            for (first, last) in parts {
                want.extend_from_slice(
                    format!(
                        "--{boundary}\r\nContent-Type: application/octet-stream\r\n\
                         Content-Range: bytes {first}-{last}/{len}\r\n\r\n"
                    )
                    .as_bytes(),
                );
                want.extend_from_slice(&big[first as usize..=last as usize]);
                want.extend_from_slice(b"\r\n");
            }
            want.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
            assert_eq!(body, want, "{target}");
        }
    });
}

#[test]
fn keep_alive_and_pipelining() {
    each_engine("pipelining", Duration::from_secs(30), |s| {
        let mut c = connect(s);
        for _ in 0..3 {
            c.write_all(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            assert_eq!(response(&mut c, false).2, b"hallo\n");
        }
        let mut batch = Vec::new();
        let targets = ["/hallo.txt", "/missing", "/big.bin", "/sub/", "/hallo.txt"];
        for (i, t) in targets.iter().cycle().take(60).enumerate() {
            batch.extend_from_slice(
                format!("GET {t} HTTP/1.1\r\nHost: x\r\nX-N: {i}\r\n\r\n").as_bytes(),
            );
        }
        c.write_all(&batch).unwrap();
        for t in targets.iter().cycle().take(60) {
            let (st, _, body) = response(&mut c, false);
            match *t {
                "/hallo.txt" => assert_eq!(body, b"hallo\n"),
                "/missing" => assert_eq!(st, 404),
                "/big.bin" => assert_eq!(body.len(), 300_000),
                _ => assert_eq!(body, b"<p>sub</p>\n"),
            }
        }
        c.write_all(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let (_, h, _) = response(&mut c, false);
        assert_eq!(header(&h, "connection"), Some("close"));
        assert!(eof_within(&mut c, Duration::from_secs(5)));
        let mut c = connect(s);
        c.write_all(b"GET /hallo.txt HTTP/1.0\r\n\r\n").unwrap();
        response(&mut c, false);
        assert!(eof_within(&mut c, Duration::from_secs(5)));
        let mut c = connect(s);
        c.write_all(b"GET /hallo.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let (_, h, _) = response(&mut c, false);
        assert_eq!(header(&h, "connection"), Some("keep-alive"));
        c.write_all(b"GET /hallo.txt HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(response(&mut c, false).2, b"hallo\n");
    });
}

#[test]
fn traversal_is_refused() {
    each_engine("traversal", Duration::from_secs(30), |s| {
        let hostile: &[&[u8]] = &[
            b"/../secret.txt",
            b"/../../../../etc/passwd",
            b"/%2e%2e/secret.txt",
            b"/%2E%2E/%2e%2e/etc/passwd",
            b"/.%2e/secret.txt",
            b"/sub/../../secret.txt",
            b"/sub/..%2f..%2fsecret.txt",
            b"/..%5csecret.txt",
            b"/..\\secret.txt",
            b"/hallo.txt%00.html",
            b"/hallo.txt\x00",
            b"/out-link",
            b"/rel-link",
            b"http://evil/../secret.txt",
            b"http://evil/etc/passwd",
            b"//etc/passwd",
            b"/%252e%252e/secret.txt",
            b"/sub/%2e%2e/%2e%2e/secret.txt",
            b"/./../secret.txt",
            b"/etc/passwd",
        ];
        for t in hostile {
            let (st, _, body) = get(s, t, "Connection: close\r\n");
            assert!(
                matches!(st, 403 | 404 | 400),
                "{:?}: {st}",
                String::from_utf8_lossy(t)
            );
            assert!(!body.starts_with(b"SECRET") && !body.starts_with(b"root:"));
        }
    });
}

#[test]
fn slow_clients_are_dropped() {
    each_engine("slow", Duration::from_millis(600), |s| {
        // Trickling a header byte every 100 ms keeps the connection busy but never completes
        // a request: dropped at the header deadline, not kept alive by the activity.
        let mut c = connect(s);
        let started = Instant::now();
        let mut dropped = false;
        for &b in
            b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
        {
            if c.write_all(&[b]).is_err() {
                dropped = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            c.set_nonblocking(true).unwrap();
            let mut buf = [0u8; 16];
            let r = c.read(&mut buf);
            c.set_nonblocking(false).unwrap();
            if matches!(r, Ok(0))
                || matches!(&r, Err(e) if e.kind() != std::io::ErrorKind::WouldBlock)
            {
                dropped = true;
                break;
            }
        }
        assert!(dropped, "slow client not dropped");
        assert!(started.elapsed() < Duration::from_secs(3));
        // A silent kept-alive connection is dropped too.
        let mut idle = connect(s);
        idle.write_all(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        response(&mut idle, false);
        assert!(eof_within(&mut idle, Duration::from_secs(3)));
    });
}

#[test]
fn graceful_stop_finishes_responses() {
    for engine in engines() {
        let Some(s) = start(engine, &format!("stop-{engine:?}"), Duration::from_secs(30)) else {
            continue;
        };
        let mut idle = connect(&s);
        idle.write_all(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        response(&mut idle, false);
        let mut busy = connect(&s);
        // Not read yet: the 300 KB answer waits in the socket buffers when the stop comes.
        busy.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let stop = s.stop.clone();
        stop.store(true, Ordering::SeqCst);
        let (st, _, body) = response(&mut busy, false);
        assert_eq!((st, body.len()), (200, 300_000));
        assert!(eof_within(&mut idle, Duration::from_secs(5)));
        let stats = s.stop();
        assert_eq!(stats.requests, 2);
        assert_eq!(stats.connections, 2);
    }
}

#[test]
fn many_connections() {
    each_engine("many", Duration::from_secs(30), |s| {
        let mut conns: Vec<TcpStream> = (0..300).map(|_| connect(s)).collect();
        for c in &mut conns {
            c.write_all(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
        }
        for c in &mut conns {
            assert_eq!(response(c, false).2, b"hallo\n");
        }
    });
}

/// A directory to list: names that must be escaped, a subdirectory, symlinks inside and
/// outside the root. Returns the names a listing of `root/list/` must show, in order.
fn listing_tree(dir: &std::path::Path) -> Vec<&'static str> {
    let list = dir.join("root/list");
    std::fs::create_dir_all(list.join("Zdir")).unwrap();
    std::fs::create_dir_all(dir.join("outside")).unwrap();
    std::fs::write(dir.join("outside/secret-in-dir.txt"), b"SECRET\n").unwrap();
    for name in ["<script>alert(1).txt", "a&b", "with space", "100%", "b\"q'"] {
        std::fs::write(list.join(name), b"x").unwrap();
    }
    let link = |target: &std::path::Path, name: &str| {
        std::os::unix::fs::symlink(target, list.join(name)).unwrap();
    };
    link(&dir.join("outside"), "out-dir");
    link(&dir.join("secret.txt"), "out-file");
    link(std::path::Path::new("../../secret.txt"), "out-rel");
    link(std::path::Path::new("../sub"), "in-dir");
    link(std::path::Path::new("../hallo.txt"), "in-file");
    link(std::path::Path::new("nowhere"), "dangling");
    std::os::unix::fs::symlink(dir.join("outside"), dir.join("root/out-dir")).unwrap();
    vec![
        "<li><a href=\"100%25\">100%</a></li>",
        "<li><a href=\"%3Cscript%3Ealert%281%29.txt\">&lt;script&gt;alert(1).txt</a></li>",
        "<li><a href=\"a%26b\">a&amp;b</a></li>",
        "<li><a href=\"b%22q%27\">b&quot;q&#39;</a></li>",
        "<li><a href=\"in-dir/\">in-dir/</a></li>",
        "<li><a href=\"in-file\">in-file</a></li>",
        "<li><a href=\"with%20space\">with space</a></li>",
        "<li><a href=\"Zdir/\">Zdir/</a></li>",
    ]
}

#[test]
fn listings_escape_names_and_never_leave_the_root() {
    for engine in engines() {
        let mut expected = Vec::new();
        let Some(s) = start_with(
            engine,
            &format!("listing-{engine:?}"),
            Duration::from_secs(30),
            |c, dir| {
                expected = listing_tree(dir);
                c.listing = true;
            },
        ) else {
            continue;
        };
        let (st, h, body) = get(&s, b"/list/", "");
        assert_eq!(st, 200, "{engine:?}");
        assert_eq!(header(&h, "content-type"), Some("text/html; charset=utf-8"));
        let page = String::from_utf8(body).unwrap();
        assert!(
            page.contains("<title>Directory listing for /list/</title>"),
            "{page}"
        );
        let items: Vec<&str> = page.lines().filter(|l| l.starts_with("<li>")).collect();
        assert_eq!(
            items, expected,
            "{engine:?}: sorted, escaped, symlinks out of the root left out"
        );
        for hidden in ["out-dir", "out-file", "out-rel", "dangling", "secret"] {
            assert!(
                !page.contains(hidden),
                "{engine:?}: {hidden} listed:\n{page}"
            );
        }
        // The root has no index.html: it is listed, without what lies outside it.
        let (st, _, body) = get(&s, b"/", "");
        let page = String::from_utf8(body).unwrap();
        assert_eq!(st, 200);
        assert!(page.contains("<title>Directory listing for /</title>"));
        assert!(
            page.contains("<a href=\"list/\">list/</a>") && page.contains("<a href=\"hallo.txt\">")
        );
        assert!(page.contains("<a href=\"in-link\">in-link</a>"));
        for hidden in ["out-link", "rel-link", "out-dir", "secret"] {
            assert!(
                !page.contains(hidden),
                "{engine:?}: {hidden} listed:\n{page}"
            );
        }
        // A directory with index.html is served its index, never listed.
        let (st, _, body) = get(&s, b"/sub/", "");
        assert_eq!((st, body), (200, b"<p>sub</p>\n".to_vec()));
        // A symlink to a directory outside, and traversal attempts: refused, never listed.
        for t in [
            &b"/out-dir/"[..],
            b"/list/out-dir/",
            b"/../",
            b"/%2e%2e/",
            b"/list/../../",
            b"/list/%2e%2e/%2e%2e/",
            b"http://evil/../",
        ] {
            let (st, _, body) = get(&s, t, "Connection: close\r\n");
            assert!(
                matches!(st, 400 | 403 | 404),
                "{engine:?} {}: {st}",
                String::from_utf8_lossy(t)
            );
            assert!(!String::from_utf8_lossy(&body).contains("secret"));
        }
        // HEAD: the head alone; the Content-Length is the page's.
        let mut c = connect(&s);
        c.write_all(
            b"HEAD /list/ HTTP/1.1\r\nHost: x\r\n\r\nGET /list/ HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .unwrap();
        let (st, h, _) = response(&mut c, true);
        let (st2, _, body) = response(&mut c, false);
        assert_eq!((st, st2), (200, 200));
        assert_eq!(
            header(&h, "content-length"),
            Some(body.len().to_string().as_str())
        );
        s.stop();
    }
}

#[test]
fn no_listing_unless_asked() {
    each_engine("nolisting", Duration::from_secs(30), |s| {
        assert_eq!(get(s, b"/noindex/", "").0, 404);
        assert_eq!(get(s, b"/", "").0, 404);
    });
}

/// Reads what arrives on `fd` until `lines` lines came or `limit` passed.
fn read_lines(fd: &std::os::fd::OwnedFd, lines: usize, limit: Duration) -> String {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let end = Instant::now() + limit;
    let mut got = Vec::new();
    while got.iter().filter(|&&b| b == b'\n').count() < lines {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let ts = Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => panic!("poll: {e}"),
        }
        let mut buf = [0u8; 4096];
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    String::from_utf8(got).unwrap()
}

/// `"127.0.0.1 - - [23/Nov/2026:17:00:00 +0000] "` and the rest, or a panic naming the line.
fn log_rest(line: &str) -> &str {
    let rest = line
        .strip_prefix("127.0.0.1 - - [")
        .unwrap_or_else(|| panic!("{line:?}"));
    let (date, rest) = rest.split_at(26);
    let b = date.as_bytes();
    assert!(
        b[2] == b'/' && b[6] == b'/' && b[11] == b':' && date.ends_with(" +0000"),
        "{line:?}"
    );
    rest.strip_prefix("] ")
        .unwrap_or_else(|| panic!("{line:?}"))
}

#[test]
fn access_log_lines_in_common_log_format() {
    for engine in engines() {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let Some(s) = start_with(
            engine,
            &format!("log-{engine:?}"),
            Duration::from_secs(30),
            |c, _| {
                c.access_log = Some(Arc::new(w));
            },
        ) else {
            continue;
        };
        // Written within the tick, while serving (not only at the stop).
        assert_eq!(get(&s, b"/hallo.txt", "").0, 200);
        let first = read_lines(&r, 1, Duration::from_secs(2));
        assert_eq!(
            log_rest(first.trim_end()),
            "\"GET /hallo.txt HTTP/1.1\" 200 6",
            "{engine:?}"
        );
        let mut c = connect(&s);
        c.write_all(
            b"HEAD /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n\
              GET /missing%20file HTTP/1.0\r\nConnection: keep-alive\r\n\r\n\
              GET /big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=0-9\r\n\r\n",
        )
        .unwrap();
        response(&mut c, true);
        let (_, _, not_found) = response(&mut c, false);
        response(&mut c, false);
        c.write_all(b"GET /\"x\" HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let (bad, _, bad_body) = response(&mut c, false);
        drop(c);
        s.stop();
        let rest = read_lines(&r, 5, Duration::from_secs(5));
        let lines: Vec<&str> = rest.lines().map(log_rest).collect();
        assert_eq!(
            lines,
            vec![
                "\"HEAD /hallo.txt HTTP/1.1\" 200 -".to_owned(),
                format!("\"GET /missing%20file HTTP/1.0\" 404 {}", not_found.len()),
                "\"GET /big.bin HTTP/1.1\" 206 10".to_owned(),
                format!("\"GET /\\x22x\\x22 HTTP/1.1\" {bad} {}", bad_body.len()),
            ],
            "{engine:?}"
        );
    }
}
