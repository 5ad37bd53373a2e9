"""TLS connections on fdkit.aio in hostile conditions, against asyncio's own loop: as in
``test_aio_tls_records.py``, each scenario is a program run in a child Python on asyncio's
``SelectorEventLoop`` (the oracle) and on ``fdkit.aio.EventLoop`` with each engine, and what the
program observed is compared (``helpers/aio_corners.py``). The peer is the program's own other
end, over real TLS on 127.0.0.1 with certificates of a throwaway CA (``trustme``), or a raw
peer: a blocking socket in a thread of the program, its ``ssl.SSLObject`` and two
``MemoryBIO`` objects driven by hand, which writes exactly the bytes it is told to.

Scenarios:

- the handshake refused: an expired or not yet valid server certificate, and a TLS version
  mismatch (server at most TLS 1.2, client at least TLS 1.3), in and out of debug mode (where
  the server's side of the failure reaches the exception handler);
- a record corrupted mid-stream by the raw peer (its authentication tag, on TLS 1.3 and 1.2,
  its version, or in the same segment as a good record) or an alert sent in plaintext: what
  ``data_received`` got, the exception handler, the exception ``connection_lost`` is given
  (its message, ``_ssl.c`` line included);
- records and close_notify fragmented into 1-byte TCP segments; a record and close_notify in
  one segment; the client's Finished and its first record in one segment;
- a peer that closes TCP without close_notify (with the app reading, and paused), and
  ``ssl_shutdown_timeout`` when the peer never answers the local close_notify;
- ``close()``, ``abort()`` and cancellation during the handshake (the server stalls);
- ``pause_reading()``/``resume_reading()`` around a 10 MiB transfer, and a ``BufferedProtocol``
  reading 5 MiB through a small buffer;
- ``loop.sendfile`` over TLS (asyncio's fallback of writes);
- TLS over a Unix socket, ``connect_accepted_socket(ssl=)``, and ``start_tls`` on the server
  side of a connection upgraded after a plaintext exchange;
- (in ``test_aio_tls_raising.py``) writes in order, writes refused, and the app protocol
  raising ``BaseException``s.

Where an exception's traceback is part of the record, its functions are compared by a test
of their own, next to the one comparing the rest.

And, marked slow, a leak check: 10,000 TLS connections opened and closed on fdkit.aio leave
the fd count and the RSS where they were after the first thousand.
"""

from __future__ import annotations

import re

import pytest

from helpers.aio_corners import compare, record
from helpers.aio_parity import FdkitEngine, each_engine, fdkit_kind
from test_aio_tls_records import TLS_PRELUDE

#: The programs' shared part: ``TLS_PRELUDE`` and the raw peer.
HOSTILE_PRELUDE = (
    TLS_PRELUDE
    + """
import gc, threading, time
from asyncio import sslproto

class Peer:
    # One end of a TLS connection on a blocking socket, its SSLObject driven by hand: what it
    # sends is exactly the bytes it is given, in the segments it is told.
    def __init__(self, sock, ctx, server_side, hostname=None):
        self.sock = sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.inc, self.out, server_side=server_side,
                                server_hostname=hostname)

    def send(self, data, chunk=None, delay=0.0):
        if chunk is None:
            self.sock.sendall(data)
            return
        for i in range(0, len(data), chunk):
            self.sock.sendall(data[i:i + chunk])
            time.sleep(delay)

    def fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("the peer's socket read EOF")
        self.inc.write(data)

    def handshake(self, chunk=None, delay=0.0):
        while True:
            try:
                self.obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.send(self.out.read(), chunk, delay)
                self.fill()
        self.send(self.out.read(), chunk, delay)

    def records(self, data):  # the TLS records `data` is sent as
        self.obj.write(data)
        return self.out.read()

    def read(self):  # the next app data, b"" at close_notify
        while True:
            try:
                return self.obj.read(65536)
            except ssl.SSLWantReadError:
                self.fill()
            except ssl.SSLZeroReturnError:
                return b""

    def rest(self):  # how the connection ends: ["eof", bytes read before] or the error
        n = 0
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return ["eof", n]
                n += len(data)
        except OSError as exc:
            return err(exc)

def serve_peer(body):
    # A listener on 127.0.0.1 whose first connection body(conn, res) handles in a thread.
    lst = socket.create_server(("127.0.0.1", 0))
    port = lst.getsockname()[1]
    res = {}
    def run():
        try:
            with lst:
                conn, _ = lst.accept()
            with conn:
                conn.settimeout(10)
                body(conn, res)
        except BaseException as exc:
            res["peer raised"] = err(exc)
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return port, res, th

def connect_peer(port, body):
    # A connection to 127.0.0.1:port that body(conn, res) handles in a thread.
    res = {}
    def run():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                body(conn, res)
        except BaseException as exc:
            res["peer raised"] = err(exc)
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return res, th

async def until(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("the program waited in vain")
        await asyncio.sleep(0.002)

async def joined(th):
    await until(lambda: not th.is_alive())

async def connect(client, port, **kw):
    return await loop.create_connection(lambda: client, "127.0.0.1", port, ssl=CLIENT_CTX,
                                        server_hostname="localhost", **kw)

class Echo(asyncio.Protocol):
    def connection_made(self, tr):
        self.tr = tr
    def data_received(self, data):
        self.tr.write(data)

def tb_names(exc):
    return [f.name for f in traceback.extract_tb(exc.__traceback__)]
"""
)


