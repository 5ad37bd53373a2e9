"""Property tests (hypothesis) for the reader and writer, through real pipes.

- Any messages from any set of writers, their chunks interleaved at chunk boundaries in any
  order the kernel may produce (each writer's chunks stay in its own order), decode to each
  message once its last chunk arrives: the same messages per writer, in order.
- The wire model these streams are built with is what ``AtomicPipe`` writes, for any messages.
- Mixed-mode streams of lines, bursts and messages in any order round trip (with and without
  zstd), written by a real ``AtomicPipe`` writer.
- Arbitrary bytes never hang a reader: they decode or raise ``ProtocolError``.

Streams are fed into the pipe in pieces of a drawn size, so the reader meets partial frames.
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fdkit.atomic_pipe import AtomicPipe
from helpers.wire import HEADER, KINDS, Item, burst, chunks, decode, decode_partial, wire_of

pytestmark = pytest.mark.timeout(120)

SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

INT32 = st.integers(-(2**31), 2**31 - 1)
UINT32 = st.integers(0, 2**32 - 1)


def random_bytes(max_size: int) -> st.SearchStrategy[bytes]:
    """Short bytes hypothesis shrinks well, or long ones (many chunks) made from a seed."""
    return st.one_of(
        st.binary(max_size=64),
        st.builds(
            lambda n, seed: random.Random(seed).randbytes(n), st.integers(0, max_size), UINT32
        ),
        st.builds(lambda n, b: bytes([b]) * n, st.integers(4070, 8200), st.integers(0, 255)),
    )


def pieces(stream_len: int) -> st.SearchStrategy[int]:
    """A write size for the feeder; at most ~2,000 writes per stream, to keep examples quick."""
    floor = stream_len // 2000 + 1
    return st.sampled_from([1, 7, 16, 4095, 4096, 4097, 1 << 16]).map(lambda p: max(p, floor))


# --- many writers, interleaved ----------------------------------------------------------------


@settings(SETTINGS, max_examples=300)
@given(
    writers=st.dictionaries(
        st.tuples(INT32, INT32), st.lists(random_bytes(13_000), max_size=6), min_size=1, max_size=5
    ),
    data=st.data(),
)
def test_interleaved_writers_decode_per_writer_in_order(
    writers: dict[tuple[int, int], list[bytes]], data: st.DataObject
) -> None:
    # Each writer's chunk sequence, each chunk paired with the message it completes (if last).
    queues: dict[tuple[int, int], list[tuple[bytes, bytes | None]]] = {}
    for who, msgs in writers.items():
        q = queues.setdefault(who, [])
        for m in msgs:
            cs = chunks(m, *who)
            q.extend((c, m if i == len(cs) - 1 else None) for i, c in enumerate(cs))
    # A kernel schedule: any order of chunks that keeps each writer's own order.
    order = data.draw(st.permutations([who for who, q in queues.items() for _ in q]))
    position = dict.fromkeys(queues, 0)
    stream = b""
    expected: list[Item] = []
    by_writer: dict[tuple[int, int], list[bytes]] = {}
    for who in order:
        chunk, done = queues[who][position[who]]
        position[who] += 1
        stream += chunk
        if done is not None:
            expected.append(("message", done))
            by_writer.setdefault(who, []).append(done)
    got = decode(stream, data.draw(pieces(len(stream))))
    assert got == expected
    # Said the other way round: per writer, exactly its non-empty messages, in order.
    for who, msgs in writers.items():
        assert by_writer.get(who, []) == [m for m in msgs if m]


@settings(SETTINGS, max_examples=100)
@given(msgs=st.lists(random_bytes(9_000), max_size=8), mixed=st.booleans(), batch=st.booleans())
def test_the_model_is_what_atomic_pipe_writes(msgs: list[bytes], mixed: bool, batch: bool) -> None:
    def write(w: AtomicPipe) -> None:
        if batch:
            assert w.write_messages(msgs) == len(msgs)
        else:
            for m in msgs:
                w.write_message(m)

    wire = wire_of(write, mixed_data_mode=mixed)
    assert wire == b"".join(b"".join(chunks(m, os.getpid(), 0, mixed=mixed)) for m in msgs)


# --- mixed mode -----------------------------------------------------------------------------

LINE_BYTES = st.binary(max_size=200).map(lambda b: b.replace(b"\n", b"").replace(b"\x0e", b""))
# Uncompressed, a burst holding 0x0F (or starting with 0x10) cannot be told apart from the
# framing: the wire format has no length for bursts. Compressed bursts can hold anything.
PLAIN_BURST = st.binary(min_size=1, max_size=300).filter(
    lambda b: b"\x0f" not in b and not b.startswith(b"\x10")
) | st.integers(1, 4094).map(lambda n: b"b" * n)
ANY_BURST = st.binary(min_size=1, max_size=300) | st.builds(
    lambda n, seed: random.Random(seed).randbytes(n), st.integers(1, 4200), UINT32
)


def mixed_items(compressed: bool) -> st.SearchStrategy[list[tuple[str, bytes]]]:
    return st.lists(
        st.one_of(
            st.tuples(st.just("line"), LINE_BYTES.map(lambda b: b + b"\n")),
            st.tuples(st.just("burst"), ANY_BURST if compressed else PLAIN_BURST),
            st.tuples(st.just("message"), random_bytes(12_000)),
        ),
        max_size=25,
    )


@settings(SETTINGS, max_examples=200)
@given(compressed=st.booleans(), data=st.data())
def test_mixed_streams_round_trip(compressed: bool, data: st.DataObject) -> None:
    items = data.draw(mixed_items(compressed))
    opts: dict[str, Any] = {"mixed_data_mode": True, "compression": "zstd" if compressed else None}
    expected: list[Item] = []

    def write(w: AtomicPipe) -> None:
        for kind, payload in items:
            if kind == "line":
                os.write(w.fileno(), payload)  # plain writes share the stream
                expected.append((kind, payload))
            elif kind == "burst":
                fits = w.fits_in_burst(payload)
                wrote = w.write_burst(payload)
                assert wrote == fits
                if wrote is not None:
                    expected.append((kind, payload))
                else:
                    assert compressed  # uncompressed bursts were drawn small enough
            else:
                w.write_message(payload)
                if payload or compressed:  # an empty message writes nothing uncompressed
                    expected.append((kind, payload))

    wire = wire_of(write, **opts)
    if not compressed:  # and the bytes are the model's
        model = b"".join(
            p
            if k == "line"
            else burst(p, mixed=True)
            if k == "burst"
            else b"".join(chunks(p, os.getpid(), 0, mixed=True))
            for k, p in items
        )
        assert wire == model
    assert decode(wire, data.draw(pieces(len(wire))), **opts) == expected


# --- garbage --------------------------------------------------------------------------------

GARBAGE = st.lists(
    st.one_of(
        st.binary(max_size=300),
        st.builds(
            HEADER.pack, INT32, INT32, st.integers(0, 3) | UINT32, st.integers(0, 4100) | UINT32
        ),
        st.sampled_from([b"\x0e", b"\x0f", b"\x0e\x10", b"\n", b"\x28\xb5\x2f\xfd"]),
    ),
    max_size=30,
).map(b"".join)


@settings(SETTINGS, max_examples=500)
@given(
    stream=GARBAGE,
    mixed=st.booleans(),
    compression=st.sampled_from([None, "zstd"]),
    data=st.data(),
)
def test_garbage_never_hangs(
    stream: bytes, mixed: bool, compression: str | None, data: st.DataObject
) -> None:
    # decode() fails the test if the reader neither yields nor reaches EOF within its wait.
    items, e = decode_partial(
        stream, data.draw(pieces(len(stream))), mixed_data_mode=mixed, compression=compression
    )
    assert all(kind in {"message", "burst", "line"} for kind, _ in items)
    if e is not None:
        assert e.kind in KINDS
        assert 0 <= e.offset <= len(stream)
        assert e.writer is None or (
            isinstance(e.writer, tuple) and all(isinstance(x, int) for x in e.writer)
        )
