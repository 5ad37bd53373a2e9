//! Proxy endpoints: a TCP address or a unix stream socket, spelled as on the command line.

use crate::error::Error;
use rustix::net::{AddressFamily, SocketAddrAny, SocketAddrUnix};
use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The most bytes of a unix socket name: `sun_path` is 108 bytes, one kept for the NUL
/// (a path) or taken by the leading NUL (an abstract name). See unix(7).
const MAX_UNIX_NAME: usize = 107;

/// Where the proxy listens or forwards to.
///
/// Spelled `HOST:PORT` (IPv4), `[V6]:PORT`, `unix:/PATH` (any path, relative too) or
/// `unix:@NAME` (the abstract namespace, see unix(7)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A TCP address, IPv4 or IPv6.
    Tcp(SocketAddr),
    /// A unix stream socket bound to a filesystem path.
    Unix(PathBuf),
    /// A unix stream socket in the abstract namespace (the name without its leading NUL).
    Abstract(Vec<u8>),
}

impl Endpoint {
    /// Parses an endpoint whose host is an IP literal (no name lookup).
    pub fn parse(s: &str) -> Result<Endpoint, Error> {
        if let Some(rest) = s.strip_prefix("unix:") {
            return unix(rest);
        }
        let (host, port) = split_host_port(s)?;
        let ip: IpAddr = host
            .parse()
            .map_err(|_| Error::InvalidArgument("the host is not an IP address"))?;
        Ok(Endpoint::Tcp(SocketAddr::new(ip, port)))
    }

    /// Parses an endpoint, resolving a host name with getaddrinfo(3) (the first address
    /// wins). Blocks while the resolver works. A malformed spelling is an
    /// `io::ErrorKind::InvalidInput` error.
    pub fn resolve(s: &str) -> io::Result<Endpoint> {
        if s.starts_with("unix:") {
            return Ok(Endpoint::parse(s)?);
        }
        let (host, port) = split_host_port(s)?;
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(Endpoint::Tcp(SocketAddr::new(ip, port)));
        }
        (host, port)
            .to_socket_addrs()?
            .next()
            .map(Endpoint::Tcp)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the host has no address"))
    }

    /// The host and port of a `HOST:PORT` spelling whose host is a name to resolve (not an
    /// IP literal, not a unix socket): what an [`UpstreamName`](super::UpstreamName) follows.
    /// `Ok(None)` for every other well-formed spelling.
    pub fn host_name(s: &str) -> Result<Option<(&str, u16)>, Error> {
        if s.starts_with("unix:") {
            return Endpoint::parse(s).map(|_| None);
        }
        let (host, port) = split_host_port(s)?;
        Ok(host.parse::<IpAddr>().is_err().then_some((host, port)))
    }

    /// The socket family to create for this endpoint.
    pub fn family(&self) -> AddressFamily {
        match self {
            Endpoint::Tcp(SocketAddr::V4(_)) => AddressFamily::INET,
            Endpoint::Tcp(SocketAddr::V6(_)) => AddressFamily::INET6,
            Endpoint::Unix(_) | Endpoint::Abstract(_) => AddressFamily::UNIX,
        }
    }

    /// Whether this is a TCP endpoint (where `TCP_NODELAY` applies).
    pub fn is_tcp(&self) -> bool {
        matches!(self, Endpoint::Tcp(_))
    }

    /// The kernel's form of the address.
    pub fn sockaddr(&self) -> io::Result<SocketAddrAny> {
        Ok(match self {
            Endpoint::Tcp(a) => SocketAddrAny::from(*a),
            Endpoint::Unix(p) => SocketAddrUnix::new(p.as_path())?.into(),
            Endpoint::Abstract(name) => SocketAddrUnix::new_abstract_name(name)?.into(),
        })
    }
}

impl std::str::FromStr for Endpoint {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Endpoint::parse(s)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // `SocketAddr` already writes `[v6]:port`.
            Endpoint::Tcp(a) => write!(f, "{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Abstract(name) => write!(f, "unix:@{}", name.escape_ascii()),
        }
    }
}

fn unix(rest: &str) -> Result<Endpoint, Error> {
    let (abstract_name, name) = match rest.strip_prefix('@') {
        Some(name) => (true, name),
        None => (false, rest),
    };
    if name.is_empty() {
        return Err(Error::InvalidArgument("the unix socket name is empty"));
    }
    if name.len() > MAX_UNIX_NAME {
        return Err(Error::InvalidArgument(
            "the unix socket name is longer than 107 bytes",
        ));
    }
    if name.contains('\0') {
        return Err(Error::InvalidArgument(
            "the unix socket name has a NUL byte",
        ));
    }
    Ok(if abstract_name {
        Endpoint::Abstract(name.as_bytes().to_vec())
    } else {
        Endpoint::Unix(PathBuf::from(OsStr::from_bytes(name.as_bytes())))
    })
}

