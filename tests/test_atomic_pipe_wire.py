"""The Atomic::Pipe wire format written out in Python, proven equal to ``AtomicPipe``'s output,
and the size boundaries (0, 1, 4080, 4081, 1 MiB; bursts at the maximum and one over).

The other ``test_atomic_pipe_*`` modules import the model and the pipe helpers from here: the
property tests build chunks for many writer identities with :func:`chunks`, which is only worth
something because the tests below show it produces exactly what ``AtomicPipe`` writes.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable
from typing import Any

import pytest

from conftest import Feeder, Sink, payload
from fdkit.atomic_pipe import PIPE_BUF, AtomicPipe, ProtocolError

pytestmark = pytest.mark.timeout(30)

HEADER = struct.Struct("<iiII")  # pid, tid, chunk id (counts down to 0), payload size
PAYLOAD_MAX = PIPE_BUF - HEADER.size  # 4080
MIXED_PAYLOAD_MAX = PIPE_BUF - HEADER.size - 3  # 4077: 0x0E 0x10 before, 0x0F after
FRAME_START, MESSAGE_MARK, FRAME_END = b"\x0e", b"\x10", b"\x0f"

Item = tuple[str, bytes]  # ('message' | 'burst' | 'line', data), as the mixed reader says


# --- the model ------------------------------------------------------------------------------


def chunks(message: bytes, pid: int, tid: int, *, mixed: bool = False) -> list[bytes]:
    """The chunks (one atomic write each) a writer (pid, tid) sends for ``message``."""
    size = MIXED_PAYLOAD_MAX if mixed else PAYLOAD_MAX
    parts = [message[i : i + size] for i in range(0, len(message), size)]
    out = []
    for i, part in enumerate(parts):
        chunk = HEADER.pack(pid, tid, len(parts) - 1 - i, len(part)) + part
        out.append(FRAME_START + MESSAGE_MARK + chunk + FRAME_END if mixed else chunk)
    return out


def burst(data: bytes, *, mixed: bool = False) -> bytes:
    return FRAME_START + data + FRAME_END if mixed else data


def header_offsets(stream: bytes, *, mixed: bool = False) -> list[int]:
    """Where the 16-byte headers sit in a well-formed stream (a known-good one: the vectors).

    Normal mode is chunks back to back; mixed mode walks frames, bursts and lines.
    """
    offsets, pos = [], 0
    while pos < len(stream):
        if not mixed:
            offsets.append(pos)
            pos += HEADER.size + HEADER.unpack_from(stream, pos)[3]
        elif stream[pos : pos + 2] == FRAME_START + MESSAGE_MARK:
            offsets.append(pos + 2)
            pos += 2 + HEADER.size + HEADER.unpack_from(stream, pos + 2)[3]
            assert stream[pos : pos + 1] == FRAME_END, f"no frame end at {pos}"
            pos += 1
        elif stream[pos : pos + 1] == FRAME_START:
            pos = stream.index(FRAME_END, pos) + 1
        else:
            pos = stream.index(b"\n", pos) + 1
    assert pos == len(stream)
    return offsets


def with_writer(stream: bytes, pid: int, tid: int, *, mixed: bool = False) -> bytes:
    """``stream`` with every header's pid/tid replaced: a vector as this process would write it."""
    out = bytearray(stream)
    for at in header_offsets(stream, mixed=mixed):
        struct.pack_into("<ii", out, at, pid, tid)
    return bytes(out)


def writers_of(stream: bytes, *, mixed: bool = False) -> list[tuple[int, int]]:
    """The (pid, tid) of every chunk in a stream, in order."""
    return [HEADER.unpack_from(stream, at)[:2] for at in header_offsets(stream, mixed=mixed)]


# --- real pipes -----------------------------------------------------------------------------


