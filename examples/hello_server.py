"""A keep-alive HTTP server that answers every request with "hallo\\n", driven by an io_uring
:class:`fdkit.uring.Ring` from Python.

One multishot accept takes every connection; each connection has one multishot receive on a
provided-buffer ring; requests are counted by their ``\\r\\n\\r\\n`` terminators (so pipelined
requests get one reply each, in order) and the replies go out in one send per batch. Nothing
is parsed beyond that: it is the io_uring hello-world, not a web server.

    python examples/hello_server.py --port 8080

It prints ``listening on HOST:PORT`` once ready and stops cleanly on SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import errno
import signal
import socket
import sys
from dataclasses import dataclass, field
from types import FrameType

from fdkit import fd
from fdkit.uring import Completion, Ring, available

RESPONSE = (
    b"HTTP/1.1 200 OK\r\n"
    b"Server: fdkit-ring\r\n"
    b"Content-Type: text/plain\r\n"
    b"Content-Length: 6\r\n"
    b"Connection: keep-alive\r\n"
    b"\r\n"
    b"hallo\n"
)
TERMINATOR = b"\r\n\r\n"
MAX_PENDING = 64 << 10  # a request head larger than this is not a hello-world client

# user_data = serial << 2 | kind; serial 0 is the listener.
ACCEPT, RECV, SEND, OTHER = 0, 1, 2, 3
GROUP = 0


class Stop(Exception):
    """Raised by the SIGINT/SIGTERM handler to leave the loop."""


@dataclass
class Conn:
    fd: int
    serial: int
    pending: bytes = b""  # an incomplete request head
    out: bytearray = field(default_factory=bytearray)  # replies waiting for the send
    sending: bytes = b""  # the send in flight
    receiving: bool = True  # the multishot receive is armed
    closing: bool = False


class HelloServer:
    def __init__(self, listen_fd: int, ring: Ring) -> None:
        self.lfd = listen_fd
        self.ring = ring
        self.conns: dict[int, Conn] = {}
        self.next_serial = 1
        self.requests = 0

    def run(self) -> None:
        self.ring.accept(self.lfd, ACCEPT, multishot=True)
        while True:
            for c in self.ring.wait():
                self.handle(c)

    def handle(self, c: Completion) -> None:
        serial, kind = c.user_data >> 2, c.user_data & 3
        if kind == ACCEPT:
            self.accepted(c)
            return
        conn = self.conns.get(serial)
        if conn is None:  # a late completion of a connection already closed
            return
        if kind == RECV:
            self.received(conn, c)
        elif kind == SEND:
            self.sent(conn, c)

    def accepted(self, c: Completion) -> None:
        if not c.more:
            self.ring.accept(self.lfd, ACCEPT, multishot=True)
        if c.error is not None:
            return
        conn = Conn(c.result, self.next_serial)
        self.next_serial += 1
        self.conns[conn.serial] = conn
        fd.setsockopt(conn.fd, socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.ring.recv_multishot(conn.fd, GROUP, conn.serial << 2 | RECV)

    def received(self, conn: Conn, c: Completion) -> None:
        if not c.more:
            conn.receiving = False
        if c.data:
            head = conn.pending + c.data
            n = head.count(TERMINATOR)
            if n:
                conn.pending = head[head.rfind(TERMINATOR) + len(TERMINATOR) :]
                conn.out += RESPONSE * n
                self.requests += n
                self.flush(conn)
            else:
                conn.pending = head
            if len(conn.pending) > MAX_PENDING:
                self.close(conn)
                return
        if not conn.receiving:
            if c.error is not None and c.error.errno == errno.ENOBUFS:
                # The buffer ring ran dry; the data waits in the socket: receive again.
                conn.receiving = True
                self.ring.recv_multishot(conn.fd, GROUP, conn.serial << 2 | RECV)
            elif c.data:
                conn.receiving = True
                self.ring.recv_multishot(conn.fd, GROUP, conn.serial << 2 | RECV)
            else:  # end of stream or an error: finish the replies, then close
                conn.closing = True
                if not conn.sending:
                    self.close(conn)

    def flush(self, conn: Conn) -> None:
        if conn.sending or not conn.out:
            return
        conn.sending = bytes(conn.out)
        conn.out.clear()
        self.ring.send(conn.fd, conn.sending, conn.serial << 2 | SEND, flags=socket.MSG_NOSIGNAL)

    def sent(self, conn: Conn, c: Completion) -> None:
        if c.error is not None:
            conn.sending = b""
            self.close(conn)
            return
        rest = conn.sending[c.result :]
        conn.sending = b""
        if rest:
            conn.out[:0] = rest
        self.flush(conn)
        if conn.closing and not conn.sending:
            self.close(conn)

    def close(self, conn: Conn) -> None:
        del self.conns[conn.serial]
        if conn.receiving:
            # The armed receive holds the socket open: cancel it, then drop the fd.
            self.ring.cancel(conn.serial << 2 | RECV, OTHER)
        self.ring.close_fd(conn.fd, OTHER)

    def shutdown(self) -> None:
        self.ring.close()  # cancels and reaps everything in flight
        for conn in self.conns.values():
            fd.close(conn.fd)
        self.conns.clear()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    ap.add_argument("--entries", type=int, default=4096, help="submission queue size")
    args = ap.parse_args(argv)

    ok, reason = available()
    if not ok:
        print(f"hello_server: io_uring unavailable: {reason}", file=sys.stderr)
        return 1

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stop

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.host, args.port))
    listener.listen(4096)
    host, port = listener.getsockname()
    ring = Ring(args.entries)
    ring.provide_buffers(GROUP, 1024, 4096)
    server = HelloServer(listener.fileno(), ring)
    print(f"listening on {host}:{port}", flush=True)
    try:
        server.run()
    except Stop:
        pass
    finally:
        server.shutdown()
        listener.close()
    print(f"stopped after {server.requests} requests", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
