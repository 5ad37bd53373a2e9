"""TLS connections on fdkit.aio whose program writes oddly or raises, against asyncio's own
loop, as in ``test_aio_tls_hostile.py`` (whose prelude and raw peer these programs share):

- writes from ``connection_made`` and several writes (``writelines`` too) per
  ``data_received``, in order; writes after ``close()``; and ``writelines`` of a value
  ``SSLObject.write`` refuses;
- ``data_received`` raising a ``BaseException`` that is not an ``Exception`` (a program's, and
  ``SystemExit`` and ``KeyboardInterrupt``, which leave ``run_until_complete``), and
  ``pause_writing`` raising from within a ``write``.

Where an exception's traceback is part of the record, its functions are compared by a test
of their own, next to the one comparing the rest.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest

from helpers.aio_corners import compare
from helpers.aio_parity import FdkitEngine, each_engine
from test_aio_tls_hostile import HOSTILE_PRELUDE


@functools.cache
def compare_once(engine: FdkitEngine, program: str, *args: str) -> tuple[Any, Any]:
    """:func:`compare`, run once per process for the tests that read one record twice."""
    return compare(engine, program, *args)


def tracebacks_apart(rec: Any) -> tuple[Any, Any]:
    """``(the record without its tracebacks, the tracebacks)``: the exception handler's
    contexts' traceback functions, and those of the record's keys ending in "traceback"."""
    rest = copy.deepcopy(rec)
    tracebacks = {k: rest.pop(k) for k in sorted(rec) if k.endswith("traceback")}
    tracebacks["handled"] = [context.pop("tb") for context in rest["handled"]]
    return rest, tracebacks


WRITES_PROGRAM = (
    HOSTILE_PRELUDE
    + """
import logging
case = ARGS[0]
out = {}
warned = []

class Keep(logging.Handler):
    def emit(self, r):
        warned.append([r.levelname, masked(r.getMessage())])

logging.getLogger("asyncio").addHandler(Keep(logging.WARNING))

class Chatty(asyncio.Protocol):  # writes at once, then three times per data_received
    def __init__(self):
        self.events = []
        self.done = loop.create_future()
    def connection_made(self, tr):
        self.tr = tr
        tr.write(b"hello;")
    def data_received(self, data):
        self.tr.write(b"1:" + data + b";")
        self.tr.writelines([b"2:", bytearray(b"ba"), memoryview(b"mv"), b";"])
        self.tr.write(bytearray(b"3;"))
    def connection_lost(self, exc):
        self.events.append(["lost", err(exc)])
        self.done.set_result(None)

class Odd(Chatty):
    def data_received(self, data):
        try:
            self.tr.writelines([b"a", "str", b"b"])
            self.events.append("writelines returned")
        except BaseException as exc:
            self.events.append(["writelines raised", err(exc)])
        self.tr.write(b"after")
        self.events.append(["closing", self.tr.is_closing()])

class Asker(Collect):  # "ping" once it read "hello;", "pong" once it read the answer
    def data_received(self, data):
        super().data_received(data)
        if bytes(self.data) == b"hello;":
            self.transport.write(b"ping")
        elif bytes(self.data).endswith(b"ping;2:bamv;3;"):
            self.transport.write(b"pong")

async def main():
    chatty = Odd() if case == "writelines refused" else Chatty()
    asker = Asker()
    if case == "client side":
        srv, tr, pr = await tls_pair(lambda: asker, lambda: chatty)
    else:
        srv, tr, pr = await tls_pair(lambda: chatty, lambda: asker)
    if case == "writelines refused":
        await asyncio.wait_for(chatty.done, 10)
        await asyncio.wait_for(asker.done, 10)
    else:
        await until(lambda: bytes(asker.data).endswith(b"pong;2:bamv;3;"))
        asker.transport.close()
        if case == "writes after close":
            for data in [b"late"] * 6 + [bytearray(b"late"), memoryview(b"late")]:
                asker.transport.write(data)
            asker.transport.writelines([b"late", b"late"])
        await asyncio.wait_for(asker.done, 10)
        await asyncio.wait_for(chatty.done, 10)
    out["peer read"] = bytes(asker.data).decode()
    out["peer events"] = asker.events
    out["writer events"] = chatty.events
    out["logged"] = warned
    srv.close()
    await srv.wait_closed()

