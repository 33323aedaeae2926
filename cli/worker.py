"""`rankserve worker`: take retrain jobs from the Redis queue until SIGTERM."""

import logging
from typing import Annotated

import typer

from core.settings import get_settings
from worker.runner import run_worker


def worker(
    burst: Annotated[bool, typer.Option(help="Exit once the queue is empty")] = False,
    name: Annotated[str | None, typer.Option(help="Worker name; default: random")] = None,
) -> None:
    """Train, gate, bundle and promote students submitted through POST /admin/retrain.

    SIGTERM lets the running job finish within RANKSERVE_WORKER_SHUTDOWN_GRACE_S, then
    requeues it; a second SIGTERM stops at once.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    run_worker(get_settings(), burst=burst, name=name)
