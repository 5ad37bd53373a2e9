"""The native module's face: ``ProtocolError`` lives in
``fdkit._fdkit`` and survives pickling; the fd-owning objects share one way to get the fd
(``fileno()``), one form for a pipe's size (a property, still callable), and ``__exit__``
returning None; every duration goes through one reader, with one set of messages.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fdkit import _fdkit, fd
from fdkit.atomic_pipe import AtomicPipe, ProtocolError
from fdkit.uring import Ring, available
from fdkit.zerocopy import Pipe

pytestmark = pytest.mark.timeout(30)

HEADER = struct.Struct("<iiII")  # the wire's chunk header: pid, tid, chunk id, payload size
PAGE = os.sysconf("SC_PAGESIZE")


def broken_stream_error() -> ProtocolError:
    """A real ProtocolError from the reader: a chunk from writer (4242, 7) cut short."""
    r, w = AtomicPipe.pair()
    with r:
        chunk = HEADER.pack(4242, 7, 0, 100) + b"x" * 100
        os.write(w.fileno(), chunk[: HEADER.size + 50])
        w.close()
        with pytest.raises(ProtocolError) as info:
            r.read_message(timeout=5)
    return info.value


# --- ProtocolError ---------------------------------------------------------------------------


def test_protocol_error_lives_in_the_native_module() -> None:
    """Before: ``__module__`` was ``_fdkit``, a module that cannot be imported."""
    assert ProtocolError.__module__ == "fdkit._fdkit"
    assert ProtocolError.__qualname__ == "ProtocolError"
    assert _fdkit.ProtocolError is ProtocolError
    assert issubclass(ProtocolError, ValueError)


def test_protocol_error_pickles_round_trip() -> None:
    """Before: ``pickle.dumps`` raised (``No module named '_fdkit'``), so a ProtocolError could
    not cross to another process (multiprocessing, concurrent.futures)."""
    e = broken_stream_error()
    assert (e.kind, e.writer, e.offset) == ("truncated_chunk", (4242, 7), 0)
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is ProtocolError
    assert back.args == e.args
    assert str(back) == str(e)
    assert (back.writer, back.offset, back.kind, back.fatal) == (
        e.writer,
        e.offset,
        e.kind,
        e.fatal,
    )


def test_protocol_error_unpickles_in_another_process() -> None:
    data = pickle.dumps(broken_stream_error())
    code = (
        "import pickle, sys\n"
        "e = pickle.loads(sys.stdin.buffer.read())\n"
        "print(type(e).__module__, type(e).__name__, e.kind, e.writer, e.offset)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=data, capture_output=True, check=True, timeout=20
    )
    assert out.stdout.decode().split() == [
        "fdkit._fdkit", "ProtocolError", "truncated_chunk", "(4242,", "7)", "0",
    ]  # fmt: skip


# --- __exit__ returns None -------------------------------------------------------------------


def make_ring() -> Ring:
    ok, why = available()
    if not ok:
        pytest.skip(f"io_uring unavailable: {why}")
    return Ring(8)


@pytest.mark.parametrize(
    "make", [Pipe, lambda: AtomicPipe.pair()[0], make_ring], ids=["Pipe", "AtomicPipe", "Ring"]
)
def test_exit_returns_none_and_closes(make: Callable[[], Pipe | AtomicPipe | Ring]) -> None:
    """Before: ``__exit__`` returned False (and the stubs said ``bool``)."""
    obj = make()
    obj.__enter__()
    assert obj.__exit__(None, None, None) is None
    assert obj.closed
    assert obj.__exit__(None, None, None) is None  # closing twice is harmless


def test_exit_lets_the_exception_through() -> None:
    with pytest.raises(KeyError), Pipe() as p:
        raise KeyError("x")
    assert p.closed


# --- one way to get the fd: fileno() ---------------------------------------------------------


def test_ring_fileno_and_its_fd_alias() -> None:
    """Before: Ring had only the ``fd`` property."""
    ring = make_ring()
    n = ring.fileno()
    assert n == ring.fd
    assert os.readlink(f"/proc/self/fd/{n}") == "anon_inode:[io_uring]"  # the ring itself
    ring.close()
    assert ring.fileno() == -1
    assert ring.fd == -1


def test_pipe_fileno_is_the_read_end() -> None:
    """Before: Pipe had only ``fds``."""
    p = Pipe()
    r, w = p.fds
    assert p.fileno() == r != w
    os.write(w, b"ready")
    assert fd.poll([(p.fileno(), fd.POLLIN)], 5) == [(r, fd.POLLIN)]
    p.close()
    assert p.fileno() == -1


def test_atomic_pipe_fileno() -> None:
    """Each end's ``fileno()`` is its own end of the pipe: the writer's can be written, and
    the reader's becomes readable once a message is."""
    r, w = AtomicPipe.pair()
    assert fd.poll([(w.fileno(), fd.POLLOUT)], 0) == [(w.fileno(), fd.POLLOUT)]
    assert fd.poll([(r.fileno(), fd.POLLIN)], 0) == []
    w.write_message(b"hi")
    assert fd.poll([(r.fileno(), fd.POLLIN)], 5) == [(r.fileno(), fd.POLLIN)]
    r.close()
    w.close()
    assert r.fileno() == w.fileno() == -1


