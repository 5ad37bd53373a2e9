"""`fdkit pipe-cat`, run as a user runs it: the installed command in a subprocess, reading the
Perl-written vectors, FIFOs fed by writer processes, and stdin pipes.

Every process is started through :func:`started`, which kills it (by its pid) if the test did
not see it exit, and closes its pipes.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fdkit.atomic_pipe import AtomicPipe
from helpers import syscall_numbers, syscall_of

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"
VECTORS_DIR = Path(__file__).parent / "vectors" / "atomic_pipe_vectors"
VECTORS: list[dict[str, Any]] = json.loads((VECTORS_DIR / "manifest.json").read_text())["vectors"]


def vector(name: str) -> bytes:
    return (VECTORS_DIR / name).read_bytes()


def payload(spec: dict[str, Any]) -> bytes:
    """A manifest payload: ``text``, ``repeat`` × ``count``, or ``hex``."""
    if "text" in spec:
        return str(spec["text"]).encode()
    if "repeat" in spec:
        return str(spec["repeat"]).encode() * int(spec["count"])
    return bytes.fromhex(spec["hex"])


def mode_args(vec: dict[str, Any]) -> list[str]:
    args = ["--mixed"] if vec["mode"] == "mixed" else []
    return [*args, "--zstd"] if vec["compression"] == "zstd" else args


def cat(
    *args: str, input: bytes | None = None, timeout: float = 10
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [FDKIT, "pipe-cat", *args],
        input=input,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def events(stdout: bytes, writer: tuple[int, int] | None = None) -> list[tuple[str, bytes]]:
    """The ``--json`` output as (type, payload) pairs, checking each object's ``len`` and,
    for messages when ``writer`` is given, its pid and tid."""
    out = []
    for line in stdout.decode().splitlines():
        obj = json.loads(line)
        if writer is not None and obj["type"] == "message":
            assert (obj["pid"], obj["tid"]) == writer, obj
        data = obj["data"].encode() if "data" in obj else base64.b64decode(obj["data_b64"])
        assert obj["len"] == len(data), obj
        out.append((obj["type"], data))
    return out


@contextlib.contextmanager
def started(cmd: list[str], **kwargs: Any) -> Iterator[subprocess.Popen[bytes]]:
    """A process for the test's lifetime: killed by pid if still running, pipes closed."""
    proc = subprocess.Popen(cmd, **kwargs)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        proc.wait(timeout=10)


def wait_blocked_in_open(pid: int, timeout: float = 10.0) -> None:
    """Waits until ``pid``'s main thread sits in open(2) (a FIFO open waiting for its other
    end): the same syscall seen for 0.2 s, longer than any open during interpreter start."""
    opens = syscall_numbers("open")
    deadline = time.monotonic() + timeout
    streak = 0
    while streak < 10:
        if time.monotonic() > deadline:
            pytest.fail(f"process {pid} never waited in open(2)", pytrace=False)
        streak = streak + 1 if syscall_of(pid, pid) in opens else 0
        time.sleep(0.02)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def readable(stream: Any, timeout: float) -> bool:
    return bool(select.select([stream], [], [], timeout)[0])


# --- the Perl-written vectors ------------------------------------------------------------------

# In normal mode a burst is the bare bytes, no header: a normal-mode reader cannot tell it from
# a chunk cut short, so pipe-cat reports it as one (Perl's reader would wait forever).
NORMAL_MODE_BURSTS = {"V08_burst_hello_nl.bin", "V16_zstd_burst_hello_nl.bin"}


@pytest.mark.parametrize("vec", VECTORS, ids=[v["file"] for v in VECTORS])
def test_every_vector_decodes_to_its_manifest(vec: dict[str, Any]) -> None:
    path = str(VECTORS_DIR / vec["file"])
    expected = [(kind, payload(spec)) for kind, spec in vec["decodes_to"]]
    r = cat("--json", *mode_args(vec), path)
    if vec["file"] in NORMAL_MODE_BURSTS:
        assert r.returncode == 1, r
        assert r.stdout == b"", r
        assert b"stream ended inside the chunk at byte 0" in r.stderr
        assert len(r.stderr.splitlines()) == 1, r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert r.stderr == b""
    writer = (vec["pid"], vec["tid"]) if vec["mode"] == "normal" else None
    assert events(r.stdout, writer) == expected
    raw = cat("--raw", *mode_args(vec), path)
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout == b"".join(data for _, data in expected)