out["run"] = run_outcome(loop, main())
loop.run_until_complete(asyncio.sleep(0.05))
out["handled"] = handled
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize(
    "case", ["server side", "client side", "writes after close", "writelines refused"]
)
def test_tls_write_order(engine: FdkitEngine, case: str) -> None:
    """An app protocol that writes from ``connection_made`` (before its peer sent anything)
    and writes three times per ``data_received`` (``write`` of ``bytes`` and ``bytearray``,
    ``writelines`` of mixed buffers), on the server side and on the client side: the peer
    reads the bytes in order. And ``writelines`` with a ``str`` among bytes: the exception
    handler's contexts (their traceback functions apart: see the next test), the events of
    both sides, what the peer read. And writes after ``close()``: asyncio's warnings."""
    oracle, got = compare_once(engine, WRITES_PROGRAM, case)
    assert oracle["run"] == "returned"
    if case == "writelines refused":
        # writelines, then write, then _do_read after data_received: each meets the str
        assert [c["message"] for c in oracle["handled"]] == ["Fatal error on SSL protocol"] * 3
        assert oracle["handled"][0]["exception"][0] == "TypeError"
        assert oracle["writer events"][-1][1][0] == "TypeError"
    else:
        assert oracle["peer read"] == "hello;1:ping;2:bamv;3;1:pong;2:bamv;3;"
        assert oracle["handled"] == []
    if case == "writes after close":  # from the fifth write on
        assert oracle["logged"] == [["WARNING", "SSL connection is closed"]] * 4
    assert tracebacks_apart(got)[0] == tracebacks_apart(oracle)[0]
    if case != "writelines refused":  # its tracebacks: the next test
        assert got == oracle


@each_engine
def test_tls_write_refused_traceback(engine: FdkitEngine) -> None:
    """``writelines`` with a ``str``, then ``_do_read`` writing the backlog after
    ``data_received`` returned: the traceback functions of each handler context, the last
    one from ``_do_read`` (where asyncio caught it) to ``SSLObject.write``."""
    oracle, got = compare_once(engine, WRITES_PROGRAM, "writelines refused")
    assert oracle["handled"][-1]["tb"][0] == "_do_read"
    assert tracebacks_apart(got)[1] == tracebacks_apart(oracle)[1]


