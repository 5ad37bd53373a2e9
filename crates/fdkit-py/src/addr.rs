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

use crate::args::type_name;
use crate::errors::os_error;

/// Converts a Python address for a socket `fd` into a kernel address.
pub fn from_py(obj: &Bound<'_, PyAny>, fd: BorrowedFd<'_>) -> PyResult<SocketAddrAny> {
    if let Ok(s) = obj.cast::<PyString>() {
        let os = s.extract::<std::ffi::OsString>()?;
        return unix_addr(os.as_bytes());
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return unix_addr(b.as_bytes());
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
    let port = port_arg(&tuple.get_item(1)?)?;
    let flowinfo = if n > 2 {
        u32_arg(&tuple.get_item(2)?, "flowinfo")?
    } else {
        0
    };
    let scope_id = if n > 3 {
        u32_arg(&tuple.get_item(3)?, "scope_id")?
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

fn unix_addr(path: &[u8]) -> PyResult<SocketAddrAny> {
    let addr = match path.split_first() {
        Some((0, name)) => SocketAddrUnix::new_abstract_name(name),
        _ => {
            if path.contains(&0) {
                return Err(PyValueError::new_err("embedded null byte in AF_UNIX path"));
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

fn port_arg(obj: &Bound<'_, PyAny>) -> PyResult<u16> {
    let v: i64 = obj
        .extract()
        .map_err(|_| PyTypeError::new_err("port must be an int"))?;
    u16::try_from(v).map_err(|_| PyValueError::new_err(format!("port must be 0-65535, got {v}")))
}

fn u32_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u32> {
    let v: i64 = obj
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be an int")))?;
    u32::try_from(v)
        .map_err(|_| PyValueError::new_err(format!("{what} must be 0-4294967295, got {v}")))
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
            return (v6.ip().to_string(), v6.port(), v6.flowinfo(), v6.scope_id())
                .into_pyobject(py)
                .map(Bound::into_any);
        }
    } else if family == AddressFamily::UNIX {
        // An unnamed address is just the family field (length 2). rustix reads it back as an
        // abstract address with an empty name, so tell the two apart by length first.
        if addr.addr_len() as usize <= std::mem::size_of::<u16>() {
            return Ok(PyString::new(py, "").into_any());
        }
        if let Ok(unix) = SocketAddrUnix::try_from(addr.clone()) {
            if let Some(name) = unix.abstract_name() {
                let mut bytes = Vec::with_capacity(name.len() + 1);
                bytes.push(0);
                bytes.extend_from_slice(name);
                return Ok(PyBytes::new(py, &bytes).into_any());
            }
            if let Some(path) = unix.path_bytes() {
                let os = std::ffi::OsStr::from_bytes(path);
                return Ok(os.into_pyobject(py)?.into_any());
            }
            return Ok(PyString::new(py, "").into_any());
        }
    }
    // An address family this binding does not spell out: hand over the raw sockaddr bytes.
    // SAFETY: `as_ptr` points at `addr_len()` initialised bytes owned by `addr`, alive here.
    let raw =
        unsafe { std::slice::from_raw_parts(addr.as_ptr().cast::<u8>(), addr.addr_len() as usize) };
    Ok(PyBytes::new(py, raw).into_any())
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
}
