"""Background tasks that live exactly as long as an app component."""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

logger = logging.getLogger(__name__)

# How long a cancelled task may take to stop before it is cancelled again: far longer than
# any of these tasks' own clean-up (closing a Redis connection) takes.
_RECANCEL_S = 5.0


@asynccontextmanager
async def background_task(
    work: Coroutine[Any, Any, object], name: str
) -> AsyncIterator[asyncio.Task[object]]:
    """Run `work` while the block runs; on the way out cancel it and wait until it has
    stopped, so nothing it touches (clients, files) is closed under its feet."""
    task = asyncio.create_task(work, name=name)
    try:
        yield task
    finally:
        await stop_task(task)


async def stop_task(task: asyncio.Task[Any], recancel_s: float = _RECANCEL_S) -> None:
    """Cancel `task` and wait until it has stopped, cancelling it again every `recancel_s`.

    A cancellation can be lost inside a library, and a loop that retries on the library's
    errors then runs on: a worker told to stop never finished its lifespan, and its server
    waited for it until killed (3 of 8 scripted stops of a two-worker server). A script with a
    loop shaped like the swap manager's (pub/sub reads, GET and SET, retried on RedisError),
    cancelled at a random moment, lost 61 of 300 cancellations with redis-py 8.1 (known since
    redis/redis-py#2028 and #2551).
    """
    task.cancel()
    while not (await asyncio.wait({task}, timeout=recancel_s))[0]:
        logger.warning("task %s did not stop when cancelled; cancelling it again", task.get_name())
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
