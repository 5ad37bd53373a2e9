"""TLS connections on fdkit.aio, whose per-record path is native (``fdkit.aio._tls``), against
asyncio's own loop: each scenario is a program run in a child Python on asyncio's
``SelectorEventLoop`` (the oracle) and on ``fdkit.aio.EventLoop`` with each engine, and what the
program observed is compared (``helpers/aio_corners.py``). Both ends are in the program, over
real TLS on 127.0.0.1, with certificates of a throwaway CA (``trustme``).

Scenarios: echo of sizes from 1 byte to 10 MiB with flow control paused and resumed both ways
(an ``asyncio.Protocol`` and a ``BufferedProtocol`` on the app side), the app protocol raising in
``data_received`` (the exception handler's context and the traceback's functions), garbage
instead of a ClientHello, a TCP reset against close_notify, ``write_eof`` refused, odd values
given to ``write``, ``set_protocol`` mid-stream, a handshake that times out, a certificate the
client does not trust and a hostname mismatch, and the native path standing aside for a class
patched after the loop exists and for ``SSLContext.sslobject_class``.

Then the proof that the native path runs: with ``sys.setprofile``, a request and its answer
over an established connection call no Python function of ``asyncio.sslproto`` on fdkit.aio
(where ``fdkit.aio._tls.native_ok()`` holds: CPython 3.11 to 3.13 and any later one whose
``sslproto`` methods have their source).
"""

from __future__ import annotations

import sys

import pytest

from helpers.aio_corners import PRELUDE, compare, record
from helpers.aio_parity import ASYNCIO, FdkitEngine, each_engine, fdkit_kind

pytestmark = each_engine

TLS_PRELUDE = (
    PRELUDE
    + """
import ssl, socket, traceback, trustme
CA = trustme.CA()
SERVER_CTX = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
CA.issue_cert("localhost", "127.0.0.1").configure_cert(SERVER_CTX)
CLIENT_CTX = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
CA.configure_trust(CLIENT_CTX)
loop = new_loop(KIND)
handled = []

def handler(lp, ctx):
    exc = ctx.get("exception")
    handled.append({
        "message": masked(ctx.get("message")),
        "exception": err(exc),
        "keys": sorted(k for k in ctx if k not in ("source_traceback",)),
        "transport": type(ctx.get("transport")).__name__,
        "protocol": type(ctx.get("protocol")).__name__,
        "tb": [f.name for f in traceback.extract_tb(exc.__traceback__)] if exc else None,
    })

loop.set_exception_handler(handler)

class Collect(asyncio.Protocol):
    def __init__(self):
        self.data = bytearray()
        self.events = []
        self.done = loop.create_future()
        self.transport = None
    def connection_made(self, tr):
        self.transport = tr
        self.events.append("made")
    def data_received(self, data):
        self.data += data
    def eof_received(self):
        self.events.append("eof")
    def connection_lost(self, exc):
        self.events.append(["lost", err(exc)])
        if not self.done.done():
            self.done.set_result(None)
    def pause_writing(self):
        self.events.append("pause")
    def resume_writing(self):
        self.events.append("resume")

async def tls_pair(server_factory, client_factory, **kw):
    srv = await loop.create_server(server_factory, "127.0.0.1", 0, ssl=SERVER_CTX)
    port = srv.sockets[0].getsockname()[1]
    tr, pr = await loop.create_connection(
        client_factory, "127.0.0.1", port, ssl=CLIENT_CTX, server_hostname="localhost", **kw)
    return srv, tr, pr

def squash(events):  # pause/resume counts depend on timing: whether each happened does not
    out = []
    for e in events:
        if e in ("pause", "resume") and e in out:
            continue
        out.append(e)
    return out
"""
)

ECHO_PROGRAM = (
    TLS_PRELUDE
    + """
size, app = int(ARGS[0]), ARGS[1]
payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
class Echo(asyncio.Protocol):
    def connection_made(self, tr):
        self.tr = tr
    def data_received(self, data):
        self.tr.write(data)
    def eof_received(self):
        return False

class Buffered(asyncio.BufferedProtocol):
    def __init__(self):
        self.buf = bytearray(7000)
        self.data = bytearray()
        self.done = loop.create_future()
        self.events = []
    def connection_made(self, tr):
        self.transport = tr
        self.events.append("made")
    def get_buffer(self, n):
        # a memoryview: asyncio's _do_read__buffered slices what it gets (a bytearray's slice
        # is a copy, which loses what is read into it)
        return memoryview(self.buf)
    def buffer_updated(self, n):
        self.data += self.buf[:n]
    def connection_lost(self, exc):
        self.events.append(["lost", err(exc)])
        self.done.set_result(None)

async def main():
    client = Collect() if app == "protocol" else Buffered()
    srv, tr, pr = await tls_pair(Echo, lambda: client)
    tr.set_write_buffer_limits(high=64 * 1024)
    view = memoryview(payload)
    for i in range(0, len(view), 100_000):
        tr.write(bytes(view[i:i + 100_000]))
        await asyncio.sleep(0)
    while len(client.data) < size:
        await asyncio.sleep(0.005)
    tr.close()
    await client.done
    srv.close()
    await srv.wait_closed()
    return {"same": bytes(client.data) == payload, "events": squash(client.events),
            "write buffer": tr.get_write_buffer_size()}

out = {"result": loop.run_until_complete(asyncio.wait_for(main(), 30))}
out["handled"] = handled
emit(out)
"""
)


