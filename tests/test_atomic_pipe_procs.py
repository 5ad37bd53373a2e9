"""Many writers on one pipe, for real: writer processes, threads sharing one writer, a child
after ``fork``, and FIFOs opened reader-first and writer-first.

Every message carries its writer number and a sequence number, and its body is derived from
both, so a lost, duplicated, reordered or mangled message is caught, not just counted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fdkit.atomic_pipe import AtomicPipe
from helpers import syscall_numbers, syscall_of, wait_for
from helpers.wire import HEADER, decode, header_offsets, wire_of

pytestmark = pytest.mark.timeout(60)

# Shared by the parent and the writer children (which exec it): message `seq` of writer `k`.
MESSAGE_CODE = """
import random
BLOCK = random.Random(1).randbytes(20_000)

def message(k, seq):
    if seq % 97 == 0:
        size = 4000 + seq * 37 % 9000  # one to four chunks
    else:
        size = (seq * 7919 + k * 31) % 600
    off = (seq * 131 + k * 17) % 5000
    return b"%d:%d:" % (k, seq) + BLOCK[off : off + size]
"""
_ns: dict[str, Any] = {}
exec(MESSAGE_CODE, _ns)
message: Callable[[int, int], bytes] = _ns["message"]

WRITER_CHILD = (
    MESSAGE_CODE
    + """
import sys
from fdkit.atomic_pipe import AtomicPipe

fd, k, n = map(int, sys.argv[1:])
with AtomicPipe.from_fd("w", fd) as w:
    seq = 0
    while seq < n:
        if seq % 3 == 0:  # a batch, then single calls: both paths interleave with the others
            batch = [message(k, s) for s in range(seq, min(n, seq + 50))]
            assert w.write_messages(batch) == len(batch)
            seq += len(batch)
        else:
            w.write_message(message(k, seq))
            seq += 1
"""
)


class Checker:
    """Checks each writer's messages arrive whole and in sequence."""

    def __init__(self, writers: int) -> None:
        self.next = [0] * writers

    def __call__(self, msg: bytes) -> None:
        k, seq, _ = msg.split(b":", 2)
        w, s = int(k), int(seq)
        assert s == self.next[w], f"writer {w}: got message {s}, expected {self.next[w]}"
        assert msg == message(w, s), f"writer {w}: message {s} is mangled"
        self.next[w] += 1


def read_until_eof(r: AtomicPipe, check: Callable[[bytes], None], wait: float = 20.0) -> int:
    count = 0
    while batch := r.read_messages(1024, timeout=wait):
        for m in batch:
            check(m)
        count += len(batch)
    assert r.eof(), f"no message nor EOF for {wait} s after {count} messages"
    return count


def test_four_writer_processes_ten_thousand_messages_each() -> None:
    writers, n = 4, 10_000
    r, w = AtomicPipe.pair()
    children: list[subprocess.Popen[bytes]] = []
    with r:
        try:
            with w:
                for k in range(writers):
                    children.append(
                        subprocess.Popen(
                            [sys.executable, "-c", WRITER_CHILD, str(w.fileno()), str(k), str(n)],
                            pass_fds=[w.fileno()],
                        )
                    )
            # Our writer is closed: EOF comes when the last child exits.
            check = Checker(writers)
            assert read_until_eof(r, check) == writers * n
            assert check.next == [n] * writers
            assert [c.wait(20) for c in children] == [0] * writers
        finally:
            for c in children:
                if c.poll() is None:
                    c.kill()
                c.wait(10)


def test_threads_share_one_writer() -> None:
    writers, n = 4, 2_000
    r, w = AtomicPipe.pair()
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            for seq in range(n):
                w.write_message(message(k, seq))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(writers)]
    with r:
        with w:
            for t in threads:
                t.start()
            check = Checker(writers)
            count = 0
            while count < writers * n:
                batch = r.read_messages(1024, timeout=20)
                assert batch, f"stuck after {count} messages"
                for m in batch:
                    check(m)
                count += len(batch)
            for t in threads:
                t.join(20)
            assert not errors
            assert not any(t.is_alive() for t in threads)
        assert r.read_message(timeout=5) is None
        assert r.eof()


def chunk_table(wire: bytes) -> list[tuple[int, int, bytes]]:
    """(pid, tid, payload) of every chunk of a normal-mode stream."""
    out = []
    for at in header_offsets(wire):
        pid, tid, _, size = HEADER.unpack_from(wire, at)
        out.append((pid, tid, wire[at + HEADER.size : at + HEADER.size + size]))
    return out


def test_tid_is_zero_on_the_main_thread_and_distinct_per_thread() -> None:
    threads = 4
    tids: dict[int, int] = {}
    # Every thread stays alive until all have written: a kernel thread id is unique only
    # among live threads.
    barrier = threading.Barrier(threads)

    def write(w: AtomicPipe) -> None:
        w.write_message(b"\xff" * 10)

        def run(i: int) -> None:
            tids[i] = threading.get_native_id()
            w.write_message(bytes([i]) * 5000)  # two chunks: both must carry the tid
            barrier.wait(10)

        ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(20)

    table = chunk_table(wire_of(write))
    assert len(table) == 1 + 2 * threads
    assert {pid for pid, _, _ in table} == {os.getpid()}
    assert table[0][1:] == (0, b"\xff" * 10)
    assert len(set(tids.values())) == threads
    assert 0 not in tids.values()
    for _, tid, data in table[1:]:
        assert tid == tids[data[0]]
        assert data == bytes([data[0]]) * len(data)


