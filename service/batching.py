"""Dynamic batching: concurrent requests coalesce into encoder batches on one worker thread.

A collector task waits for the first pending request, gives others up to `max_wait_s` to
join (skipped once `max_batch_size` texts are waiting), then hands every request of the
same engine, up to `max_batch_size` texts, to the worker. While the worker computes, new
requests queue; when it finishes they have already waited, so the next batch leaves at once.
So batches grow with the load even at the default `max_wait_s` of 0, where a request that
finds the worker idle leaves at once (docs/api.md#dynamic-batching measures both).
The worker tokenises; the encoder sorts the texts by token count (less padding) and cuts them
into the cheapest forward passes within the size and its padded-token budget.

Clients that wait for each answer before they send again would otherwise settle into two
cohorts that take turns: while one is encoded, the other's answers and next requests cross
HTTP, and every batch holds half of them. So after a batch the collector gives the clients it
has just answered up to `rejoin_s`, and at most a share of the batch's own encoding time, to
send their next texts, and leaves as soon as they have: one cohort, batches twice as large.
Where they do not come back in time (clients that pause, or leave), it stops waiting for a
growing number of batches, so a stream of independent requests pays for it rarely
(service/rejoin.py keeps that account).

One worker thread only: torch already spreads a forward pass over the cores, and one queue
keeps the order of work under load predictable. The queue is bounded in texts; a request
that would overflow it fails fast with `QueueFullError` (429 + Retry-After).
"""

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from core.settings import Settings
from service.background import stop_task
from service.engine import Engine
from service.metrics import Metrics
from service.queue_full import QueueFullError
from service.rejoin import RejoinWait

T = TypeVar("T")


@dataclass(frozen=True)
class Encoded:
    embeddings: torch.Tensor  # (n, dim) float32 on the CPU, unit rows
    token_counts: list[int]  # per text, before truncation (special tokens included)
    max_tokens: int  # the encoder's maximum; texts with more tokens were truncated

    @property
    def truncated(self) -> list[bool]:
        return [count > self.max_tokens for count in self.token_counts]

    @property
    def tokens_processed(self) -> int:
        return sum(min(count, self.max_tokens) for count in self.token_counts)


@dataclass
class _Job:
    engine: Engine
    texts: list[str]
    future: asyncio.Future[Encoded]
    enqueued: float = field(default_factory=time.perf_counter)


class Batcher:
    def __init__(
        self,
        metrics: Metrics,
        *,
        max_batch_size: int,
        max_wait_s: float,
        rejoin_s: float,
        capacity: int,
        retry_after_s: int,
    ) -> None:
        self.metrics = metrics
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.capacity = capacity
        self.retry_after_s = retry_after_s
        self._pending: deque[_Job] = deque()
        self._pending_texts = 0
        self._arrived = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="encoder")
        self._collector: asyncio.Task[None] | None = None
        self._rejoin = RejoinWait(rejoin_s, max_batch_size)

    @classmethod
    def from_settings(cls, metrics: Metrics, settings: Settings) -> "Batcher":
        return cls(
            metrics,
            max_batch_size=settings.encode_batch_size,
            max_wait_s=settings.batch_wait_ms / 1000,
            rejoin_s=settings.batch_rejoin_ms / 1000,
            capacity=settings.queue_capacity,
            retry_after_s=settings.retry_after_s,
        )

    async def start(self) -> None:
        self._collector = asyncio.create_task(self._collect(), name="batch-collector")

    async def stop(self) -> None:
        if self._collector is not None:
            await stop_task(self._collector)
        for job in self._pending:
            job.future.cancel()
        self._pending.clear()
        self._executor.shutdown(wait=True)

    async def encode(self, engine: Engine, texts: list[str]) -> Encoded:
        """Embeddings of `texts` by `engine`, computed in a batch with other requests' texts."""
        if self._pending and self._pending_texts + len(texts) > self.capacity:
            self.metrics.rejected.inc()
            raise QueueFullError(self.retry_after_s)
        job = _Job(engine, texts, asyncio.get_running_loop().create_future())
        self._pending.append(job)
        self._pending_texts += len(texts)
        self.metrics.queue_depth.set(self._pending_texts)
        self._arrived.set()
        return await job.future

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run `fn(*args)` on the worker thread, after the encoder work queued before it."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _collect(self) -> None:
        while True:
            await self._next_arrival()
            await self._gather()
            jobs = self._take()
            if jobs:
                await self._process(jobs)

    async def _gather(self) -> None:
        """Wait, with requests pending, for others to join: up to `max_wait_s` from the first
        one's arrival, and while the answered clients are expected back."""
        deadline = self._pending[0].enqueued + self.max_wait_s
        rejoin = self._rejoin
        rejoining = rejoin.waits(self._pending_texts)
        while self._pending_texts < self.max_batch_size:
            now = time.perf_counter()
            remaining = deadline - now
            if rejoin.waits(self._pending_texts):
                remaining = max(remaining, rejoin.until - now)
            if remaining <= 0:
                break
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), remaining)
        if rejoining:
            outcome = rejoin.settle(self._pending_texts)
            self.metrics.rejoin_waits.labels(outcome=outcome).inc()
        else:
            rejoin.forget()

    async def _next_arrival(self) -> None:
        while not self._pending:
            self._arrived.clear()
            await self._arrived.wait()

    def _take(self) -> list[_Job]:
        """FIFO jobs of the first job's engine, up to max_batch_size texts (at least one job)."""
        jobs: list[_Job] = []
        texts = 0
        while self._pending:
            job = self._pending[0]
            if job.future.cancelled():
                self._pending.popleft()
                self._pending_texts -= len(job.texts)
                continue
            if jobs and (
                job.engine is not jobs[0].engine or texts + len(job.texts) > self.max_batch_size
            ):
                break
            self._pending.popleft()
            self._pending_texts -= len(job.texts)
            jobs.append(job)
            texts += len(job.texts)
        self.metrics.queue_depth.set(self._pending_texts)
        return jobs

    async def _process(self, jobs: list[_Job]) -> None:
        now = time.perf_counter()
        for job in jobs:
            self.metrics.queue_wait.observe(now - job.enqueued)
        texts = [text for job in jobs for text in job.texts]
        self.metrics.batch_size.observe(len(texts))
        try:
            encoded, encoding_s = await self.run(self._encode, jobs[0].engine, texts)
        except Exception as error:
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(error)
            return
        self._rejoin.after_batch(len(texts), self._pending_texts, encoding_s, time.perf_counter())
        start = 0
        for job in jobs:
            stop = start + len(job.texts)
            if not job.future.done():
                job.future.set_result(
                    Encoded(
                        embeddings=encoded.embeddings[start:stop],
                        token_counts=encoded.token_counts[start:stop],
                        max_tokens=encoded.max_tokens,
                    )
                )
            start = stop

    def _encode(self, engine: Engine, texts: list[str]) -> tuple[Encoded, float]:
        """Worker thread: the encoder tokenises the texts once, counts their tokens and cuts the
        cheapest forward passes. The embeddings and the seconds they took."""
        start = time.perf_counter()
        encoder = engine.encoder
        embeddings, counts = encoder.encode_counted(texts, batch_size=self.max_batch_size)
        seconds = time.perf_counter() - start
        self.metrics.inference.observe(seconds)
        encoded = Encoded(
            embeddings=embeddings.cpu(), token_counts=counts, max_tokens=encoder.max_seq_length
        )
        return encoded, seconds