@pytest.mark.parametrize(
    ("size", "app"),
    [(1, "protocol"), (70_000, "protocol"), (10 << 20, "protocol"), (3 << 20, "buffered")],
)
def test_tls_echo(engine: FdkitEngine, size: int, app: str) -> None:
    """Bytes through a TLS echo, the client's flow control paused and resumed by a 10 MiB
    transfer: the same bytes back, the same events, nothing for the exception handler."""
    oracle, got = compare(engine, ECHO_PROGRAM, str(size), app, timeout=60)
    assert oracle["result"]["same"] is True
    assert oracle["handled"] == []
    assert got == oracle


FAULT_PROGRAM = (
    TLS_PRELUDE
    + """
case = ARGS[0]
out = {}

class Raises(asyncio.Protocol):
    def connection_made(self, tr):
        self.tr = tr
    def data_received(self, data):
        raise LookupError("from data_received")

class WriteOdd(asyncio.Protocol):
    def connection_made(self, tr):
        self.tr = tr
    def data_received(self, data):
        results = []
        for v in (b"", bytearray(b"ba"), memoryview(b"mv"), "str", None, 1):
            try:
                self.tr.write(v)
                results.append("ok")
            except BaseException as exc:
                results.append(err(exc))
        out["write"] = results
        try:
            self.tr.write_eof()
        except BaseException as exc:
            out["write_eof"] = err(exc)
        out["can_write_eof"] = self.tr.can_write_eof()
        self.tr.write(b"done")

async def main():
    if case in ("raises", "odd"):
        factory = Raises if case == "raises" else WriteOdd
        client = Collect()
        srv, tr, pr = await tls_pair(factory, lambda: client)
        tr.write(b"hello")
        if case == "odd":
            while not bytes(client.data).endswith(b"done"):
                await asyncio.sleep(0.005)
            out["client got"] = bytes(client.data).decode()
            tr.close()
        await asyncio.wait_for(client.done, 10)
        out["client events"] = client.events
        srv.close()
        return
    if case == "garbage":
        srv = await loop.create_server(Collect, "127.0.0.1", 0, ssl=SERVER_CTX)
        port = srv.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
        out["peer read"] = masked(await asyncio.wait_for(r.read(), 10))
        w.close()
        await asyncio.sleep(0.1)
        srv.close()
        return
    if case == "reset":
        server_side = []
        def make():
            p = Collect()
            server_side.append(p)
            return p
        client = Collect()
        srv, tr, pr = await tls_pair(make, lambda: client)
        tr.write(b"x")
        while not server_side or not server_side[0].data:
            await asyncio.sleep(0.005)
        sock = tr.get_extra_info("socket")
        raw = socket.socket(fileno=sock.fileno())  # the client's socket, reset by SO_LINGER 0
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\\x01\\0\\0\\0\\0\\0\\0\\0")
        raw.detach()
        tr.abort()
        await asyncio.wait_for(server_side[0].done, 10)
        out["server events"] = server_side[0].events
        srv.close()
        return
    if case == "set_protocol":
        client = Collect()
        srv, tr, pr = await tls_pair(Echo2, lambda: client)
        tr.write(b"one")
        while bytes(client.data) != b"one":
            await asyncio.sleep(0.005)
        other = Collect()
        tr.set_protocol(other)
        tr.write(b"two")
        while bytes(other.data) != b"two":
            await asyncio.sleep(0.005)
        out["first"], out["second"] = bytes(client.data).decode(), bytes(other.data).decode()
        out["protocol is other"] = tr.get_protocol() is other
        tr.close()
        await asyncio.wait_for(other.done, 10)
        srv.close()
        return
    if case == "handshake timeout":
        lst = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog), never answers
        port = lst.getsockname()[1]
        try:
            await loop.create_connection(Collect, "127.0.0.1", port, ssl=CLIENT_CTX,
                                         server_hostname="localhost", ssl_handshake_timeout=0.2)
        except BaseException as exc:
            out["raised"] = err(exc)
        lst.close()
        return
    if case in ("untrusted", "hostname"):
        srv = await loop.create_server(Collect, "127.0.0.1", 0, ssl=SERVER_CTX)
        port = srv.sockets[0].getsockname()[1]
        ctx = ssl.create_default_context() if case == "untrusted" else CLIENT_CTX
        try:
            await loop.create_connection(Collect, "127.0.0.1", port, ssl=ctx,
                                         server_hostname="example.org" if case == "hostname"
                                         else "localhost")
        except BaseException as exc:
            out["raised"] = err(exc)
        await asyncio.sleep(0.1)
        srv.close()
        return

class Echo2(asyncio.Protocol):
    def connection_made(self, tr):
        self.tr = tr
    def data_received(self, data):
        self.tr.write(data)

out["run"] = run_outcome(loop, main())
loop.run_until_complete(asyncio.sleep(0.05))
out["handled"] = handled
emit(out)
"""
)


