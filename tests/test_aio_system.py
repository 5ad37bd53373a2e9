"""Processes, signals, pipes and threads on fdkit.aio and on asyncio's loop, the same code on
both: subprocesses with pipes (large output on stdout and stderr at once, communicate,
return codes, shell), signal handlers (os.kill to this process), connect_read_pipe /
connect_write_pipe, run_in_executor."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import os
import signal
import threading

import pytest

from helpers import payload
from helpers.aio import PYTHON, Loop, each_loop

BIG = payload(1 << 20, seed=15)

# Reads stdin to EOF, writes 4 MiB to stdout and 2 MiB to stderr interleaved, then the hash of
# what it read, and exits 7.
CHILD = r"""
import sys, hashlib
data = sys.stdin.buffer.read()
for i in range(64):
    sys.stdout.buffer.write(bytes([i]) * 65536)
    sys.stderr.buffer.write(bytes([255 - i]) * 32768)
sys.stdout.buffer.write(hashlib.sha256(data).digest())
sys.exit(7)
"""


@each_loop
def test_subprocess_exec_pipes_large_output(loop: Loop) -> None:
    """stdin 1 MiB in, 4 MiB out on stdout and 2 MiB on stderr at once: communicate collects both
    whole (no deadlock), the exit code comes through."""

    async def main() -> None:
        proc = await asyncio.create_subprocess_exec(
            PYTHON, "-c", CHILD,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate(BIG)
        assert proc.returncode == 7
        assert len(out) == 64 * 65536 + 32
        assert out[:-32] == b"".join(bytes([i]) * 65536 for i in range(64))
        assert out[-32:] == hashlib.sha256(BIG).digest()
        assert err == b"".join(bytes([255 - i]) * 32768 for i in range(64))

    loop.run(main())


@each_loop
def test_subprocess_streams_and_wait(loop: Loop) -> None:
    """Line by line through the pipes of a running child, then EOF on its stdin ends it."""

    async def main() -> None:
        proc = await asyncio.create_subprocess_exec(
            PYTHON, "-u", "-c",
            "import sys\nfor line in sys.stdin: print(line.strip().upper(), flush=True)",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdin is not None
        assert proc.stdout is not None
        for word in ("alpha", "beta", "gamma"):
            proc.stdin.write(word.encode() + b"\n")
            await proc.stdin.drain()
            assert await proc.stdout.readline() == word.upper().encode() + b"\n"
        proc.stdin.close()
        await proc.stdin.wait_closed()
        assert await proc.stdout.read() == b""
        assert await proc.wait() == 0
        assert proc.returncode == 0

    loop.run(main())


@each_loop
def test_subprocess_shell_and_kill(loop: Loop) -> None:
    async def main() -> None:
        proc = await asyncio.create_subprocess_shell(
            "echo $((6 * 7)); exit 3", stdout=asyncio.subprocess.PIPE
        )
        out, err = await proc.communicate()
        assert out == b"42\n"
        assert err is None
        assert proc.returncode == 3

        sleeper = await asyncio.create_subprocess_exec("sleep", "30")
        sleeper.kill()
        assert await asyncio.wait_for(sleeper.wait(), 10) == -signal.SIGKILL

        with pytest.raises(FileNotFoundError):
            await asyncio.create_subprocess_exec("/nonexistent/fdkit-no-such-program")

    loop.run(main())


@each_loop
def test_signal_handlers(loop: Loop) -> None:
    """add_signal_handler runs the callback (with its arguments) in the loop, for each signal
    sent; remove_signal_handler puts the default disposition back and says whether it removed."""
    before = signal.getsignal(signal.SIGUSR1)

    async def main() -> None:
        running = asyncio.get_running_loop()
        got: list[tuple[str, int]] = []
        arrived = asyncio.Event()
        in_loop_thread: list[bool] = []

        def on_signal(tag: str, n: int) -> None:
            in_loop_thread.append(threading.current_thread() is threading.main_thread())
            got.append((tag, n))
            arrived.set()

        running.add_signal_handler(signal.SIGUSR1, on_signal, "usr1", 1)
        running.add_signal_handler(signal.SIGUSR2, on_signal, "usr2", 2)
        try:
            for _ in range(3):
                arrived.clear()
                os.kill(os.getpid(), signal.SIGUSR1)
                await asyncio.wait_for(arrived.wait(), 5)
            arrived.clear()
            os.kill(os.getpid(), signal.SIGUSR2)
            await asyncio.wait_for(arrived.wait(), 5)
            assert got == [("usr1", 1)] * 3 + [("usr2", 2)]
            assert all(in_loop_thread)
            # replacing a handler: the new one runs
            running.add_signal_handler(signal.SIGUSR1, on_signal, "again", 3)
            arrived.clear()
            os.kill(os.getpid(), signal.SIGUSR1)
            await asyncio.wait_for(arrived.wait(), 5)
            assert got[-1] == ("again", 3)
        finally:
            assert running.remove_signal_handler(signal.SIGUSR1) is True
            assert running.remove_signal_handler(signal.SIGUSR2) is True
        assert running.remove_signal_handler(signal.SIGUSR1) is False
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL

    loop.run(main())
    signal.signal(signal.SIGUSR1, before)


@each_loop
def test_read_and_write_pipes(loop: Loop) -> None:
    """connect_write_pipe writes 1 MiB into a pipe that connect_read_pipe reads on the same loop;
    closing the write transport gives the reader EOF; both transports close their fds."""

    async def main() -> None:
        running = asyncio.get_running_loop()
        r, w = os.pipe()
        rf = os.fdopen(r, "rb", buffering=0)
        wf = os.fdopen(w, "wb", buffering=0)
        reader = asyncio.StreamReader()
        rt, _ = await running.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), rf)
        wt, wp = await running.connect_write_pipe(asyncio.streams.FlowControlMixin, wf)
        writer = asyncio.StreamWriter(wt, wp, None, running)
        assert isinstance(rt, asyncio.ReadTransport)
        assert isinstance(wt, asyncio.WriteTransport)

        async def send() -> None:
            for i in range(0, len(BIG), 50_000):
                writer.write(BIG[i : i + 50_000])
                await writer.drain()
            writer.close()

        sending = asyncio.create_task(send())
        assert await reader.read() == BIG
        await sending
        for _ in range(500):  # connection_lost (which closes the pipe) runs a turn or two later
            if rf.closed and wf.closed:
                break
            await asyncio.sleep(0.002)
        assert rt.is_closing()
        assert wt.is_closing()
        assert rf.closed
        assert wf.closed

    loop.run(main())


@each_loop
def test_run_in_executor(loop: Loop) -> None:
    """The default executor runs the function in another thread and returns its result; an
    exception comes back to the awaiting task; a custom executor is used when given."""

    def where(x: int) -> tuple[int, str]:
        return x * 2, threading.current_thread().name

    def boom() -> None:
        raise ZeroDivisionError("in the executor")

    async def main() -> None:
        running = asyncio.get_running_loop()
        value, thread = await running.run_in_executor(None, where, 21)
        assert value == 42
        assert thread != threading.current_thread().name
        with pytest.raises(ZeroDivisionError, match="in the executor"):
            await running.run_in_executor(None, boom)
        with concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="mine") as ex:
            results = await asyncio.gather(
                *(running.run_in_executor(ex, where, i) for i in range(8))
            )
            assert [v for v, _ in results] == [i * 2 for i in range(8)]
            assert all(t.startswith("mine") for _, t in results)
        assert await asyncio.to_thread(sum, [1, 2, 3]) == 6

    loop.run(main())
