"""Whether ``fdkit proxy``'s upstream is its own listening address.

``fdkit proxy 8080 127.0.0.1:8080`` forwards each connection to itself, which forwards it to
itself again: one curl opened 3,326 connections in 2 s. The proxy asks :func:`self_loop` once
the listener is bound (so a port 0 has its real number) and refuses to serve such an upstream.
"""

from __future__ import annotations

import ipaddress
import os
import socket

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _endpoint(text: str) -> tuple[str, str, int]:
    """``("unix", PATH, 0)``, ``("abstract", NAME, 0)`` or ``("tcp", HOST, PORT)`` of an
    address in the native spelling (``HOST`` without brackets)."""
    if text.startswith("unix:@"):
        return "abstract", text[len("unix:@") :], 0
    if text.startswith("unix:"):
        return "unix", text[len("unix:") :], 0
    host, _, port = text.rpartition(":")
    return "tcp", host.removeprefix("[").removesuffix("]"), int(port) if port.isdigit() else -1


def _destination(ip: IpAddress) -> IpAddress:
    """Where a connect to ``ip`` goes: an IPv4-mapped address is its IPv4 address, and the
    unspecified address (0.0.0.0, ::) is loopback, as Linux connects it."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified:
        return ipaddress.ip_address("127.0.0.1" if ip.version == 4 else "::1")
    return ip


def _nonlocal_bind(version: int) -> bool:
    """Whether bind(2) takes addresses this host does not have (``ip_nonlocal_bind``)."""
    name = "ipv4/ip_nonlocal_bind" if version == 4 else "ipv6/ip_nonlocal_bind"
    try:
        with open(f"/proc/sys/net/{name}") as f:
            return f.read().strip() != "0"
    except OSError:
        return False


def _is_local(ip: IpAddress) -> bool:
    """Whether ``ip`` is an address of this host (in this network namespace): loopback, or
    one bind(2) accepts. The kernel's own answer, so every interface's addresses count."""
    if ip.is_loopback:
        return True
    if ip.is_multicast or _nonlocal_bind(ip.version):
        return False
    family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(ip), 0))
    except OSError:
        return False
    return True


def _v6only() -> bool:
    """Whether a socket bound to ``[::]`` takes IPv6 only (the proxy leaves the system's
    default, ``net.ipv6.bindv6only``, which is 0: IPv4 too)."""
    try:
        with open("/proc/sys/net/ipv6/bindv6only") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def _accepts(listening: IpAddress, target: IpAddress) -> bool:
    """Whether a listener bound to ``listening`` takes a connect to ``target`` (same port)."""
    target = _destination(target)
    if isinstance(listening, ipaddress.IPv6Address) and listening.ipv4_mapped is not None:
        listening = listening.ipv4_mapped
    if not listening.is_unspecified:
        return listening == target
    if listening.version == 4:
        return target.version == 4 and _is_local(target)
    return (target.version == 6 or not _v6only()) and _is_local(target)


def self_loop(listening: str, upstream: str) -> str | None:
    """Why a connection forwarded to ``upstream`` would come back to the listener at
    ``listening`` (the real address, port 0 resolved), or ``None``.

    Unix sockets: the same abstract name, or a path to the same socket file (symbolic and
    relative paths included). TCP: the same port, and an upstream address the listener takes:
    its own address; for a wildcard listener (0.0.0.0, and [::] with IPv4 too unless
    ``bindv6only``), any address of this host (the 127/8 and ::1 loopbacks, every
    interface's); 0.0.0.0 and :: as an upstream are loopback, as Linux connects them. A host
    name counts if any address it resolves to loops: the proxy looks it up again while
    serving, and may take another of its answers."""
    kind, where, port = _endpoint(listening)
    up_kind, up_where, up_port = _endpoint(upstream)
    if kind != up_kind:
        return None
    if kind == "abstract":
        return "the same abstract socket name" if where == up_where else None
    if kind == "unix":
        try:
            same = os.path.samefile(where, up_where)
        except OSError:
            return None
        return "the same socket file" if same else None
    if port != up_port:
        return None
    listen_ip = ipaddress.ip_address(where)
    named = False
    try:
        targets = [ipaddress.ip_address(up_where)]
    except ValueError:
        named = True
        try:
            infos = socket.getaddrinfo(up_where, up_port, type=socket.SOCK_STREAM)
        except OSError:
            return None  # the native lookup said what it found; nothing to compare
        targets = [ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in infos]
    for target in targets:
        if _accepts(listen_ip, target):
            steps = [f"{up_where} resolves to {target}"] if named else []
            if _destination(target) != target:
                shown = target if named else up_where
                steps.append(f"a connect to {shown} goes to {_destination(target)}")
            reached = _listen_text(_destination(target), up_port)
            return ", ".join([*steps, f"{reached} reaches the listener on {listening}"])
    return None


def _listen_text(ip: IpAddress, port: int) -> str:
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"
