//! Socket addresses, spelled the way Python's `socket` module spells them.
//!
//! In: `(host, port)` for IPv4, `(host, port[, flowinfo[, scope_id]])` for IPv6, `str`/`bytes`
//! paths for AF_UNIX (a leading NUL for the abstract namespace). A plain fd carries no family,
//! so the shape decides: a path is AF_UNIX, a 3- or 4-tuple is IPv6, a 2-tuple is IPv4 when the
//! host is a dotted quad and IPv6 when it parses as IPv6. Only a host that is neither (a name,
//! or `""`) costs more: the socket's own family is read with `SO_DOMAIN` and the name resolved
//! with `socket.getaddrinfo`, as the `socket` module would.
//!
//! Out: the same shapes; an AF_UNIX path comes back as `str`, an abstract name as `bytes`
//! with its leading NUL, an unnamed peer as `""`; other families as raw `bytes`.

use fdkit::fd::{getsockopt_int, AddressFamily, SocketAddrAny};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use rustix::net::{SocketAddrUnix, SocketAddrV4, SocketAddrV6};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;

use crate::args::{int_in_range, port_arg, type_name};
use crate::errors::os_error;

/// Converts a Python address for a socket `fd` into a kernel address.
pub fn from_py(obj: &Bound<'_, PyAny>, fd: BorrowedFd<'_>) -> PyResult<SocketAddrAny> {
    if let Ok(s) = obj.cast::<PyString>() {
        let os = s.extract::<std::ffi::OsString>()?;
        return unix_addr(obj, os.as_bytes());
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return unix_addr(obj, b.as_bytes());
    }
    let Ok(tuple) = obj.cast::<PyTuple>() else {
        return Err(PyTypeError::new_err(format!(
            "address must be a (host, port) tuple or a str/bytes path, not {}",
            type_name(obj)
        )));
    };
    let n = tuple.len();
    if !(2..=4).contains(&n) {
        return Err(PyValueError::new_err(format!(
            "address tuple must have 2 (IPv4) or 2-4 (IPv6) items, got {n}"
        )));
    }
    let host_obj = tuple.get_item(0)?;
    let host_str = host_obj
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err("address host must be a str"))?;
    let host_cow = host_str.to_cow()?;
    let host: &str = &host_cow;
    if host.contains('\0') {
        // getaddrinfo(3) takes a C string: "127.0.0.1\0.example.com" would resolve as
        // "127.0.0.1" and slip past a suffix allow-list (CPython's getaddrinfo truncates so).
        return Err(PyValueError::new_err(format!(
            "address host must not contain a NUL byte: {}",
            repr(&host_obj)
        )));
    }
    let port = port_arg(&tuple.get_item(1)?)?;
    let flowinfo = if n > 2 {
        int_in_range(&tuple.get_item(2)?, "flowinfo")?
    } else {
        0
    };
    let scope_id = if n > 3 {
        int_in_range(&tuple.get_item(3)?, "scope_id")?
    } else {
        0
    };
    if n == 2 {
        if let Ok(ip) = host.parse::<Ipv4Addr>() {
            return Ok(SocketAddrV4::new(ip, port).into());
        }
    }
    if let Ok(ip) = host.parse::<Ipv6Addr>() {
        return Ok(SocketAddrV6::new(ip, port, flowinfo, scope_id).into());
    }
    resolve(obj.py(), host, port, flowinfo, scope_id, n, fd)
}

