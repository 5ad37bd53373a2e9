"""``fdkit pipe-cat PATH|-``: decode an Atomic::Pipe stream and print what it carries.

For debugging any writer, Perl or Python: point it at the FIFO the writers use (it waits for a
writer, like any FIFO reader), at a file holding a captured stream, at a pipe path such as
``/dev/fd/N``, or at stdin (``-``). One line per event by default, ``--json`` for tools,
``--raw`` for the payloads themselves, ``--count`` for totals, ``-q`` for none (the exit code
says whether the stream was whole), ``-v`` to log what is read on stderr.

A broken stream is reported on stderr (the ProtocolError's own message, which names the byte
offset and the writer) only after every complete event before it was printed; decoding goes
on where the decoder can resynchronize, and the exit code is 1. Output is flushed whenever the
reader has nothing more ready, so a live FIFO shows events as they come.
"""

from __future__ import annotations

import argparse
import base64
import errno
import json
import logging
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from fdkit.cli import _log

if TYPE_CHECKING:
    from fdkit.atomic_pipe import AtomicPipe, ProtocolError

# How much of a payload one human-readable line shows without --full: enough to recognize a
# message, short enough that a 1 MiB payload does not flood the terminal.
TEXT_LIMIT = 200
HEX_LIMIT = 64
# Events taken from the reader per batch: output is flushed between batches that wait.
BATCH = 1024
# Bytes of output gathered before a write(2), unless the reader runs dry first.
OUT_BUFFER = 64 << 10
# How long one read waits: Ctrl-C is handled between waits even if a read ignored it.
WAIT = 0.5

#: With ``-v``: what is read, how, and the totals at the end.
log = logging.getLogger("fdkit.cli.pipe-cat")

# (kind, payload); kind is "message", "burst" or "line".
Writer = tuple[int, int] | None
Event = tuple[str, bytes, Writer]


