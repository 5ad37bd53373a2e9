"""The receive buffer of TLS connections on fdkit.aio: one per thread instead of a zeroed
256 KiB ``bytearray`` per connection (``fdkit.aio._tls._thread_buffer``), against asyncio's own
loop, each program run in a child on both (``helpers/aio_corners.py``).

What a program could see: the memory a connection costs (less), the data (the same, with the
Python read path forced by debug mode in two threads at once, each with its own loop), errors
from asyncio's ``SSLProtocol.__init__`` (the same exception, the same traceback lines), and a
program's patch of that ``__init__`` or of ``SSLProtocol.max_size`` (run as on asyncio's loop).
"""

from __future__ import annotations

import threading

import pytest

from helpers.aio_corners import compare, record
from helpers.aio_parity import ASYNCIO, FdkitEngine, each_engine, fdkit_kind
from test_aio_tls_records import TLS_PRELUDE

MEMORY_PROGRAM = (
    TLS_PRELUDE
    + """
import gc
count = int(ARGS[0])

def rss_kib():
    gc.collect()
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

async def main():
    srv = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0, ssl=SERVER_CTX)
    port = srv.sockets[0].getsockname()[1]
    async def connect():
        return await loop.create_connection(asyncio.Protocol, "127.0.0.1", port, ssl=CLIENT_CTX,
                                            server_hostname="localhost")
    kept = [await connect() for _ in range(20)]  # the first connections' one-time costs
    before = rss_kib()
    kept += [await connect() for _ in range(count)]
    await asyncio.sleep(0.1)  # the server's side of the last connection is up
    out["kib per pair"] = (rss_kib() - before) / count
    for tr, _ in kept:
        tr.abort()
    srv.close()

out = {}
out["run"] = run_outcome(loop, main())
emit(out)
"""
)


@each_engine
def test_tls_memory_per_connection(engine: FdkitEngine) -> None:
    """200 idle TLS connections, both ends in one process: asyncio's loop keeps a 256 KiB
    buffer for each end (about 570 KiB a pair); fdkit.aio, less than a quarter of that."""
    kind = fdkit_kind(engine)
    oracle = record(ASYNCIO, MEMORY_PROGRAM, "200")
    got = record(kind, MEMORY_PROGRAM, "200")
    assert oracle["run"] == got["run"] == "returned"
    assert oracle["kib per pair"] > 400, oracle  # the premise: two 256 KiB buffers a pair
    assert got["kib per pair"] < oracle["kib per pair"] / 4, (got, oracle)


THREADS_PROGRAM = (
    TLS_PRELUDE
    + """
import hashlib, threading
size = int(ARGS[0])

class Echo(asyncio.Protocol):
    def connection_made(self, tr):
        self.tr = tr
    def data_received(self, data):
        self.tr.write(data)

class Sink(asyncio.Protocol):
    def __init__(self, lp, want):
        self.got, self.want = hashlib.sha256(), want
        self.n, self.done = 0, lp.create_future()
    def data_received(self, data):
        self.got.update(data)
        self.n += len(data)
        if self.n >= self.want and not self.done.done():
            self.done.set_result(self.got.hexdigest())

def one(name, results):
    # A loop of this thread's own in debug mode, where asyncio's Python reads into the
    # protocol's buffer (get_buffer, recv_into, buffer_updated), while the other thread does.
    lp = new_loop(KIND)
    lp.set_debug(True)
    lp.slow_callback_duration = 1e9
    payload = hashlib.sha256(name.encode()).digest() * (size // 32)
    async def main():
        srv = await lp.create_server(Echo, "127.0.0.1", 0, ssl=SERVER_CTX)
        port = srv.sockets[0].getsockname()[1]
        sink = Sink(lp, len(payload))
        tr, _ = await lp.create_connection(lambda: sink, "127.0.0.1", port, ssl=CLIENT_CTX,
                                           server_hostname="localhost")
        for i in range(0, len(payload), 65536):
            tr.write(payload[i:i + 65536])
            await asyncio.sleep(0)
        digest = await asyncio.wait_for(sink.done, 20)
        tr.close()
        srv.close()
        await srv.wait_closed()
        return digest == hashlib.sha256(payload).hexdigest()
    try:
        results[name] = lp.run_until_complete(main())
    except BaseException as exc:
        results[name] = err(exc)
    finally:
        lp.close()

results = {}
threads = [threading.Thread(target=one, args=(n, results)) for n in ("a", "b")]
for t in threads:
    t.start()
for t in threads:
    t.join()
emit({"echoed intact": results})
"""
)


@each_engine
def test_tls_buffer_per_thread(engine: FdkitEngine) -> None:
    """Two threads, each running its own loop in debug mode (asyncio's Python read path, which
    reads into the shared buffer), each echo 8 MiB of its own bytes over TLS at the same time:
    each gets back exactly what it sent."""
    oracle, got = compare(engine, THREADS_PROGRAM, str(8 << 20), timeout=60)
    assert oracle == {"echoed intact": {"a": True, "b": True}}
    assert got == oracle