@pytest.mark.parametrize(
    "case",
    [
        "raises",
        "odd",
        "garbage",
        "reset",
        "set_protocol",
        "handshake timeout",
        "untrusted",
        "hostname",
    ],
)
def test_tls_faults(engine: FdkitEngine, case: str) -> None:
    """What the program sees when the app protocol raises in ``data_received``, ``write`` gets
    odd values, ``write_eof`` is refused, the peer speaks plain HTTP to a TLS server, the peer
    resets instead of close_notify, the app protocol is replaced mid-stream, the handshake
    times out, or the certificate is refused: the same calls, errors and handler contexts
    (traceback functions included) as on asyncio's loop."""
    oracle, got = compare(engine, FAULT_PROGRAM, case, timeout=30)
    assert oracle["run"] == "returned"
    if case == "raises":
        assert oracle["handled"][0]["exception"] == ["LookupError", "from data_received"]
        assert oracle["handled"][0]["message"] == "Fatal error on SSL protocol"
    if case in ("untrusted", "hostname"):
        assert oracle["raised"][0] == "SSLCertVerificationError"
    assert got == oracle


PATCHED_PROGRAM = (
    TLS_PRELUDE
    + """
from asyncio import sslproto
case = ARGS[0]
calls = []
if case == "class patch":
    original = sslproto.SSLProtocol._do_read
    def _do_read(self):
        calls.append("_do_read")
        return original(self)
elif case == "sslobject_class":
    class Counting(ssl.SSLObject):
        def read(self, *a):
            calls.append("read")
            return super().read(*a)
        def write(self, data):
            calls.append("write")
            return super().write(data)
    SERVER_CTX.sslobject_class = Counting

class Echo(asyncio.Protocol):
    def connection_made(self, tr):
        self.tr = tr
    def data_received(self, data):
        self.tr.write(data)

async def main():
    client = Collect()
    srv, tr, pr = await tls_pair(Echo, lambda: client)
    if case == "class patch":  # after the loop and the connection exist
        sslproto.SSLProtocol._do_read = _do_read
    calls.clear()
    for i in range(3):
        tr.write(b"ping %d" % i)
        while not bytes(client.data).endswith(b"ping %d" % i):
            await asyncio.sleep(0.005)
    tr.close()
    await client.done
    srv.close()
    return bytes(client.data).decode()

out = {"result": loop.run_until_complete(asyncio.wait_for(main(), 10))}
out["patched ran"] = len(calls) > 0
out["handled"] = handled
emit(out)
"""
)


@pytest.mark.parametrize("case", ["class patch", "sslobject_class"])
def test_tls_native_path_stands_aside(engine: FdkitEngine, case: str) -> None:
    """A method of ``SSLProtocol`` patched on the class after the connection exists, and an
    ``SSLObject`` subclass given by ``SSLContext.sslobject_class``: their code runs for every
    record, as on asyncio's loop."""
    oracle, got = compare(engine, PATCHED_PROGRAM, case)
    assert oracle["patched ran"] is True
    assert got == oracle


