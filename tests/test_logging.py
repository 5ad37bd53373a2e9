"""fdkit.logging: records logged in fork, spawn and forkserver children arrive whole, in
order and with their fields in the parent; nothing is lost when a child exits (normally or by
``os._exit``) right after logging; no lock taken across ``fork`` deadlocks a child; the
listener stops cleanly.

Real processes (``multiprocessing`` contexts), real FIFOs and pipes; every child is joined
with a deadline and killed if it overstays.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import logging
import multiprocessing
import os
import pickle
import random
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest

from fdkit.atomic_pipe import PIPE_BUF, AtomicPipe
from fdkit.logging import AtomicPipeHandler, AtomicPipeListener, child_setup, listen
from helpers import bounded, open_fds, wait_for

StartMethod = Literal["fork", "spawn", "forkserver"]
METHODS: list[StartMethod] = ["fork", "spawn", "forkserver"]
TRANSPORTS = ["fifo", "pair"]

# Python 3.12+ warns when a multi-threaded process forks (the listener's thread is running):
# that fork-with-threads case is exactly what these tests exercise.
pytestmark = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded:DeprecationWarning"
)


@pytest.fixture(scope="session", autouse=True)
def _multiprocessing_helpers() -> None:
    """Starts multiprocessing's helper processes (resource tracker, forkserver) before this
    module's fd-leak snapshot: they keep a few fds open in this process for the rest of the
    session by design, which is no leak of the code under test."""
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()
    forkserver.ensure_running()


class Collector(logging.Handler):
    """Keeps every record the listener hands it."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def tagged(self, tag: str) -> list[logging.LogRecord]:
        return [r for r in self.records if getattr(r, "tag", None) == tag]


def make_listener(
    transport: str, *handlers: logging.Handler
) -> tuple[AtomicPipeListener, AtomicPipeHandler]:
    if transport == "fifo":
        listener = AtomicPipeListener(*handlers)
        return listener, listener.handler()
    return AtomicPipeListener.pair(*handlers)


T = TypeVar("T")


def field(r: logging.LogRecord, key: str, kind: type[T]) -> T:
    """What ``extra=`` set on the record as attribute ``key``, checked to be a ``kind``."""
    value = getattr(r, key)
    assert isinstance(value, kind), (key, value)
    return value


def context(method: StartMethod) -> ForkContext | SpawnContext | ForkServerContext:
    """``multiprocessing.get_context(method)``, typed by the method."""
    if method == "fork":
        return multiprocessing.get_context("fork")
    if method == "spawn":
        return multiprocessing.get_context("spawn")
    return multiprocessing.get_context("forkserver")


def run_children(
    ctx: ForkContext | SpawnContext | ForkServerContext,
    target: Callable[..., None],
    arg_tuples: list[tuple[Any, ...]],
    *,
    after_start: Callable[[], None] | None = None,
    timeout: float = 30.0,
) -> list[int]:
    """Starts one child per argument tuple, joins them all (bounded), returns their pids;
    every child must exit 0. A child still running at the deadline is killed."""
    procs = [ctx.Process(target=target, args=a) for a in arg_tuples]
    try:
        for p in procs:
            p.start()
        if after_start is not None:
            after_start()
        deadline = time.monotonic() + timeout
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        codes = [p.exitcode for p in procs]
        pids: list[int] = []
        for p in procs:
            assert p.pid is not None  # started
            pids.append(p.pid)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
            p.close()
    assert codes == [0] * len(procs), f"children exit codes (None: still running): {codes}"
    return pids


# ---------------------------------------------------------------------------------------------
# What the children do (module level: spawn and forkserver children import them by name)


@dataclasses.dataclass(frozen=True)
class Point:
    """A non-builtin extra value: it travels pickled on its own and comes back equal."""

    x: int
    y: int


def extras(tag: str, i: int) -> dict[str, Any]:
    return {
        "tag": tag,
        "seq": i,
        "pair": (i, tag),
        "raw": bytes([i % 256, 0, 255]),
        "nested": {"k": [i, 1.5, None]},
        "point": Point(i, -i),
        "when": datetime.date(2024, 1, 1 + i % 28),
    }


def child_logs(handler: AtomicPipeHandler, tag: str, n: int, exit_mode: str) -> None:
    child_setup(handler, logging.DEBUG)
    log = logging.getLogger(f"fdkit.test.{tag}")
    for i in range(n):
        log.info("record %d of %s", i, tag, extra=extras(tag, i))
    try:
        raise ValueError(f"boom in {tag}")
    except ValueError:
        log.exception(
            "failed in %s",
            tag,
            stack_info=True,
            extra={"tag": tag, "seq": n, "lock": threading.Lock()},  # a lock does not pickle
        )
    if exit_mode == "os_exit":
        os._exit(0)


