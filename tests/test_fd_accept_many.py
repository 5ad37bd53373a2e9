"""``accept_many`` under pressure: EMFILE (a lowered RLIMIT_NOFILE in a child process),
connections reset before they are accepted, and batches bounded by ``max``."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import textwrap

from fdkit import fd
from fdkit.types import Address
from helpers import Fds

EMFILE_CHILD = textwrap.dedent(
    """
    import errno, json, os, resource, sys
    from fdkit import fd

    N = 12          # connections queued
    FREE = 3        # fds left for accept_many

    l = fd.socket(); fd.bind(l, ("127.0.0.1", 0)); fd.listen(l, 64)
    fd.set_blocking(l, False)
    addr = fd.getsockname(l)
    clients = []
    for i in range(N):
        c = fd.socket(); fd.connect(c, addr); clients.append(c)
    client_names = sorted(list(fd.getsockname(c)) for c in clients)
    for i, c in enumerate(clients):
        fd.send(c, b"%d" % i)

    # A limit that leaves exactly FREE numbers free below it (the listing's own fd is closed
    # again by the time it returns: count only what is still open).
    open_fds = {int(n) for n in os.listdir("/proc/self/fd")}
    open_fds = {n for n in open_fds if os.path.lexists(f"/proc/self/fd/{n}")}
    limit = 0
    while limit - len({n for n in open_fds if n < limit}) < FREE:
        limit += 1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))

    out = {}
    first = fd.accept_many(l, 64)
    out["first"] = len(first)
    try:
        fd.accept_many(l, 64)
        out["second"] = "no error"
    except OSError as e:
        out["second"] = [type(e).__name__, e.errno]
    try:
        fd.accept(l)
        out["accept"] = "no error"
    except OSError as e:
        out["accept"] = [type(e).__name__, e.errno]

    peers = [list(p) for _, p in first]
    data = []
    for conn, _ in first:
        data.append(fd.recv(conn, 10).decode())
        fd.close(conn)
    sizes = []
    for _ in range(3 * N):
        batch = fd.accept_many(l, 64)
        sizes.append(len(batch))
        if not batch:
            break
        for conn, p in batch:
            peers.append(list(p))
            data.append(fd.recv(conn, 10).decode())
            fd.close(conn)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    out["sizes"] = sizes
    out["peers_match"] = sorted(peers) == client_names
    out["data"] = sorted(int(d) for d in data)
    out["n"] = N
    out["free"] = FREE
    for c in clients:
        fd.close(c)
    fd.close(l)
    print(json.dumps(out), flush=True)
    """
)


def test_accept_many_emfile_returns_what_fits_then_raises() -> None:
    out = subprocess.run(
        [sys.executable, "-c", EMFILE_CHILD], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    n, free = result["n"], result["free"]
    # The first batch filled the free slots and returned them instead of raising.
    assert result["first"] == free
    # With no slot left and nothing accepted, the error surfaces with its errno.
    assert result["second"] == ["OSError", 24]  # EMFILE
    assert result["accept"] == ["OSError", 24]
    # After closing, the rest came out FREE at a time; no connection was lost or duplicated.
    assert result["sizes"][:-1] == [free] * ((n - free) // free) + (
        [(n - free) % free] if (n - free) % free else []
    )
    assert result["sizes"][-1] == 0
    assert result["peers_match"] is True
    assert result["data"] == list(range(n))


def _rst_close(fds: Fds, c: int) -> None:
    fd.setsockopt(c, socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    fds.close(c)


def test_accept_many_with_reset_connections(fds: Fds) -> None:
    """Clients that send RST before being accepted: accept_many neither raises nor loses the
    live ones. Linux hands reset connections out (their first read fails with ECONNRESET or
    sees EOF) rather than failing accept with ECONNABORTED; both are handled."""
    lfd, addr = fds.listener(blocking=False)
    live: list[tuple[Address, int]] = []
    reset: list[tuple[Address, int]] = []
    for i in range(10):
        c = fds.client(addr)
        fd.send(c, b"hi %d" % i)
        (reset if i % 2 else live).append((fd.getsockname(c), c))
    for _, c in reset:
        _rst_close(fds, c)
    reset_names = {name for name, _ in reset}
    live_names = {name for name, _ in live}

    got = fd.accept_many(lfd)
    for conn, _ in got:
        fds.own(conn)
    assert fd.accept_many(lfd) == []  # everything pending was consumed in one call
    peers = [p for _, p in got]
    assert len(peers) == len(set(peers))
    assert live_names <= set(peers)
    assert set(peers) <= live_names | reset_names
    skipped = len(reset_names - set(peers))
    assert len(got) + skipped == 10

    for conn, peer in got:
        assert fd.fstat(conn).st_mode  # a valid, open fd
        if peer in live_names:
            assert fd.recv(conn, 100) in (b"hi %d" % i for i in range(10))
        else:
            fd.set_blocking(conn, False)
            try:
                first = fd.recv(conn, 100)
            except ConnectionResetError:
                first = None
            # Data the client sent before its RST may or may not survive; the reset shows.
            if first not in (None, b""):
                assert first.startswith(b"hi ")
                try:
                    after = fd.recv(conn, 100)
                except ConnectionResetError:
                    after = b""
                assert after == b""
    # The live connections still work both ways.
    for name, c in live:
        conn = next(conn for conn, p in got if p == name)
        fd.send(conn, b"back")
        assert fd.recv(c, 100) == b"back"


def test_accept_many_max_over_several_calls(fds: Fds) -> None:
    lfd, addr = fds.listener(blocking=False)
    clients = {fd.getsockname(c): c for c in (fds.client(addr) for _ in range(11))}
    seen = []
    sizes = []
    while True:
        batch = fd.accept_many(lfd, max=4)
        sizes.append(len(batch))
        for conn, peer in batch:
            fds.own(conn)
            seen.append(peer)
            assert fd.getpeername(conn) == peer
            assert fd.getsockname(clients[peer]) == peer
        if not batch:
            break
    assert sizes == [4, 4, 3, 0]
    assert sorted(seen) == sorted(clients)


def test_accept_many_addresses_match_clients(fds: Fds) -> None:
    lfd, addr = fds.listener(blocking=False)
    clients = [fds.client(addr) for _ in range(5)]
    got = fd.accept_many(lfd)
    for conn, _ in got:
        fds.own(conn)
    names = [fd.getsockname(c) for c in clients]
    # The kernel queues connections in arrival order.
    assert [p for _, p in got] == names
    for (conn, peer), c in zip(got, clients, strict=True):
        fd.send(c, repr(peer).encode())
        fd.set_blocking(conn, True)
        assert fd.recv(conn, 100) == repr(peer).encode()


def test_accept_many_max_one_and_large_max(fds: Fds) -> None:
    lfd, addr = fds.listener(blocking=False)
    for _ in range(3):
        fds.client(addr)
    one = fd.accept_many(lfd, 1)
    assert len(one) == 1
    fds.own(one[0][0])
    rest = fd.accept_many(lfd, 2**62)
    for conn, _ in rest:
        fds.own(conn)
    assert len(rest) == 2


PEER_PATH_CHILD = textwrap.dedent(
    """
    import ctypes, json, os, socket, sys, tempfile
    from fdkit import fd

    class SockaddrUn(ctypes.Structure):
        _fields_ = [("sun_family", ctypes.c_ushort), ("sun_path", ctypes.c_char * 108)]

    libc = ctypes.CDLL(None, use_errno=True)
    d = tempfile.mkdtemp(prefix="fdkit-am-")
    lpath = d + "/l"
    l = fd.socket(fd.AF_UNIX, fd.SOCK_STREAM | fd.SOCK_NONBLOCK)
    fd.bind(l, lpath)
    fd.listen(l)
    long_path = d + "/" + "q" * (108 - len(d) - 1)
    clients = []
    for i in range(3):
        c = fd.socket(fd.AF_UNIX)
        if i == 1:  # a peer bound to a full 108-byte path, as any C program may do
            addr = SockaddrUn(socket.AF_UNIX, long_path.encode())
            assert libc.bind(c, ctypes.byref(addr), 110) == 0, ctypes.get_errno()
        fd.connect(c, lpath)
        clients.append(c)

    def fds():
        return {n for n in os.listdir("/proc/self/fd") if os.path.lexists("/proc/self/fd/" + n)}

    before = fds()
    out = {}
    try:
        got = fd.accept_many(l)
        out["peers"] = [p for _, p in got]
        for conn, _ in got:
            fd.close(conn)
    except BaseException as e:
        out["error"] = type(e).__name__
    out["leaked"] = len(fds() - before)
    try:
        out["left"] = len(fd.accept_many(l))
    except BaseException as e:
        out["left"] = type(e).__name__
    out["long_path"] = long_path
    for c in clients:
        fd.close(c)
    fd.close(l)
    os.unlink(lpath)
    os.unlink(long_path)
    os.rmdir(d)
    print(json.dumps(out), flush=True)
    """
)


def test_accept_many_peer_with_108_byte_path() -> None:
    """One peer whose address fills sun_path (no NUL) among ordinary ones: accept_many returns
    all three, raises nothing, and leaks no fd (run in a child so a leak is measured there)."""
    out = subprocess.run(
        [sys.executable, "-c", PEER_PATH_CHILD], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result.get("error") is None, result
    assert result["leaked"] == 0
    assert result["peers"] == ["", result["long_path"], ""]
    assert result["left"] == 0
