# examples/docs_proxy_record.py: prints `fdkit proxy --record FILE` recordings, a line a chunk
# (python3 docs_proxy_record.py FILE.1 FILE.2 ...)
import datetime
import struct
import sys
from collections.abc import Iterator

MAGIC = b"FDKREC1\n"
# direction (b">" client to upstream, b"<" upstream to client), 3 zero bytes, length,
# connection number, nanoseconds since the Unix epoch: 24 bytes, little-endian
HEADER = struct.Struct("<c3xIQQ")


def chunks(path: str) -> Iterator[tuple[str, int, int, bytes]]:
    """(direction, connection, time in ns, bytes) of each chunk, in the order delivered;
    no bytes: that direction ended (its half-close was passed on)."""
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise SystemExit(f"{path}: not an fdkit proxy recording")
        while head := f.read(HEADER.size):
            direction, length, conn, ns = HEADER.unpack(head)
            yield direction.decode(), conn, ns, f.read(length)


for path in sys.argv[1:]:
    for direction, conn, ns, data in chunks(path):
        when = datetime.datetime.fromtimestamp(ns / 1e9).isoformat(timespec="microseconds")
        what = f"{len(data)} bytes {data[:32]!r}" if data else "end"
        print(f"{when} conn {conn} {direction} {what}")
