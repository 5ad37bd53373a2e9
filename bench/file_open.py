#!/usr/bin/env python3
"""File open+close per CPU-second: open(), os.open, fd.open and C.

Run: .venv/bin/python bench/file_open.py [--quick] [--json]  (same as `fdkit bench file_open`).
The code lives in fdkit.benchmarks.file_open so the installed `fdkit bench` carries it.
"""

from fdkit.benchmarks._cli import main

if __name__ == "__main__":
    raise SystemExit(main(names=["file_open"]))
