"""Multi-process logging over an atomic pipe: children send records, the parent re-emits them.

Why not ``QueueHandler``/``QueueListener`` over a ``multiprocessing.Queue``: the queue pickles
in a feeder thread, so a child that calls ``os._exit`` (or is a ``fork`` child ending through
``os._exit``) loses what the feeder had not written yet, and the queue's locks, held by another
thread at ``fork``, deadlock the child. Here the thread that logs writes the record itself, as
one atomic-pipe message, in blocking mode: when ``emit`` returns the bytes are in the kernel,
so nothing is lost at exit, and there is no feeder thread and no lock of our own to inherit.

Two transports, one handler class:

* FIFO (``AtomicPipeListener()``, every start method): the listener makes a FIFO in a private
  directory (``mkdtemp``, mode 0700, so only this user can reach it) and opens it read-write,
  so its read end never sees EOF while children come and go. A handler is just the FIFO's
  path: it pickles as such for ``spawn``/``forkserver`` children and opens the FIFO on its
  first record in each process.
* pair (``AtomicPipeListener.pair()``): an anonymous pipe; ``fork`` children inherit the
  writer, ``spawn``/``forkserver`` children get it through multiprocessing's fd passing (the
  handler pickles only while a child is being started). The listener ends by itself at EOF,
  once the parent closed its handler and every child exited.

Encoding: a pickle of the record's ``__dict__``, sanitized the way
``logging.handlers.SocketHandler.makePickle`` does it (message merged with its args, the
traceback formatted into ``exc_text`` since tracebacks do not pickle). Pickle rather than
JSON because "extra fields intact" means their types too: JSON turns tuples into lists, drops
bytes and datetimes and stringifies int keys. The trust boundary is the same as
``multiprocessing`` (which pickles everything over its pipes): only this user's processes can
write to the FIFO or hold the pipe. Extra values of other than plain builtin types are pickled
one by one with their ``repr`` alongside, so one value the parent cannot unpickle (a class it
cannot import) degrades to its repr instead of losing the record.

Fork safety: ``logging`` itself re-initialises every handler's lock in a forked child (3.9+,
``_at_fork_reinit``). The native ``AtomicPipe`` serializes its calls internally, and another
thread may be inside one at ``fork``: so a handler inherited across ``fork`` never touches the
parent's pipe object again, it opens (FIFO) or duplicates (pair) its own in the new process.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import pickle
import secrets
import select
import stat
import sys
import tempfile
import threading
import traceback
import weakref
from collections.abc import Iterator
from typing import Any, Literal, Self

from fdkit.atomic_pipe import AtomicPipe, ProtocolError

__all__ = [
    "AtomicPipeHandler",
    "AtomicPipeListener",
    "child_setup",
    "listen",
]

_PROTOCOL = pickle.HIGHEST_PROTOCOL
# Keys the handler adds to the pickled dict; the listener removes them again.
_EXTRAS_KEY = "_fdkit_pickled_extras"
_EXC_KEY = "_fdkit_exc_value"
# Attributes every LogRecord has: their values are plain (str, int, float, None), never boxed.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
_ATOMS = frozenset({str, int, float, bool, bytes, type(None)})
_FORMATTER = logging.Formatter()
_LISTENER_GONE = frozenset({errno.EPIPE, errno.ENOENT, errno.ENXIO})

# Pipe objects inherited across fork that this process must never touch nor free (freeing one
# may take the lock another parent thread held at fork). One entry per fork generation.
_ABANDONED: list[AtomicPipe] = []
# Set in a listener's thread: a handler feeding that same listener drops what the listener
# relays, instead of sending it round again forever (handler attached to the parent's root).
_relaying = threading.local()


def _plain(value: object, depth: int = 0) -> bool:
    """Whether ``value`` is builtin data any process can unpickle (exact types, small depth)."""
    t = type(value)
    if t in _ATOMS:
        return True
    if depth >= 4:
        return False
    if t in (tuple, list) and isinstance(value, tuple | list):
        return all(_plain(v, depth + 1) for v in value)
    if t is dict and isinstance(value, dict):
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception as e:
        return f"<unrepresentable {type(value).__qualname__}: {e!r}>"


def encode_record(record: logging.LogRecord) -> bytes:
    """A record as bytes for the pipe: ``SocketHandler.makePickle``'s sanitizing, plus boxing.

    Does not modify the record (other handlers may still format it).
    """
    d = dict(record.__dict__)
    d["msg"] = record.getMessage()
    d["args"] = None
    d["exc_info"] = None
    d.pop("message", None)
    ei = record.exc_info
    if ei:
        if not record.exc_text:
            d["exc_text"] = _FORMATTER.formatException(ei)
        if ei[1] is not None:
            # The exception itself, without its traceback, so the parent's handlers see
            # exc_info[0]/[1]; optional: the parent keeps exc_text if it cannot unpickle it.
            with contextlib.suppress(Exception):
                d[_EXC_KEY] = pickle.dumps(ei[1], _PROTOCOL)
    boxed: dict[str, tuple[bytes | None, str]] = {}
    for key, value in d.items():
        if key not in _STANDARD and not _plain(value):
            blob: bytes | None
            try:
                blob = pickle.dumps(value, _PROTOCOL)
            except Exception:
                blob = None
            boxed[key] = (blob, _safe_repr(value))
    for key in boxed:
        del d[key]
    if boxed:
        d[_EXTRAS_KEY] = boxed
    return pickle.dumps(d, _PROTOCOL)


def decode_record(data: bytes) -> logging.LogRecord:
    """The record :func:`encode_record` made (``exc_info`` restored without traceback when the
    exception unpickles here; boxed extras fall back to their repr when they do not)."""
    d = pickle.loads(data)
    if not isinstance(d, dict):
        raise ValueError(f"not a log record: a pickled {type(d).__name__}")
    for key, (blob, text) in (d.pop(_EXTRAS_KEY, None) or {}).items():
        value: object = text
        if blob is not None:
            with contextlib.suppress(Exception):
                value = pickle.loads(blob)
        d[key] = value
    exc = d.pop(_EXC_KEY, None)
    if exc is not None:
        with contextlib.suppress(Exception):
            value = pickle.loads(exc)
            if isinstance(value, BaseException):
                d["exc_info"] = (type(value), value, None)
    return logging.makeLogRecord(d)


def _open_fifo_writer(path: str) -> AtomicPipe:
    """Opens the listener's FIFO for writing, in blocking mode.

    ``O_NONBLOCK`` for the open only: with no reader (a listener killed without cleanup) it
    fails at once with ENXIO where a blocking open (``AtomicPipe.write_fifo``) would wait
    forever. The writes are blocking again, so ``emit`` returns with the record in the kernel.
    """
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a FIFO")
        os.set_blocking(fd, True)
        return AtomicPipe.from_fd("w", fd)
    except BaseException:
        os.close(fd)
        raise


class AtomicPipeHandler(logging.Handler):
    """Sends each record, whole, as one atomic-pipe message to an :class:`AtomicPipeListener`.

    Get one from :meth:`AtomicPipeListener.handler` (or :func:`listen`); attach it in children
    with :func:`child_setup`. It formats nothing itself: the parent's handlers do. Pickling
    carries the address and the level (not filters or a formatter) for ``spawn`` and
    ``forkserver`` children. A record that cannot be sent goes to ``handleError`` and counts
    in :attr:`dropped`; once the listener is gone (EPIPE, its FIFO removed, or no reader) that
    is said once per process and later records are only counted.
    """

    def __init__(
        self,
        address: str | os.PathLike[str],
        level: int | str = logging.NOTSET,
        *,
        listener_id: str | None = None,
    ) -> None:
        """A handler writing to the FIFO at ``address``, opened on the first record.

        ``listener_id`` names the listener behind the FIFO so that records this listener
        relays in its own thread are not sent to it again (see :meth:`handle`).
        """
        super().__init__(level)
        self._setup(os.fspath(address), None, listener_id)

    def _setup(
        self, address: str | None, writer: AtomicPipe | None, listener_id: str | None
    ) -> None:
        self.address = address
        self.listener_id = listener_id
        self.dropped = 0
        self._pipe = writer
        self._fd = -1 if writer is None else writer.fileno()  # the pair's writer, in _pid
        self._pid = os.getpid()
        self._broken = False
        self._closed = False
        _HANDLERS.add(self)

    @classmethod
    def from_writer(
        cls,
        writer: AtomicPipe,
        level: int | str = logging.NOTSET,
        *,
        listener_id: str | None = None,
    ) -> AtomicPipeHandler:
        """A handler over a pipe's writer end; it takes ownership (closes it on close()).
        Children started by ``fork`` keep using it, through a dup of the fd."""
        if writer.mode != "w":
            raise ValueError("AtomicPipeHandler needs a writer")
        writer.blocking = True  # emit returns with the record in the kernel
        self = cls.__new__(cls)
        logging.Handler.__init__(self, level)
        self._setup(None, writer, listener_id)
        return self

    def serialize(self, record: logging.LogRecord) -> bytes:
        """The message for ``record`` (override to change the encoding, with the listener's
        :meth:`AtomicPipeListener.deserialize`)."""
        return encode_record(record)

    def handle(self, record: logging.LogRecord) -> bool:
        """Drops what our own listener relays in its thread (this handler attached to a logger
        of the listener's process): sending it again would loop forever. Checked before taking
        the handler's lock, which a thread blocked on a full pipe may hold while it waits for
        this very listener to read."""
        if self.listener_id is not None and getattr(_relaying, "id", None) == self.listener_id:
            return False
        return super().handle(record)

    def emit(self, record: logging.LogRecord) -> None:
        """Writes the record as one message; blocks while the pipe is full.

        Called under the handler's lock (``Handler.handle``), so one process's records leave in
        the order they were logged.
        """
        try:
            pipe = self._writer()
            if pipe is None:
                self.dropped += 1
                return
            pipe.write_message(self.serialize(record))
        except RecursionError:
            raise
        except Exception as e:
            # The listener is gone (EPIPE; its FIFO removed, ENOENT; no reader, ENXIO): said
            # once, then records are only counted; it will not come back at this address.
            self._broken = isinstance(e, OSError) and e.errno in _LISTENER_GONE
            self.dropped += 1
            self.handleError(record)

    def _writer(self) -> AtomicPipe | None:
        """This process's pipe (None once the listener is gone): opened or duplicated on the
        first record after a fork, never shared with the parent's object."""
        if self._closed:
            raise ValueError("the handler is closed")
        pid = os.getpid()
        if self._pid != pid:
            self._adopt_after_fork(pid)
        if self._broken:
            return None
        if self._pipe is None:
            if self.address is None:
                raise ValueError("the handler's pipe is closed")
            self._pipe = _open_fifo_writer(self.address)
        return self._pipe

    def _adopt_after_fork(self, pid: int) -> None:
        inherited, self._pipe = self._pipe, None
        self._pid, self._broken, self.dropped = pid, False, 0
        if inherited is not None:
            _ABANDONED.append(inherited)
        if self.address is None and self._fd >= 0:
            # The pair's writer fd was inherited with the object: a fresh object over a dup.
            self._pipe = AtomicPipe.from_fd("w", os.dup(self._fd))
            self._fd = self._pipe.fileno()

    def flush(self) -> None:
        """Nothing to do: writes are synchronous (blocking mode)."""

    def close(self) -> None:
        """Closes this process's pipe; an object inherited across fork is left untouched."""
        self.acquire()
        try:
            pipe, self._pipe = self._pipe, None
            self._closed, self._fd = True, -1
            if pipe is not None:
                if self._pid == os.getpid():
                    pipe.close()
                else:
                    _ABANDONED.append(pipe)
        finally:
            self.release()
        super().close()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles for a ``spawn``/``forkserver`` child: the FIFO's path, or the pair's fd
        through multiprocessing's fd passing (only while a child is being started)."""
        if self.address is not None:
            return (_rebuild, (type(self), self.address, None, self.level, self.listener_id))
        from multiprocessing import context, reduction

        if context.get_spawning_popen() is None:
            raise TypeError(
                "an AtomicPipeHandler over a pipe pair pickles only to start a multiprocessing "
                "child (its fd travels with the process); use the FIFO listener otherwise"
            )
        self.acquire()
        try:
            pipe = self._writer()
        finally:
            self.release()
        if pipe is None:
            raise ValueError("the handler's pipe is broken")
        dup_fd = reduction.DupFd(pipe.fileno())
        return (_rebuild, (type(self), None, dup_fd, self.level, self.listener_id))


def _rebuild(
    cls: type[AtomicPipeHandler],
    address: str | None,
    dup_fd: Any,
    level: int,
    listener_id: str | None,
) -> AtomicPipeHandler:
    if address is not None:
        return cls(address, level, listener_id=listener_id)
    fd = dup_fd.detach()
    os.set_inheritable(fd, False)
    return cls.from_writer(AtomicPipe.from_fd("w", fd), level, listener_id=listener_id)


def _safe_remove(pid: int, path: str | None, directory: str | None, wake: int) -> None:
    """Finalizer: removes the FIFO and its directory and closes the wake fd (-1: none), in the
    process that made them only (a forked child's copy of a listener owns none of it)."""
    if os.getpid() != pid:
        return
    for remove, target in ((os.unlink, path), (os.rmdir, directory)):
        if target is not None:
            with contextlib.suppress(FileNotFoundError):
                remove(target)
    if wake >= 0:
        os.close(wake)


class AtomicPipeListener:
    """Reads records from the pipe in a background thread and re-emits them in this process.

    Records go to ``handlers`` when given (those below a handler's level are skipped with
    ``respect_handler_level``), else to ``logging.getLogger(record.name).handle(record)``
    (which applies that logger's filters and handlers, not its level: the child already did).

    ``stop()`` (or leaving the ``with`` block) makes new writers fail fast, reads everything
    already in the pipe, re-emits it and joins the thread: a child that logged and exited before
    ``stop()`` is never cut short. Over a pipe pair the thread also ends on its own at EOF
    (:meth:`join` waits for that). Not for use from two threads at once.
    """

    def __init__(
        self,
        *handlers: logging.Handler,
        respect_handler_level: bool = False,
        transport: Literal["fifo", "pair"] = "fifo",
        dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.handlers = handlers
        self.respect_handler_level = respect_handler_level
        self.received = 0  # records re-emitted (undecodable messages included)
        self.undecodable = 0
        self.id = secrets.token_hex(8)
        self.address: str | None = None
        self._pid = os.getpid()
        self._thread: threading.Thread | None = None
        self._pair_writer: AtomicPipe | None = None
        self._dir: str | None = None
        wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            if transport == "fifo":
                self._reader = self._make_fifo(dir)
            elif transport == "pair":
                self._reader, self._pair_writer = AtomicPipe.pair()
            else:
                raise ValueError(f"transport must be 'fifo' or 'pair', not {transport!r}")
            self._reader.blocking = False  # the thread waits in poll, with the wake fd
        except BaseException:
            _safe_remove(self._pid, self.address, self._dir, wake)
            raise
        self._wake = wake
        self._reader_fd = self._reader.fileno()
        self._finalizer = weakref.finalize(
            self, _safe_remove, self._pid, self.address, self._dir, wake
        )
        _LISTENERS.add(self)

    def _make_fifo(self, parent: str | os.PathLike[str] | None) -> AtomicPipe:
        self._dir = tempfile.mkdtemp(prefix="fdkit-log-", dir=parent)  # mode 0700
        self.address = os.path.join(self._dir, "log.fifo")
        os.mkfifo(self.address, 0o600)
        # O_RDWR: the listener counts as a writer of its own FIFO, so the read end never sees
        # EOF between children, and the open does not wait for one (Linux fifo(7)).
        fd = os.open(self.address, os.O_RDWR | os.O_CLOEXEC)
        try:
            return AtomicPipe.from_fd("r", fd)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def pair(
        cls,
        *handlers: logging.Handler,
        level: int | str = logging.NOTSET,
        respect_handler_level: bool = False,
    ) -> tuple[AtomicPipeListener, AtomicPipeHandler]:
        """A listener over an anonymous pipe and the one handler that owns its writer.

        Children inherit the handler (``fork``) or receive its fd (``spawn``/``forkserver``);
        close it in the parent once they are started, and the listener ends by itself when the
        last child exits.
        """
        listener = cls(*handlers, respect_handler_level=respect_handler_level, transport="pair")
        return listener, listener.handler(level)

    def handler(self, level: int | str = logging.NOTSET) -> AtomicPipeHandler:
        """A handler that feeds this listener (FIFO: a new one each call, cheap; pair: the one
        handler owning the writer, once)."""
        if self.address is not None:
            return AtomicPipeHandler(self.address, level, listener_id=self.id)
        writer, self._pair_writer = self._pair_writer, None
        if writer is None:
            raise ValueError("the pair's handler was already taken (share it: children inherit it)")
        return AtomicPipeHandler.from_writer(writer, level, listener_id=self.id)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> AtomicPipeListener:
        """Starts the reading thread (a daemon: a forgotten listener does not block exit)."""
        if self._thread is not None:
            raise RuntimeError("the listener was already started")
        if not self._finalizer.alive or os.getpid() != self._pid:
            raise RuntimeError("the listener is stopped (or belongs to another process)")
        self._thread = threading.Thread(target=self._run, name="fdkit-log-listener", daemon=True)
        self._thread.start()
        return self

    def is_alive(self) -> bool:
        """Whether the listener's reading thread runs (started and not yet ended)."""
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> bool:
        """Waits for the thread to end on its own (EOF on a pair); True when it has."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.is_alive()

    def stop(self, timeout: float | None = None) -> None:
        """Re-emits everything already written, then joins the thread and frees the pipe, the
        FIFO and its directory. Idempotent; a no-op in a forked child's copy.

        Raises TimeoutError when the thread (a slow handler) is still busy after ``timeout``;
        call again to finish.
        """
        if os.getpid() != self._pid:
            return
        if self.address is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.address)  # new writers now fail at once (ENOENT)
        thread = self._thread
        if thread is not None and thread.is_alive():
            with contextlib.suppress(OSError):
                os.eventfd_write(self._wake, 1)
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError(f"the log listener is still busy after {timeout} s")
        _LISTENERS.discard(self)  # before closing: a fork now must not touch the fd number
        self._reader.close()
        if self._pair_writer is not None:
            self._pair_writer.close()
            self._pair_writer = None
        self._finalizer()

    def __enter__(self) -> Self:
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _forget_in_child(self) -> None:
        """After fork, in the child: drop its copy of the read end, or a child outliving the
        listener would keep the pipe "read" and block forever once it is full, instead of
        getting EPIPE. ``dup2`` of /dev/null rather than ``close``: the inherited pipe object
        (never used here) still closes that number one day, and it must stay ours."""
        nul = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.dup2(nul, self._reader_fd, inheritable=False)
        finally:
            os.close(nul)

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        _relaying.id = self.id
        reader = self._reader
        poller = select.poll()
        poller.register(self._reader_fd, select.POLLIN)
        poller.register(self._wake, select.POLLIN)
        stopping = False
        last_error: tuple[int, str] | None = None
        while True:
            try:
                batch = reader.read_messages(256)
            except ProtocolError as e:
                key = (e.offset, e.kind)
                if key != last_error:
                    self._dispatch_record(self._error_record(f"broken log stream: {e}"))
                if reader.eof():
                    break  # a message cut short at EOF (a writer killed mid-write)
                if key == last_error:
                    self._abandon_stream()  # no progress past garbage: the reader cannot resync
                    break
                last_error = key
                continue
            if batch:
                for data in batch:
                    self._dispatch(data)
                continue
            if stopping or reader.eof():
                break
            for fd, _events in poller.poll():
                if fd == self._wake:
                    stopping = True  # one more pass: everything already in the pipe

    def _abandon_stream(self) -> None:
        """Stops reading a stream that cannot be decoded any further, and says so. The read end
        is closed (and the FIFO removed) rather than left unread: writers then fail with EPIPE
        (or ENOENT) instead of blocking forever on a full pipe."""
        self._dispatch_record(
            self._error_record(
                "the log stream cannot be decoded past this point: the listener stops reading "
                "(writers now get EPIPE)"
            )
        )
        if self.address is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.address)
        _LISTENERS.discard(self)  # before closing: a fork now must not touch the fd number
        self._reader.close()

    def deserialize(self, data: bytes) -> logging.LogRecord:
        """The record in a message (override with :meth:`AtomicPipeHandler.serialize`)."""
        return decode_record(data)

    def _dispatch(self, data: bytes) -> None:
        try:
            record = self.deserialize(data)
        except Exception as e:
            self.undecodable += 1
            record = self._error_record(
                f"undecodable log message ({len(data)} bytes: {data[:64]!r}): {e!r}"
            )
        self._dispatch_record(record)

    def _error_record(self, msg: str) -> logging.LogRecord:
        return logging.makeLogRecord(
            {"name": __name__, "levelno": logging.WARNING, "levelname": "WARNING", "msg": msg}
        )

    def _dispatch_record(self, record: logging.LogRecord) -> None:
        self.received += 1
        try:
            self.handle(record)
        except Exception:
            # A failing handler must not end the thread (children would block on a full pipe).
            if logging.raiseExceptions:
                traceback.print_exc(file=sys.stderr)

    def handle(self, record: logging.LogRecord) -> None:
        """Re-emits one record (override to route differently)."""
        if not self.handlers:
            logging.getLogger(record.name).handle(record)
            return
        for h in self.handlers:
            if not self.respect_handler_level or record.levelno >= h.level:
                h.handle(record)


_HANDLERS: weakref.WeakSet[AtomicPipeHandler] = weakref.WeakSet()
_LISTENERS: weakref.WeakSet[AtomicPipeListener] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Eager twin of the handlers' pid check (which also covers forks that skip these hooks).
    for h in list(_HANDLERS):
        h._pid = -1
    for listener in list(_LISTENERS):
        listener._forget_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def listen(
    *handlers: logging.Handler,
    level: int | str = logging.NOTSET,
    respect_handler_level: bool = False,
    dir: str | os.PathLike[str] | None = None,
) -> Iterator[AtomicPipeHandler]:
    """Runs a FIFO listener for the block and yields a handler for children.

    On exit the handler is closed in this process, then the listener drains and stops.
    """
    with AtomicPipeListener(
        *handlers, respect_handler_level=respect_handler_level, dir=dir
    ) as listener:
        handler = listener.handler(level)
        try:
            yield handler
        finally:
            handler.close()


def child_setup(
    target: AtomicPipeHandler | str | os.PathLike[str],
    level: int | str | None = None,
    *,
    replace: bool = True,
) -> AtomicPipeHandler:
    """Attaches a handler (or a new one for a FIFO address) to the root logger of this child.

    ``replace`` removes the root's other handlers (not closed: in a ``fork`` child they are
    the parent's, and closing would flush the parent's buffers a second time), so records are
    not also printed by the child. ``level`` sets the root logger's level. Fits
    ``Pool(initializer=child_setup, initargs=(handler,))``.
    """
    handler = target if isinstance(target, AtomicPipeHandler) else AtomicPipeHandler(target)
    root = logging.getLogger()
    if replace:
        for h in list(root.handlers):
            if h is not handler:
                root.removeHandler(h)
    if handler not in root.handlers:
        root.addHandler(handler)
    if level is not None:
        root.setLevel(level)
    return handler
