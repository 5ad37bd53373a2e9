"""Listen addresses and the failure to listen on one, spelled and worded alike by ``fdkit serve``
and ``fdkit proxy``.

A port alone means every IPv4 interface, as socat's ``TCP-LISTEN:PORT`` does (socat binds
0.0.0.0 unless told ``pf=ip6`` or ``TCP6-LISTEN``): ``9002`` and ``:9002`` are
``0.0.0.0:9002``. ``[::]:9002`` listens on IPv6 too. A bind that fails is one line naming the
address, ``fdkit proxy: cannot listen on 0.0.0.0:9002: Address already in use``, and exit
status 1.
"""

from __future__ import annotations

import errno

#: Where ``PORT`` and ``:PORT`` listen: every IPv4 interface, as socat's ``TCP-LISTEN:PORT``.
ALL_INTERFACES = "0.0.0.0"

#: What a listen address may be, for ``--help``.
LISTEN_HELP = (
    "PORT or :PORT (every IPv4 interface, as socat's TCP-LISTEN:PORT), HOST:PORT, [V6]:PORT, "
    "unix:/PATH or unix:@NAME (abstract)"
)


def listen_address(text: str) -> str:
    """``text`` with a bare ``PORT`` or ``:PORT`` spelled out as ``0.0.0.0:PORT``; any other
    spelling as it is (the native parser judges it). ``ValueError`` for a port alone that is
    not 0..65535, worded as the native parser words a bad address."""
    digits = text[1:] if text.startswith(":") else text
    if not digits or not (digits.isascii() and digits.isdigit()):
        return text
    if int(digits) > 65535:
        raise ValueError(f'invalid address "{text}": the port is not a number from 0 to 65535')
    return f"{ALL_INTERFACES}:{int(digits)}"


def listen_text(host: str, port: int) -> str:
    """``HOST:PORT``, or ``[V6]:PORT`` for an IPv6 host (given with or without brackets)."""
    host = host.lstrip("[").rstrip("]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def cannot_listen(
    command: str, e: OSError, at: str, port: int | None = None, instead: str = ""
) -> str | None:
    """The one line saying that ``fdkit COMMAND`` could not listen on ``at``, when ``e`` is the
    native server's failed socket/bind/listen there (it names the address as ``filename``);
    ``None`` for any other error. A TCP ``port`` below 1024 refused (``EACCES``) gets a hint,
    which suggests ``instead`` when given."""
    if e.filename != at or not e.strerror:
        return None
    hint = ""
    if e.errno == errno.EACCES and port is not None and 0 < port < 1024:
        suggestion = f"; try {instead}" if instead else ""
        hint = f" (ports below 1024 need root or CAP_NET_BIND_SERVICE{suggestion})"
    return f"fdkit {command}: cannot listen on {at}: {e.strerror}{hint}"
