"""The worker process: RQ's forking worker, tightened for long jobs and hard crashes.

RQ runs each job in a forked "work horse" while the parent watches it and keeps the job's
heartbeat. Three changes to that behaviour, each through one of RQ's overridable methods:

- Heartbeat expiry. RQ lets a running job's heartbeat outlive the worker by 60 s plus the
  monitoring interval; here it is three intervals, so a SIGKILLed worker's job is found
  abandoned (and retried or failed by StartedJobRegistry.cleanup) within seconds.
- The horse dies with its parent. RQ puts the horse in its own process group, so a SIGKILL
  of the worker would leave it training, and later promoting, unsupervised. On Linux the
  horse asks the kernel for SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG).
- Bounded warm shutdown. On SIGTERM RQ waits for the job however long it takes; here it waits
  `worker_shutdown_grace_s`, then kills the horse, and RQ's failure handling requeues the job
  (if it has retries left; the trainer resumes from its last checkpoint) or fails it.
"""

import ctypes
import logging
import os
import signal
import sys
import time
from typing import Any

from redis import Redis
from rq import Worker
from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue
from rq.serializers import JSONSerializer

from core.bundle_manifest import BundleStoreUnavailableError
from core.jobs import retrain_queue
from core.redis_clients import sync_redis
from core.redis_keys import RedisKeys
from core.settings import Settings
from core.stores import open_store
from core.threads import apply_thread_policy

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
HEARTBEATS_PER_TTL = 3


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent exits; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        logger.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    # The parent may have died between fork and prctl: then nobody will send the signal.
    if os.getppid() != parent_pid:
        os._exit(1)


class RetrainWorker(Worker):
    def __init__(self, *args: Any, shutdown_grace_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shutdown_grace_s = shutdown_grace_s
        self._shutdown_deadline: float | None = None

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        return int(self.job_monitoring_interval) * HEARTBEATS_PER_TTL

    def main_work_horse(self, job: Job, queue: Queue) -> None:
        die_with_parent(self.pid or os.getppid())
        super().main_work_horse(job, queue)

    def handle_warm_shutdown_request(self) -> None:
        super().handle_warm_shutdown_request()
        self._shutdown_deadline = time.monotonic() + self.shutdown_grace_s
        if self.horse_pid:
            self.log.info(
                "Worker %s: waiting up to %.0fs for job to finish", self.name, self.shutdown_grace_s
            )

    def maintain_heartbeats(self, job: Job, execution: Execution) -> None:
        super().maintain_heartbeats(job, execution)
        deadline = self._shutdown_deadline
        if deadline is not None and time.monotonic() >= deadline and self.horse_pid:
            self.log.warning(
                "Worker %s: job %s outlived the shutdown grace; stopping it for requeue",
                self.name,
                job.id,
            )
            self.kill_horse()


def build_worker(settings: Settings, connection: Redis, name: str | None = None) -> RetrainWorker:
    queue = retrain_queue(connection, RedisKeys(settings.redis_prefix))
    return RetrainWorker(
        [queue],
        name=name,
        connection=connection,
        serializer=JSONSerializer,
        job_monitoring_interval=settings.worker_heartbeat_s,
        shutdown_grace_s=settings.worker_shutdown_grace_s,
    )


def run_worker(settings: Settings, *, burst: bool = False, name: str | None = None) -> bool:
    """Work until SIGTERM/SIGINT (or, with `burst`, until the queue is empty)."""
    apply_thread_policy(settings)  # inherited by every forked work horse
    try:
        removed = open_store(settings).remove_stale_temporaries()
    except BundleStoreUnavailableError as error:
        # Leftovers are harmless until the next start; jobs are what the worker is for.
        logger.warning("could not look for half-written bundles: %s", error)
        removed = []
    for path in removed:
        logger.warning("removed a half-written bundle left by a crashed writer: %s", path)
    connection = sync_redis(settings)
    worker = build_worker(settings, connection, name)
    return worker.work(burst=burst, logging_level="INFO")