def wire_of(write: Callable[[AtomicPipe], object], **options: Any) -> bytes:
    """The bytes ``write(writer)`` puts on a real pipe (drained by a thread as they come)."""
    r, w = os.pipe2(os.O_CLOEXEC)
    sink = Sink(r, keep=True)
    sink.start()
    try:
        with AtomicPipe.from_fd("w", w, **options) as writer:
            write(writer)
    finally:
        try:
            sink.finish()
        finally:
            os.close(r)
    return bytes(sink.kept)


def read_all(reader: AtomicPipe, wait: float = 10.0, into: list[Item] | None = None) -> list[Item]:
    """Everything a reader yields until EOF, as (kind, data), appended to ``into`` as it comes
    (so a caller catching ProtocolError still sees what came before). Waiting ``wait`` seconds
    for the next item without EOF fails the test (a reader that hangs is a bug)."""
    out: list[Item] = [] if into is None else into
    if reader.mixed_data_mode:
        while (item := reader.get_line_burst_or_data(timeout=wait)) is not None:
            out.append(item)
    else:
        while batch := reader.read_messages(timeout=wait):
            out.extend(("message", m) for m in batch)
    assert reader.eof(), f"no EOF within {wait} s after {len(out)} items"
    return out


def decode(
    stream: bytes, piece: int = 1 << 16, into: list[Item] | None = None, **options: Any
) -> list[Item]:
    """What a reader with ``options`` makes of ``stream``, fed into a real pipe ``piece`` bytes
    per write by a thread (so the reader sees partial frames), then EOF."""
    r, w = os.pipe2(os.O_CLOEXEC)
    feeder = Feeder(w, stream, then=lambda: os.close(w), chunk=piece)
    try:
        reader = AtomicPipe.from_fd("r", r, **options)
    except BaseException:
        os.close(w)
        raise
    with reader:
        feeder.start()
        try:
            return read_all(reader, into=into)
        finally:
            reader.close()  # unblocks a feeder stuck on a full pipe if the reader gave up
            feeder.join(10)
            assert not feeder.is_alive()


def decode_partial(
    stream: bytes, piece: int = 1 << 16, **options: Any
) -> tuple[list[Item], ProtocolError | None]:
    """Like :func:`decode`, for broken streams: (what came out, the ProtocolError or None)."""
    items: list[Item] = []
    try:
        decode(stream, piece, into=items, **options)
    except ProtocolError as e:
        return items, e
    return items, None


def in_thread(call: Callable[[], Any]) -> tuple[Any, int]:
    """Runs ``call`` on a new thread: (its result, the thread's kernel id)."""
    box: dict[str, Any] = {}

    def run() -> None:
        box["tid"] = threading.get_native_id()
        box["result"] = call()

    t = threading.Thread(target=run)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the writer thread failed or hung"
    assert "result" in box, "the writer thread failed or hung"
    return box["result"], box["tid"]


# --- the model is what AtomicPipe writes ----------------------------------------------------

MESSAGES = [b"", b"x", b"Hello", payload(4079), payload(4080), payload(4081), payload(10_000)]


@pytest.mark.parametrize("mixed", [False, True], ids=["normal", "mixed"])
@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: f"{len(m)}B")
def test_model_matches_write_message(msg: bytes, mixed: bool) -> None:
    wire = wire_of(lambda w: w.write_message(msg), mixed_data_mode=mixed)
    assert wire == b"".join(chunks(msg, os.getpid(), 0, mixed=mixed))


@pytest.mark.parametrize("mixed", [False, True], ids=["normal", "mixed"])
def test_model_matches_write_messages_batches(mixed: bool) -> None:
    # Batching puts several messages' chunks in one write(2); the bytes stay the same.
    msgs = [payload(n, seed=n) for n in (0, 1, 100, 2000, 4080, 3, 9000, 17, 17, 0, 4500)] * 5
    wire = wire_of(lambda w: w.write_messages(iter(msgs)), mixed_data_mode=mixed)
    assert wire == b"".join(b"".join(chunks(m, os.getpid(), 0, mixed=mixed)) for m in msgs)


def test_model_matches_a_threads_writer() -> None:
    wire, tid = in_thread(lambda: wire_of(lambda w: w.write_message(payload(5000))))
    assert tid not in (0, os.getpid())
    assert wire == b"".join(chunks(payload(5000), os.getpid(), tid))


