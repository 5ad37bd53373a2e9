"""The atomic_pipe bench at smoke-test size: its rows, and its measurement, which must catch a
contender that loses, adds or alters a message."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from functools import partial

import pytest

from helpers.bench import (
    ATOMIC_PIPE_HEADLINES,
    RESULTS_TIMEOUT,
    RowContract,
    bench_rows,
    children,
    python_m_bench,
    tiny_env,
)

# isort: split
# (bench/ is importable once helpers.bench has put the source tree on sys.path)
from bench import atomic_pipe

pytestmark = pytest.mark.source_tree


class TestRows(RowContract):
    """The rows of atomic_pipe (see RowContract)."""


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_atomic_pipe_rows() -> None:
    rows = bench_rows("atomic_pipe")
    by_id = {r.id: r for r in rows}
    for i in ATOMIC_PIPE_HEADLINES:
        assert [r.id for r in rows].count(i) == 1, i
        assert by_id[i].unit == "msg/s"
    assert by_id["atomic_pipe_batch_100b"].baseline_name.startswith("multiprocessing.Queue")
    assert by_id["atomic_pipe_call_100b"].baseline_name.startswith("multiprocessing.Queue")
    assert "≥1M msg/s" in by_id["atomic_pipe_batch_100b"].case
    assert "≥300k msg/s" in by_id["atomic_pipe_call_100b"].case
    assert by_id["atomic_pipe_10k_vs_raw"].baseline_name.startswith("unframed pipe")
    assert "4 writers" in by_id["atomic_pipe_4writers_100b"].case
    assert by_id["atomic_pipe_mixed_100k"].baseline_name.startswith("fdkit normal mode")
    assert any(r.baseline_name.startswith("multiprocessing.Pipe") for r in rows)
    for key in ("zstd", "zstd_dict"):
        size = by_id[f"atomic_pipe_{key}_json_size"]
        assert size.unit == "B/msg", size
        assert size.ratio > 1, size


def test_atomic_pipe_script_prints_json() -> None:
    proc = python_m_bench("atomic_pipe", "--json", env=tiny_env())
    assert proc.returncode == 0, proc.stderr
    got = [r["id"] for r in json.loads(proc.stdout)["results"]]
    for i in ATOMIC_PIPE_HEADLINES:
        assert got.count(i) == 1, got


def _traffic(count: int, mixed: bool = False) -> tuple[list[list[bytes]], atomic_pipe.Expect]:
    """Two writers' shares of ``count`` 100 B messages, and what the reader must get."""
    load = atomic_pipe.Load(100, count, writers=2, mixed=mixed)
    shares = atomic_pipe._shares(load)
    return shares, atomic_pipe._expect(load, shares)


class _LossyRaw(atomic_pipe.RawChannel):
    """Writes one byte of each message wrong: same count, same length, wrong content."""

    def write(self, msgs: list[bytes]) -> None:
        super().write([b"?" + m[1:] for m in msgs])


CHANNELS: dict[str, tuple[Callable[[], atomic_pipe.Channel], bool]] = {
    "raw": (partial(atomic_pipe.RawChannel, 100), False),
    "mp_queue": (atomic_pipe.QueueChannel, False),
    "mp_pipe": (atomic_pipe.PipeChannel, False),
    "fdkit_batch": (partial(atomic_pipe.FdkitChannel, "batch", "batch", {}), False),
    "fdkit_call": (partial(atomic_pipe.FdkitChannel, "call", "call", {}), False),
    "fdkit_mixed": (
        partial(atomic_pipe.FdkitChannel, "groups", "mixed", {"mixed_data_mode": True}),
        True,
    ),
}


@pytest.mark.parametrize("name", list(CHANNELS))
def test_atomic_pipe_measure_catches_a_short_stream(name: str) -> None:
    """Every contender delivers and verifies 2 writers x 150 messages; a reader waiting for
    more than was sent ends with EOFError (not a hang, not a figure), and no writer process
    or fd is left behind."""
    make, mixed = CHANNELS[name]
    shares, want = _traffic(300, mixed)
    before = children()  # another test file of this worker may have left some of its own
    sample = atomic_pipe._measure(make, shares, want, check=True)
    assert sample.count == 300
    assert sample.wall_ns > 0
    more = dataclasses.replace(want, count=want.count + 1, nbytes=want.nbytes + 100)
    with pytest.raises(EOFError):
        atomic_pipe._measure(make, shares, more, check=False)
    assert not children() - before


def test_atomic_pipe_measure_catches_wrong_content() -> None:
    shares, want = _traffic(50)
    before = children()
    atomic_pipe._measure(partial(atomic_pipe.RawChannel, 100), shares, want, check=False)
    with pytest.raises(RuntimeError, match="not the messages sent"):
        atomic_pipe._measure(partial(_LossyRaw, 100), shares, want, check=True)
    assert not children() - before
