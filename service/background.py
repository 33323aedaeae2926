"""Background tasks that live exactly as long as an app component."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any


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
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