def test_model_matches_mixed_burst_and_lines() -> None:
    def write(w: AtomicPipe) -> None:
        os.write(w.fileno(), b"plain\n")
        assert w.write_burst(b"abc") == 5
        w.write_message(b"M")

    wire = wire_of(write, mixed_data_mode=True)
    assert (
        wire == b"plain\n" + burst(b"abc", mixed=True) + chunks(b"M", os.getpid(), 0, mixed=True)[0]
    )


# --- boundaries -----------------------------------------------------------------------------


@pytest.mark.parametrize("mixed", [False, True], ids=["normal", "mixed"])
@pytest.mark.parametrize("n", [0, 1, 4077, 4078, 4080, 4081, 8160, 8161, 1 << 20])
def test_message_sizes_round_trip(n: int, mixed: bool) -> None:
    msg = payload(n, seed=3)
    wire = wire_of(lambda w: w.write_message(msg), mixed_data_mode=mixed)
    per_chunk = MIXED_PAYLOAD_MAX if mixed else PAYLOAD_MAX
    count = -(-n // per_chunk)  # an empty message writes nothing at all
    assert len(wire) == n + count * (PIPE_BUF - per_chunk)
    assert decode(wire, mixed_data_mode=mixed) == ([("message", msg)] if n else [])


def test_wire_sizes_at_the_chunk_edge() -> None:
    assert len(wire_of(lambda w: w.write_message(b"x" * 4080))) == 4096
    assert len(wire_of(lambda w: w.write_message(b"x" * 4081))) == 4096 + 17
    assert len(wire_of(lambda w: w.write_message(b"x" * 4077), mixed_data_mode=True)) == 4096
    assert len(wire_of(lambda w: w.write_message(b"x" * 4078), mixed_data_mode=True)) == 4116


@pytest.mark.parametrize(
    ("mixed", "biggest"), [(False, PIPE_BUF), (True, PIPE_BUF - 2)], ids=["normal", "mixed"]
)
def test_burst_at_the_maximum_and_one_over(mixed: bool, biggest: int) -> None:
    # Mixed-mode bursts cannot hold the frame-end byte (the writer refuses, see below).
    data = payload(biggest + 1, seed=1).replace(b"\x0f", b"\x01").replace(b"\x10", b"\x02")
    fits, over = data[:biggest], data
    results: list[int | None] = []

    def write(w: AtomicPipe) -> None:
        assert w.fits_in_burst(fits) == PIPE_BUF
        assert w.fits_in_burst(over) is None
        results.append(w.write_burst(over))  # too big: nothing written
        results.append(w.write_burst(fits))
        results.append(w.write_burst(b"z"))

    wire = wire_of(write, mixed_data_mode=mixed)
    assert results == [None, PIPE_BUF, 3 if mixed else 1]
    assert wire == burst(fits, mixed=mixed) + burst(b"z", mixed=mixed)
    if mixed:
        assert decode(wire, mixed_data_mode=True) == [("burst", fits), ("burst", b"z")]


def test_burst_accepts_any_bytes_like() -> None:
    data = payload(100)
    wire = wire_of(lambda w: [w.write_burst(x) for x in (bytearray(data), memoryview(data), data)])
    assert wire == data * 3


@pytest.mark.parametrize("data", [b"a\x0fb", b"\x0f", b"\x10starts like a message"])
def test_mixed_burst_refuses_what_a_reader_would_misread(data: bytes) -> None:
    # Not in Perl (whose reader then cuts the burst short or misreads it as a message): an
    # uncompressed mixed-mode burst has no length, so such data cannot travel intact.
    def write(w: AtomicPipe) -> None:
        with pytest.raises(ValueError, match="burst data"):
            w.write_burst(data)

    assert wire_of(write, mixed_data_mode=True) == b""
    assert wire_of(lambda w: w.write_burst(data)) == data  # normal mode: no framing, no issue
