"""Programs the benches start in other processes, as real modules a linter sees.

Each is run by its file path (``python bench/child/NAME.py ARGS``, see :func:`script`), so it
does not depend on ``sys.path``, and imports only the standard library (and ``fdkit`` where it
measures fdkit; ``aio_tls_servers``, ``asyncio_servers`` and ``asyncio_proxy`` also import
``aio_servers``' hello server or its stop on SIGTERM/SIGINT, putting the harness's root on
``sys.path`` first). Importing one runs nothing: the work is under
``if __name__ == "__main__"``.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def script(name: str) -> str:
    """The path of the child program ``name`` (``bench/child/<name>.py``), for an argv."""
    path = HERE / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no child program {path}")
    return str(path)
