"""Broken streams: where Perl's reader hangs, spins or merges silently, ``AtomicPipe`` raises a
``ProtocolError`` (a ``ValueError``) naming the writer and the byte offset, and only after
every complete message was returned. Waiting on a partial frame costs no CPU.

Streams are built with the wire model (``helpers.wire.chunks``) and fed into real
pipes, one byte per write as well as all at once.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from fdkit.atomic_pipe import AtomicPipe, ProtocolError
from helpers.wire import HEADER, KINDS, burst, chunks, decode_partial

pytestmark = pytest.mark.timeout(30)

A, B = (4242, 0), (4343, 77)  # two writer identities
PIECES = pytest.mark.parametrize("piece", [1, 1 << 16], ids=["1B-writes", "64K-writes"])


def check_error(
    e: ProtocolError | None, kind: str, writer: tuple[int, int] | None, offset: int
) -> None:
    assert e is not None, "the broken stream raised nothing"
    assert isinstance(e, ValueError)
    assert (e.kind, e.writer, e.offset) == (kind, writer, offset), str(e)
    assert str(offset) in str(e)
    if writer is not None:
        assert str(writer[0]) in str(e)


@PIECES
def test_truncated_chunk_after_complete_messages(piece: int) -> None:
    done = chunks(b"Hello", *A)[0] + chunks(b"other writer", *B)[0]
    cut = chunks(b"x" * 100, *B)[0][: HEADER.size + 50]
    items, e = decode_partial(done + cut, piece)
    assert items == [("message", b"Hello"), ("message", b"other writer")]
    check_error(e, "truncated_chunk", B, len(done))


@PIECES
@pytest.mark.parametrize(("cut", "writer"), [(6, None), (8, B), (15, B)])
def test_truncated_header(piece: int, cut: int, writer: tuple[int, int] | None) -> None:
    # pid and tid are the header's first 8 bytes: named as soon as they are there.
    done = chunks(b"Hello", *A)[0]
    items, e = decode_partial(done + chunks(b"x", *B)[0][:cut], piece)
    assert items == [("message", b"Hello")]
    check_error(e, "truncated_chunk", writer, len(done))


@PIECES
def test_incomplete_message_after_later_complete_ones(piece: int) -> None:
    first, _last = chunks(b"a" * 5000, *A)
    after = chunks(b"after", *B)[0] + chunks(b"more", *B)[0]
    items, e = decode_partial(first + after, piece)
    assert items == [("message", b"after"), ("message", b"more")]
    check_error(e, "incomplete_message", A, 0)


def test_two_interleaved_messages_from_one_writer_are_not_merged() -> None:
    # Perl appends the second message's chunk to the first and yields garbage.
    one = chunks(b"1" * 5000, *A)[0]
    two = chunks(b"2" * 5000, *A)[0]
    ok = chunks(b"ok", *B)[0]
    items, e = decode_partial(ok + one + two)
    assert items == [("message", b"ok")]
    check_error(e, "chunk_out_of_order", A, len(ok) + len(one))


def test_chunk_too_large_is_reported_without_waiting_for_it() -> None:
    # The header claims more than a chunk can hold: no use waiting for the payload.
    r, w = AtomicPipe.pair()
    with r, w:
        os.write(w.fileno(), chunks(b"fine", *A)[0] + HEADER.pack(*B, 0, 5000) + b"x" * 100)
        assert r.read_message(timeout=5) == b"fine"
        start = time.monotonic()
        with pytest.raises(ProtocolError) as e:
            r.read_message(timeout=5)
        assert time.monotonic() - start < 2
        check_error(e.value, "chunk_too_large", B, 20)


def test_all_ones_garbage() -> None:
    items, e = decode_partial(b"\xff" * 100)
    assert items == []
    check_error(e, "chunk_too_large", (-1, -1), 0)


@pytest.mark.parametrize("mixed", [False, True], ids=["normal", "mixed"])
def test_bad_compressed_data_names_the_writer(mixed: bool) -> None:
    stream = b"".join(chunks(b"not a zstd frame", *A, mixed=mixed))
    items, e = decode_partial(stream, compression="zstd", mixed_data_mode=mixed)
    assert items == []
    assert e is not None
    assert e.kind == "bad_compressed_data"
    assert e.writer == A


# --- mixed mode -----------------------------------------------------------------------------


@PIECES
def test_mixed_truncated_message_frame(piece: int) -> None:
    head = b"a line\n" + burst(b"B", mixed=True)
    frame = chunks(b"y" * 300, *A, mixed=True)[0]
    items, e = decode_partial(head + frame[:100], piece, mixed_data_mode=True)
    assert items == [("line", b"a line\n"), ("burst", b"B")]
    assert e is not None
    assert e.kind == "truncated_chunk"
    assert e.writer == A
    assert len(head) <= e.offset <= len(head) + 100


@PIECES
def test_mixed_unterminated_burst(piece: int) -> None:
    head = b"a line\n"
    items, e = decode_partial(head + b"\x0eburst with no end", piece, mixed_data_mode=True)
    assert items == [("line", b"a line\n")]
    assert e is not None
    assert e.kind in {"truncated_burst", "missing_frame_end"}
    assert e.writer is None
    assert len(head) <= e.offset <= len(head) + 18


def test_mixed_message_frame_without_its_end_byte() -> None:
    frame = chunks(b"payload", *A, mixed=True)[0]
    items, e = decode_partial(
        frame[:-1] + b"X\n" + chunks(b"ok", *B, mixed=True)[0], mixed_data_mode=True
    )
    assert items == []
    assert e is not None
    assert e.kind == "missing_frame_end"
    assert e.writer == A
    assert e.offset in (0, len(frame) - 1)


# --- garbage never hangs or spins -----------------------------------------------------------


@pytest.mark.parametrize("mixed", [False, True], ids=["normal", "mixed"])
@pytest.mark.parametrize("seed", range(20))
def test_random_garbage_decodes_or_raises(seed: int, mixed: bool) -> None:
    rnd = random.Random(seed)
    stream = rnd.randbytes(rnd.randrange(1, 20_000))
    if seed % 2:  # sprinkle the frame bytes, so mixed mode sees frames start and end
        stream = bytes(rnd.choice(b"\x0e\x0f\x10\n") if rnd.random() < 0.05 else c for c in stream)
    start = time.monotonic()
    items, e = decode_partial(stream, rnd.choice([1, 100, 1 << 16]), mixed_data_mode=mixed)
    assert time.monotonic() - start < 10
    if e is not None:
        assert e.kind in KINDS
        assert 0 <= e.offset <= len(stream)
    assert all(kind in {"message", "burst", "line"} for kind, _ in items)


@pytest.mark.serial
@pytest.mark.parametrize(
    ("mixed", "partial"),
    [
        (False, chunks(b"z" * 100, *A)[0][:60]),
        (False, HEADER.pack(*A, 0, 10)[:7]),
        (True, chunks(b"z" * 100, *A, mixed=True)[0][:60]),
        (True, b"\x0e\x10" + HEADER.pack(*A, 0, 10)[:5]),
        (True, b"\x0ean unfinished burst"),
        (True, b"an unfinished line"),
    ],
    ids=["chunk", "header", "mixed-chunk", "mixed-header", "mixed-burst", "line"],
)
def test_waiting_on_a_partial_frame_polls_not_spins(mixed: bool, partial: bytes) -> None:
    # The writer is still open, so the reader must wait for the rest: in poll(2), not a loop.
    r, w = AtomicPipe.pair(mixed_data_mode=mixed)
    with r, w:
        os.write(w.fileno(), partial)
        cpu, wall = time.process_time(), time.monotonic()
        got = r.get_line_burst_or_data(timeout=0.5) if mixed else r.read_message(timeout=0.5)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        assert got in (None, (None, None))
        assert 0.45 <= wall < 2.0, wall
        assert cpu < 0.1, f"{cpu:.3f} s of CPU in a {wall:.3f} s wait: the reader spins"