def check_child_records(collect: Collector, tag: str, n: int, pid: int) -> None:
    mine = collect.tagged(tag)
    assert [field(r, "seq", int) for r in mine] == list(range(n + 1)), (
        f"{tag}: records missing or reordered"
    )
    for r in mine[:n]:
        assert r.getMessage() == f"record {field(r, 'seq', int)} of {tag}"
        assert (r.name, r.levelno, r.process) == (f"fdkit.test.{tag}", logging.INFO, pid)
        assert r.args is None
        assert r.exc_info is None
        for key, value in extras(tag, field(r, "seq", int)).items():
            got = getattr(r, key)
            assert got == value, (tag, field(r, "seq", int), key, got)
            assert type(got) is type(value), (tag, field(r, "seq", int), key, got)
    last = mine[n]
    assert (last.levelno, last.getMessage(), last.process) == (
        logging.ERROR,
        f"failed in {tag}",
        pid,
    )
    # The exception itself came back (without its traceback), and its text in exc_text.
    assert last.exc_info is not None
    assert last.exc_info[0] is ValueError
    assert str(last.exc_info[1]) == f"boom in {tag}"
    assert last.exc_text is not None
    assert last.exc_text.startswith("Traceback (most recent call last):")
    assert "in child_logs" in last.exc_text
    assert last.exc_text.endswith(f"ValueError: boom in {tag}")
    assert last.stack_info is not None
    assert last.stack_info.startswith("Stack (most recent call")
    assert "in child_logs" in last.stack_info
    assert "lock" in field(last, "lock", str)
    # The parent's formatters print the child's traceback and stack.
    text = logging.Formatter("%(message)s").format(last)
    assert f"ValueError: boom in {tag}" in text
    assert "Stack (most recent call" in text


@pytest.mark.parametrize("exit_mode", ["return", "os_exit"])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_child_records_arrive_whole(transport: str, method: StartMethod, exit_mode: str) -> None:
    """Two children each log 40 records with extra fields and an exception, then exit right
    away: everything is in the parent when the listener has stopped."""
    n = 40
    collect = Collector()
    listener, handler = make_listener(transport, collect)
    tags = [f"{method}-{exit_mode}-{k}" for k in range(2)]
    with listener:
        pids = run_children(
            context(method),
            child_logs,
            [(handler, tag, n, exit_mode) for tag in tags],
            # The parent's writer goes once the children have theirs: over a pair, EOF then
            # comes when the last child exits.
            after_start=handler.close,
        )
        if transport == "pair":
            assert listener.join(10), "the pair listener did not end at EOF"
    assert not listener.is_alive()
    for tag, pid in zip(tags, pids, strict=True):
        check_child_records(collect, tag, n, pid)
    assert len(collect.records) == 2 * (n + 1)
    assert listener.received == 2 * (n + 1)
    assert listener.undecodable == 0


# ---------------------------------------------------------------------------------------------
# Volume: many writers at once, big records


def payload_for(tag: str, i: int) -> bytes:
    """Every 25th record spans a few chunks (10 KB); the others are small."""
    size = 10_000 if i % 25 == 0 else 100 + i % 200
    return random.Random(f"{tag}:{i}").randbytes(size)


def child_payloads(handler: AtomicPipeHandler, tag: str, n: int) -> None:
    child_setup(handler, logging.INFO)
    log = logging.getLogger("fdkit.test.many")
    for i in range(n):
        data = payload_for(tag, i)
        digest = hashlib.sha256(data).hexdigest()
        log.info("%s %d", tag, i, extra={"tag": tag, "seq": i, "data": data, "digest": digest})
    os._exit(0)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_many_children_at_once_nothing_lost_or_mangled(transport: str) -> None:
    n, tags = 500, [f"w{k}" for k in range(4)]
    collect = Collector()
    listener, handler = make_listener(transport, collect)
    with listener:
        pids = run_children(
            multiprocessing.get_context("fork"),
            child_payloads,
            [(handler, tag, n) for tag in tags],
            after_start=handler.close,
        )
    assert len(collect.records) == n * len(tags)
    for tag, pid in zip(tags, pids, strict=True):
        mine = collect.tagged(tag)
        assert [field(r, "seq", int) for r in mine] == list(range(n)), (
            f"{tag}: records missing or reordered"
        )
        for r in mine:
            assert r.process == pid
            assert r.getMessage() == f"{tag} {field(r, 'seq', int)}"
            assert field(r, "data", bytes) == payload_for(tag, field(r, "seq", int))
            assert field(r, "digest", str) == hashlib.sha256(field(r, "data", bytes)).hexdigest()