def test_human_lines_show_text_escapes_hex_and_cut_long_payloads() -> None:
    r = cat(str(VECTORS_DIR / "V01_msg_hello.bin"))
    assert (r.returncode, r.stdout, r.stderr) == (0, b"message pid=12345 tid=0 len=5: Hello\n", b"")

    r = cat("--mixed", str(VECTORS_DIR / "V12_mixed_stream_line_burst_msg_line.bin"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines() == [
        "line len=9: line one\\n",
        "burst len=1: B",
        "message len=1: M",
        "line len=5: tail\\n",
    ]

    # 0..255 is not UTF-8: hex, the first 64 bytes, and how much was left out.
    binary = bytes(range(256))
    r = cat(str(VECTORS_DIR / "V06_msg_binary_0to255.bin"))
    assert r.stdout.decode() == (
        f"message pid=12345 tid=0 len=256 hex: {binary[:64].hex()}"
        " ... (+192 bytes, --full shows all)\n"
    )
    r = cat("--full", str(VECTORS_DIR / "V06_msg_binary_0to255.bin"))
    assert r.stdout.decode() == f"message pid=12345 tid=0 len=256 hex: {binary.hex()}\n"

    r = cat(str(VECTORS_DIR / "V05_msg_10000_a.bin"))
    assert r.stdout.decode() == (
        "message pid=12345 tid=0 len=10000: " + "a" * 200 + " ... (+9800 bytes, --full shows all)\n"
    )
    r = cat("--full", str(VECTORS_DIR / "V05_msg_10000_a.bin"))
    assert r.stdout.decode() == "message pid=12345 tid=0 len=10000: " + "a" * 10000 + "\n"


def test_count_prints_only_the_totals() -> None:
    path = str(VECTORS_DIR / "V12_mixed_stream_line_burst_msg_line.bin")
    r = cat("--mixed", "--count", path)
    assert (r.returncode, r.stderr) == (0, b"")
    assert r.stdout == b"1 message, 1 burst, 2 lines, 16 bytes\n"
    r = cat("--mixed", "--count", "--json", path)
    assert json.loads(r.stdout) == {"messages": 1, "bursts": 1, "lines": 2, "bytes": 16}
    r = cat("--count", str(VECTORS_DIR / "V02_msg_empty.bin"))
    assert r.stdout == b"0 messages, 0 bursts, 0 lines, 0 bytes\n"


# --- FIFOs and stdin, with real writers ----------------------------------------------------------

WRITER = """
import sys
from fdkit.atomic_pipe import AtomicPipe
with AtomicPipe.write_fifo(sys.argv[1]) as w:
    for i in range(int(sys.argv[2])):
        w.write_message(f"msg {i};".encode() * (i % 7 * 300 + 1))
"""


def written(n: int) -> list[tuple[str, bytes]]:
    """What :data:`WRITER` sends for ``n``: sizes from 6 bytes to past three chunks."""
    return [("message", f"msg {i};".encode() * (i % 7 * 300 + 1)) for i in range(n)]


@pytest.mark.parametrize("first", ["reader", "writer"])
def test_fifo_with_a_writer_process(tmp_path: Path, first: str) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader_cmd = [FDKIT, "pipe-cat", "--json", str(fifo)]
    writer_cmd = [sys.executable, "-c", WRITER, str(fifo), "200"]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    one, two = (reader_cmd, writer_cmd) if first == "reader" else (writer_cmd, reader_cmd)
    with started(one, **pipes) as p1:
        wait_blocked_in_open(p1.pid)
        with started(two, **pipes) as p2:
            reader, writer = (p1, p2) if first == "reader" else (p2, p1)
            out, err = reader.communicate(timeout=20)
            assert reader.returncode == 0, err
            assert err == b""
            assert events(out) == written(200)
            _, werr = writer.communicate(timeout=10)
            assert writer.returncode == 0, werr


def test_stdin_pipe_from_a_live_writer_is_printed_as_it_comes() -> None:
    r, w = os.pipe()
    with started(
        [FDKIT, "pipe-cat", "-"], stdin=r, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        os.close(r)
        with AtomicPipe.from_fd("w", w) as writer:
            writer.write_message(b"first")
            # The writer is still open: the line must come out now, not at EOF.
            assert readable(proc.stdout, 10), "pipe-cat held back a ready message"
            assert proc.stdout is not None
            me = f"pid={os.getpid()} tid=0".encode()
            assert proc.stdout.readline() == b"message " + me + b" len=5: first\n"
            writer.write_message(b"x" * 9000)
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert out.startswith(b"message " + me + b" len=9000: xxx")
    assert out.count(b"\n") == 1


def test_stdin_raw_passes_binary_payloads_through() -> None:
    messages = [bytes(range(256)) * 20, b"", b"\x00\x0e\x0f\x10", os.urandom(5000)]
    r, w = os.pipe()
    with started(
        [FDKIT, "pipe-cat", "--raw", "-"],
        stdin=r,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        os.close(r)

        def feed() -> None:
            with AtomicPipe.from_fd("w", w) as writer:
                writer.write_messages(messages)

        t = threading.Thread(target=feed)
        t.start()
        out, err = proc.communicate(timeout=10)
        t.join(10)
    assert (proc.returncode, err) == (0, b"")
    assert out == b"".join(messages)


def test_stdin_mixed_stream_from_bytes() -> None:
    data = vector("V12_mixed_stream_line_burst_msg_line.bin")
    r = cat("--mixed", "--json", "-", input=data)
    assert r.returncode == 0, r.stderr
    assert events(r.stdout) == [
        ("line", b"line one\n"),
        ("burst", b"B"),
        ("message", b"M"),
        ("line", b"tail\n"),
    ]


def test_zstd_with_a_dictionary_file(tmp_path: Path) -> None:
    dictionary = b"".join(b'{"level": "info", "logger": "app.%d", "msg": ' % i for i in range(50))
    messages = [b'{"level": "info", "logger": "app.7", "msg": "hello %d"}' % i for i in range(20)]
    reader, writer = AtomicPipe.pair(compression="zstd", dictionary=dictionary)
    with reader, writer:
        writer.write_messages(messages)
        writer.close()
        stream = b""
        while chunk := os.read(reader.fileno(), 65536):
            stream += chunk
    (tmp_path / "stream").write_bytes(stream)
    (tmp_path / "dict").write_bytes(dictionary)
    r = cat("--json", "--zstd", "--dictionary", str(tmp_path / "dict"), str(tmp_path / "stream"))
    assert r.returncode == 0, r.stderr
    assert events(r.stdout) == [("message", m) for m in messages]
    # Without the dictionary every message fails alone, each named by its writer (this test).
    r = cat("--zstd", str(tmp_path / "stream"))
    assert r.returncode == 1
    assert r.stdout == b""
    errors = r.stderr.decode().splitlines()
    assert len(errors) == len(messages)
    assert all(f"writer pid {os.getpid()} tid 0" in e and "decompress" in e for e in errors)


# --- broken streams ------------------------------------------------------------------------------


def test_truncated_stream_prints_whole_messages_then_the_error() -> None:
    hello, big = vector("V01_msg_hello.bin"), vector("V05_msg_10000_a.bin")
    # Hello, then the 10000-byte message cut inside its second chunk (at stream byte 21 + 4096).
    r = cat("-", input=hello + big[:5000])
    assert r.returncode == 1
    assert r.stdout == b"message pid=12345 tid=0 len=5: Hello\n"
    errors = r.stderr.decode().splitlines()
    assert errors[0].startswith("fdkit pipe-cat: stream ended inside the chunk at byte 4117")
    assert "12345" in errors[0]
    # The message it belonged to is reported too, by where it started.
    assert any("half-received message" in e and "byte 21" in e for e in errors[1:]), errors
    # Cut exactly after a chunk, then a message from another thread (tid 1): both messages,
    # then one error for the half message.
    r = cat("--json", "-", input=hello + big[:4096] + vector("V07_msg_hello_thread.bin"))
    assert r.returncode == 1
    assert events(r.stdout) == [("message", b"Hello"), ("message", b"Hello")]
    [error] = r.stderr.decode().splitlines()
    assert "half-received message from writer pid 12345 tid 0 started at byte 21" in error


def test_mixed_stream_cut_prints_every_event_before_the_error() -> None:
    whole = vector("V12_mixed_stream_line_burst_msg_line.bin")
    cut = vector("V10_mixed_msg_10000_a.bin")[:3000]
    r = cat("--mixed", "--json", "-", input=whole + cut)
    assert r.returncode == 1
    assert [kind for kind, _ in events(r.stdout)] == ["line", "burst", "message", "line"]
    [error] = r.stderr.decode().splitlines()
    assert f"stream ended inside the chunk at byte {len(whole)}" in error
    assert "writer pid 12345 tid 0" in error


def test_interleaved_messages_are_reported_and_decoding_goes_on() -> None:
    hello, big = vector("V01_msg_hello.bin"), vector("V05_msg_10000_a.bin")
    # The same writer starts a new message before finishing the first: the partial one is
    # dropped and reported, and the messages around it still come out.
    r = cat("--json", "-", input=hello + big[:4096] + hello + big)
    assert r.returncode == 1
    assert events(r.stdout) == [
        ("message", b"Hello"),
        ("message", b"Hello"),
        ("message", b"a" * 10000),
    ]
    [error] = r.stderr.decode().splitlines()
    assert "chunk at byte 4117 from writer pid 12345 tid 0" in error
    assert "two messages interleaved" in error


def test_garbage_ends_with_one_error_line_and_never_hangs() -> None:
    garbage = bytes((i * 7919 + 13) % 251 for i in range(1 << 20))
    start = time.monotonic()
    r = cat("-", input=garbage)
    assert r.returncode == 1
    assert r.stdout == b""
    [error] = r.stderr.decode().splitlines()
    assert "byte 0" in error
    assert "not an Atomic::Pipe stream" in error
    r = cat("--mixed", "--count", "-", input=garbage)
    assert r.returncode in (0, 1)
    assert time.monotonic() - start < 8


def test_garbage_from_a_writer_that_stays_open_ends_without_eof() -> None:
    with started(
        [FDKIT, "pipe-cat", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdin is not None
        assert proc.stderr is not None
        proc.stdin.write(b"\xff" * 64)
        proc.stdin.flush()
        # No more input and no EOF: the fatal error alone must end it.
        assert proc.wait(timeout=10) == 1
        assert b"not an Atomic::Pipe stream" in proc.stderr.read()


def test_a_stream_cut_while_the_writer_idles_waits_without_spinning() -> None:
    with started(
        [FDKIT, "pipe-cat", "--mixed", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdin is not None
        # A mixed-mode message frame, header and half its payload, then silence.
        proc.stdin.write(vector("V10_mixed_msg_10000_a.bin")[:3000])
        proc.stdin.flush()
        time.sleep(0.3)
        before = cpu_seconds(proc.pid)
        time.sleep(1.0)
        assert cpu_seconds(proc.pid) - before < 0.2, "pipe-cat spins on a partial frame"
        out, err = proc.communicate(timeout=10)  # closes stdin: EOF
    assert proc.returncode == 1
    assert out == b""
    assert b"stream ended inside" in err


# --- errors, signals, closed output --------------------------------------------------------------


def test_errors_are_one_line(tmp_path: Path) -> None:
    hello = str(VECTORS_DIR / "V01_msg_hello.bin")
    cases = [
        ([str(tmp_path / "missing")], 1, "No such file or directory"),
        ([str(tmp_path)], 1, "Is a directory"),
        (["--zstd", "--dictionary", str(tmp_path / "nodict"), hello], 1, "--dictionary"),
        (["--dictionary", hello, hello], 2, "--dictionary needs --zstd"),
        (["--raw", "--count", hello], 2, "do not go together"),
    ]
    for args, code, message in cases:
        r = cat(*args)
        assert r.returncode == code, (args, r.stderr)
        assert len(r.stderr.decode().strip().splitlines()) == 1, r.stderr
        assert message in r.stderr.decode()
        assert r.stderr.startswith(b"fdkit pipe-cat: ")
        assert r.stdout == b""
    r = cat("--raw", "--json", hello)
    assert r.returncode == 2
    assert b"not allowed with" in r.stderr


def test_help() -> None:
    r = subprocess.run([FDKIT, "pipe-cat", "--help"], capture_output=True, timeout=10, check=False)
    assert r.returncode == 0
    assert b"usage: fdkit pipe-cat" in r.stdout
    assert b"--mixed" in r.stdout
    assert b"--dictionary" in r.stdout


@pytest.mark.parametrize("waiting_in", ["fifo open", "read"])
def test_ctrl_c_exits_130_quietly(tmp_path: Path, waiting_in: str) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    if waiting_in == "fifo open":
        # No writer ever comes: pipe-cat waits in open(2).
        cmd, stdin = [FDKIT, "pipe-cat", str(fifo)], subprocess.DEVNULL
    else:
        cmd, stdin = [FDKIT, "pipe-cat", "-"], subprocess.PIPE
    with started(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        if waiting_in == "fifo open":
            wait_blocked_in_open(proc.pid)
        else:
            assert proc.stdin is not None
            proc.stdin.write(vector("V01_msg_hello.bin"))
            proc.stdin.flush()
            assert proc.stdout is not None
            assert readable(proc.stdout, 10)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=5)
    assert proc.returncode == 130, err
    assert err == b""
    if waiting_in == "read":
        assert out == b"message pid=12345 tid=0 len=5: Hello\n"


def test_closed_stdout_exits_quietly(tmp_path: Path) -> None:
    stream = tmp_path / "many"
    stream.write_bytes(vector("V01_msg_hello.bin") * 20000)
    with started(
        [FDKIT, "pipe-cat", str(stream)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        assert proc.stdout.readline() == b"message pid=12345 tid=0 len=5: Hello\n"
        proc.stdout.close()  # like `| head -1`
        assert proc.wait(timeout=10) == 141  # 128 + SIGPIPE, as for cat (fdkit.cli.EXIT_EPIPE)
        assert proc.stderr.read() == b""


# --- -q and -v --------------------------------------------------------------------------------


def test_quiet_prints_no_events_and_the_exit_code_says_whether_the_stream_is_whole() -> None:
    hello, big = vector("V01_msg_hello.bin"), vector("V05_msg_10000_a.bin")
    whole = cat("-q", "-", input=hello + big)
    assert (whole.returncode, whole.stdout, whole.stderr) == (0, b"", b"")
    cut = cat("-q", "-", input=hello + big[:5000])
    assert (cut.returncode, cut.stdout) == (1, b"")
    # Errors still go to stderr, as they were.
    assert cut.stderr.decode().startswith("fdkit pipe-cat: stream ended inside the chunk")
    counted = cat("-q", "--count", "-", input=hello + big)
    assert counted.stdout == b"2 messages, 0 bursts, 0 lines, 10005 bytes\n"


def test_verbose_logs_what_it_reads_with_a_timestamp(tmp_path: Path) -> None:
    stream = tmp_path / "stream"
    stream.write_bytes(vector("V01_msg_hello.bin"))
    r = cat("-v", str(stream))
    assert r.returncode == 0
    assert r.stdout == b"message pid=12345 tid=0 len=5: Hello\n"
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d fdkit pipe-cat: "
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 3, lines
    assert re.fullmatch(stamp + rf"reading '{re.escape(str(stream))}' \(\d+ bytes\)", lines[0])
    assert re.fullmatch(stamp + "normal mode", lines[1]), lines[1]
    assert re.fullmatch(stamp + "end of stream: 1 message, 0 bursts, 0 lines, 5 bytes", lines[2]), (
        lines[2]
    )


def test_the_summary_counts_in_the_singular_and_plural() -> None:
    """One message of one byte is "1 message", "1 byte", not "1 bytes" (as `wc` would not)."""
    from fdkit.cli.pipe_cat import Counts

    c = Counts()
    c.add("message", b"x")
    assert c.summary(False) == "1 message, 0 bursts, 0 lines, 1 byte"
    c.add("line", b"yz")
    assert c.summary(False) == "1 message, 0 bursts, 1 line, 3 bytes"