/// Splits `host:port` or `[v6]:port`; the host comes back without brackets.
fn split_host_port(s: &str) -> Result<(&str, u16), Error> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or(Error::InvalidArgument("missing ']' after an IPv6 host"))?;
        let port = after
            .strip_prefix(':')
            .ok_or(Error::InvalidArgument("expected [V6]:PORT"))?;
        (host, port)
    } else {
        let (host, port) = s.rsplit_once(':').ok_or(Error::InvalidArgument(
            "expected HOST:PORT, [V6]:PORT, unix:/PATH or unix:@NAME",
        ))?;
        if host.contains(':') {
            return Err(Error::InvalidArgument(
                "an IPv6 host needs brackets: [V6]:PORT",
            ));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(Error::InvalidArgument("the host is empty"));
    }
    if host.contains('\0') {
        // getaddrinfo(3) would read it only up to the NUL: "127.0.0.1\0.example.com".
        return Err(Error::InvalidArgument("the host has a NUL byte"));
    }

    let port = port
        .parse::<u16>()
        .map_err(|_| Error::InvalidArgument("the port is not a number from 0 to 65535"))?;
    Ok((host, port))
}

/// A peer address for the log: `ip:port`, `[v6]:port`, or `unix` (+ the path when the peer
/// bound one, which clients rarely do).
pub(super) fn peer_text(peer: Option<&SocketAddrAny>) -> String {
    let Some(peer) = peer else {
        return "unix".to_owned();
    };
    match SocketAddr::try_from(peer.clone()) {
        Ok(a) => a.to_string(),
        Err(_) => {
            // Decoded by hand: rustix's unix decoder panics on a `sun_path` with no NUL, which
            // any local peer can bind.
            let len = peer.addr_len() as usize;
            // SAFETY: `as_ptr` points at `addr_len()` initialised bytes owned by `peer`, which
            // outlives this borrow.
            let raw = unsafe { std::slice::from_raw_parts(peer.as_ptr().cast::<u8>(), len) };
            let path = raw.get(2..).unwrap_or_default();
            match path.first() {
                None => "unix".to_owned(),
                Some(0) => format!("unix:@{}", path[1..].escape_ascii()),
                Some(_) => {
                    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
                    format!("unix:{}", path[..end].escape_ascii())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_spelling() {
        let e = |s: &str| Endpoint::parse(s).unwrap();
        assert_eq!(
            e("127.0.0.1:80"),
            Endpoint::Tcp("127.0.0.1:80".parse().unwrap())
        );
        assert_eq!(e("[::1]:0"), Endpoint::Tcp("[::1]:0".parse().unwrap()));
        assert_eq!(e("unix:/tmp/s"), Endpoint::Unix("/tmp/s".into()));
        assert_eq!(e("unix:rel"), Endpoint::Unix("rel".into()));
        assert_eq!(e("unix:@name"), Endpoint::Abstract(b"name".to_vec()));
        for s in ["[::1]:0", "127.0.0.1:8080", "unix:/tmp/s", "unix:@x"] {
            assert_eq!(e(s).to_string(), s);
        }
    }

    #[test]
    fn refuses_malformed_spellings() {
        for s in [
            "",
            "80",
            ":80",
            "1.2.3.4",
            "1.2.3.4:",
            "1.2.3.4:65536",
            "1.2.3.4:x",
            "::1:80",
            "[::1]80",
            "[::1",
            "unix:",
            "unix:@",
            "localhost:80",
        ] {
            assert!(Endpoint::parse(s).is_err(), "{s:?} parsed");
        }
        let long = format!("unix:/{}", "x".repeat(107));
        assert!(Endpoint::parse(&long).is_err());
        assert!(Endpoint::parse(&long[..long.len() - 1]).is_ok());
    }

    #[test]
    fn resolves_names() {
        let e = Endpoint::resolve("localhost:1234").unwrap();
        match e {
            Endpoint::Tcp(a) => {
                assert!(a.ip().is_loopback());
                assert_eq!(a.port(), 1234);
            }
            other => panic!("{other:?}"),
        }
        let bad = Endpoint::resolve("nonsense").unwrap_err();
        assert_eq!(bad.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn tells_a_host_name_from_an_address() {
        assert_eq!(
            Endpoint::host_name("db.example:5432").unwrap(),
            Some(("db.example", 5432))
        );
        for s in ["127.0.0.1:1", "[::1]:1", "unix:/tmp/s", "unix:@x"] {
            assert_eq!(Endpoint::host_name(s).unwrap(), None, "{s:?}");
        }
        assert!(Endpoint::host_name("nonsense").is_err());
    }

    #[test]
    fn refuses_a_nul_in_the_host() {
        // Never cut at the NUL and resolved as "127.0.0.1" / "localhost".
        for s in [
            "127.0.0.1\0.example.com:80",
            "localhost\0.example.com:80",
            "[::1\0]:80",
        ] {
            let err = Endpoint::resolve(s).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{s:?}");
            assert!(
                err.to_string().contains("the host has a NUL byte"),
                "{s:?}: {err}"
            );
        }
    }
}