/// The slow path: `""`, `"<broadcast>"` or a host name, resolved for the socket's family.
fn resolve(
    py: Python<'_>,
    host: &str,
    port: u16,
    flowinfo: u32,
    scope_id: u32,
    n: usize,
    fd: BorrowedFd<'_>,
) -> PyResult<SocketAddrAny> {
    let domain =
        getsockopt_int(fd, libc_consts::SOL_SOCKET, libc_consts::SO_DOMAIN).map_err(os_error)?;
    let v6 = domain == i32::from(AddressFamily::INET6.as_raw()) || n > 2;
    match (host, v6) {
        ("", false) => return Ok(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port).into()),
        ("", true) => {
            return Ok(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, flowinfo, scope_id).into())
        }
        ("<broadcast>", false) => return Ok(SocketAddrV4::new(Ipv4Addr::BROADCAST, port).into()),
        _ => {}
    }
    let socket = py.import("socket")?;
    let family = if v6 {
        libc_consts::AF_INET6
    } else {
        libc_consts::AF_INET
    };
    let infos = socket.call_method1("getaddrinfo", (host, port, family))?;
    let first = infos
        .try_iter()?
        .next()
        .ok_or_else(|| PyValueError::new_err(format!("no address for host {host:?}")))??;
    let sockaddr = first.get_item(4)?;
    let resolved: String = sockaddr.get_item(0)?.extract()?;
    if v6 {
        let ip: Ipv6Addr = resolved
            .parse()
            .map_err(|_| PyValueError::new_err(format!("bad IPv6 address {resolved:?}")))?;
        let scope = if scope_id != 0 {
            scope_id
        } else {
            sockaddr.get_item(3)?.extract()?
        };
        Ok(SocketAddrV6::new(ip, port, flowinfo, scope).into())
    } else {
        let ip: Ipv4Addr = resolved
            .parse()
            .map_err(|_| PyValueError::new_err(format!("bad IPv4 address {resolved:?}")))?;
        Ok(SocketAddrV4::new(ip, port).into())
    }
}

/// Numbers from <sys/socket.h> the binding needs for the slow path.
mod libc_consts {
    pub const SOL_SOCKET: i32 = 1;
    pub const SO_DOMAIN: i32 = 39;
    pub const AF_INET: i32 = 2;
    pub const AF_INET6: i32 = 10;
}

/// `repr(obj)` for an error message (what the user typed, NULs and all made visible).
fn repr(obj: &Bound<'_, PyAny>) -> String {
    obj.repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// An AF_UNIX address from a path's bytes; `obj` is the path as given, for messages. A
/// leading NUL names the abstract namespace, where every byte counts (NULs included); a
/// filesystem path with a NUL inside would be cut there by the kernel, so it is refused.
/// See unix(7).
fn unix_addr(obj: &Bound<'_, PyAny>, path: &[u8]) -> PyResult<SocketAddrAny> {
    if path.is_empty() {
        // `""` asks the kernel to pick a fresh abstract name (autobind), as in `socket`.
        return Ok(SocketAddrUnix::new_unnamed().into());
    }
    let addr = match path.split_first() {
        Some((0, name)) => SocketAddrUnix::new_abstract_name(name),
        _ => {
            if path.contains(&0) {
                return Err(PyValueError::new_err(format!(
                    "embedded null byte in AF_UNIX path {} (only an abstract name, which \
                     starts with one, may hold NUL bytes)",
                    repr(obj)
                )));
            }
            SocketAddrUnix::new(path)
        }
    };
    addr.map(Into::into).map_err(|_| {
        PyValueError::new_err(format!(
            "AF_UNIX path too long ({} bytes; the kernel allows 107)",
            path.len()
        ))
    })
}

/// Converts a kernel address to Python's spelling (`None` from the kernel means an unnamed
/// peer, given as `""` like the `socket` module does).
pub fn to_py<'py>(py: Python<'py>, addr: Option<&SocketAddrAny>) -> PyResult<Bound<'py, PyAny>> {
    let Some(addr) = addr else {
        return Ok(PyString::new(py, "").into_any());
    };
    let family = addr.address_family();
    if family == AddressFamily::INET {
        if let Ok(v4) = SocketAddrV4::try_from(addr.clone()) {
            let mut buf = [0u8; 15];
            let host = PyString::new(py, dotted_quad(v4.ip(), &mut buf));
            return (host, v4.port()).into_pyobject(py).map(Bound::into_any);
        }
    } else if family == AddressFamily::INET6 {
        if let Ok(v6) = SocketAddrV6::try_from(addr.clone()) {
            return (ipv6_text(v6.ip()), v6.port(), v6.flowinfo(), v6.scope_id())
                .into_pyobject(py)
                .map(Bound::into_any);
        }
    } else if family == AddressFamily::UNIX {
        return Ok(unix_to_py(py, raw_bytes(addr)));
    }
    // An address family this binding does not spell out: hand over the raw sockaddr bytes.
    Ok(PyBytes::new(py, raw_bytes(addr)).into_any())
}