def test_tls_buffer_is_the_threads_own() -> None:
    """The sharing itself, which the echo above catches only when two reads overlap: a thread
    gets the same buffer for a size every time, another thread a buffer of its own."""
    from fdkit.aio._tls import _thread_buffer

    size = 256 * 1024
    mine = _thread_buffer(size)
    assert type(mine) is bytearray
    assert len(mine) == size
    assert _thread_buffer(size) is mine
    assert _thread_buffer(1000) is not mine
    theirs: list[bytearray] = []
    thread = threading.Thread(target=lambda: theirs.append(_thread_buffer(size)))
    thread.start()
    thread.join()
    assert theirs[0] is not mine
    assert len(theirs[0]) == size


ERRORS_PROGRAM = (
    TLS_PRELUDE
    + """
case = ARGS[0]
kwargs = {
    "handshake timeout 0": {"ssl_handshake_timeout": 0},
    "shutdown timeout -1": {"ssl_shutdown_timeout": -1},
    "handshake timeout str": {"ssl_handshake_timeout": "1"},
    "hostname with a leading dot": {"server_hostname": ".localhost"},
}[case]

async def main():
    srv = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0, ssl=SERVER_CTX)
    port = srv.sockets[0].getsockname()[1]
    kw = {"server_hostname": "localhost", **kwargs}
    try:
        await loop.create_connection(asyncio.Protocol, "127.0.0.1", port, ssl=CLIENT_CTX, **kw)
        out["connect"] = "returned"
    except BaseException as exc:
        out["connect"] = err(exc)
        # Every frame's function, and the file, line and text of the one that raised.
        tb = traceback.extract_tb(exc.__traceback__)
        out["functions"] = [f.name for f in tb]
        out["raised at"] = (tb[-1].filename.rsplit("/", 1)[-1], tb[-1].lineno, tb[-1].line)
    srv.close()
    await srv.wait_closed()

out = {}
out["run"] = run_outcome(loop, main())
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize(
    "case",
    [
        "handshake timeout 0",
        "shutdown timeout -1",
        "handshake timeout str",
        "hostname with a leading dot",
    ],
)
def test_tls_protocol_init_errors(engine: FdkitEngine, case: str) -> None:
    """What asyncio's ``SSLProtocol.__init__`` refuses (a timeout not above 0 or not a
    number, a ``server_hostname`` that ``wrap_bio`` refuses): the same exception, through
    the same functions, raised from the same line of asyncio's or ssl's code."""
    oracle, got = compare(engine, ERRORS_PROGRAM, case)
    assert oracle["run"] == "returned"
    assert oracle["connect"] != "returned"  # ValueError, TypeError, or (3.13+) its subclass
    assert oracle["functions"][3:5] == ["_make_ssl_transport", "__init__"]
    assert got == oracle


PATCH_PROGRAM = (
    TLS_PRELUDE
    + """
from asyncio import sslproto
case = ARGS[0]
calls = []
if case == "init":
    asyncio_init = sslproto.SSLProtocol.__init__
    def init(self, *args, **kwargs):
        calls.append(("init", kwargs.get("ssl_handshake_timeout")))
        asyncio_init(self, *args, **kwargs)
        calls.append(("buffer", len(self._ssl_buffer)))
    sslproto.SSLProtocol.__init__ = init
elif case == "max_size":
    sslproto.SSLProtocol.max_size = 1000

class Echo(asyncio.Protocol):
    def connection_made(self, tr):
        self.tr = tr
    def data_received(self, data):
        self.tr.write(data)

class Collect(asyncio.Protocol):
    def __init__(self):
        self.data, self.done = bytearray(), loop.create_future()
    def data_received(self, data):
        self.data += data
        if len(self.data) >= 100000 and not self.done.done():
            self.done.set_result(None)

async def main():
    srv = await loop.create_server(Echo, "127.0.0.1", 0, ssl=SERVER_CTX)
    port = srv.sockets[0].getsockname()[1]
    client = Collect()
    tr, _ = await loop.create_connection(lambda: client, "127.0.0.1", port, ssl=CLIENT_CTX,
                                         server_hostname="localhost", ssl_handshake_timeout=7)
    tr.write(bytes(range(250)) * 400)
    await asyncio.wait_for(client.done, 10)
    out["echoed"] = bytes(client.data) == bytes(range(250)) * 400
    tr.close()
    srv.close()
    await srv.wait_closed()

out = {}
out["run"] = run_outcome(loop, main())
out["calls"] = sorted(set(map(repr, calls)))
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize("case", ["init", "max_size"])
def test_tls_protocol_patched(engine: FdkitEngine, case: str) -> None:
    """A program's patch of asyncio's ``SSLProtocol.__init__`` runs for every connection (its
    buffer then asyncio's own), and a ``max_size`` set on asyncio's class sizes the reads: the
    same calls and the same echo as on asyncio's loop."""
    oracle, got = compare(engine, PATCH_PROGRAM, case)
    assert oracle["run"] == "returned"
    assert oracle["echoed"] is True
    if case == "init":
        assert oracle["calls"] == ["('buffer', 262144)", "('init', 7)", "('init', None)"]
    assert got == oracle