# --- one form for a pipe's size: a property (still callable) ---------------------------------


def test_size_is_a_property_on_both_pipes_and_still_callable() -> None:
    """Before: ``Pipe.size`` was a property and ``AtomicPipe.size`` a method."""
    p = Pipe()
    r, w = AtomicPipe.pair()
    with p, r, w:
        assert p.size == r.size == w.size == 16 * PAGE  # the kernel default
        assert p.size() == r.size() == 16 * PAGE  # the older spelling still works
        assert isinstance(r.size, int)
        assert type(r.size()) is int
        assert (
            p.max_size
            == r.max_size
            == r.max_size()
            == int(Path("/proc/sys/fs/pipe-max-size").read_text())
        )
        assert r.resize(2 * PAGE) == r.size == w.size == 2 * PAGE
        assert p.resize(4 * PAGE) == p.size
        assert json.loads(json.dumps({"size": r.size})) == {"size": 2 * PAGE}
        assert r.size + 1 == 2 * PAGE + 1
        assert type(r.size + 1) is int
    with pytest.raises(ValueError, match="closed"):
        _ = r.size
    with pytest.raises(ValueError, match="closed"):
        _ = p.size


def test_pipe_size_pickles_as_an_int() -> None:
    with Pipe() as p:
        assert pickle.loads(pickle.dumps(p.size)) == p.size


# --- one duration reader ---------------------------------------------------------------------


def atomic_read(t: float) -> bool:
    r, w = AtomicPipe.pair()
    with r, w:
        w.write_message(b"hi")
        return r.read_message(timeout=t) == b"hi"


def atomic_flush(t: float) -> bool:
    r, w = AtomicPipe.pair()
    with r, w:
        return w.flush(timeout=t)


def fd_poll(t: float) -> bool:
    r, w = os.pipe()
    try:
        return fd.poll([(w, fd.POLLOUT)], t) == [(w, fd.POLLOUT)]
    finally:
        os.close(r)
        os.close(w)


WAITS = pytest.mark.parametrize(
    "call", [atomic_read, atomic_flush, fd_poll], ids=["read_message", "flush", "poll"]
)


@WAITS
@pytest.mark.parametrize("t", [math.inf, 1e300, 9223372037.0, 0, 0.0])
def test_inf_waits_forever_and_zero_not_at_all(call: Callable[[float], bool], t: float) -> None:
    """``inf`` (anything past ~292 years) means no limit for poll and AtomicPipe, as before;
    with the fd ready, each returns at once."""
    assert call(t) is True


@WAITS
@pytest.mark.parametrize(
    ("t", "message"),
    [
        (-1.0, r"timeout must be >= 0 seconds, got -1.0"),
        (-0.5, r"timeout must be >= 0 seconds, got -0.5"),
        (-math.inf, r"timeout must be >= 0 seconds, got -inf"),
        (math.nan, r"timeout must be a number of seconds, got nan"),
    ],
)
def test_bad_waits_say_why_in_one_voice(
    call: Callable[[float], bool], t: float, message: str
) -> None:
    """Before: three wordings ('a non-negative number or None', 'must not be NaN', '>= 0
    (None waits forever)'); now the one reader's, as Ring.wait and the servers say it."""
    with pytest.raises(ValueError, match=f"^{message}$"):
        call(t)
    ring = make_ring() if available()[0] else None
    if ring is not None:
        with ring, pytest.raises(ValueError, match=f"^{message}$"):
            ring.wait(0, t)
