"""Waiting for what a background thread, task or process does, with a deadline."""

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout: float = 30,
    message: str = "condition not met in time",
    interval: float = 0.1,
) -> T:
    """`condition()`'s first truthy value; TimeoutError(message) if none came in `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(message)
        time.sleep(interval)
