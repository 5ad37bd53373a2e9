"""An endpoint process of the byte-moving benches (see :mod:`bench._endpoints` for the roles
and the protocol): ``python endpoint.py ROLE ARGS...``.

Plain Python, no fdkit import: the relaying process is what the benches measure, so the far
ends are cheap and run elsewhere. One command per line on stdin, one answer line on stdout;
exits when stdin closes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import sys

BUF = memoryview(bytearray(1 << 20))


def reply(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def pipe_pair() -> tuple[int, int]:
    """A pipe, enlarged to 1 MiB when the limit allows."""
    r, w = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)
    return r, w


def drain(fd: int, n: int, mode: str, r: int, w: int, null: int) -> tuple[int, str]:
    """Receive ``n`` bytes (``n < 0``: until EOF); returns (count, hexdigest or ``-``).

    Mode ``sha`` reads into one reused buffer and hashes; otherwise the bytes are spliced
    through the pipe ``r``/``w`` into ``null``.
    """
    got = 0
    if mode == "sha":
        h = hashlib.sha256()
        while n < 0 or got < n:
            want = len(BUF) if n < 0 else min(len(BUF), n - got)
            k = os.readv(fd, [BUF[:want]])
            if k == 0:
                break
            h.update(BUF[:k])
            got += k
        return got, h.hexdigest()
    while n < 0 or got < n:
        want = (1 << 20) if n < 0 else min(1 << 20, n - got)
        k = os.splice(fd, w, want)
        if k == 0:
            break
        got += k
        while k:
            k -= os.splice(r, null, k)
    return got, "-"


def send(fd: int, dfd: int, dsize: int, n: int) -> None:
    """Send ``n`` bytes on ``fd``: the file ``dfd`` (``dsize`` bytes) over and over."""
    left = n
    while left:
        chunk = min(left, dsize)
        off = 0
        while off < chunk:
            off += os.sendfile(fd, dfd, off, chunk - off)
        left -= chunk


def main(argv: list[str]) -> None:
    role = argv[0]
    lines = iter(sys.stdin.readline, "")
    r, w = pipe_pair()
    null = os.open("/dev/null", os.O_WRONLY)
    if role == "source":
        fd = int(argv[1])
        dfd = os.open(argv[2], os.O_RDONLY)
        dsize = os.fstat(dfd).st_size
        for line in lines:
            n = int(line)
            send(fd, dfd, dsize, n)
            reply(f"sent {n}")
    elif role == "sink":
        fd = int(argv[1])
        for line in lines:
            count, mode = line.split()
            got, digest = drain(fd, int(count), mode, r, w, null)
            reply(f"{got} {digest}")
    elif role == "accept-sink":
        listener = socket.socket(fileno=int(argv[1]))
        for line in lines:
            conn, _ = listener.accept()
            with conn:
                got, digest = drain(conn.fileno(), -1, line.strip(), r, w, null)
            reply(f"{got} {digest}")
    elif role == "client":
        dfd = os.open(argv[1], os.O_RDONLY)
        dsize = os.fstat(dfd).st_size
        for line in lines:
            host, port, count = line.split()
            with socket.create_connection((host, int(port))) as s:
                send(s.fileno(), dfd, dsize, int(count))
                s.shutdown(socket.SHUT_WR)
                back, _ = drain(s.fileno(), -1, "count", r, w, null)
            reply(f"sent {count} {back}")
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main(sys.argv[1:])