CALLS_PROGRAM = (
    TLS_PRELUDE
    + """
from asyncio import sslproto

class Echo(asyncio.Protocol):
    def connection_made(self, tr):
        self.tr = tr
    def data_received(self, data):
        self.tr.write(data)

seen = []
def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_filename == sslproto.__file__:
        seen.append(frame.f_code.co_name)

async def main():
    client = Collect()
    srv, tr, pr = await tls_pair(Echo, lambda: client)
    for i in range(3):  # warm: the handshake's last steps are asyncio's
        tr.write(b"warm")
        while not bytes(client.data).endswith(b"warm"):
            await asyncio.sleep(0.005)
    sys.setprofile(profile)
    for i in range(20):
        tr.write(b"ping %d" % i)
        while not bytes(client.data).endswith(b"ping %d" % i):
            await asyncio.sleep(0)
    sys.setprofile(None)
    tr.close()
    await client.done
    srv.close()

loop.run_until_complete(asyncio.wait_for(main(), 10))
native = None
if KIND != "asyncio":
    from fdkit.aio import _tls
    native = _tls.native_ok()
emit({"native": native, "sslproto calls": sorted(set(seen))})
"""
)


def test_tls_records_run_native(engine: FdkitEngine) -> None:
    """20 requests and answers over an established TLS connection, both ends on fdkit.aio:
    no Python function of ``asyncio.sslproto`` runs (asyncio's loop runs several per record)."""
    oracle = record(ASYNCIO, CALLS_PROGRAM)
    assert "_do_read" in oracle["sslproto calls"]
    got = record(fdkit_kind(engine), CALLS_PROGRAM)
    if not got["native"]:
        assert sys.version_info >= (3, 14), "the native TLS path must run on CPython 3.11-3.13"
        pytest.skip("asyncio.sslproto's methods here are not the source fdkit.aio follows")
    assert got["sslproto calls"] == []


LEAVING_PROGRAM = (
    TLS_PRELUDE
    + """
tls = ARGS[0] == "tls"

class Exits(asyncio.Protocol):
    def data_received(self, data):
        raise SystemExit(3)

async def main():
    srv = await loop.create_server(Exits, "127.0.0.1", 0, ssl=SERVER_CTX if tls else None)
    port = srv.sockets[0].getsockname()[1]
    if tls:
        tr, pr = await loop.create_connection(
            Collect, "127.0.0.1", port, ssl=CLIENT_CTX, server_hostname="localhost")
        tr.write(b"x")
    else:
        tr, pr = await loop.create_connection(Collect, "127.0.0.1", port)
        tr.write(b"x")
    await asyncio.sleep(5)

out = {}
try:
    loop.run_until_complete(main())
except SystemExit as exc:
    out["left with"] = [f.name for f in traceback.extract_tb(exc.__traceback__)][1:]
emit(out)
"""
)


@pytest.mark.parametrize("transport", ["plain", "tls"])
def test_system_exit_leaves_with_asyncios_entries(engine: FdkitEngine, transport: str) -> None:
    """SystemExit raised by ``data_received`` leaves ``run_until_complete`` with the traceback
    asyncio's loop gives it: the entries of ``_run_once``, ``Handle._run`` and the transport's
    read methods (for TLS the SSL protocol's too) down to ``data_received``."""
    oracle, got = compare(engine, LEAVING_PROGRAM, transport)
    assert oracle["left with"][-2:] == (
        ["_read_ready__data_received", "data_received"]
        if transport == "plain"
        else ["_do_read__copied", "data_received"]
    )
    assert got == oracle


SUBCLASS_PATCH_PROGRAM = (
    TLS_PRELUDE
    + """
from fdkit.aio import _tls

class Echo(asyncio.Protocol):
    def connection_made(self, tr):
        self.tr = tr
    def data_received(self, data):
        self.tr.write(data)

calls = []
original = _tls.SSLProtocol._do_read

def _do_read(self):
    calls.append(type(self).__name__)
    return original(self)

async def main():
    client = Collect()
    srv, tr, pr = await tls_pair(Echo, lambda: client)
    _tls.SSLProtocol._do_read = _do_read  # on fdkit's subclass, after the connection exists
    try:
        tr.write(b"ping")
        while bytes(client.data) != b"ping":
            await asyncio.sleep(0.005)
    finally:
        del _tls.SSLProtocol._do_read
    tr.close()
    await client.done
    srv.close()

loop.run_until_complete(asyncio.wait_for(main(), 10))
emit({"patched ran": sorted(set(calls)), "native after": _tls.native_ok()})
"""
)


def test_tls_patch_on_fdkits_subclass_runs(engine: FdkitEngine) -> None:
    """A method set on fdkit's own ``SSLProtocol`` subclass (the class fdkit's connections
    have) runs for each record, as one set on asyncio's class does; deleted, the native path
    stands for asyncio's methods again."""
    got = record(fdkit_kind(engine), SUBCLASS_PATCH_PROGRAM)
    if got["native after"] is False:
        assert sys.version_info >= (3, 14)
        pytest.skip("asyncio.sslproto's methods here are not the source fdkit.aio follows")
    assert got == {"patched ran": ["SSLProtocol"], "native after": True}
