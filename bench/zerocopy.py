#!/usr/bin/env python3
"""Moving bytes between fds: fdkit.zerocopy.transfer vs the recv_into/sendall loop,
os.splice, socket.sendfile, shutil.copyfileobj, os.copy_file_range and a C splice relay, for
tcp/unix/file sources and destinations at 4 KiB, 64 KiB, 1 MiB and 1 GiB per call; relay CPU
per GiB and MiB/s. Then a 1 GiB file copy against shutil.copyfile.

Run: .venv/bin/python bench/zerocopy.py [--quick] [--json]  (same as `fdkit bench zerocopy`).
The code lives in fdkit.benchmarks.zerocopy so the installed `fdkit bench` carries it.
"""

from fdkit.benchmarks._cli import main

if __name__ == "__main__":
    raise SystemExit(main(names=["zerocopy"]))
