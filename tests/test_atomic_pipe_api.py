"""``AtomicPipe``'s surface: constructors and modes, fd ownership, closing, misuse errors,
timeouts, iteration, ``eof``, blocking, pipe sizes, and mixed mode's lines and peeks.

Wire-level behaviour (bytes, sizes, vectors) is in ``test_atomic_pipe_wire``/``_vectors``;
broken streams in ``_protocol``; processes, threads and FIFOs in ``_procs``.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fdkit import atomic_pipe
from fdkit.atomic_pipe import PIPE_BUF, AtomicPipe, ProtocolError
from fdkit.types import AtomicPipeMode
from helpers import is_open
from helpers.wire import chunks

pytestmark = pytest.mark.timeout(30)


def pipe_max_size() -> int:
    return int(Path("/proc/sys/fs/pipe-max-size").read_text())


def test_constants_and_error_type() -> None:
    assert PIPE_BUF == AtomicPipe.PIPE_BUF == atomic_pipe.PIPE_BUF == 4096
    assert issubclass(ProtocolError, ValueError)


def test_pair() -> None:
    r, w = AtomicPipe.pair()
    with r, w:
        assert (r.mode, w.mode) == ("r", "w")
        assert r.fileno() != w.fileno()
        assert is_open(r.fileno())
        assert is_open(w.fileno())
        for p in (r, w):
            assert not os.get_inheritable(p.fileno())  # CLOEXEC from the start
            assert p.blocking
            assert os.get_blocking(p.fileno())
            assert not p.closed
            assert not p.mixed_data_mode
            assert p.compression is None
        assert w.pending_output == 0
        w.write_message(b"one")
        assert r.read_message() == b"one"


def test_pair_options() -> None:
    r, w = AtomicPipe.pair(mixed_data_mode=True, compression="zstd", level=1)
    with r, w:
        assert r.mixed_data_mode
        assert w.mixed_data_mode
        assert r.compression == w.compression == "zstd"
        w.write_message(b"m" * 10_000)
        assert w.write_burst(b"b" * 1000) is not None
        os.write(w.fileno(), b"line\n")
        got = [r.get_line_burst_or_data(timeout=5) for _ in range(3)]
        assert got == [("message", b"m" * 10_000), ("burst", b"b" * 1000), ("line", b"line\n")]


@pytest.mark.parametrize(
    ("mode", "end", "expected"), [("r", 0, "r"), ("<&", 0, "r"), ("w", 1, "w"), (">&", 1, "w")]
)
def test_from_fd_modes_take_ownership(mode: AtomicPipeMode, end: int, expected: str) -> None:
    fds = os.pipe2(os.O_CLOEXEC)
    mine = fds[1 - end]
    try:
        p = AtomicPipe.from_fd(mode, fds[end])
        with p:
            assert p.mode == expected
            assert p.fileno() == fds[end]
            if expected == "w":
                p.write_message(b"via from_fd")
                assert os.read(mine, 100)[16:] == b"via from_fd"
            else:
                os.write(mine, chunks(b"abc", 1, 0)[0])
                assert p.read_message() == b"abc"
        assert p.closed
        assert p.fileno() == -1
        assert not is_open(fds[end])  # it owned the fd, so it closed it
    finally:
        os.close(mine)


@pytest.mark.parametrize("mode", ["rw", "", "a", "rb", " r", "+<&", "R", "<", ">"])
def test_from_fd_bad_mode_leaves_the_fd_to_the_caller(mode: str) -> None:
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        with pytest.raises(ValueError, match="mode must be"):
            AtomicPipe.from_fd(mode, r)  # type: ignore[arg-type]  # misuse on purpose
        assert is_open(r)
    finally:
        os.close(w)
        os.close(r)


def test_from_fd_refuses_the_wrong_direction_and_leaves_the_fd() -> None:
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        with pytest.raises(ValueError, match="not open for reading"):
            AtomicPipe.from_fd("r", w)
        with pytest.raises(ValueError, match="not open for writing"):
            AtomicPipe.from_fd(">&", r)
        with pytest.raises(ValueError, match="zstd"):
            AtomicPipe.from_fd("r", r, compression="zstd", level=99)
        assert is_open(r)
        assert is_open(w)
    finally:
        os.close(w)
        os.close(r)


def test_from_fd_bad_fd_is_ebadf() -> None:
    r, w = os.pipe2(os.O_CLOEXEC)
    os.close(r)
    os.close(w)
    modes: tuple[tuple[AtomicPipeMode, int], ...] = (("r", r), ("w", w))
    for mode, n in modes:
        with pytest.raises(OSError, match="Bad file descriptor") as e:
            AtomicPipe.from_fd(mode, n)
        assert e.value.errno == errno.EBADF


def test_context_manager_and_close_twice() -> None:
    r, w = AtomicPipe.pair()
    numbers = (r.fileno(), w.fileno())
    with r as entered, w:
        assert entered is r
    for p, n in zip((r, w), numbers, strict=True):
        assert p.closed
        assert p.fileno() == -1
        assert not is_open(n)
        p.close()  # a second close does nothing (and touches no reused fd number)
        assert p.closed


def test_closing_the_writer_is_eof_for_the_reader() -> None:
    r, w = AtomicPipe.pair()
    with r:
        w.write_message(b"last")
        w.close()
        assert r.read_message(timeout=5) == b"last"
        assert r.read_message(timeout=5) is None
        assert r.eof()


def _writer_calls() -> dict[str, Callable[[AtomicPipe], Any]]:
    return {
        "write_message": lambda p: p.write_message(b"x"),
        "write_messages": lambda p: p.write_messages([b"x"]),
        "write_burst": lambda p: p.write_burst(b"x"),
    }


def _reader_calls() -> dict[str, Callable[[AtomicPipe], Any]]:
    return {
        "read_message": lambda p: p.read_message(timeout=0),
        "read_messages": lambda p: p.read_messages(timeout=0),
        "iter": lambda p: next(iter(p)),
        "get_line_burst_or_data": lambda p: p.get_line_burst_or_data(timeout=0),
    }


def _both_calls() -> dict[str, Callable[[AtomicPipe], Any]]:
    def set_blocking(p: AtomicPipe) -> None:
        p.blocking = False

    return {
        "size": lambda p: p.size(),
        "resize": lambda p: p.resize(8192),
        "resize_or_max": lambda p: p.resize_or_max(8192),
        "blocking": lambda p: p.blocking,
        "set_blocking": set_blocking,
    }


CLOSED_CALLS = {**_writer_calls(), **_reader_calls(), **_both_calls()}


@pytest.mark.parametrize("name", sorted(CLOSED_CALLS))
def test_calls_on_a_closed_pipe_are_value_errors(name: str) -> None:
    r, w = AtomicPipe.pair(mixed_data_mode=name == "get_line_burst_or_data")
    r.close()
    w.close()
    target = r if name in _reader_calls() else w
    with pytest.raises(ValueError, match="closed"):
        CLOSED_CALLS[name](target)
    if name in _both_calls():
        with pytest.raises(ValueError, match="closed"):
            CLOSED_CALLS[name](r)


@pytest.mark.parametrize("name", sorted(_reader_calls()))
def test_reader_calls_on_a_writer_are_value_errors(name: str) -> None:
    r, w = AtomicPipe.pair(mixed_data_mode=name == "get_line_burst_or_data")
    with (
        r,
        w,
        pytest.raises(ValueError, match="this AtomicPipe is the writing end: it cannot read"),
    ):
        _reader_calls()[name](w)


@pytest.mark.parametrize("name", sorted(_writer_calls()))
def test_writer_calls_on_a_reader_are_value_errors(name: str) -> None:
    r, w = AtomicPipe.pair()
    with r, w:
        with pytest.raises(ValueError, match="this AtomicPipe is the reading end: it cannot write"):
            _writer_calls()[name](r)
        w.write_message(b"still fine")
        assert r.read_message(timeout=5) == b"still fine"


def test_read_message_in_mixed_mode_is_a_value_error() -> None:
    r, w = AtomicPipe.pair(mixed_data_mode=True)
    with r, w:
        w.write_message(b"x")
        with pytest.raises(ValueError, match="get_line_burst_or_data"):
            r.read_message()
        assert r.get_line_burst_or_data(timeout=5) == ("message", b"x")


def test_write_takes_bytes_like_only() -> None:
    r, w = AtomicPipe.pair()
    with r, w:
        w.write_message(bytearray(b"ba"))
        w.write_message(memoryview(b"xmvx")[1:3])
        assert w.write_messages(x for x in (b"g1", bytearray(b"g2"))) == 2
        assert w.write_messages([]) == 0
        with pytest.raises(TypeError):
            w.write_message("text")  # type: ignore[arg-type]  # misuse on purpose
        assert r.read_messages(10, timeout=5) == [b"ba", b"mv", b"g1", b"g2"]


@pytest.mark.parametrize("mixed", [False, True], ids=["normal", "mixed"])
@pytest.mark.parametrize("timeout", [0.0, 0.2])
def test_read_timeout_returns_none_in_time(timeout: float, mixed: bool) -> None:
    r, w = AtomicPipe.pair(mixed_data_mode=mixed)
    with r, w:
        calls: list[Callable[[], Any]] = (
            [lambda: r.get_line_burst_or_data(timeout=timeout)]
            if mixed
            else [lambda: r.read_message(timeout=timeout), lambda: r.read_messages(timeout=timeout)]
        )
        for call in calls:
            start = time.monotonic()
            assert call() in (None, [], (None, None))  # mixed: (None, None), as Perl's
            elapsed = time.monotonic() - start
            assert timeout * 0.9 <= elapsed < timeout + 0.5, elapsed
        assert not r.eof()


def test_nonblocking_reader_returns_what_is_ready() -> None:
    r, w = AtomicPipe.pair()
    with r, w:
        r.blocking = False
        assert not r.blocking
        assert not os.get_blocking(r.fileno())
        assert r.read_message() is None
        assert r.read_messages() == []
        os.write(w.fileno(), chunks(b"abcde", 1, 0)[0][:18])  # most of a chunk
        assert r.read_message() is None
        os.write(w.fileno(), b"cde")
        assert r.read_message() == b"abcde"
        r.blocking = True
        assert r.blocking
        assert os.get_blocking(r.fileno())


def test_iteration_and_read_messages_max() -> None:
    r, w = AtomicPipe.pair()
    msgs = [b"m%d" % i for i in range(10)] + [b"big" * 5000]
    with r:
        with w:
            w.write_messages(msgs)
        first = r.read_messages(3)
        assert first == msgs[:3]
        assert r.read_messages(max=2) == msgs[3:5]
        assert not r.eof()
        assert list(r) == msgs[5:]
        assert r.eof()
        assert list(r) == []
        assert r.read_message() is None
        assert r.read_messages() == []


def test_eof_only_once_everything_was_returned() -> None:
    r, w = AtomicPipe.pair()
    with r:
        w.write_messages([b"a", b"b"])
        w.close()
        assert not r.eof()
        assert r.read_message() == b"a"
        assert not r.eof()  # b"b" is still to come
        assert r.read_message() == b"b"
        assert r.read_message() is None
        assert r.eof()


def test_blocking_get_set_both_ends() -> None:
    r, w = AtomicPipe.pair()
    with r, w:
        for p in (r, w):
            p.blocking = False
            assert p.blocking is False
            assert not os.get_blocking(p.fileno())
            p.blocking = True
            assert p.blocking is True
            assert os.get_blocking(p.fileno())


def test_sizes() -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    r, w = AtomicPipe.pair()
    with r, w:
        assert r.size() == w.size() == 16 * page  # the kernel default
        assert r.max_size() == w.max_size() == pipe_max_size()
        assert w.resize(5000) == 2 * page  # the kernel rounds up to pages (a power of two)
        assert r.size() == 2 * page  # one pipe, two ends
        assert r.resize_or_max(pipe_max_size() * 4) == pipe_max_size()
        assert w.size() == pipe_max_size()
        assert w.resize_or_max(1 << 16) == 1 << 16


def test_mixed_mode_lines_peeks_and_final_line() -> None:
    r, w = AtomicPipe.pair()
    with r:
        r.set_mixed_data_mode()
        w.set_mixed_data_mode()
        assert r.mixed_data_mode
        assert w.mixed_data_mode
        os.write(w.fileno(), b"a line\npart")
        assert r.get_line_burst_or_data(peek_line=True, timeout=5) == ("line", b"a line\n")
        assert r.get_line_burst_or_data(peek_line=True, timeout=5) == ("peek", b"part")
        assert r.get_line_burst_or_data(peek_line=True, timeout=5) == ("peek", b"part")
        assert r.get_line_burst_or_data(timeout=0.1) == (None, None)  # a partial line waits
        os.write(w.fileno(), b"ial\nno newline")
        assert r.get_line_burst_or_data(timeout=5) == ("line", b"partial\n")
        w.close()
        assert r.get_line_burst_or_data(timeout=5) == ("line", b"no newline")
        assert r.get_line_burst_or_data(timeout=5) == (None, None)
        assert r.eof()


def test_eof_looks_without_taking_bytes_a_caller_then_polls_for() -> None:
    """eof() with a message waiting says False and leaves it in the pipe: a caller that asks
    eof() and then sleeps in poll(2) on the fd (fdkit.logging's listener, fdkit.aio's
    read_message) must still be woken by those bytes."""
    import select

    r, w = AtomicPipe.pair()
    with r, w:
        w.write_message(b"waiting")
        assert not r.eof()
        p = select.poll()
        p.register(r.fileno(), select.POLLIN)
        assert p.poll(0), "eof() took the bytes out of the pipe"
        assert r.read_message() == b"waiting"
        w.close()
        assert r.eof()
