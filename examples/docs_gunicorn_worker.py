# examples/docs_gunicorn_worker.py: gunicorn -k docs_gunicorn_worker.FdkitWorker app:app
from typing import Any, ClassVar

from uvicorn_worker import UvicornWorker


class FdkitWorker(UvicornWorker):
    """uvicorn's gunicorn worker, each worker process on an fdkit.aio loop."""

    CONFIG_KWARGS: ClassVar[dict[str, Any]] = {
        **UvicornWorker.CONFIG_KWARGS,
        "loop": "fdkit.aio:new_event_loop",
    }