def _escape(text: str) -> str:
    """Printable characters as they are, everything else (and the backslash) escaped, so one
    event stays on one line and nothing invisible reaches the terminal."""
    out = []
    for c in text:
        if c == "\\":
            out.append("\\\\")
        elif c.isprintable():
            out.append(c)
        else:
            out.append(c.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def human(kind: str, data: bytes, full: bool, writer: Writer = None) -> str:
    """``message pid=12 tid=0 len=5: Hello``: UTF-8 payloads as escaped text, others as hex;
    long ones cut with a note saying how much was left out. Mixed-mode events carry no
    writer."""
    who = f" pid={writer[0]} tid={writer[1]}" if writer else ""
    head = f"{kind}{who} len={len(data)}"
    if not data:
        return head
    try:
        data.decode("utf-8")
        limit, as_hex = TEXT_LIMIT, False
    except UnicodeDecodeError:
        limit, as_hex = HEX_LIMIT, True
    shown = data if full else data[:limit]
    if as_hex:
        body = " hex: " + shown.hex()
    else:
        # The whole payload is valid UTF-8, so only a character cut at the limit can fail.
        body = ": " + _escape(shown.decode("utf-8", errors="ignore"))
    if len(shown) < len(data):
        body += f" ... (+{len(data) - len(shown)} bytes, --full shows all)"
    return head + body


def as_json(kind: str, data: bytes, writer: Writer = None) -> str:
    """One JSON object: the payload as text when it is UTF-8, else base64 in ``data_b64``;
    ``pid``/``tid`` for normal-mode messages."""
    obj: dict[str, Any] = {"type": kind, "len": len(data)}
    if writer:
        obj["pid"], obj["tid"] = writer
    try:
        obj["data"] = data.decode("utf-8")
    except UnicodeDecodeError:
        obj["data_b64"] = base64.b64encode(data).decode("ascii")
    return json.dumps(obj)


class Counts:
    """Events and payload bytes seen, by kind."""

    def __init__(self) -> None:
        self.by_kind = {"message": 0, "burst": 0, "line": 0}
        self.bytes = 0

    def add(self, kind: str, data: bytes) -> None:
        self.by_kind[kind] += 1
        self.bytes += len(data)

    def summary(self, as_json: bool) -> str:
        n = self.by_kind
        if as_json:
            return json.dumps(
                {"messages": n["message"], "bursts": n["burst"], "lines": n["line"]}
                | {"bytes": self.bytes}
            )

        kinds = ", ".join(_log.count(n[k], k) for k in ("message", "burst", "line"))
        return f"{kinds}, {_log.count(self.bytes, 'byte')}"


Emit = Callable[[str, bytes, Writer], object]


def _printer(args: argparse.Namespace, out: IO[bytes]) -> Emit:
    """The function that writes one event in the chosen output format."""
    if args.count or args.quiet:
        return lambda kind, data, writer: None
    if args.raw:
        return lambda kind, data, writer: out.write(data)
    if args.json:
        return lambda kind, data, writer: out.write(as_json(kind, data, writer).encode() + b"\n")
    full = args.full
    return lambda kind, data, writer: out.write(human(kind, data, full, writer).encode() + b"\n")


class Reader:
    """Batches of events from an AtomicPipe, in normal or mixed data mode.

    A ProtocolError raised after some events of a batch were taken is held back and raised by
    the next call, so those events are printed before the error, as the reader promises.
    """

    def __init__(self, pipe: AtomicPipe, mixed: bool) -> None:
        self.pipe = pipe
        self.mixed = mixed
        self.held: ProtocolError | None = None

    def batch(self, timeout: float) -> list[Event]:
        """The events ready now, or (waiting up to ``timeout``) the first ones to come;
        ``[]`` at EOF or when nothing came in time."""
        if self.held is not None:
            e, self.held = self.held, None
            raise e
        if not self.mixed:
            got = self.pipe.read_messages(BATCH, timeout=timeout, with_writer=True)
            return [("message", data, (pid, tid)) for pid, tid, data in got]
        from fdkit.atomic_pipe import ProtocolError

        out: list[Event] = []
        try:
            while len(out) < BATCH:
                ev = self.pipe.get_line_burst_or_data(timeout=timeout if not out else 0)
                if ev[0] is None:
                    break
                out.append((ev[0], ev[1], None))
        except ProtocolError as e:
            if not out:
                raise
            self.held = e
        return out


def _open(path: str, options: dict[str, Any]) -> AtomicPipe:
    """The reading end for PATH: stdin (``-``), a FIFO or pipe path (opened as a FIFO reader,
    which waits for a writer), or a file holding a captured stream."""
    from fdkit.atomic_pipe import AtomicPipe

    if path == "-":
        log.debug("reading stdin")
        stdin = os.dup(0)
        try:
            return AtomicPipe.from_fd("r", stdin, pipe_only=False, **options)
        except BaseException:
            os.close(stdin)  # from_fd takes the fd only when it succeeds
            raise
    st = os.stat(path)
    if stat.S_ISFIFO(st.st_mode):
        log.debug("opening FIFO %r (waits for a writer)", path)
        return AtomicPipe.read_fifo(path, **options)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    log.debug("reading %r (%s bytes)", path, st.st_size)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return AtomicPipe.from_fd("r", fd, pipe_only=False, **options)
    except BaseException:
        os.close(fd)  # from_fd takes the fd only when it succeeds
        raise


def _error(message: str) -> None:
    print(f"fdkit pipe-cat: {message}", file=sys.stderr, flush=True)


def _decode(
    pipe: AtomicPipe,
    reader: Reader,
    emit: Emit,
    counts: Counts,
    out: IO[bytes],
) -> bool:
    """Prints every event until EOF; returns False when the stream was broken somewhere."""
    from fdkit.atomic_pipe import ProtocolError

    ok = True
    last_error: tuple[str, int] | None = None
    while True:
        try:
            events = reader.batch(0)
            if not events:
                out.flush()
                # At EOF one more read raises whatever the stream left incomplete.
                events = reader.batch(0) if pipe.eof() else reader.batch(WAIT)
                if not events and pipe.eof():
                    return ok
        except ProtocolError as e:
            out.flush()
            _error(str(e))
            ok = False
            # A fatal error (normal mode: a header claiming an impossible size) leaves nothing
            # to resynchronize on: stop. Others are reported once and decoding resumes after
            # the damaged part. Any error seen twice also stops it.
            if e.fatal or (e.kind, e.offset) == last_error:
                return ok
            last_error = (e.kind, e.offset)
            continue
        for kind, data, writer in events:
            counts.add(kind, data)
            emit(kind, data, writer)


def run(args: argparse.Namespace) -> int:
    _log.setup("pipe-cat", args)
    if args.dictionary is not None and not args.zstd:
        _error("--dictionary needs --zstd")
        return 2
    if args.raw and args.count:
        _error("--raw and --count do not go together")
        return 2
    options: dict[str, Any] = {"mixed_data_mode": args.mixed}
    try:
        if args.zstd:
            options["compression"] = "zstd"
            if args.dictionary is not None:
                options["dictionary"] = Path(args.dictionary).read_bytes()
    except OSError as e:
        _error(f"--dictionary: {e.strerror or e}: {args.dictionary}")
        return 1
    # Our own buffer on fd 1, whatever PYTHONUNBUFFERED says: a syscall per event would
    # dominate, and _decode flushes whenever the reader has nothing ready.
    sys.stdout.flush()
    out = open(sys.stdout.fileno(), "wb", buffering=OUT_BUFFER, closefd=False)  # noqa: SIM115
    try:
        with out, _open(args.path, options) as pipe:
            counts = Counts()
            log.debug(
                "%s mode%s",
                "mixed data" if args.mixed else "normal",
                ", zstd" + (" with a dictionary" if args.dictionary else "") if args.zstd else "",
            )
            try:
                ok = _decode(pipe, Reader(pipe, args.mixed), _printer(args, out), counts, out)
                log.debug("end of stream: %s", counts.summary(False))
            finally:
                # Also after Ctrl-C: the counts so far are what an interrupted watch wants.
                if args.count:
                    out.write(counts.summary(args.json).encode() + b"\n")
                out.flush()
    except BrokenPipeError:
        # The reader of our output went away (`| head`): quiet, with the status every fdkit
        # command gives then (see fdkit.cli.EXIT_EPIPE).
        from fdkit.cli import reader_gone

        return reader_gone()
    except KeyboardInterrupt:
        return 130
    except OSError as e:
        where = f": {e.filename}" if e.filename else ""
        _error(f"{e.strerror or e}{where}")
        return 1
    return 0 if ok else 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "pipe-cat",
        help="decode an Atomic::Pipe stream (FIFO, file or stdin) and print its messages",
        description="Read an Atomic::Pipe stream (Perl's Atomic::Pipe or fdkit.atomic_pipe "
        "writers) from PATH - a FIFO (waits for a writer), a pipe path like /dev/fd/N, or a "
        "file holding a captured stream - or from stdin ('-'), and print one line per "
        "message, burst or line: UTF-8 payloads as escaped text, others as hex, long ones "
        "cut (--full shows all). A broken stream is reported with its byte offset and writer "
        "after everything complete before it, and the exit code is 1.",
    )
    p.add_argument("path", metavar="PATH", help="a FIFO, pipe path or file; '-' for stdin")
    form = p.add_mutually_exclusive_group()
    form.add_argument(
        "--json",
        action="store_true",
        help='one JSON object per event: {"type", "len", "data"} ("data_b64" when the '
        "payload is not UTF-8); with --count, the summary as JSON",
    )
    form.add_argument(
        "--raw",
        action="store_true",
        help="write the payloads to stdout as they are, nothing added (for piping)",
    )
    p.add_argument("--count", action="store_true", help="print only the counts, at the end")
    _log.add_verbosity(
        p,
        quiet="print no events: the exit code alone says whether the stream is whole "
        "(errors still go to stderr; --count still prints the counts)",
    )
    p.add_argument("--full", action="store_true", help="print long payloads whole")
    p.add_argument(
        "--mixed",
        action="store_true",
        help="mixed data mode: plain lines, bursts and messages on one stream",
    )
    p.add_argument("--zstd", action="store_true", help="the writers compress with zstd")
    p.add_argument(
        "--dictionary",
        metavar="FILE",
        help="the raw zstd dictionary the writers use (with --zstd)",
    )
    p.set_defaults(run=run)
