"""Perl Atomic::Pipe 0.028's API as its own tests use it: mixed-mode loops that never block,
``write_message``'s chunk count (t/ipc.t), ``new()`` + ``clone_writer`` (t/simple.t),
``keep_compressed``, the compression setters, ``read_fifo`` opened read-write, ``from_fd``/
``from_file`` checks, ``read_size``, ``fill_buffer`` and an ``eof()`` that looks at the pipe."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fdkit.atomic_pipe import PIPE_BUF, AtomicPipe, Decompressed

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

DICTIONARY = b'{"level": "info", "logger": "app.worker", "message": "request served"}\n' * 8


def perl_style_collect(r: AtomicPipe, want: int, deadline: float = 10.0) -> list[tuple[str, bytes]]:
    """Perl's loop: ``my ($type, $text) = $r->get_line_burst_or_data(); sleep unless $type``.
    Every call must return at once (the reader is non-blocking in mixed mode)."""
    got: list[tuple[str, bytes]] = []
    end = time.monotonic() + deadline
    slowest = 0.0
    while len(got) < want:
        assert time.monotonic() < end, f"only {got} after {deadline} s"
        start = time.monotonic()
        kind, data = r.get_line_burst_or_data()
        slowest = max(slowest, time.monotonic() - start)
        if kind is None:
            assert data is None
            time.sleep(0.005)
            continue
        assert data is not None
        got.append((kind, data))
    assert slowest < 0.5, f"a get_line_burst_or_data() call took {slowest:.3f} s: it blocked"
    return got


def test_mixed_mode_makes_the_reader_non_blocking_and_says_none_none() -> None:
    r, w = AtomicPipe.pair(mixed_data_mode=True)
    with r, w:
        assert r.blocking is False  # as Perl's pair(mixed_data_mode => 1)
        assert w.blocking is True  # the write side is left alone
        start = time.monotonic()
        assert r.get_line_burst_or_data() == (None, None)
        assert time.monotonic() - start < 0.5
        kind, data = r.get_line_burst_or_data()  # the 2-tuple idiom always unpacks
        assert (kind, data) == (None, None)
    r, w = AtomicPipe.pair()
    with r, w:
        assert r.blocking is True
        r.set_mixed_data_mode()
        w.set_mixed_data_mode()
        assert r.blocking is False
        assert r.get_line_burst_or_data() == (None, None)


def test_perl_mixed_data_mode_t_loop_never_blocks() -> None:
    # t/mixed_data_mode.t: a line, a line interrupted by a burst, then an unterminated line.
    r, w = AtomicPipe.pair(mixed_data_mode=True)
    raw = os.dup(w.fileno())

    def worker() -> None:
        os.write(raw, b"A Line\n")
        os.write(raw, b"Line start ...")
        time.sleep(0.05)
        w.write_burst(b"Interrupting cow!\n\n\n")
        os.write(raw, b"... line end\n")
        os.write(raw, b"not terminated but EOF")

    t = threading.Thread(target=worker)
    t.start()
    try:
        got = perl_style_collect(r, 3)
        t.join(5)
        assert got == [
            ("line", b"A Line\n"),
            ("burst", b"Interrupting cow!\n\n\n"),
            ("line", b"Line start ...... line end\n"),
        ]
        assert not r.eof()
        assert r.get_line_burst_or_data() == (None, None)
        assert not r.eof()
        w.close()
        os.close(raw)
        raw = -1
        assert not r.eof()  # the unterminated line is still to come
        assert r.get_line_burst_or_data() == ("line", b"not terminated but EOF")
        assert r.eof()
        assert r.get_line_burst_or_data() == (None, None)
        assert r.eof()
    finally:
        t.join(5)
        if raw >= 0:
            os.close(raw)
        r.close()
        w.close()


def test_mixed_mode_message_from_another_process_never_blocks() -> None:
    r, w = AtomicPipe.pair(mixed_data_mode=True)
    big = b"aa" * PIPE_BUF
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys; from fdkit.atomic_pipe import AtomicPipe\n"
            "w = AtomicPipe.from_fd('w', int(sys.argv[1]), mixed_data_mode=True)\n"
            "os.write(w.fileno(), b'before\\n'); w.write_message(b'aa' * 4096)\n"
            "os.write(w.fileno(), b'after\\n'); w.close()\n",
            str(w.fileno()),
        ],
        pass_fds=[w.fileno()],
    )
    try:
        w.close()
        got = perl_style_collect(r, 3)
        assert got == [("line", b"before\n"), ("message", big), ("line", b"after\n")]
        assert child.wait(10) == 0
        end = time.monotonic() + 5
        while not r.eof():
            assert time.monotonic() < end
            time.sleep(0.005)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)
        r.close()


def test_write_message_returns_its_chunks_as_in_perl_ipc_t() -> None:
    # t/ipc.t: "dd" x PIPE_BUF from a forked worker takes 3 parts (ids 2, 1, 0).
    r, w = os.pipe2(os.O_CLOEXEC)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from fdkit.atomic_pipe import AtomicPipe\n"
            "with AtomicPipe.from_fd('w', int(sys.argv[1])) as w:\n"
            "    n = [w.write_message(m) for m in (b'dd' * 4096, b'x', b'')]\n"
            "print(*n)\n",
            str(w),
        ],
        pass_fds=[w],
        stdout=subprocess.PIPE,
    )
    os.close(w)
    try:
        out, _ = child.communicate(timeout=20)
        assert child.returncode == 0
        assert out.split() == [b"3", b"1", b"0"]
        wire = b""
        while chunk := os.read(r, 1 << 16):
            wire += chunk
    finally:
        os.close(r)
    assert len(wire) == 2 * PIPE_BUF + 1 + 4 * 16
    ids, at = [], 0
    while at < len(wire):
        pid, tid, part, size = struct.unpack_from("<iiII", wire, at)
        assert (pid, tid) == (child.pid, 0)
        ids.append(part)
        at += 16 + size
    assert ids == [2, 1, 0, 0]
    rr, ww = os.pipe2(os.O_CLOEXEC)
    os.write(ww, wire)
    os.close(ww)
    with AtomicPipe.from_fd("r", rr) as reader:
        assert reader.read_message(timeout=5, with_writer=True) == (child.pid, 0, b"dd" * PIPE_BUF)
        assert reader.read_message(timeout=5) == b"x"
        assert reader.read_message(timeout=5) is None
        assert reader.eof()


def test_write_message_counts_compressed_chunks() -> None:
    r, w = AtomicPipe.pair(compression="zstd")
    noise = os.urandom(10_000)
    with r, w:
        assert w.write_message(b"a" * 100_000) == 1  # compresses into one chunk
        assert w.write_message(noise) == 3  # random bytes do not compress
        assert w.write_message(b"") == 1  # an empty message is a (non-empty) frame
        w.close()
        assert list(r) == [b"a" * 100_000, noise, b""]


def test_set_compression_keeps_what_is_not_restated() -> None:
    r, w = AtomicPipe.pair(compression="zstd", level=7, dictionary=DICTIONARY, keep_compressed=True)
    with r, w:
        for p in (r, w):
            assert (p.compression, p.compression_level) == ("zstd", 7)
            assert p.compression_dictionary == DICTIONARY
            assert p.keep_compressed
            p.set_compression("zstd")
            assert (p.compression, p.compression_level) == ("zstd", 7)
            assert p.compression_dictionary == DICTIONARY
            assert p.keep_compressed
            p.set_compression(level=12)
            assert p.compression_level == 12
            assert p.compression_dictionary == DICTIONARY
            p.set_compression(None)  # as Perl: off, and the level forgotten; the dictionary stays
            assert p.compression is None
            assert p.compression_level is None
            assert p.compression_dictionary == DICTIONARY
            assert p.keep_compressed
            p.set_compression("zstd", keep_compressed=False)
            assert not p.keep_compressed
        w.write_message(b"message one " * 50)
        assert r.read_message(timeout=5) == b"message one " * 50  # both ends kept the dictionary


def test_compression_setters() -> None:
    r, w = AtomicPipe.pair()
    with r, w:
        assert (w.compression, w.compression_level, w.compression_dictionary) == (None, None, None)
        assert w.keep_compressed is False
        with pytest.raises(ValueError, match="compression"):
            w.compression_dictionary = DICTIONARY  # as Perl: needs compression on
        for p in (r, w):
            p.set_compression("zstd")
            p.compression_dictionary = DICTIONARY
            p.compression_level = 19
            assert (p.compression_level, p.compression_dictionary) == (19, DICTIONARY)
            with pytest.raises(ValueError, match="out of range"):
                p.compression_level = 99
            assert p.compression_level == 19
        r.keep_compressed = True
        assert w.write_message(b"record " * 300) == 1
        data = r.read_message(timeout=5)
        assert isinstance(data, Decompressed)
        assert data == b"record " * 300
        frame = data.compressed
        assert frame.startswith(ZSTD_MAGIC)
        assert len(frame) < 200
        r.keep_compressed = False
        w.compression_dictionary = None
        r.compression_dictionary = None
        assert w.compression_dictionary is None
        w.write_message(b"plain zstd")
        assert r.read_message(timeout=5) == b"plain zstd"


def test_keep_compressed_bursts_and_writer_in_mixed_mode() -> None:
    r, w = AtomicPipe.pair(mixed_data_mode=True, compression="zstd", keep_compressed=True)
    with r, w:
        w.write_burst(b"burst " * 100)
        w.write_message(b"message " * 100)
        os.write(w.fileno(), b"a line\n")
        got = perl_style_collect(r, 3)
        assert got == [
            ("burst", b"burst " * 100),
            ("message", b"message " * 100),
            ("line", b"a line\n"),
        ]
        kinds = [(kind, type(data).__name__) for kind, data in got]
        assert kinds == [("burst", "Decompressed"), ("message", "Decompressed"), ("line", "bytes")]
        for _, data in got[:2]:
            assert isinstance(data, Decompressed)
            assert data.compressed.startswith(ZSTD_MAGIC)
            assert len(data.compressed) < len(data)
    r, w = AtomicPipe.pair(compression="zstd", keep_compressed=True)
    with r, w:
        w.write_messages([b"one", b"two"])
        batch = r.read_messages(timeout=5, with_writer=True)
        assert batch == [(os.getpid(), 0, b"one"), (os.getpid(), 0, b"two")]
        for *_, data in batch:
            assert isinstance(data, Decompressed)
            assert data.compressed.startswith(ZSTD_MAGIC)
        r.keep_compressed = False
        w.write_message(b"three")
        assert type(r.read_message(timeout=5)) is bytes


def test_new_clone_writer_then_reader_as_perl_simple_t() -> None:
    p = AtomicPipe.new()
    with p:
        assert not p.is_reader
        assert not p.is_writer
        w1, w2, w3 = p.clone_writer(), p.clone_writer(), p.clone_writer()
        with pytest.raises(AttributeError, match="reader"):
            p.read_message  # noqa: B018  # both ends held: nothing to forward to
        reader = p.reader()
        assert p.is_reader
        assert not p.is_writer
        assert reader.is_reader
        assert not reader.is_writer
        assert p.reader() is reader
        with pytest.raises(ValueError, match="cannot set to writer"):
            p.writer()
        with w1, w2, w3:
            assert w1.is_writer
            assert w1.fileno() != w2.fileno()
            w1.write_message(b"aaa")
            w2.write_message(b"bbb")
            w3.write_message(b"ccc")
        assert [p.read_message(), p.read_message(), p.read_message()] == [b"aaa", b"bbb", b"ccc"]
        assert p.read_message() is None  # every writer closed (the held one by reader())
        assert p.eof()
    assert reader.closed


def test_new_writer_keeps_settings_and_clone_reader() -> None:
    with AtomicPipe.new(compression="zstd") as p:
        other_reader = p.clone_reader()
        w = p.writer()
        assert p.is_writer
        with pytest.raises(ValueError, match="cannot set to reader"):
            p.reader()
        assert p.write_message(b"z" * 9000) == 1
        p.close()
        with other_reader:
            assert other_reader.compression == "zstd"
            assert other_reader.read_message(timeout=5) == b"z" * 9000
            assert other_reader.read_message(timeout=5) is None
        assert w.closed


def test_clone_reader_and_writer_on_ends() -> None:
    r, w = AtomicPipe.pair(mixed_data_mode=True)
    with r, w:
        w2 = w.clone_writer()
        r2 = r.clone_reader()
        with w2, r2:
            assert w2.mixed_data_mode
            assert r2.mixed_data_mode
            assert os.path.samestat(os.fstat(w2.fileno()), os.fstat(w.fileno()))
            with pytest.raises(ValueError, match="reading end"):
                r.clone_writer()
            with pytest.raises(ValueError, match="writing end"):
                w.clone_reader()
            w2.write_burst(b"hello\n")
            assert perl_style_collect(r2, 1) == [("burst", b"hello\n")]
        w.close()
        assert r.eof()
    with pytest.raises(ValueError, match="closed"):
        r.clone_reader()


def test_read_size_and_fill_buffer() -> None:
    r, w = AtomicPipe.pair()
    with r, w:
        assert r.read_size >= 65536
        with pytest.raises(ValueError, match="writing end"):
            w.read_size = 10
        with pytest.raises(ValueError, match="at least 1"):
            r.read_size = 0
        r.read_size = 20
        assert r.read_size == 20
        assert r.fill_buffer(timeout=0) == 0  # nothing there
        w.write_message(b"x" * 100)
        assert r.fill_buffer() == 20  # one read of read_size bytes
        r.read_size = 1 << 16
        assert r.fill_buffer(timeout=5) == 96
        assert r.fill_buffer(timeout=0) == 0
        assert r.read_message(timeout=0) == b"x" * 100
        w.close()
        assert r.fill_buffer(timeout=5) == 0  # end of stream
        assert r.eof()
        with pytest.raises(ValueError, match="writing end"):
            w.fill_buffer()


def test_eof_looks_at_the_pipe() -> None:
    r, w = AtomicPipe.pair()
    with r:
        assert not r.eof()
        w.write_message(b"last")
        w.close()
        assert not r.eof()  # a message is still to be read
        assert r.read_message() == b"last"
        assert r.eof()
    r, w = AtomicPipe.pair()
    with r:
        w.close()
        assert r.eof()  # no read saw the end yet: eof() looks
        assert not w.eof()


def test_read_fifo_read_write_never_waits_and_sees_no_eof_between_writers(tmp_path: Path) -> None:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    start = time.monotonic()
    with AtomicPipe.read_fifo(path, read_write=True) as r:
        assert time.monotonic() - start < 2  # no writer yet: the open did not wait
        assert r.is_reader
        for n in range(3):
            with AtomicPipe.write_fifo(path) as w:
                assert w.write_message(b"writer %d" % n) == 1
            assert r.read_message(timeout=5) == b"writer %d" % n
            assert r.read_message(timeout=0.05) is None  # the writer left: no EOF
            assert not r.eof()


def test_read_fifo_refuses_what_is_not_a_fifo(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_bytes(b"")
    with pytest.raises(ValueError, match="not a pipe or FIFO"):
        AtomicPipe.read_fifo(f)
    with pytest.raises(ValueError, match="not a pipe or FIFO"):
        AtomicPipe.read_fifo(f, read_write=True)


def test_from_fd_checks_for_a_pipe_and_can_dup(tmp_path: Path) -> None:
    f = tmp_path / "capture"
    f.write_bytes(b"")
    fd = os.open(f, os.O_RDONLY | os.O_CLOEXEC)
    a, b = socket.socketpair()
    try:
        with pytest.raises(ValueError, match="not a pipe or FIFO"):
            AtomicPipe.from_fd("r", fd)
        os.fstat(fd)  # still the caller's
        with pytest.raises(ValueError, match="not a pipe or FIFO"):
            AtomicPipe.from_fd("w", a.fileno())
        with AtomicPipe.from_fd("r", fd, dup=True, pipe_only=False) as p:
            assert p.fileno() != fd
            assert p.read_message(timeout=1) is None
            assert p.eof()
        os.fstat(fd)  # dup=True: the AtomicPipe closed its own copy only
    finally:
        os.close(fd)
        a.close()
        b.close()
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        with AtomicPipe.from_fd("w", w, dup=True) as p:
            p.write_message(b"via dup")
        os.write(w, b"")  # still open
    finally:
        os.close(w)
    with AtomicPipe.from_fd("r", r) as p:
        assert p.read_message(timeout=5) == b"via dup"
        assert p.read_message(timeout=5) is None


def test_from_file_takes_the_mode_from_the_object(tmp_path: Path) -> None:
    r, w = os.pipe2(os.O_CLOEXEC)
    with os.fdopen(r, "rb", buffering=0) as rf, os.fdopen(w, "wb", buffering=0) as wf:
        with AtomicPipe.from_file(rf) as reader, AtomicPipe.from_file(wf) as writer:
            assert reader.is_reader
            assert writer.is_writer
            assert reader.fileno() != rf.fileno()
            writer.write_message(b"from_fh")
            assert reader.read_message(timeout=5) == b"from_fh"
        assert not rf.closed
        assert os.fstat(rf.fileno())
        with AtomicPipe.from_file(wf, "w") as writer:
            assert writer.is_writer
        with pytest.raises(ValueError, match="not open for reading"):
            AtomicPipe.from_file(wf, "r")
    path = tmp_path / "fifo"
    os.mkfifo(path)
    with open(os.open(path, os.O_RDWR | os.O_CLOEXEC), "r+b", buffering=0) as both:
        with pytest.raises(ValueError, match="read-write"):
            AtomicPipe.from_file(both)
        with AtomicPipe.from_file(both, "<&") as reader:
            assert reader.is_reader
    with pytest.raises(TypeError, match="fileno"):
        AtomicPipe.from_file(b"not a file")  # type: ignore[arg-type]
