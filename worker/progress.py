"""Job progress, written into the RQ job's meta where GET /admin/jobs reads it."""

import math
import os
import time
from collections.abc import Callable
from typing import Any

from rq.job import Job

from core.jobs import PROGRESS


class ProgressReporter:
    """Writes {phase, step, total, percent, loss, eta_s, elapsed_s, pid} into the job's meta.

    Training steps can be a few milliseconds apart; one Redis write per `min_interval_s` is
    enough for a progress bar, and the last step of a phase is always written.
    """

    def __init__(
        self,
        job: Job | None,
        min_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.job = job
        self.min_interval_s = min_interval_s
        self.clock = clock
        self.state: dict[str, Any] = {"phase": "starting"}
        self._started = self.clock()
        self._phase_started = self._started
        self._first_step: tuple[float, int] | None = None  # (time, step) of the phase's first
        self._last_write = 0.0

    def phase(self, name: str, **fields: Any) -> None:
        self._phase_started = self.clock()
        self._first_step = None
        self.state = {"phase": name, **fields}
        self._write(force=True)

    def step(self, done: int, total: int, loss: float) -> None:
        # The rate since the first step reported: what precedes it in the phase (teacher
        # embeddings, a resumed run's earlier steps) would otherwise inflate the ETA.
        now = self.clock()
        if self._first_step is None:
            self._first_step = (now, done)
        first_time, first_done = self._first_step
        if done > first_done:
            per_step = (now - first_time) / (done - first_done)
        else:
            per_step = (now - self._phase_started) / done if done else 0.0
        self.state = {
            "phase": "training",
            "step": done,
            "total": total,
            "percent": round(100.0 * done / total, 2) if total else 100.0,
            "loss": loss if math.isfinite(loss) else None,
            "eta_s": round(per_step * (total - done), 1),
        }
        self._write(force=done >= total)

    def _write(self, *, force: bool) -> None:
        now = self.clock()
        if self.job is None or (not force and now - self._last_write < self.min_interval_s):
            return
        self._last_write = now
        # The pid is the work horse's: what an operator would signal or look for in `ps`.
        elapsed = round(now - self._started, 1)
        self.job.meta[PROGRESS] = self.state | {"elapsed_s": elapsed, "pid": os.getpid()}
        self.job.save_meta()
