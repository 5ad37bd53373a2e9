"""The Atomic::Pipe wire format written out in Python (the model), and helpers that run
``AtomicPipe`` readers and writers on real pipes.

``test_atomic_pipe_wire`` proves the model equal to what ``AtomicPipe`` writes; the other
``test_atomic_pipe_*`` modules build streams with it (the property tests build chunks for many
writer identities with :func:`chunks`, which is only worth something because of that proof).
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable
from typing import Any

from fdkit.atomic_pipe import PIPE_BUF, AtomicPipe, ProtocolError
from helpers import Feeder, Sink

HEADER = struct.Struct("<iiII")  # pid, tid, chunk id (counts down to 0), payload size
PAYLOAD_MAX = PIPE_BUF - HEADER.size  # 4080
MIXED_PAYLOAD_MAX = PIPE_BUF - HEADER.size - 3  # 4077: 0x0E 0x10 before, 0x0F after
FRAME_START, MESSAGE_MARK, FRAME_END = b"\x0e", b"\x10", b"\x0f"

#: Every ``ProtocolError.kind`` the reader reports.
KINDS = {
    "truncated_chunk",
    "incomplete_message",
    "chunk_too_large",
    "chunk_out_of_order",
    "truncated_burst",
    "missing_frame_end",
    "bad_burst",
    "bad_compressed_data",
}

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
        while (item := reader.get_line_burst_or_data(timeout=wait))[0] is not None:
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
