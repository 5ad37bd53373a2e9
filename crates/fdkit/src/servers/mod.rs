//! Servers whose hot loop never enters Python. They may use every other family; nothing uses
//! them.
//!
//! - [`static_files`]: [`StaticServer`](static_files::StaticServer), HTTP/1.1 `GET`/`HEAD` for
//!   the files under one directory (io_uring or epoll), the server behind `fdkit serve`.
//! - [`proxy`]: [`ProxyServer`](proxy::ProxyServer), a TCP/unix forwarding proxy that splices
//!   through pipes (one thread, one epoll set), the server behind `fdkit proxy`.
//!
//! Both are used the same way: `bind` (the address is known before serving, port 0 picks a
//! free one), then `run(checkpoint, log)`, which serves until the checkpoint returns `Err`
//! (it is called at least every 100 ms; [`crate::fd::stop_when`] makes one from a flag) and
//! returns the counters. Errors: `std::io::Result`, since a server's failures come from the
//! configuration and name resolution as well as the kernel (whose errno
//! [`raw_os_error`](std::io::Error::raw_os_error) keeps).
//!
//! # Example
//!
//! A static server and a proxy in front of it, on loopback, stopped by a flag:
//!
//! ```
//! use fdkit::fd::stop_when;
//! use fdkit::servers::proxy::{Endpoint, ProxyConfig, ProxyServer};
//! use fdkit::servers::static_files::{ServeConfig, StaticServer};
//! use std::io::{Read, Write};
//! use std::net::{SocketAddr, TcpStream};
//! use std::sync::atomic::{AtomicBool, Ordering};
//!
//! # fn main() -> std::io::Result<()> {
//! let root = std::env::temp_dir().join(format!("fdkit-doc-servers-{}", std::process::id()));
//! std::fs::create_dir_all(&root)?;
//! std::fs::write(root.join("hello.txt"), "hello")?;
//!
//! let web = StaticServer::bind(ServeConfig::new(&root, SocketAddr::from(([127, 0, 0, 1], 0))))?;
//! let upstream = Endpoint::Tcp(web.local_addr());
//! let proxy = ProxyServer::bind(ProxyConfig::new(Endpoint::parse("127.0.0.1:0")?, upstream))?;
//! let Endpoint::Tcp(front) = proxy.local_endpoint().clone() else { unreachable!() };
//!
//! let stop = AtomicBool::new(false);
//! let (web_stats, proxy_stats, body) = std::thread::scope(|s| {
//!     let web = s.spawn(|| web.run(stop_when(&stop), |line| eprintln!("serve: {line}")));
//!     let proxy = s.spawn(|| proxy.run(stop_when(&stop), |line| eprintln!("proxy: {line}")));
//!     let body = (|| {
//!         let mut client = TcpStream::connect(front)?;
//!         client.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
//!         let mut response = String::new();
//!         client.read_to_string(&mut response)?;
//!         std::io::Result::Ok(response)
//!     })();
//!     stop.store(true, Ordering::Relaxed);
//!     (web.join().unwrap(), proxy.join().unwrap(), body)
//! });
//! let body = body?;
//! assert!(body.starts_with("HTTP/1.1 200 OK\r\n"), "{body}");
//! assert!(body.ends_with("\r\n\r\nhello"), "{body}");
//! assert_eq!(web_stats?.requests, 1);
//! assert_eq!(proxy_stats?.connections, 1);
//! std::fs::remove_dir_all(&root)?;
//! # Ok(())
//! # }
//! ```
//!
//! # References
//!  - [epoll(7)](https://man7.org/linux/man-pages/man7/epoll.7.html),
//!    [io_uring(7)](https://man7.org/linux/man-pages/man7/io_uring.7.html)
//!  - [splice(2)](https://man7.org/linux/man-pages/man2/splice.2.html),
//!    [sendfile(2)](https://man7.org/linux/man-pages/man2/sendfile.2.html)

mod listen_epoll;
mod nofile;
pub mod proxy;
pub mod static_files;