HANDSHAKE_PROGRAM = (
    HOSTILE_PRELUDE
    + """
import datetime, logging
case, debug = ARGS[0], ARGS[1] == "debug"
loop.set_debug(debug)
logged = []

class Keep(logging.Handler):  # what asyncio logs with a traceback (debug mode only)
    def emit(self, r):
        if r.exc_info:
            logged.append([masked(r.getMessage()), err(r.exc_info[1])])

logging.getLogger("asyncio").addHandler(Keep(logging.DEBUG))
logging.getLogger("asyncio").setLevel(logging.DEBUG)
now = datetime.datetime.now(datetime.timezone.utc)
day = datetime.timedelta(days=1)
if case in ("expired", "not yet valid"):
    SERVER_CTX = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    when = (now - 10 * day, now - day) if case == "expired" else (now + day, now + 10 * day)
    CA.issue_cert("localhost", "127.0.0.1", not_before=when[0],
                  not_after=when[1]).configure_cert(SERVER_CTX)
elif case == "version":
    SERVER_CTX.maximum_version = ssl.TLSVersion.TLSv1_2
    CLIENT_CTX.minimum_version = ssl.TLSVersion.TLSv1_3
out = {}

async def main():
    made = []
    def server_factory():
        p = Collect()
        made.append(p)
        return p
    srv = await loop.create_server(server_factory, "127.0.0.1", 0, ssl=SERVER_CTX)
    port = srv.sockets[0].getsockname()[1]
    client = Collect()
    try:
        await connect(client, port)
        out["client"] = "connected"
    except BaseException as exc:
        out["client"] = err(exc)
        out["client details"] = [getattr(exc, k, None)
                                 for k in ("library", "reason", "verify_code", "verify_message")]
    if debug:  # the server's side reaches the exception handler
        await until(lambda: handled)
    else:
        await asyncio.sleep(0.1)
    out["client events"] = client.events
    out["server events"] = [p.events for p in made]
    srv.close()
    await srv.wait_closed()

out["run"] = run_outcome(loop, main())
out["handled"] = handled
out["logged"] = logged
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize("case", ["expired", "not yet valid", "version"])
@pytest.mark.parametrize("debug", ["quiet", "debug"])
def test_tls_handshake_refused(engine: FdkitEngine, case: str, debug: str) -> None:
    """An expired or not yet valid server certificate, and a server at most at TLS 1.2 for a
    client at least at TLS 1.3: the client's exception (type, message with ``_ssl.c``'s line,
    its ``library``, ``reason`` and verification code), the server's side (the exception
    handler's context and asyncio's log in debug mode), as on asyncio's loop."""
    oracle, got = compare(engine, HANDSHAKE_PROGRAM, case, debug)
    assert oracle["run"] == "returned"
    assert oracle["server events"] == [[]]  # made, never connected
    if case == "version":  # the server drops the connection without sending its alert
        assert oracle["client"] == ["ConnectionResetError", ""]
    else:
        assert oracle["client"][0] == "SSLCertVerificationError"
        why = "certificate has expired" if case == "expired" else "certificate is not yet valid"
        assert why in oracle["client"][1]
    if debug == "debug":
        context = oracle["handled"][0]
        assert context["message"] == "Error on transport creation for incoming connection"
        if case == "version":
            assert "UNSUPPORTED_PROTOCOL" in context["exception"][1]
    else:
        assert oracle["handled"] == []
    assert got == oracle