HUGE = "".join(chr(0x41 + i % 26) for i in range(100_000))


def child_huge(handler: AtomicPipeHandler) -> None:
    child_setup(handler)
    log = logging.getLogger("fdkit.test.huge")
    try:
        raise RuntimeError("z" * 60_000)
    except RuntimeError:
        log.error("%s", HUGE, exc_info=True, extra={"tag": "huge"})
    os._exit(0)  # at once: the 40 chunks are already in the kernel


@pytest.mark.parametrize("method", METHODS)
def test_a_100k_record_with_a_60k_traceback_arrives_whole(method: StartMethod) -> None:
    collect = Collector()
    with listen(collect) as handler:
        [pid] = run_children(context(method), child_huge, [(handler,)])
    [r] = collect.records
    assert len(r.getMessage()) > 24 * PIPE_BUF  # two dozen chunks at least
    assert r.getMessage() == HUGE
    assert r.process == pid
    assert r.exc_text is not None
    assert r.exc_text.endswith("RuntimeError: " + "z" * 60_000)
    assert r.exc_info is not None
    assert r.exc_info[0] is RuntimeError


@pytest.fixture
def private_logger() -> Iterator[logging.Logger]:
    """A logger of the test's own that does not propagate to the root, reset afterwards."""
    log = logging.getLogger(f"fdkit.test.private.{random.getrandbits(32):08x}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    try:
        yield log
    finally:
        for h in list(log.handlers):
            log.removeHandler(h)
        log.propagate = True


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_threads_of_one_process_log_concurrently(
    transport: str, private_logger: logging.Logger
) -> None:
    n, threads = 300, 8
    collect = Collector()
    listener, handler = make_listener(transport, collect)
    private_logger.addHandler(handler)

    def work(k: int) -> None:
        for i in range(n):
            blob = b"%d" % k * (3000 if i % 50 == 0 else 5)  # some multi-chunk records
            private_logger.info("t%d %d", k, i, extra={"tag": f"t{k}", "seq": i, "blob": blob})

    with listener:
        workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(30)
        assert not any(t.is_alive() for t in workers)
        private_logger.removeHandler(handler)
        handler.close()
    assert len(collect.records) == n * threads
    for k in range(threads):
        mine = collect.tagged(f"t{k}")
        assert [field(r, "seq", int) for r in mine] == list(range(n))
        assert len({r.thread for r in mine}) == 1
        assert all(
            field(r, "blob", bytes) == b"%d" % k * (3000 if field(r, "seq", int) % 50 == 0 else 5)
            for r in mine
        )
    # Thread idents can be reused once a thread ends; names are unique per Thread object.
    assert len({r.threadName for r in collect.records}) == threads


# ---------------------------------------------------------------------------------------------
# Fork safety


def child_logs_once(tag: str, logger_name: str) -> None:
    # The handler came with the fork, attached to the logger, possibly mid-write in the parent.
    logging.getLogger(logger_name).info("child %s", tag, extra={"tag": tag, "seq": 0})
    os._exit(0)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_fork_while_another_thread_is_writing_does_not_deadlock(
    transport: str, private_logger: logging.Logger
) -> None:
    """A parent thread writes 20 KB records back to back (so it is nearly always inside the
    pipe's write, holding the handler's lock and the pipe's internal lock) while children are
    forked: each child logs through the inherited handler at once and must not block on a lock
    copied in the locked state."""
    collect = Collector()
    listener, handler = make_listener(transport, collect)
    private_logger.addHandler(handler)
    stop = threading.Event()
    sent = 0

    def hammer() -> None:
        nonlocal sent
        while not stop.is_set():
            private_logger.info("hammer", extra={"tag": "hammer", "seq": sent, "b": b"h" * 20_000})
            sent += 1

    tags = [f"forked{k}" for k in range(12)]
    with listener:
        t = threading.Thread(target=hammer)
        t.start()
        try:
            wait_for(lambda: sent > 3, what="the hammer thread to be writing")
            pids = run_children(
                multiprocessing.get_context("fork"),
                child_logs_once,
                [(tag, private_logger.name) for tag in tags],
                timeout=15,
            )
        finally:
            stop.set()
            t.join(10)
            private_logger.removeHandler(handler)
            handler.close()
        assert not t.is_alive()
    for tag, pid in zip(tags, pids, strict=True):
        [r] = collect.tagged(tag)
        assert r.process == pid
        assert r.getMessage() == f"child {tag}"
    assert [field(r, "seq", int) for r in collect.tagged("hammer")] == list(range(sent))


def test_logging_reinitialises_handler_locks_in_a_fork_child() -> None:
    """The claim the handler's fork safety rests on (Python 3.9+): a handler lock held by
    another thread at fork is free in the child."""
    handler = AtomicPipeHandler("/nonexistent/fifo")
    held, release = threading.Event(), threading.Event()

    lock = handler.lock
    assert lock is not None

    def hold() -> None:
        with lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(5)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            got = handler.lock is not None and handler.lock.acquire(timeout=2)
            os._exit(0 if got else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
        t.join(5)
        handler.close()


def child_outlives(handler: AtomicPipeHandler, go: Any) -> None:
    log = logging.getLogger("fdkit.test.outlive")
    child_setup(handler)
    logging.raiseExceptions = False  # the one broken-pipe report would only be noise here
    log.warning("first", extra={"tag": "outlive"})
    go.wait(10)
    for i in range(100):  # 200 KB: more than a pipe holds
        log.warning("after %d %s", i, "y" * 2000)
    os._exit(0 if handler.dropped == 100 else 1)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_child_outliving_the_listener_gets_errors_not_a_hang(transport: str) -> None:
    """The child inherited the listener's read end with the fork: were it kept open, the
    child's writes would fill the pipe and block forever once the listener stopped. It is
    dropped in the child at fork, so the writes fail (EPIPE) and are counted as dropped."""
    ctx = multiprocessing.get_context("fork")
    collect = Collector()
    listener, handler = make_listener(transport, collect)
    go = ctx.Event()

    def stop_then_go() -> None:
        wait_for(lambda: len(collect.records) == 1, what="the child's first record")
        handler.close()
        listener.stop(timeout=5)
        go.set()

    with listener:
        run_children(ctx, child_outlives, [(handler, go)], after_start=stop_then_go, timeout=15)
    assert [r.getMessage() for r in collect.records] == ["first"]


# ---------------------------------------------------------------------------------------------
# The listener: routing, loops, bad input, stopping


def test_relayed_records_are_not_sent_round_again(private_logger: logging.Logger) -> None:
    """Without handlers the listener hands records to their logger; the handler feeding that
    listener is attached to the same logger here: it must not send relayed records again."""
    collect = Collector()
    with AtomicPipeListener() as listener:
        handler = listener.handler()
        private_logger.addHandler(handler)
        private_logger.addHandler(collect)
        for i in range(3):
            private_logger.info("loop %d", i)
        wait_for(lambda: listener.received >= 3, what="the relayed records")
        time.sleep(0.2)  # a loop would keep the count climbing
        assert listener.received == 3
        private_logger.removeHandler(handler)
        handler.close()
    # Each record twice: once directly, once relayed by the listener.
    assert sorted(r.getMessage() for r in collect.records) == sorted(
        f"loop {i}" for i in (0, 0, 1, 1, 2, 2)
    )


def test_respect_handler_level() -> None:
    warn, everything = Collector(logging.WARNING), Collector()
    with listen(warn, everything, respect_handler_level=True) as handler:
        for level in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR):
            handler.handle(logging.makeLogRecord({"name": "x", "levelno": level, "msg": "m"}))
    assert [r.levelno for r in everything.records] == [10, 20, 30, 40]
    assert [r.levelno for r in warn.records] == [30, 40]


def test_undecodable_messages_are_reported_and_the_listener_goes_on() -> None:
    collect = Collector()
    with AtomicPipeListener(collect) as listener:
        assert listener.address is not None
        with AtomicPipe.write_fifo(listener.address) as raw:
            raw.write_message(b"not a pickle")
            raw.write_message(pickle.dumps(["a", "list"]))
        handler = listener.handler()
        handler.handle(logging.makeLogRecord({"name": "after", "msg": "still here"}))
        handler.close()
    assert listener.undecodable == 2
    assert [r.name for r in collect.records] == ["fdkit.logging", "fdkit.logging", "after"]
    assert "undecodable log message (12 bytes: b'not a pickle')" in collect.records[0].getMessage()
    assert collect.records[2].getMessage() == "still here"


def test_garbage_on_the_fifo_stops_the_listener_and_writers_fail_fast(
    private_logger: logging.Logger,
) -> None:
    """The stream cannot be decoded past garbage: the listener says so, ends its thread and
    closes the read end, so a writer gets EPIPE instead of blocking on a pipe nobody reads."""
    collect = Collector()
    listener = AtomicPipeListener(collect).start()
    handler = listener.handler()
    private_logger.addHandler(handler)
    try:
        private_logger.warning("before")
        wait_for(lambda: len(collect.records) == 1, what="the first record")
        assert listener.address is not None
        raw = os.open(listener.address, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(raw, b"garbage, not an atomic pipe chunk\n" * 3)
        finally:
            os.close(raw)
        assert listener.join(5), "the listener kept going on an undecodable stream"
        logging.raiseExceptions, saved = False, logging.raiseExceptions
        try:
            for i in range(100):  # 200 KB: would fill the pipe were it still open
                private_logger.warning("after %d %s", i, "y" * 2000)
        finally:
            logging.raiseExceptions = saved
        assert handler.dropped == 100
    finally:
        private_logger.removeHandler(handler)
        handler.close()
        listener.stop(timeout=5)
    messages = [r.getMessage() for r in collect.records]
    assert messages[0] == "before", messages
    assert len(messages) == 3, messages
    assert messages[1].startswith("broken log stream: ")
    assert "cannot be decoded past this point" in messages[2]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_stop_drains_and_frees_everything(transport: str) -> None:
    threads_before, fds_before = set(threading.enumerate()), open_fds()
    collect = Collector()
    listener, handler = make_listener(transport, collect)
    fifo_dir = None if listener.address is None else os.path.dirname(listener.address)
    listener.start()
    for i in range(200):  # ~400 KB: more than the pipe holds, so the listener is busy
        handler.handle(logging.makeLogRecord({"msg": f"r{i}", "blob": b"b" * 2000}))
    handler.close()
    if transport == "pair":
        assert listener.join(10), "no EOF once the only writer closed"
    listener.stop(timeout=10)
    assert [r.msg for r in collect.records] == [f"r{i}" for i in range(200)]
    assert not listener.is_alive()
    assert set(threading.enumerate()) == threads_before
    assert open_fds() == fds_before
    if fifo_dir is not None:
        assert not os.path.exists(fifo_dir)
    listener.stop()  # idempotent
    with pytest.raises(RuntimeError):
        listener.start()


def handle_counting_errors(handler: AtomicPipeHandler, n: int) -> int:
    """Hands ``n`` records to ``handler``; returns how many reached ``handleError``."""
    reported: list[logging.LogRecord] = []
    # This one handler's handleError, replaced to count what reaches it.
    handler.handleError = reported.append  # type: ignore[method-assign, assignment]
    for i in range(n):
        handler.handle(logging.makeLogRecord({"msg": f"too late {i}"}))
    return len(reported)


def test_a_writer_fails_fast_once_the_listener_is_gone(tmp_path: Path) -> None:
    """ENOENT (the FIFO was removed by stop) or ENXIO (a FIFO nobody reads, as a killed
    listener leaves it): no wait, one report, then records are only counted."""
    listener = AtomicPipeListener().start()
    handler = listener.handler()
    listener.stop(timeout=5)
    assert handle_counting_errors(handler, 3) == 1
    assert handler.dropped == 3
    handler.close()

    orphan = tmp_path / "orphan.fifo"
    os.mkfifo(orphan, 0o600)
    handler = AtomicPipeHandler(orphan)
    outcome = bounded(lambda: handle_counting_errors(handler, 3), timeout=5)
    assert outcome.get() == 1
    assert handler.dropped == 3
    handler.close()


def test_handler_pickles_as_its_address_but_a_pair_only_to_start_a_child() -> None:
    with AtomicPipeListener() as listener:
        handler = listener.handler(logging.WARNING)
        copy = pickle.loads(pickle.dumps(handler))
        assert type(copy) is AtomicPipeHandler
        assert (copy.address, copy.level, copy.listener_id) == (
            listener.address,
            logging.WARNING,
            listener.id,
        )
        handler.close()
        copy.close()
    listener, handler = AtomicPipeListener.pair()
    with listener:
        with pytest.raises(TypeError, match="multiprocessing child"):
            pickle.dumps(handler)
        handler.close()
