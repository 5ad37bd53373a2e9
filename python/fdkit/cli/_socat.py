"""socat's address forms for ``fdkit proxy``, spelled as the native proxy spells addresses.

``fdkit proxy TCP-LISTEN:8080,fork,reuseaddr TCP:backend:80`` is what a socat user types, and
it works as ``socat`` would: the keywords (case-insensitive, with socat's abbreviations
``TCP-L``, ``TCP4-L``, ``TCP6-L``, ``UNIX-L``) become ``0.0.0.0:8080``, ``backend:80`` and so
on, and the options fdkit honours are read. Every other socat address type (``EXEC:``,
``OPENSSL:``, ``UDP:``, ``STDIO``, ``-``, a bare path, which socat opens with ``GOPEN``) and
every option fdkit cannot honour are refused by name, in one line; fdkit's own spellings
(``PORT``, ``HOST:PORT``, ``[V6]:PORT``, ``unix:PATH``, ``unix:@NAME``) pass through as they are.

What socat's listening options mean here: ``fork`` is what the proxy always does (it serves
every connection; without ``fork`` socat would serve one and exit), ``reuseaddr`` too (the
proxy always sets ``SO_REUSEADDR``), ``unlink-early`` and ``unlink-close`` too (a socket file
nothing listens on is replaced, and the file is removed at the end; a live socket is never
taken over), ``nodelay`` too (``TCP_NODELAY`` is always set); ``bind=ADDR`` is the address to
listen on, ``pf=ip4|ip6`` its family, ``max-children=N`` is ``--max-connections N``, and on the
upstream ``connect-timeout=SECONDS`` is ``--connect-timeout``.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Literal

Role = Literal["LISTEN", "UPSTREAM"]

#: socat's listening address types fdkit proxy takes, by keyword (lower case): the kind of
#: socket and the IP family it forces (``None``: IPv4 unless ``pf=ip6``, as socat 1.7).
LISTEN_TYPES: dict[str, tuple[str, int | None]] = {
    "tcp-listen": ("tcp", None),
    "tcp-l": ("tcp", None),
    "tcp4-listen": ("tcp", socket.AF_INET),
    "tcp4-l": ("tcp", socket.AF_INET),
    "tcp6-listen": ("tcp", socket.AF_INET6),
    "tcp6-l": ("tcp", socket.AF_INET6),
    "unix-listen": ("unix", None),
    "unix-l": ("unix", None),
    "abstract-listen": ("abstract", None),
}

#: socat's connecting address types fdkit proxy takes (``UNIX`` and ``UNIX-CLIENT`` are
#: socat's "stream or datagram" client: a stream socket is what the proxy relays).
CONNECT_TYPES: dict[str, tuple[str, int | None]] = {
    "tcp": ("tcp", None),
    "tcp-connect": ("tcp", None),
    "tcp4": ("tcp", socket.AF_INET),
    "tcp4-connect": ("tcp", socket.AF_INET),
    "tcp6": ("tcp", socket.AF_INET6),
    "tcp6-connect": ("tcp", socket.AF_INET6),
    "unix-connect": ("unix", None),
    "unix-client": ("unix", None),
    "unix": ("unix", None),
    "abstract-connect": ("abstract", None),
    "abstract-client": ("abstract", None),
    "abstract": ("abstract", None),
}


def _names(*groups: str) -> frozenset[str]:
    return frozenset(" ".join(groups).split())


#: Every other address type of socat 1.7 and 1.8 (``socat -h``), refused by name.
OTHER_TYPES = _names(
    "- stdio stdin stdout stderr fd accept-fd exec exec1 exec2 system system1 system2 shell",
    "create creat file open gopen pipe fifo echo pty readline tun interface if nop test",
    "named local proxy proxy-connect socks socks-client socks4 socks4-client socks4a",
    "socks4a-client socks5 socks5-client socks5-connect socks5-listen",
    "openssl openssl-client openssl-connect openssl-listen openssl-server ssl ssl-l ssl-s",
    "openssl-dtls-client openssl-dtls-server",
    "abstract-recv abstract-recvfrom abstract-sendto",
    "unix-recv unix-recvfrom unix-send unix-sendto",
    "inet inet-l inet-listen inet4 inet4-l inet4-listen inet6 inet6-l inet6-listen",
    "socket-connect socket-datagram datagram dgram socket-listen socket-recv",
    "socket-recvfrom socket-sendto sendto",
    "vsock-connect vsock-listen vsock-l",
    "posixmq-bidirectional posixmq-read posixmq-receive posixmq-send posixmq-write",
    " ".join(
        f"{proto}{v}{suffix}"
        for proto in ("udp", "udplite", "sctp", "dccp", "ip")
        for v in ("", "4", "6")
        for suffix in (
            "",
            "-connect",
            "-listen",
            "-l",
            "-datagram",
            "-dgram",
            "-recv",
            "-recvfrom",
            "-send",
            "-sendto",
        )
    ),
)

#: Suffixes of the types whose one parameter is a port or a number (``UDP-LISTEN:53``,
#: ``FD:3``): ``KEYWORD:DIGITS`` is then socat's, not a host named like a socat keyword.
_ONE_NUMBER = ("-listen", "-l", "-s", "-server", "-recv", "-recvfrom")

#: Options that name what the proxy always does: accepted as they are (or ``=1``).
_ALWAYS = {
    "fork": "the proxy serves every connection",
    "reuseaddr": "the proxy sets SO_REUSEADDR",
    "so-reuseaddr": "the proxy sets SO_REUSEADDR",
    "nodelay": "the proxy sets TCP_NODELAY",
    "unlink-early": "a socket file nothing listens on is replaced",
    "unlink-close": "the socket file is removed at the end",
}

#: The options each kind of address takes, for the messages.
_LISTEN_OPTIONS = {
    "tcp": ("fork", "reuseaddr", "bind=", "pf=", "max-children=", "nodelay"),
    "unix": ("fork", "reuseaddr", "unlink-early", "unlink-close", "max-children="),
}
_CONNECT_OPTIONS = {
    "tcp": ("connect-timeout=", "pf=", "nodelay"),
    "unix": ("connect-timeout=",),
}

_FAMILIES = {
    "ip4": socket.AF_INET,
    "ipv4": socket.AF_INET,
    "inet": socket.AF_INET,
    "4": socket.AF_INET,
    "ip6": socket.AF_INET6,
    "ipv6": socket.AF_INET6,
    "inet6": socket.AF_INET6,
    "6": socket.AF_INET6,
}


@dataclass(frozen=True)
class Address:
    """An address as typed, and as the native proxy spells it."""

    #: What the user typed.
    typed: str
    #: The native spelling: ``HOST:PORT``, ``[V6]:PORT``, ``unix:PATH``, ``unix:@NAME``.
    spec: str
    #: socat's keyword as typed, upper case (``TCP-L``), or ``None`` for fdkit's own spelling.
    keyword: str | None = None
    #: ``max-children=N``: the connection cap.
    max_children: str | None = None
    #: ``connect-timeout=SECONDS``.
    connect_timeout: str | None = None
    #: A host name a ``TCP4:``/``TCP6:`` upstream was looked up as, once, in its family.
    looked_up: str | None = None


class SocatError(ValueError):
    """A socat address fdkit proxy does not take: the message names it."""


def _split(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside square brackets (``[::1]:80`` is two parts)."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth = max(0, depth - 1)
        elif c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _port(text: str, typed: str) -> int:
    """A port number, or a TCP service name (``http``) as socat takes it."""
    if text.isascii() and text.isdigit():
        if int(text) > 65535:
            raise SocatError(f'invalid address "{typed}": the port is not a number from 0 to 65535')
        return int(text)
    try:
        return socket.getservbyname(text, "tcp")
    except OSError:
        raise SocatError(
            f'invalid address "{typed}": the port {text!r} is neither a number from 0 to 65535 '
            "nor a TCP service name"
        ) from None


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _in_family(host: str, family: int, typed: str, what: str) -> str:
    """``host`` as an IP literal of ``family``: a literal is checked, a name looked up (the
    first answer of getaddrinfo(3) in that family, as socat takes it)."""
    want = "IPv4" if family == socket.AF_INET else "IPv6"
    ip = _literal(host)
    if ip is not None:
        if (ip.version == 4) != (family == socket.AF_INET):
            raise SocatError(f'invalid address "{typed}": {what} takes an {want} address, not {ip}')
        return str(ip)
    try:
        infos = socket.getaddrinfo(host, None, family, socket.SOCK_STREAM)
    except OSError as e:
        raise OSError(f'cannot resolve "{typed}": {host} has no {want} address ({e})') from None
    return str(infos[0][4][0])


def _options(
    opts: list[str], allowed: tuple[str, ...], role: Role, typed: str, keyword: str
) -> dict[str, str | None]:
    """The options as ``{name: value}`` (names lower case); one fdkit cannot honour, or one
    given twice, is refused by name."""
    found: dict[str, str | None] = {}
    for opt in opts:
        if not opt:
            continue
        name, eq, value = opt.partition("=")
        name = name.strip().lower()
        if name == "so-reuseaddr":
            name = "reuseaddr"
        if name in _ALWAYS:  # a flag: as it is, or =1 (=0 asks for what the proxy cannot)
            key, ok = name, name in allowed and (not eq or value.strip() == "1")
        else:
            key = f"{name}=" if eq or f"{name}=" in allowed else name
            ok = key in allowed
        if not ok:
            raise SocatError(
                f'{role} "{typed}": fdkit proxy cannot honour socat\'s option {opt.strip()} on '
                f"{keyword} (it takes {', '.join(allowed)} there)"
            )
        if key.endswith("=") and not value.strip():
            raise SocatError(f'{role} "{typed}": socat\'s option {name}= needs a value')
        if name in found:
            raise SocatError(f'{role} "{typed}": socat\'s option {name} is given twice')
        found[name] = value.strip() if eq else None
    return found


def _family_option(found: dict[str, str | None], role: Role, typed: str) -> int | None:
    pf = found.get("pf")
    if pf is None:
        return None
    family = _FAMILIES.get(pf.lower())
    if family is None:
        raise SocatError(f'{role} "{typed}": pf={pf} is not ip4 or ip6')
    return family


def _keyword(text: str) -> tuple[str, str] | None:
    """``(keyword, rest)`` when ``text`` starts with a socat keyword (any case) followed by
    ``:``, ``,`` or nothing; ``None`` otherwise."""
    if text == "-" or text.startswith("-,"):
        return "-", text[1:]
    m = re.match(r"([A-Za-z][A-Za-z0-9-]*)(?=[:,]|$)", text)
    if m is None:
        return None
    word = m.group(1).lower()
    if word in LISTEN_TYPES or word in CONNECT_TYPES or word in OTHER_TYPES:
        return word, text[m.end() :]
    return None


def spell(text: str, role: Role) -> Address:
    """``text`` (LISTEN or UPSTREAM, as ``role`` says) as the native proxy spells it.

    socat's forms become fdkit's; fdkit's own spellings pass through unchanged (the native
    parser judges them). :class:`SocatError` (a ``ValueError``) names a socat address or
    option fdkit proxy does not take; ``OSError`` is a ``TCP4:``/``TCP6:`` name or a ``bind=``
    name that does not resolve in its family."""
    if text[:5].lower() == "unix:":
        return Address(text, "unix:" + text[5:])  # fdkit's own (socat's UNIX: connects too)
    head = re.split(r"[:,]", text, maxsplit=1)[0]
    if "/" in head:
        raise SocatError(
            f'{role} "{text}": fdkit proxy does not support socat\'s GOPEN address (a path '
            f"alone); a unix socket is {'UNIX-LISTEN' if role == 'LISTEN' else 'UNIX-CONNECT'}"
            ":PATH (or unix:PATH)"
        )
    found = _keyword(text)
    if found is None:
        return Address(text, text)
    word, rest = found
    keyword = word.upper()
    if word in OTHER_TYPES:
        if re.fullmatch(r":\d+", rest) and not (word == "fd" or word.endswith(_ONE_NUMBER)):
            # HOST:PORT whose host is named like a socat type that needs more than a port
            # (``proxy:3128``): socat itself would refuse it, so it is fdkit's spelling.
            return Address(text, text)
        raise SocatError(
            f'{role} "{text}": fdkit proxy does not support socat\'s {keyword}'
            f"{':' if rest.startswith(':') else ''} address; it forwards TCP and unix stream "
            "sockets only (TCP-LISTEN, UNIX-LISTEN, ABSTRACT-LISTEN to TCP, UNIX-CONNECT, "
            "ABSTRACT-CONNECT)"
        )
    listening = word in LISTEN_TYPES
    if listening != (role == "LISTEN"):
        if role == "LISTEN":
            raise SocatError(
                f'LISTEN "{text}" is socat\'s {keyword}: address, which connects: LISTEN is '
                "where clients connect (TCP-LISTEN:PORT, UNIX-LISTEN:PATH), UPSTREAM where "
                "the proxy connects, in socat's order: fdkit proxy TCP-LISTEN:8080 TCP:HOST:80"
            )
        raise SocatError(
            f'UPSTREAM "{text}" is socat\'s {keyword}: address, which listens: UPSTREAM is '
            "where the proxy connects (TCP:HOST:PORT, UNIX-CONNECT:PATH)"
        )
    kind, family = (LISTEN_TYPES if listening else CONNECT_TYPES)[word]
    parts = _split(rest, ",")
    params = _split(parts[0][1:], ":") if parts[0].startswith(":") else []
    allowed = (_LISTEN_OPTIONS if listening else _CONNECT_OPTIONS)[
        "tcp" if kind == "tcp" else "unix"
    ]
    opts = _options(parts[1:], allowed, role, text, keyword)
    common = {
        "keyword": keyword,
        "max_children": opts.get("max-children"),
        "connect_timeout": opts.get("connect-timeout"),
    }
    if kind != "tcp":
        if len(params) != 1 or not params[0]:
            what = "a NAME" if kind == "abstract" else "a PATH"
            raise SocatError(f'{role} "{text}": socat\'s {keyword}: address takes {what}')
        name = parts[0][1:]  # the whole parameter: a path may hold ":"
        if kind == "abstract":
            return Address(text, f"unix:@{name}", **common)
        # fdkit's unix:@NAME is the abstract namespace: a path that starts with @ is kept a path.
        return Address(text, f"unix:{'./' if name.startswith('@') else ''}{name}", **common)
    pf = _family_option(opts, role, text)
    if pf is not None and family is not None and pf != family:
        raise SocatError(f'{role} "{text}": pf={opts["pf"]} contradicts {keyword}')
    family = pf or family
    if listening:
        if len(params) != 1 or not params[0]:
            raise SocatError(f'{role} "{text}": socat\'s {keyword}: address takes a PORT')
        port = _port(params[0], text)
        bind = opts.get("bind")
        if bind is None:
            host = "::" if family == socket.AF_INET6 else "0.0.0.0"
        else:
            bind_host = bind[1:-1] if bind.startswith("[") and bind.endswith("]") else bind
            if family is None and _literal(bind_host) is not None:
                family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
            host = _in_family(bind_host, family or socket.AF_INET, text, f"{keyword} bind=")
        return Address(text, _host_port(host, port), **common)
    if len(params) != 2 or not params[0] or not params[1]:
        raise SocatError(f'{role} "{text}": socat\'s {keyword}: address takes HOST:PORT')
    host, port = params[0], _port(params[1], text)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if family is None:
        return Address(text, _host_port(host, port), **common)
    ip = _in_family(host, family, text, keyword)
    looked_up = host if _literal(host) is None else None
    return Address(text, _host_port(ip, port), looked_up=looked_up, **common)
