"""Waiting for what a background thread, task or process does, with a deadline."""

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], timeout: float = 30, interval: float = 0.05) -> None:
    """Return once `condition()` holds; TimeoutError if it still does not after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(interval)
