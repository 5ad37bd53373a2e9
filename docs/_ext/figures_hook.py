"""A MkDocs hook (mkdocs.yml ``hooks:``): the figures the pages quote, read from the saved runs
of ``make bench`` in ``docs/figures/`` (see ``bench/figures.py``), so that a page cannot quote
a figure no run produced or one that another page gives otherwise.

``{{ figures("aio") }}`` becomes that bench's table (the latest date's runs: every run's
ratio, the first run's figures), ``{{ figure("aio_hello_vs_uvloop") }}`` one row in words. An
unknown bench or row id fails the build.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import figures  # noqa: E402

_CALL = re.compile(r"\{\{\s*(figures|figure)\(\s*\"([a-z0-9_]+)\"\s*\)\s*\}\}")


def on_page_markdown(markdown: str, *, page: Any, config: Any, files: Any) -> str:
    if "{{" not in markdown:
        return markdown
    runs = figures.latest(figures.load())

    def expand(m: re.Match[str]) -> str:
        kind, name = m.group(1), m.group(2)
        if kind == "figure":
            return figures.figure(runs, name)
        if name not in runs:
            raise KeyError(f"{page.file.src_path}: no saved run of the bench {name!r}")
        return figures.bench_table(runs[name])

    return _CALL.sub(expand, markdown)