BASE_EXCEPTION_PROGRAM = (
    HOSTILE_PRELUDE
    + """
case = ARGS[0]
out = {}

class Stop(BaseException):
    pass

EXC = {"Stop": Stop, "SystemExit": SystemExit, "KeyboardInterrupt": KeyboardInterrupt}[case]

class Raises(Collect):
    def data_received(self, data):
        super().data_received(data)
        raise EXC("from data_received")

client = Raises()
state = {}

async def main():
    srv, tr, pr = await tls_pair(Echo, lambda: client)
    state["tr"], state["srv"] = tr, srv
    tr.write(b"ping")
    await asyncio.wait_for(client.done, 10)

try:
    loop.run_until_complete(main())
    out["run"] = "returned"
except BaseException as exc:
    out["run"] = err(exc)
    names = tb_names(exc)
    out["run traceback"] = names[names.index("run_until_complete"):]
out["events"] = list(client.events)
out["data"] = bytes(client.data).decode()
if "tr" in state:
    out["closing"] = state["tr"].is_closing()
    async def finish():
        state["tr"].close()
        await asyncio.wait_for(client.done, 10)
        state["srv"].close()
        await state["srv"].wait_closed()
    out["finish"] = run_outcome(loop, finish())
    out["events after"] = client.events
out["handled"] = handled
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize("case", ["Stop", "SystemExit", "KeyboardInterrupt"])
def test_tls_data_received_base_exception(engine: FdkitEngine, case: str) -> None:
    """``data_received`` raising a ``BaseException`` that asyncio's ``_do_read`` does not catch:
    a program's own (``class Stop(BaseException)``) reaches the socket transport's
    ``_fatal_error`` (the exception handler's message, traceback functions, the app
    protocol's ``connection_lost``); ``SystemExit`` and ``KeyboardInterrupt`` leave
    ``run_until_complete``, the connection up. Their tracebacks apart: see the next test."""
    oracle, got = compare_once(engine, BASE_EXCEPTION_PROGRAM, case)
    if case == "Stop":
        assert oracle["run"] == "returned"
        assert oracle["handled"][0]["message"] == (
            "Fatal error: protocol.buffer_updated() call failed."
        )
        assert oracle["handled"][0]["exception"] == ["Stop", "from data_received"]
        assert oracle["events"][-1] == ["lost", ["Stop", "from data_received"]]
    else:
        assert oracle["run"] == [case, "from data_received"]
        assert oracle["handled"] == []
    assert tracebacks_apart(got)[0] == tracebacks_apart(oracle)[0]


@each_engine
@pytest.mark.parametrize("case", ["Stop", "SystemExit", "KeyboardInterrupt"])
def test_tls_data_received_base_exception_traceback(engine: FdkitEngine, case: str) -> None:
    """The traceback functions of the ``BaseException`` of the previous test: in the exception
    handler's context (``Stop``) or out of ``run_until_complete`` (through the loop's frames),
    asyncio's methods from where asyncio caught it, or from the loop, to ``data_received``."""
    oracle, got = compare_once(engine, BASE_EXCEPTION_PROGRAM, case)
    tb = oracle["handled"][0]["tb"] if case == "Stop" else oracle["run traceback"]
    assert tb[-4:] == ["buffer_updated", "_do_read", "_do_read__copied", "data_received"]
    assert tracebacks_apart(got)[1] == tracebacks_apart(oracle)[1]


PAUSE_WRITING_PROGRAM = (
    HOSTILE_PRELUDE
    + """
case = ARGS[0]
out = {}

class Stop(BaseException):
    pass

EXC = {"Stop": Stop, "LookupError": LookupError, "KeyboardInterrupt": KeyboardInterrupt,
       "SystemExit": SystemExit}[case]

class Raises(Collect):
    def pause_writing(self):
        super().pause_writing()
        raise EXC("from pause_writing")

servers = []

class Lazy(Collect):  # reads nothing: the client's writes fill the socket's buffers
    def connection_made(self, tr):
        super().connection_made(tr)
        servers.append(self)
        tr.pause_reading()

async def main():
    client = Raises()
    srv, tr, pr = await tls_pair(Lazy, lambda: client)
    tr.set_write_buffer_limits(high=1000)
    try:
        for i in range(20):
            tr.write(b"x" * (1 << 20))
        out["write"] = "returned"
    except BaseException as exc:
        out["write"] = err(exc)  # at the write the kernel's buffers could not take
        out["write traceback"] = tb_names(exc)
    out["events"] = list(client.events)
    out["write buffer size over 1 MiB"] = tr.get_write_buffer_size() > 1 << 20
    tr.abort()
    await asyncio.wait_for(client.done, 10)
    out["events after"] = client.events
    # Paused, the server's side never sees the abort: from 3.12 ``wait_closed`` waits for it.
    for server in servers:
        server.transport.abort()
        await asyncio.wait_for(server.done, 10)
    srv.close()
    await srv.wait_closed()

out["run"] = run_outcome(loop, main())
out["handled"] = handled
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize("case", ["LookupError", "Stop", "SystemExit", "KeyboardInterrupt"])
def test_tls_pause_writing_raises(engine: FdkitEngine, case: str) -> None:
    """The app protocol's ``pause_writing`` raising, called from a native ``write`` of 1 MiB
    (the peer reads nothing): an ``Exception`` or a program's ``BaseException`` reaches the
    exception handler (``protocol.pause_writing() failed``) and the writes go on;
    ``SystemExit`` and ``KeyboardInterrupt`` leave ``write`` at the same call. Their
    tracebacks apart: see the next test."""
    oracle, got = compare_once(engine, PAUSE_WRITING_PROGRAM, case)
    assert oracle["run"] == "returned"
    assert oracle["events"] == ["made", "pause"]
    if case in ("LookupError", "Stop"):
        assert oracle["write"] == "returned"
        assert oracle["handled"][0]["message"] == "protocol.pause_writing() failed"
        assert oracle["handled"][0]["exception"] == [case, "from pause_writing"]
    else:
        assert oracle["write"] == [case, "from pause_writing"]
        assert oracle["handled"] == []
    assert tracebacks_apart(got)[0] == tracebacks_apart(oracle)[0]


@each_engine
@pytest.mark.parametrize(
    "case",
    [
        "LookupError",
        "Stop",
        "SystemExit",
        "KeyboardInterrupt",
    ],
)
def test_tls_pause_writing_raises_traceback(engine: FdkitEngine, case: str) -> None:
    """The traceback functions of what ``pause_writing`` raised in the previous test: from
    ``_control_app_writing`` in the handler's context, and from the program's coroutine
    through asyncio's ``write``, ``_write_appdata``, ``_do_write`` and ``_process_outgoing``
    for what left ``write``."""
    oracle, got = compare_once(engine, PAUSE_WRITING_PROGRAM, case)
    if case in ("SystemExit", "KeyboardInterrupt"):
        assert oracle["write traceback"] == [
            "main",
            "write",
            "_write_appdata",
            "_do_write",
            "_process_outgoing",
            "_control_app_writing",
            "pause_writing",
        ]
    else:
        assert oracle["handled"][0]["tb"] == ["_control_app_writing", "pause_writing"]
    assert tracebacks_apart(got)[1] == tracebacks_apart(oracle)[1]
