"""The Atomic::Pipe wire format written out in Python, proven equal to ``AtomicPipe``'s output,
and the size boundaries (0, 1, 4080, 4081, 1 MiB; bursts at the maximum and one over).

The model and the pipe helpers live in ``helpers.wire``, where the other ``test_atomic_pipe_*``
modules take them from: the property tests build chunks for many writer identities with
``chunks``, which is only worth something because the tests below show it produces exactly
what ``AtomicPipe`` writes.
"""

from __future__ import annotations

import os

import pytest

from fdkit.atomic_pipe import PIPE_BUF, AtomicPipe
from helpers import payload
from helpers.wire import MIXED_PAYLOAD_MAX, PAYLOAD_MAX, burst, chunks, decode, in_thread, wire_of

pytestmark = pytest.mark.timeout(30)

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
