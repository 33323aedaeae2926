"""A component's background task stops with it, even when one cancellation is lost."""

import asyncio
import logging

import pytest

from service.background import background_task, stop_task


async def test_a_task_that_swallows_its_cancellation_is_cancelled_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lost = 0

    async def stubborn() -> None:
        nonlocal lost
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost += 1  # as a library that catches it and reads on

    task = asyncio.create_task(stubborn(), name="stubborn")
    await asyncio.sleep(0)  # started
    with caplog.at_level(logging.WARNING, logger="service.background"):
        await asyncio.wait_for(stop_task(task, recancel_s=0.05), timeout=10)
    assert task.cancelled()
    assert lost == 1
    assert "task stubborn did not stop when cancelled; cancelling it again" in caplog.text


async def test_a_task_stops_with_its_block_at_the_first_cancellation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="service.background"):
        async with background_task(asyncio.sleep(3600), "sleeper") as task:
            await asyncio.sleep(0)
    assert task.cancelled()
    assert caplog.text == ""


async def test_a_task_that_failed_raises_its_error_when_its_block_ends() -> None:
    async def failing() -> None:
        raise RuntimeError("broken")

    with pytest.raises(RuntimeError, match="broken"):
        async with background_task(failing(), "failing"):
            await asyncio.sleep(0.01)