/// The sockaddr as the kernel filled it: `addr_len()` bytes.
fn raw_bytes(addr: &SocketAddrAny) -> &[u8] {
    // SAFETY: `as_ptr` points at `addr_len()` initialised bytes owned by `addr`, which the
    // returned slice borrows.
    unsafe { std::slice::from_raw_parts(addr.as_ptr().cast::<u8>(), addr.addr_len() as usize) }
}

/// Spells a `sockaddr_un` from its raw bytes, as the `socket` module does. Decoded here rather
/// than through rustix, whose reader panics on a path that fills `sun_path` with no NUL (any
/// local peer can bind one) and keeps a NUL on a 107-byte path.
fn unix_to_py<'py>(py: Python<'py>, raw: &[u8]) -> Bound<'py, PyAny> {
    // Skip `sun_family`; what follows is `sun_path`, `addr_len - 2` bytes of it.
    let path = raw.get(std::mem::size_of::<u16>()..).unwrap_or_default();
    match path.first() {
        // Unnamed: only the family was filled in.
        None => PyString::new(py, "").into_any(),
        // Abstract: every byte counts, NULs included; the leading NUL is kept, as in `socket`.
        Some(0) => PyBytes::new(py, path).into_any(),
        // A filesystem path ends at its first NUL, or fills `sun_path` with none (strnlen).
        Some(_) => {
            let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
            let os = std::ffi::OsStr::from_bytes(&path[..end]);
            match os.into_pyobject(py) {
                Ok(s) => s.into_any(),
                Err(never) => match never {},
            }
        }
    }
}

/// `ip` as inet_ntop(3) spells it. Rust's `Display` agrees except for the deprecated
/// IPv4-compatible form, which glibc writes as `::a.b.c.d` (the first six words zero, the
/// seventh not, so `::` and `::1` stay as they are).
fn ipv6_text(ip: &Ipv6Addr) -> String {
    let seg = ip.segments();
    if seg[..6].iter().all(|&w| w == 0) && seg[6] != 0 {
        let [.., a, b, c, d] = ip.octets();
        return format!("::{a}.{b}.{c}.{d}");
    }
    ip.to_string()
}

/// Writes `ip` as "a.b.c.d" into `buf` and returns it: the accept hot path spells one of these
/// per connection, and this skips `fmt`'s machinery and a heap `String`.
fn dotted_quad<'b>(ip: &Ipv4Addr, buf: &'b mut [u8; 15]) -> &'b str {
    let mut n = 0;
    for (i, octet) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            buf[n] = b'.';
            n += 1;
        }
        if octet >= 100 {
            buf[n] = b'0' + octet / 100;
            n += 1;
        }
        if octet >= 10 {
            buf[n] = b'0' + (octet / 10) % 10;
            n += 1;
        }
        buf[n] = b'0' + octet % 10;
        n += 1;
    }
    // Only ASCII digits and dots were written.
    std::str::from_utf8(&buf[..n]).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_quad_matches_display() {
        for ip in [
            [0, 0, 0, 0],
            [127, 0, 0, 1],
            [255, 255, 255, 255],
            [10, 99, 100, 9],
            [1, 20, 200, 0],
        ] {
            let ip = Ipv4Addr::from(ip);
            let mut buf = [0u8; 15];
            assert_eq!(dotted_quad(&ip, &mut buf), ip.to_string());
        }
    }

    #[test]
    fn ipv6_text_matches_inet_ntop() {
        for (ip, text) in [
            ("::", "::"),
            ("::1", "::1"),
            ("::1.2.3.4", "::1.2.3.4"),
            ("::ffff:1.2.3.4", "::ffff:1.2.3.4"),
            ("::0.0.1.2", "::102"),
            ("fe80::1", "fe80::1"),
        ] {
            assert_eq!(ipv6_text(&ip.parse().unwrap()), text);
        }
    }
}
