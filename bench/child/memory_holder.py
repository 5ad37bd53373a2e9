"""The memory bench's measuring process (:mod:`bench.memory`), fresh for every measurement.

``python memory_holder.py KIND N``: KIND ``stdlib`` holds N ``socket.socket`` objects, ``fdkit``
N plain int fds from ``fd.socket()``. It warms up, reads its RSS from ``/proc/self/statm``,
builds the list, reads RSS again, closes everything and prints ``{"bytes": growth, "n": N}``.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import sys

from fdkit import fd


def rss(page: int) -> int:
    """Resident set size in bytes (``/proc/self/statm``, second field, in pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page


def main(argv: list[str]) -> None:
    kind, n = argv[0], int(argv[1])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 64), hard))
    page = os.sysconf("SC_PAGE_SIZE")
    make_std = socket.socket
    make_fd = fd.socket
    if kind == "stdlib":
        warm_std = [make_std() for _ in range(16)]
        for s in warm_std:
            s.close()
        del warm_std
    else:
        warm_fd = [make_fd() for _ in range(16)]
        for x in warm_fd:
            fd.close(x)
        del warm_fd
    if kind == "stdlib":
        before = rss(page)
        held_std = [make_std() for _ in range(n)]
        after = rss(page)
        for s in held_std:
            s.close()
    else:
        before = rss(page)
        held_fd = [make_fd() for _ in range(n)]
        after = rss(page)
        for x in held_fd:
            fd.close(x)
    print(json.dumps({"bytes": after - before, "n": n}))


if __name__ == "__main__":
    main(sys.argv[1:])
