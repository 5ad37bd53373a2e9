"""Interop with Perl's Atomic::Pipe 0.028, both directions, and zstd compression.

Every vector decodes to its ``decodes_to``; every uncompressed vector is what ``AtomicPipe``
writes for the same call, byte for byte, once the header's pid/tid are this writer's (the
vectors were written by pid 12345). Compressed output is checked with standard zstd, not with
fdkit's own decoder, so that a codec that only talks to itself fails here.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from fdkit.atomic_pipe import AtomicPipe, Decompressed, ProtocolError
from helpers import payload
from helpers.wire import (
    HEADER,
    Item,
    decode,
    header_offsets,
    in_thread,
    wire_of,
    with_writer,
    writers_of,
)

pytestmark = pytest.mark.timeout(30)

VECTORS = Path(__file__).parent / "vectors" / "atomic_pipe_vectors"
MANIFEST: list[dict[str, Any]] = json.loads((VECTORS / "manifest.json").read_text())["vectors"]
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def data_of(spec: dict[str, Any]) -> bytes:
    if "text" in spec:
        return str(spec["text"]).encode()
    if "repeat" in spec:
        return str(spec["repeat"]).encode() * int(spec["count"])
    return bytes.fromhex(spec["hex"])


def options_of(v: dict[str, Any]) -> dict[str, Any]:
    return {"mixed_data_mode": v["mode"] == "mixed", "compression": v["compression"]}


def vector_params(pred: Any = lambda v: True) -> list[Any]:
    return [pytest.param(v, id=v["file"].split("_")[0]) for v in MANIFEST if pred(v)]


def zstd_decompress(frame: bytes, dictionary: bytes | None = None) -> bytes:
    """Standard zstd: the ``zstandard`` package if it is installed, else the standard library's
    ``compression.zstd`` (Python 3.14 built with libzstd), else the ``zstd`` command."""
    try:
        import zstandard
    except ImportError:
        pass
    else:
        d = (
            zstandard.ZstdCompressionDict(dictionary, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
            if dictionary is not None
            else None
        )
        reader = zstandard.ZstdDecompressor(dict_data=d).stream_reader(
            io.BytesIO(frame), read_across_frames=True
        )
        return bytes(reader.read())
    if sys.version_info >= (3, 14):
        try:
            from compression import zstd
        except ImportError:  # built without libzstd
            pass
        else:
            zdict = zstd.ZstdDict(dictionary, is_raw=True) if dictionary is not None else None
            return zstd.decompress(frame, zstd_dict=zdict)
    exe = shutil.which("zstd")
    if exe is None:
        pytest.skip("no standard zstd here: neither the zstandard package nor the zstd command")
    args = [exe, "-d", "-c", "-q"]
    with tempfile.NamedTemporaryFile(prefix="fdkit-zdict-") as dict_file:
        if dictionary is not None:
            dict_file.write(dictionary)
            dict_file.flush()
            args += ["-D", dict_file.name]
        out = subprocess.run(args, input=frame, capture_output=True, timeout=20, check=False)
    assert out.returncode == 0, f"zstd -d failed: {out.stderr.decode(errors='replace')}"
    return out.stdout


def payloads(stream: bytes, *, mixed: bool = False) -> bytes:
    """The message payloads of a well-formed stream, joined (the compressed frame, for zstd)."""
    out = b""
    for at in header_offsets(stream, mixed=mixed):
        size = HEADER.unpack_from(stream, at)[3]
        out += stream[at + HEADER.size : at + HEADER.size + size]
    return out


# --- the vectors ----------------------------------------------------------------------------


@pytest.mark.parametrize("v", vector_params())
def test_vector_file_is_intact(v: dict[str, Any]) -> None:
    data = (VECTORS / v["file"]).read_bytes()
    assert len(data) == v["wire_bytes"]
    assert hashlib.sha256(data).hexdigest() == v["wire_sha256"]


@pytest.mark.parametrize("piece", [1, 1 << 16], ids=["1B-writes", "64K-writes"])
@pytest.mark.parametrize(
    "v", vector_params(lambda v: v["call"] != "write_burst" or v["mode"] == "mixed")
)
def test_vector_decodes(v: dict[str, Any], piece: int) -> None:
    stream = (VECTORS / v["file"]).read_bytes()
    expected = [(kind, data_of(spec)) for kind, spec in v["decodes_to"]]
    assert decode(stream, piece, **options_of(v)) == expected


@pytest.mark.parametrize(
    "v", vector_params(lambda v: v["call"] == "write_burst" and v["mode"] == "normal")
)
def test_normal_mode_burst_vector_decodes(v: dict[str, Any]) -> None:
    # A normal-mode burst has no framing at all: the reader takes the raw bytes (and, for zstd,
    # decompresses them itself), as a Perl reader does with sysread.
    stream = (VECTORS / v["file"]).read_bytes()
    [(kind, spec)] = v["decodes_to"]
    raw = zstd_decompress(stream) if v["compression"] else stream
    assert (kind, raw) == ("burst", data_of(spec))


def write_like(v: dict[str, Any], w: AtomicPipe) -> None:
    """Makes the call that wrote vector ``v``."""
    if v["call"] == "write_message":
        w.write_message(data_of(v["input"]))
    elif v["call"] == "write_burst":
        assert w.write_burst(data_of(v["input"])) is not None
    else:
        assert v["file"].startswith("V12_")  # the one sequence vector
        os.write(w.fileno(), b"line one\n")
        w.write_burst(b"B")
        w.write_message(b"M")
        os.write(w.fileno(), b"tail\n")


@pytest.mark.parametrize("v", vector_params(lambda v: v["compression"] is None))
def test_vector_is_encoded_byte_for_byte(v: dict[str, Any]) -> None:
    stream = (VECTORS / v["file"]).read_bytes()
    mixed = v["mode"] == "mixed"
    if v["call"] == "write_burst" and not mixed:  # raw bytes, no header to patch
        assert wire_of(lambda w: write_like(v, w)) == stream
        return
    if v["tid"]:  # V07 was written from a thread: so is ours, and its tid is the thread's
        wire, tid = in_thread(lambda: wire_of(lambda w: write_like(v, w), **options_of(v)))
    else:
        wire, tid = wire_of(lambda w: write_like(v, w), **options_of(v)), 0
    assert wire == with_writer(stream, os.getpid(), tid, mixed=mixed)


@pytest.mark.parametrize("v", vector_params(lambda v: v["compression"] == "zstd"))
def test_zstd_vector_call_writes_standard_zstd(v: dict[str, Any]) -> None:
    # Frames may differ from Perl's by libzstd version, so compare what they decompress to.
    mixed, data = v["mode"] == "mixed", data_of(v["input"])
    wire = wire_of(lambda w: write_like(v, w), **options_of(v))
    if v["call"] == "write_message":
        frame = payloads(wire, mixed=mixed)
        assert set(writers_of(wire, mixed=mixed)) == {(os.getpid(), 0)}
        expected: list[Item] = [("message", data)]
    else:
        frame = wire[1:-1] if mixed else wire
        assert not mixed or (wire[:1], wire[-1:]) == (b"\x0e", b"\x0f")
        expected = [("burst", data)]
    assert frame.startswith(ZSTD_MAGIC)
    assert zstd_decompress(frame) == data
    if mixed or v["call"] == "write_message":
        assert decode(wire, **options_of(v)) == expected


# --- zstd beyond the vectors ----------------------------------------------------------------

JSONISH = b"".join(
    b'{"level": "info", "logger": "app.worker", "n": %d, "message": "request done in %d ms"}\n'
    % (i, i * 7 % 1000)
    for i in range(3000)
)


@pytest.mark.parametrize("n", [0, 1, 4080, 10_000, 300_000])
def test_zstd_messages_round_trip_and_are_standard(n: int) -> None:
    # Random bytes do not compress: 10_000 of them still take three chunks once compressed.
    msgs = [payload(n, seed=5), JSONISH[:n]]
    wire = wire_of(lambda w: w.write_messages(msgs), compression="zstd")
    assert decode(wire, compression="zstd") == [("message", m) for m in msgs]
    # Each message is one frame; standard zstd decodes the frames concatenated.
    assert zstd_decompress(payloads(wire)) == b"".join(msgs)


def test_zstd_level_is_applied() -> None:
    # Text from a small vocabulary: level 19 finds clearly more to save than level 1 here
    # (unlike the very regular JSONISH, where the two come out the same).
    rnd = random.Random(7)
    words = [rnd.randbytes(rnd.randint(1, 5)).hex().encode() for _ in range(500)]
    text = b" ".join(rnd.choice(words) for _ in range(20_000))
    sizes = {}
    for level in (1, 19):
        wire = wire_of(lambda w: w.write_message(text), compression="zstd", level=level)
        assert zstd_decompress(payloads(wire)) == text
        sizes[level] = len(wire)
    assert sizes[19] < sizes[1] * 0.95 < len(text)


DICTIONARY = JSONISH[:4000]
RECORD = b'{"level": "info", "logger": "app.worker", "n": 77, "message": "request done in 9 ms"}\n'


@pytest.mark.parametrize("how", ["bytes", "str-path", "pathlike"])
def test_zstd_dictionary_round_trip(how: str, tmp_path: Path) -> None:
    path = tmp_path / "dict"
    path.write_bytes(DICTIONARY)
    dictionary = {"bytes": DICTIONARY, "str-path": str(path), "pathlike": path}[how]
    wire = wire_of(
        lambda w: w.write_messages([RECORD, RECORD[:40]]),
        compression="zstd",
        dictionary=dictionary,
    )
    got = decode(wire, compression="zstd", dictionary=dictionary)
    assert got == [("message", RECORD), ("message", RECORD[:40])]
    # The dictionary is really used: the frame is smaller than without it, and it takes the
    # dictionary to decode it, with fdkit's reader and with standard zstd.
    plain = wire_of(lambda w: w.write_message(RECORD), compression="zstd")
    first = wire[: HEADER.size + HEADER.unpack_from(wire, 0)[3]]
    assert len(first) < len(plain)
    assert zstd_decompress(payloads(first), dictionary=DICTIONARY) == RECORD
    with pytest.raises(ProtocolError) as e:
        decode(first, compression="zstd")
    assert e.value.kind == "bad_compressed_data"


def test_zstd_dictionary_set_later(tmp_path: Path) -> None:
    path = tmp_path / "dict"
    path.write_bytes(DICTIONARY)

    def write(w: AtomicPipe) -> None:
        w.set_compression("zstd", level=5, dictionary=path)
        assert w.compression == "zstd"
        w.write_message(RECORD)

    wire = wire_of(write)
    assert zstd_decompress(payloads(wire), dictionary=DICTIONARY) == RECORD
    assert decode(wire, compression="zstd", dictionary=DICTIONARY) == [("message", RECORD)]


@pytest.mark.parametrize("mixed", [False, True], ids=["normal", "mixed"])
def test_keep_compressed_returns_the_message_and_its_zstd_frame(mixed: bool) -> None:
    # As Perl's keep_compressed: the message *and* the frame it travelled as (to forward it).
    opts: dict[str, Any] = {"compression": "zstd", "mixed_data_mode": mixed}
    message = JSONISH[:20_000]
    wire = wire_of(lambda w: w.write_message(message), **opts)
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        os.write(w, wire)
    finally:
        os.close(w)
    with AtomicPipe.from_fd("r", r, keep_compressed=True, **opts) as reader:
        assert reader.keep_compressed
        if mixed:
            kind, data = reader.get_line_burst_or_data(timeout=5)
            assert kind == "message"
            assert reader.get_line_burst_or_data(timeout=5) == (None, None)
        else:
            data = reader.read_message(timeout=5)
            assert reader.read_message(timeout=5) is None
        assert reader.eof()
    assert isinstance(data, Decompressed)
    assert data == message
    frame = data.compressed
    assert frame == payloads(wire, mixed=mixed)
    assert frame.startswith(ZSTD_MAGIC)
    assert len(frame) < 20_000
    assert zstd_decompress(frame) == JSONISH[:20_000]


def test_zstd_burst_fits_by_its_compressed_size() -> None:
    # 100 KB of JSON lines compresses far below PIPE_BUF: it fits in one burst.
    big = JSONISH[:100_000]
    sizes: list[int | None] = []

    def write(w: AtomicPipe) -> None:
        sizes.append(w.fits_in_burst(big))
        sizes.append(w.write_burst(big))
        sizes.append(w.fits_in_burst(payload(100_000)))  # random bytes: far too big

    wire = wire_of(write, compression="zstd")
    assert sizes[0] is not None
    assert sizes[0] == sizes[1] == len(wire) < 4096
    assert sizes[2] is None
    assert zstd_decompress(wire) == big


def test_unknown_codec_is_a_value_error() -> None:
    r, w = AtomicPipe.pair()
    with r, w:
        with pytest.raises(ValueError, match="unknown compression"):
            w.set_compression("gzip")  # type: ignore[arg-type]  # misuse on purpose
        assert w.compression is None
    with pytest.raises(ValueError, match="unknown compression"):
        AtomicPipe.pair(compression="lz4")  # type: ignore[arg-type]  # misuse on purpose