PEER_PROGRAM = (
    HOSTILE_PRELUDE
    + """
case = ARGS[0]
out = {}
PIECES = [b"a", b"bc" * 50, bytes(range(256)) * 8]

class Answer(Collect):  # answers what it reads with "got:" and it
    def data_received(self, data):
        super().data_received(data)
        self.events.append(["data", bytes(data).decode()])
        self.transport.write(b"got:" + data)

if case.endswith("TLS 1.2"):
    SERVER_CTX.maximum_version = ssl.TLSVersion.TLSv1_2

def corrupt(conn, res):
    p = Peer(conn, SERVER_CTX, server_side=True)
    p.handshake()
    good = p.records(b"hello")
    bad = bytearray(p.records(b"world"))
    if case == "corrupt version":
        bad[2] ^= 0xFF  # the record header's version, 3.3 as 3.252
    elif case == "plaintext alert":  # a fatal handshake_failure alert, not encrypted
        bad = bytearray(b"\\x15\\x03\\x03\\x00\\x02\\x02\\x28")
    else:
        bad[-1] ^= 1  # the record's authentication tag
    if case == "corrupt, same segment":
        p.send(good + bytes(bad))
    else:
        p.send(good)
        res["answer"] = p.read().decode()
        p.send(bytes(bad))
    res["end"] = p.rest()

def close_notify_with_data(conn, res):
    p = Peer(conn, SERVER_CTX, server_side=True)
    p.handshake()
    p.obj.write(b"last words")
    try:
        p.obj.unwrap()
    except ssl.SSLWantReadError:
        pass
    p.send(p.out.read())  # the record and close_notify, one segment
    res["read"] = p.read().decode()
    res["end"] = p.rest()

def finished_with_data(conn, res):  # the peer is the client here
    p = Peer(conn, CLIENT_CTX, server_side=False, hostname="localhost")
    while True:
        try:
            p.obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            p.send(p.out.read())
            p.fill()
    p.send(p.records(b"first"))  # the client's Finished and a record, one segment
    conn.settimeout(2)  # asyncio reads the record with the Finished at once
    try:
        res["read before second"] = p.read().decode()
    except TimeoutError:
        res["read before second"] = None
    conn.settimeout(10)
    p.send(p.records(b"second"))
    res["read after second"] = p.read().decode()

def fragmented(conn, res):
    p = Peer(conn, SERVER_CTX, server_side=True)
    p.handshake(chunk=1, delay=0.0001)
    for piece in PIECES:
        p.send(p.records(piece), chunk=1, delay=0.0001)
    try:
        p.obj.unwrap()
    except ssl.SSLWantReadError:
        pass
    p.send(p.out.read(), chunk=1, delay=0.0001)  # close_notify, a byte at a time
    res["read"] = p.read().decode()  # the client's close_notify
    res["end"] = p.rest()

def no_close_notify(conn, res):
    p = Peer(conn, SERVER_CTX, server_side=True)
    p.handshake()
    p.send(p.records(b"last words"))
    # the socket closes (FIN), with no close_notify

def silent(conn, res):
    p = Peer(conn, SERVER_CTX, server_side=True)
    p.handshake()
    res["read"] = p.read().decode()  # the client's close_notify, never answered
    res["end"] = p.rest()

BODIES = {"fragmented": fragmented, "no close_notify": no_close_notify,
          "no close_notify, paused": no_close_notify, "shutdown timeout": silent,
          "close_notify with data": close_notify_with_data}

async def main():
    if case == "Finished with data":
        server = Answer()
        srv = await loop.create_server(lambda: server, "127.0.0.1", 0, ssl=SERVER_CTX)
        res, th = connect_peer(srv.sockets[0].getsockname()[1], finished_with_data)
        await asyncio.wait_for(server.done, 10)
        out["events"] = server.events
        await joined(th)
        out["peer"] = res
        srv.close()
        await srv.wait_closed()
        return
    port, res, th = serve_peer(BODIES.get(case, corrupt))
    if case.startswith("corrupt") or case == "plaintext alert":
        client = Answer()
        await connect(client, port)
        await asyncio.wait_for(client.done, 10)
        out["data"] = bytes(client.data).decode()
        out["events"] = client.events
    elif case == "fragmented":
        client = Collect()
        await connect(client, port)
        await asyncio.wait_for(client.done, 10)
        out["same"] = bytes(client.data) == b"".join(PIECES)
        out["events"] = client.events
    elif case.startswith("no close_notify") or case == "close_notify with data":
        client = Collect()
        tr, pr = await connect(client, port)
        if case.endswith("paused"):
            tr.pause_reading()
            # the TCP EOF is seen, the records wait in the incoming BIO
            await until(lambda: tr._ssl_protocol._state.name != "WRAPPED")
            out["while paused"] = [tr._ssl_protocol._state.name, bytes(client.data).decode(),
                                   list(client.events), tr.is_closing()]
            tr.resume_reading()
        await asyncio.wait_for(client.done, 10)
        out["data"] = bytes(client.data).decode()
        out["events"] = client.events
    elif case == "shutdown timeout":
        client = Collect()
        tr, pr = await connect(client, port, ssl_shutdown_timeout=0.3)
        start = time.monotonic()
        tr.close()
        out["closing"] = tr.is_closing()
        await asyncio.wait_for(client.done, 10)
        elapsed = time.monotonic() - start
        out["waited the timeout"] = 0.25 < elapsed < 2.0
        out["events"] = client.events
    await joined(th)
    out["peer"] = res

out["run"] = run_outcome(loop, main())
loop.run_until_complete(asyncio.sleep(0.05))
out["handled"] = handled
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize(
    "case",
    [
        "corrupt tag",
        "corrupt version",
        "corrupt, same segment",
        "corrupt tag, TLS 1.2",
        "plaintext alert",
    ],
)
def test_tls_corrupted_record(engine: FdkitEngine, case: str) -> None:
    """A raw peer completes the handshake, sends a record (and reads the client's answer to
    it), then a record with one byte flipped (its authentication tag, on TLS 1.3 and 1.2, or
    its version), or an alert in plaintext: the same ``data_received`` calls before it (none
    when both records came in one segment: asyncio drops what it read before the error), the
    same exception for ``connection_lost`` (an ``SSLError``, message and ``_ssl.c`` line
    included), nothing for the exception handler, and the same end at the peer."""
    oracle, got = compare(engine, PEER_PROGRAM, case)
    assert oracle["run"] == "returned"
    lost = oracle["events"][-1]
    assert lost[0] == "lost"
    assert lost[1][0] == "SSLError"
    assert "_ssl.c:" in lost[1][1]
    # OpenSSL 3.0 names the record's fault; 3.6 (Debian's, for CPython 3.14 and 3.15) names
    # the record layer's failure that it caused.
    if case == "plaintext alert":
        assert re.search("BAD_RECORD_TYPE|RECORD_LAYER_FAILURE", lost[1][1])
    elif case != "corrupt version":
        assert re.search("BAD_RECORD_MAC|RECORD_LAYER_FAILURE", lost[1][1])
    if case == "corrupt, same segment":
        assert oracle["data"] == ""
    else:
        assert oracle["data"] == "hello"
        assert oracle["peer"]["answer"] == "got:hello"
    assert oracle["handled"] == []
    assert got == oracle


@each_engine
@pytest.mark.parametrize(
    "case",
    [
        "fragmented",
        "close_notify with data",
        "Finished with data",
        "no close_notify",
        "no close_notify, paused",
        "shutdown timeout",
    ],
)
def test_tls_peer_segments_and_endings(engine: FdkitEngine, case: str) -> None:
    """A raw peer sending its handshake, its records and its close_notify one byte per TCP
    segment; its last record and its close_notify in one segment; as the client, its
    Finished and its first record in one segment (answered before it sends another); closing TCP
    after its records, with no close_notify (the app reading, and the app paused until the EOF
    was seen); and never answering the client's close_notify (``ssl_shutdown_timeout=0.3``):
    the same bytes, ``eof_received`` and ``connection_lost`` (``TimeoutError('SSL shutdown
    timed out')`` for the last) as on asyncio's loop."""
    twice = case in ("no close_notify, paused", "Finished with data")
    oracle, got = compare(engine, PEER_PROGRAM, case, twice=twice)
    assert oracle["run"] == "returned"
    assert oracle["handled"] == []
    if case == "fragmented":
        assert oracle["same"] is True
        assert oracle["events"] == ["made", "eof", ["lost", None]]
        assert oracle["peer"] == {"read": "", "end": ["eof", 0]}
    elif case == "Finished with data":
        assert oracle["events"] == [
            "made",
            ["data", "first"],
            ["data", "second"],
            "eof",
            ["lost", None],
        ]
        assert oracle["peer"] == {
            "read before second": "got:first",
            "read after second": "got:second",
        }
    elif case != "shutdown timeout":
        assert oracle["data"] == "last words"
        assert oracle["events"] == ["made", "eof", ["lost", None]]
        if case.endswith("paused"):
            assert oracle["while paused"] == ["FLUSHING", "", ["made"], False]
        if case == "close_notify with data":
            assert oracle["peer"] == {"read": "", "end": ["eof", 0]}
    else:
        assert oracle["events"] == ["made", ["lost", ["TimeoutError", "SSL shutdown timed out"]]]
        assert oracle["waited the timeout"] is True
        assert oracle["peer"] == {"read": "", "end": ["eof", 0]}
    assert got == oracle


INTERRUPTED_PROGRAM = (
    HOSTILE_PRELUDE
    + """
case = ARGS[0]
out = {}
hello = threading.Event()

def stall(conn, res):  # reads the ClientHello, answers nothing
    res["hello"] = conn.recv(65536)[:3].hex()
    hello.set()
    res["end"] = Peer(conn, SERVER_CTX, True).rest()

async def main():
    port, res, th = serve_peer(stall)
    client = Collect()
    if case == "start_tls close":
        tr, _ = await loop.create_connection(lambda: client, "127.0.0.1", port)
        client.events.clear()
        task = loop.create_task(loop.start_tls(tr, client, CLIENT_CTX,
                                               server_hostname="localhost"))
    else:
        task = loop.create_task(connect(client, port))
    await until(hello.is_set)
    protos = [o for o in gc.get_objects() if isinstance(o, sslproto.SSLProtocol)]
    assert len(protos) == 1, protos
    sp = protos[0]
    app = sp._app_transport
    out["state"] = [sp._state.name, app.is_closing()]
    if case.endswith("close"):
        app.close()
    elif case == "abort":
        app.abort()
    else:
        task.cancel()
    out["after"] = [sp._state.name, app.is_closing()]
    try:
        got = await asyncio.wait_for(task, 5)
        if isinstance(got, tuple):
            got = [type(got[0]).__name__, got[0] is app, got[0].is_closing(), got[1] is client]
        else:
            got = [type(got).__name__]
        out["task"] = ["returned", got]
    except BaseException as exc:
        out["task"] = err(exc)
    await joined(th)
    await asyncio.sleep(0.05)
    out["events"] = client.events
    out["state at end"] = sp._state.name
    out["peer"] = res

out["run"] = run_outcome(loop, main())
loop.run_until_complete(asyncio.sleep(0.05))
out["handled"] = handled
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize("case", ["close", "abort", "cancel", "start_tls close"])
def test_tls_interrupted_handshake(engine: FdkitEngine, case: str) -> None:
    """The client's app transport closed or aborted while its handshake waits on a server that
    stalls after the ClientHello (``create_connection(ssl=)``, and ``start_tls`` on a plain
    connection), and ``create_connection`` cancelled there: what the call returns or raises,
    the app protocol's events, the SSL protocol's state, and what the server read, as on
    asyncio's loop."""
    oracle, got = compare(engine, INTERRUPTED_PROGRAM, case)
    assert oracle["run"] == "returned"
    assert oracle["state"] == ["DO_HANDSHAKE", False]
    assert oracle["peer"] == {"hello": "160301", "end": ["eof", 0]}
    if case == "cancel":
        assert oracle["task"] == ["CancelledError", ""]
    elif case == "start_tls close":  # asyncio returns None for the transport
        assert oracle["task"] == ["returned", ["NoneType"]]
    else:  # asyncio returns the closed transport, the protocol never told of a connection
        assert oracle["task"] == ["returned", ["_SSLProtocolTransport", True, True, True]]
        assert oracle["events"] == []
    assert got == oracle


FLOW_PROGRAM = (
    HOSTILE_PRELUDE
    + """
case = ARGS[0]
size = 10 << 20 if case == "pause" else 5 << 20
payload = bytes(range(251)) * (size // 251) + bytes(size % 251)
out = {}

class Sender(asyncio.Protocol):
    def connection_made(self, tr):
        view = memoryview(payload)
        for i in range(0, size, 1 << 20):
            tr.write(bytes(view[i:i + (1 << 20)]))

class Pausing(Collect):  # pauses at every 2 MiB read, resumes 0.1 s later (or once the SSL
    # layer paused the socket transport, where more is to come)
    def __init__(self):
        super().__init__()
        self.next = 2 << 20
        self.seen = []
        self.while_paused = 0
        self.resumed = 0
    def connection_made(self, tr):
        super().connection_made(tr)
        self.seen.append(["made", tr.is_reading()])
    def data_received(self, data):
        if not self.transport.is_reading():
            self.while_paused += 1
        super().data_received(data)
        if len(self.data) >= self.next:
            self.next += 2 << 20
            self.transport.pause_reading()
            self.transport.pause_reading()
            self.seen.append(["paused", self.transport.is_reading()])
            loop.call_later(0.1, self.resume)
    def resume(self):
        tcp = self.transport._ssl_protocol._transport
        if tcp.is_reading() and len(self.data) < size:  # the SSL layer pauses it: wait for it
            loop.call_later(0.02, self.resume)
            return
        self.seen.append(["before resume", self.transport.is_reading(), tcp.is_reading()])
        self.transport.resume_reading()
        self.transport.resume_reading()
        self.seen.append(["resumed", self.transport.is_reading()])
        self.resumed += 1

class Small(asyncio.BufferedProtocol):  # reads through a 1000-byte memoryview
    def __init__(self):
        self.buf = bytearray(1000)
        self.data = bytearray()
        self.sizes = set()
        self.events = []
        self.done = loop.create_future()
    def connection_made(self, tr):
        self.transport = tr
        self.events.append("made")
    def get_buffer(self, n):
        return memoryview(self.buf)
    def buffer_updated(self, n):
        self.sizes.add(n)
        self.data += self.buf[:n]
    def eof_received(self):
        self.events.append("eof")
    def connection_lost(self, exc):
        self.events.append(["lost", err(exc)])
        self.done.set_result(None)

async def main():
    client = Pausing() if case == "pause" else Small()
    srv, tr, pr = await tls_pair(Sender, lambda: client)
    if case == "pause":
        await until(lambda: len(client.data) >= size and client.resumed == 5, 20)
        out["seen"] = client.seen
        out["data_received while paused"] = client.while_paused
    else:
        await until(lambda: len(client.data) >= size, 20)
        out["sizes in 1..1000"] = min(client.sizes) > 0 and max(client.sizes) <= 1000
    out["same"] = bytes(client.data) == payload
    tr.close()
    await asyncio.wait_for(client.done, 10)
    out["events"] = client.events
    srv.close()
    await srv.wait_closed()

out["run"] = run_outcome(loop, main())
out["handled"] = handled
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize("case", ["pause", "buffered"])
def test_tls_app_flow(engine: FdkitEngine, case: str) -> None:
    """``pause_reading()`` (twice) at every 2 MiB of a 10 MiB transfer and ``resume_reading()``
    (twice) 0.1 s later: no ``data_received`` while paused, ``is_reading()`` as asyncio's,
    the socket transport paused by the SSL layer meanwhile, the same bytes; and a
    ``BufferedProtocol`` reading 5 MiB through a 1000-byte memoryview: the same bytes."""
    oracle, got = compare(engine, FLOW_PROGRAM, case, timeout=30)
    assert oracle["run"] == "returned"
    assert oracle["same"] is True
    assert oracle["events"] == ["made", "eof", ["lost", None]]  # the server's close_notify
    if case == "pause":
        assert oracle["data_received while paused"] == 0
        # the socket transport paused by the SSL layer while the app is, but at the last
        # pause: the 10 MiB are all read then
        cycle = [["paused", False], ["before resume", False, False], ["resumed", True]]
        last = [["paused", False], ["before resume", False, True], ["resumed", True]]
        assert oracle["seen"] == [["made", True], *cycle * 4, *last]
    assert got == oracle


SENDFILE_PROGRAM = (
    HOSTILE_PRELUDE
    + """
import tempfile
case = ARGS[0]
size = (3 << 20) + 123
payload = bytes(range(253)) * (size // 253) + bytes(size % 253)
offset, count = (100, 2_000_000) if case == "offset and count" else (0, None)
out = {}

async def main():
    server_side = []
    def make():
        p = Collect()
        server_side.append(p)
        return p
    client = Collect()
    srv, tr, pr = await tls_pair(make, lambda: client)
    with tempfile.TemporaryFile() as f:
        f.write(payload)
        f.seek(0)
        tr.write(b"BEGIN")
        try:
            out["sent"] = await loop.sendfile(tr, f, offset, count,
                                              fallback=case != "no fallback")
        except BaseException as exc:
            out["sent"] = err(exc)
        out["file position"] = f.tell()
    tr.write(b"END")
    out["protocol is the client's"] = tr.get_protocol() is client
    end = offset + (count or size) if case != "no fallback" else 0
    want = b"BEGIN" + payload[offset:end] + b"END"
    await until(lambda: server_side and len(server_side[0].data) >= len(want), 20)
    out["same"] = bytes(server_side[0].data) == want
    tr.close()
    await asyncio.wait_for(client.done, 10)
    await asyncio.wait_for(server_side[0].done, 10)
    out["client events"] = [e for e in client.events if e not in ("pause", "resume")]
    out["server events"] = server_side[0].events
    srv.close()
    await srv.wait_closed()

out["run"] = run_outcome(loop, main())
out["handled"] = handled
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize("case", ["whole file", "offset and count", "no fallback"])
def test_tls_sendfile(engine: FdkitEngine, case: str) -> None:
    """``loop.sendfile`` over TLS, which asyncio does with writes (the app transport has no
    native sendfile), between two native writes: the bytes the server got, in order, the
    count returned, the file's position after; with ``fallback=False``, the error."""
    oracle, got = compare(engine, SENDFILE_PROGRAM, case, timeout=30)
    assert oracle["run"] == "returned"
    assert oracle["same"] is True
    assert oracle["protocol is the client's"] is True
    if case == "whole file":
        assert oracle["sent"] == oracle["file position"] == (3 << 20) + 123
    elif case == "offset and count":
        assert oracle["sent"] == 2_000_000
        assert oracle["file position"] == 2_000_100
    else:
        assert oracle["sent"][0] == "RuntimeError"
    assert got == oracle


TRANSPORTS_PROGRAM = (
    HOSTILE_PRELUDE
    + """
import os, tempfile
case = ARGS[0]
blob = bytes(range(256)) * 1200
out = {}

class Upgrading(asyncio.Protocol):  # plaintext "STARTTLS\\n", answered "OK\\n", then TLS
    def __init__(self):
        self.events = []
        self.done = loop.create_future()
        self.upgraded = False
    def connection_made(self, tr):
        self.tr = tr
        self.events.append("made")
    def data_received(self, data):
        if not self.upgraded:
            self.events.append(["plain", bytes(data).decode()])
            self.tr.write(b"OK\\n")
            loop.create_task(self.upgrade())
        else:
            self.tr.write(data)
    async def upgrade(self):
        self.tr = await loop.start_tls(self.tr, self, SERVER_CTX, server_side=True)
        self.upgraded = True
        self.events.append(["upgraded", type(self.tr).__name__,
                            self.tr.get_extra_info("ssl_object").version()])
    def eof_received(self):
        self.events.append("eof")
    def connection_lost(self, exc):
        self.events.append(["lost", err(exc)])
        self.done.set_result(None)

async def echo_through(tr, client):
    tr.write(b"hello")
    tr.write(blob)
    await until(lambda: len(client.data) >= 5 + len(blob))
    out["echoed"] = bytes(client.data) == b"hello" + blob
    tr.close()
    await asyncio.wait_for(client.done, 10)
    out["client events"] = client.events

async def main():
    client = Collect()
    if case == "unix":
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tls.sock")
            srv = await loop.create_unix_server(Echo, path, ssl=SERVER_CTX)
            tr, _ = await loop.create_unix_connection(lambda: client, path, ssl=CLIENT_CTX,
                                                      server_hostname="localhost")
            out["extra"] = [os.path.basename(tr.get_extra_info("peername")),
                            tr.get_extra_info("sockname"),
                            tr.get_extra_info("socket").family.name,
                            tr.get_extra_info("ssl_object").server_hostname]
            await echo_through(tr, client)
            srv.close()
            await srv.wait_closed()
    elif case == "accepted socket":
        lst = socket.create_server(("127.0.0.1", 0))
        lst.setblocking(False)
        connecting = loop.create_task(connect(client, lst.getsockname()[1]))
        conn, _ = await loop.sock_accept(lst)
        lst.close()
        server_side = Collect()
        (str_, spr), (tr, _) = await asyncio.gather(
            loop.connect_accepted_socket(lambda: server_side, conn, ssl=SERVER_CTX),
            connecting)
        out["server transport"] = [type(str_).__name__, spr is server_side,
                                   str_.get_extra_info("ssl_object").server_side]
        tr.write(b"ping")
        await until(lambda: bytes(server_side.data) == b"ping")
        str_.write(b"pong")
        await until(lambda: bytes(client.data) == b"pong")
        client.data.clear()
        str_.close()
        await asyncio.wait_for(client.done, 10)
        await asyncio.wait_for(server_side.done, 10)
        out["client events"] = client.events
        out["server events"] = server_side.events
    elif case == "server start_tls":
        server_side = []
        def make():
            p = Upgrading()
            server_side.append(p)
            return p
        srv = await loop.create_server(make, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        plain = Collect()
        ptr, _ = await loop.create_connection(lambda: plain, "127.0.0.1", port)
        ptr.write(b"STARTTLS\\n")
        await until(lambda: bytes(plain.data) == b"OK\\n")
        tr = await loop.start_tls(ptr, plain, CLIENT_CTX, server_hostname="localhost")
        await until(lambda: server_side[0].upgraded)  # before then, the server reads plaintext
        plain.data.clear()
        await echo_through(tr, plain)
        await asyncio.wait_for(server_side[0].done, 10)
        out["server events"] = server_side[0].events
        out["plain transport closing"] = ptr.is_closing()
        srv.close()
        await srv.wait_closed()

out["run"] = run_outcome(loop, main())
out["handled"] = handled
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize("case", ["unix", "accepted socket", "server start_tls"])
def test_tls_other_transports(engine: FdkitEngine, case: str) -> None:
    """TLS over a Unix socket (``create_unix_server(ssl=)``, ``create_unix_connection``),
    ``connect_accepted_socket(ssl=)`` on a socket the program accepted, and ``start_tls`` on
    both sides of a connection that exchanged plaintext first: the bytes, the extra info,
    the events of both sides."""
    oracle, got = compare(engine, TRANSPORTS_PROGRAM, case)
    assert oracle["run"] == "returned"
    assert oracle["handled"] == []
    assert oracle["client events"][-1] == ["lost", None]
    if case == "unix":
        assert oracle["extra"] == ["tls.sock", "", "AF_UNIX", "localhost"]
    if case == "server start_tls":
        assert oracle["server events"][:3] == [
            "made",
            ["plain", "STARTTLS\n"],
            ["upgraded", "_SSLProtocolTransport", "TLSv1.3"],
        ]
    assert got == oracle


LEAK_PROGRAM = (
    HOSTILE_PRELUDE
    + """
count, batch = int(ARGS[0]), int(ARGS[1])
server_lost = [0, None]  # how many connections the server lost, and a future for the batch

class Server(Echo):
    def connection_lost(self, exc):
        server_lost[0] += 1
        if server_lost[0] % batch == 0:
            server_lost[1].set_result(None)

class Client(Collect):
    def __init__(self):
        super().__init__()
        self.echoed = loop.create_future()
    def data_received(self, data):
        super().data_received(data)
        if len(self.data) >= 100:
            self.echoed.set_result(None)

def usage():
    gc.collect()
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return len(os.listdir("/proc/self/fd")), rss

async def one(port):
    client = Client()
    tr, _ = await connect(client, port)
    tr.write(b"x" * 100)
    await client.echoed
    tr.close()
    await client.done
    return client.events

async def main():
    srv = await loop.create_server(Server, "127.0.0.1", 0, ssl=SERVER_CTX)
    port = srv.sockets[0].getsockname()[1]
    out = {"events": []}
    for done in range(batch, count + 1, batch):
        server_lost[1] = loop.create_future()
        events = await asyncio.gather(*(one(port) for _ in range(batch)))
        await asyncio.wait_for(server_lost[1], 10)
        out["events"] = sorted({json.dumps(e) for e in events} | set(out["events"]))
        if done == 1000:
            out["baseline"] = usage()
    out["end"] = usage()
    srv.close()
    await srv.wait_closed()
    out["SSL objects left"] = sum(
        isinstance(o, (sslproto.SSLProtocol, sslproto._SSLProtocolTransport, ssl.SSLObject))
        for o in gc.get_objects())
    return out

start = time.monotonic()
out = loop.run_until_complete(main())
out["seconds"] = round(time.monotonic() - start, 1)
out["handled"] = handled
emit(out)
"""
)

#: Connections the leak check opens and closes, in batches of this many at once.
LEAK_COUNT, LEAK_BATCH = 10_000, 100


@pytest.mark.slow
@pytest.mark.timeout(180)
@each_engine
def test_tls_connections_do_not_leak(engine: FdkitEngine) -> None:
    """10,000 TLS connections (100 at once, each a request and its echo, then close_notify
    both ways) opened and closed on fdkit.aio, both ends in one process (about 25 s on an
    idle machine): after them, the process has the fds it had after the first 1,000 and an
    RSS no more than 20 MiB above, and no SSL protocol, app transport or ``SSLObject`` is
    left once they are collected."""
    got = record(fdkit_kind(engine), LEAK_PROGRAM, str(LEAK_COUNT), str(LEAK_BATCH), timeout=150)
    assert got["handled"] == []
    assert got["events"] == ['["made", "eof", ["lost", null]]']
    assert got["SSL objects left"] == 0
    fds, rss = got["baseline"]
    end_fds, end_rss = got["end"]
    assert end_fds == fds, got
    assert end_rss - rss < 20 * 1024, got