# A fork in a multi-threaded process, which Python 3.12+ warns of (a DeprecationWarning that
# `-W error` made os.fork() raise from 3.15; 3.12-3.14 dropped it): this test forks so.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_child_after_fork_writes_with_its_own_pid() -> None:
    # No thread of this test holds the writer while we fork, so the child may use it.
    r, w = AtomicPipe.pair()
    with r, w:
        w.write_message(b"parent before")
        pid = os.fork()
        if pid == 0:  # the child: write through the inherited writer, then leave at once
            code = 1
            try:
                w.write_message(b"child")
                w.write_message(b"c" * 5000)
                code = 0
            finally:
                os._exit(code)
        w.write_message(b"parent after")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        w.close()
        wire = b""
        while part := os.read(r.fileno(), 1 << 16):
            wire += part
    table = chunk_table(wire)
    by_pid: dict[int, bytes] = {}
    for p, tid, data in table:
        assert tid == 0
        by_pid[p] = by_pid.get(p, b"") + data
    assert by_pid == {os.getpid(): b"parent beforeparent after", pid: b"child" + b"c" * 5000}
    assert sorted(m for _, m in decode(wire)) == sorted(
        [b"parent before", b"child", b"c" * 5000, b"parent after"]
    )


# A fork in a multi-threaded process, which Python 3.12+ warns of (a DeprecationWarning that
# `-W error` made os.fork() raise from 3.15; 3.12-3.14 dropped it): this test forks so.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forking_while_another_thread_writes_never_leaves_the_child_stuck() -> None:
    """The classic post-fork deadlock: a thread holds the writer's lock (mid-write, GIL
    released) when another thread forks. The child must still write, and must not repeat
    the parent's queued bytes."""
    r, w = AtomicPipe.pair()
    stop = threading.Event()
    received: list[tuple[int, int, bytes]] = []

    def drain() -> None:
        while (m := r.read_message(timeout=5, with_writer=True)) is not None:
            received.append(m)

    def hammer() -> None:
        n = 0
        while not stop.is_set():
            w.write_message(n.to_bytes(4, "little") * 5000)  # 20 KB: 5 chunks, 5 writes
            n += 1

    reader = threading.Thread(target=drain)
    writer = threading.Thread(target=hammer)
    reader.start()
    writer.start()
    children = []
    try:
        for _ in range(12):
            time.sleep(0.01)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    w.write_message(b"child %d" % os.getpid())
                    code = 0
                finally:
                    os._exit(code)
            children.append(pid)
        for pid in children:
            deadline = time.monotonic() + 10
            while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
                if time.monotonic() > deadline:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    pytest.fail("a child forked mid-write hung on the inherited writer")
                time.sleep(0.01)
            assert os.waitstatus_to_exitcode(done[1]) == 0
    finally:
        stop.set()
        writer.join(10)
        w.close()
        reader.join(10)
        r.close()
    mine = [data for pid, _, data in received if pid == os.getpid()]
    from_children = {pid: data for pid, _, data in received if pid != os.getpid()}
    assert from_children == {pid: b"child %d" % pid for pid in children}
    # The parent's messages arrive whole, in order, each once (no child replayed them).
    numbers = [int.from_bytes(m[:4], "little") for m in mine]
    assert numbers == list(range(len(numbers)))
    assert all(m == m[:4] * 5000 for m in mine)


# --- FIFOs ----------------------------------------------------------------------------------


class Opener(threading.Thread):
    """Opens one end of a FIFO on a thread (the open blocks until the other end comes)."""

    def __init__(self, call: Callable[[], AtomicPipe]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.tid = 0
        self.result: AtomicPipe | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        self.tid = threading.get_native_id()
        try:
            self.result = self.call()
        except BaseException as e:
            self.error = e


@pytest.mark.parametrize("first", ["reader", "writer"])
def test_fifo(first: str, tmp_path: Path) -> None:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    opens = {
        "reader": lambda: AtomicPipe.read_fifo(path),
        "writer": lambda: AtomicPipe.write_fifo(str(path)),
    }
    second = "writer" if first == "reader" else "reader"
    opener = Opener(opens[first])
    opener.start()
    other: AtomicPipe | None = None
    try:
        # It really waits in open(2) for the other end (with the GIL released: we run).
        wait_for(
            lambda: opener.tid != 0 and syscall_of(opener.tid) in syscall_numbers("open"),
            what=f"the {first} to block in open",
        )
        time.sleep(0.05)
        assert opener.is_alive()
        assert opener.result is None
        other = opens[second]()
        opener.join(5)
        assert not opener.is_alive()
        assert opener.error is None
        assert opener.result is not None
        ends = {first: opener.result, second: other}
        r, w = ends["reader"], ends["writer"]
        assert (r.mode, w.mode) == ("r", "w")
        sent = [b"through", b"a fifo" * 2000]
        w.write_messages(sent)
        got: list[bytes] = []
        while len(got) < len(sent) and (batch := r.read_messages(timeout=5)):
            got += batch
        assert got == sent
        w.close()
        assert r.read_message(timeout=5) is None
        assert r.eof()
    finally:
        if opener.is_alive():  # free it: an O_RDWR open of a FIFO never waits
            os.close(os.open(path, os.O_RDWR))
            opener.join(5)
        for p in (opener.result, other):
            if p is not None:
                p.close()
