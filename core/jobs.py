"""The retrain queue (RQ, JSON-serialised): submit, list, inspect and cancel retrain jobs.

Both sides use it: the admin API to submit and read jobs, the worker to take them. Job
arguments, progress (`job.meta["progress"]`) and results are JSON, never pickles, so any
process can read them and no job payload can execute code on load.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Queue, Retry
from rq.command import send_stop_job_command
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job, JobStatus
from rq.registry import (
    CanceledJobRegistry,
    FailedJobRegistry,
    FinishedJobRegistry,
    StartedJobRegistry,
)
from rq.results import Result
from rq.serializers import JSONSerializer

from core.bundle_manifest import validate_version
from core.redis_keys import RedisKeys
from core.settings import Settings
from models.training.config import Recipe, TrainConfig
from models.training.methods import Method, method_config, method_spec

RETRAIN_FUNCTION = "worker.retrain.run_retrain"
PROGRESS = "progress"  # job.meta key the job writes and the admin API reads

# Job states after which nothing more happens to a job.
ENDED = frozenset({JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED})


class JobNotFoundError(LookupError):
    pass


class JobEndedError(RuntimeError):
    """Cancelling a job that has already finished, failed or been cancelled."""


DEFAULT_TEACHER = "default"  # the packaged all-MiniLM-L6-v2
DEFAULT_RECIPE = Recipe.FULL.value  # background jobs can afford the hour-long recipe


@dataclass(frozen=True)
class RetrainRequest:
    method: str
    params: dict[str, Any]
    force: bool
    teachers: list[str]
    recipe: str = DEFAULT_RECIPE
    text: str = "auto"  # auto, documents or general: worker/training_text.py
    documents_share: float | None = None  # None: the settings' retrain_documents_share


# Request parameters that name files or devices on the worker: not for remote callers.
FORBIDDEN_PARAMS = frozenset({"eval_data", "device"})


class RetrainRequestError(ValueError):
    """Bad job parameters: unknown method, invalid config, unknown teacher."""


def parse_request(
    request: RetrainRequest, settings: Settings
) -> tuple[Method, TrainConfig, list[Path | None]]:
    """The method, its recipe with the request's `params` on top, and the teacher directories.

    The admin API calls it before enqueueing (a bad request is a 422, not a failed job) and
    the job again before training.
    """
    try:
        parsed = Method(request.method)
        spec = method_spec(parsed)
        recipe = Recipe(request.recipe)
    except ValueError as error:
        raise RetrainRequestError(str(error)) from None
    forbidden = sorted(FORBIDDEN_PARAMS & set(request.params))
    if forbidden:
        raise RetrainRequestError(f"params {forbidden} are set by the worker's settings")
    try:
        config = method_config(parsed, recipe, **request.params)
    except ValueError as error:
        raise RetrainRequestError(f"invalid params: {error}") from None
    low, high = spec.teachers
    names = list(request.teachers) or ([DEFAULT_TEACHER] if low > 0 else [])
    if not low <= len(names) <= high:
        raise RetrainRequestError(f"{parsed} takes {low} to {high} teachers, got {len(names)}")
    paths: list[Path | None] = []
    for name in names:
        if name == DEFAULT_TEACHER:
            paths.append(None)
            continue
        try:
            path = settings.models_dir / validate_version(name)
        except ValueError:
            raise RetrainRequestError(f"invalid teacher name {name!r}") from None
        if not (path / "modules.json").is_file():
            raise RetrainRequestError(
                f"teacher {name!r} is not installed (rankserve teachers install)"
            )
        paths.append(path)
    return parsed, config, paths


def retrain_queue(connection: Redis, keys: RedisKeys) -> Queue:
    """`connection` must not decode responses: RQ stores compressed bytes in its job hashes."""
    return Queue(keys.retrain_queue, connection=connection, serializer=JSONSerializer)


def submit(queue: Queue, request: RetrainRequest, settings: Settings) -> Job:
    return queue.enqueue_call(
        RETRAIN_FUNCTION,
        kwargs=dataclasses.asdict(request),
        timeout=settings.job_timeout_s,
        result_ttl=settings.job_result_ttl_s,
        failure_ttl=settings.job_result_ttl_s,
        retry=Retry(max=settings.job_retries) if settings.job_retries else None,
        description=f"retrain {request.method}{' (forced)' if request.force else ''}",
        meta={PROGRESS: {"phase": "queued"}},
    )


def reap_abandoned(queue: Queue) -> None:
    """Retry or fail jobs whose worker stopped sending heartbeats (it died: SIGKILL, OOM, power).

    RQ's StartedJobRegistry holds every running job with an expiry that the worker pushes
    forward while it lives; `cleanup` hands the expired ones to RQ's abandoned-job handling.
    Workers run it themselves, but when the only worker is dead someone else must: the admin
    API calls this before it reports on jobs.
    """
    StartedJobRegistry(queue=queue).cleanup()


def fetch(queue: Queue, job_id: str) -> Job:
    try:
        return Job.fetch(job_id, connection=queue.connection, serializer=queue.serializer)
    except NoSuchJobError:
        raise JobNotFoundError(job_id) from None


def job_ids(queue: Queue) -> list[str]:
    """Every job the queue still remembers: queued, running, and ended within their TTL."""
    ids = list(queue.get_job_ids())
    for registry_class in (
        StartedJobRegistry,
        FinishedJobRegistry,
        FailedJobRegistry,
        CanceledJobRegistry,
    ):
        ids.extend(registry_class(queue=queue).get_job_ids())
    return list(dict.fromkeys(ids))


def list_jobs(queue: Queue) -> list[Job]:
    """Newest first."""
    jobs = [
        job
        for job in Job.fetch_many(job_ids(queue), queue.connection, serializer=queue.serializer)
        if job is not None
    ]
    return sorted(jobs, key=lambda job: job.enqueued_at or job.created_at, reverse=True)


def cancel(queue: Queue, job: Job) -> JobStatus:
    """Cancel a waiting job, or stop a running one (its worker kills the work horse)."""
    status = job.get_status(refresh=True)
    if status in ENDED:
        raise JobEndedError(f"job {job.id} has already ended ({status})")
    if status == JobStatus.STARTED:
        send_stop_job_command(queue.connection, job.id, serializer=queue.serializer)
        return JobStatus.STOPPED
    try:
        job.cancel()
    except InvalidJobOperation as error:
        raise JobEndedError(str(error)) from None
    return JobStatus.CANCELED


def _error(job: Job) -> str | None:
    result = job.latest_result()
    if result is None or result.type not in (Result.Type.FAILED, Result.Type.STOPPED):
        return None
    lines = [line for line in (result.exc_string or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else str(result.type.name).lower()


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment is not None else None


REQUEUED = "requeued"


def _requeued(status: JobStatus | None, progress: dict[str, Any]) -> bool:
    """Queued again after it had started: its worker died or shut down mid-job."""
    return status == JobStatus.QUEUED and progress.get("phase", "queued") != "queued"


def describe(job: Job) -> dict[str, Any]:
    """The JSON view of a job that GET /admin/jobs returns."""
    status = job.get_status(refresh=False)
    kwargs = job.kwargs
    result = job.return_value() if status == JobStatus.FINISHED else None
    progress = job.meta.get(PROGRESS) or {}
    worker = job.worker_name
    shown = str(status.value if isinstance(status, JobStatus) else status)
    if _requeued(status, progress):
        # The last progress and worker belong to the attempt that died: say so instead.
        shown, worker = REQUEUED, None
        progress = {
            "phase": REQUEUED,
            "reason": f"its worker stopped during {progress.get('phase')}; a retry resumes "
            "from the last checkpoint in the bundle store",
            "last_attempt": progress,
        }
    return {
        "id": job.id,
        "status": shown,
        "method": kwargs.get("method"),
        "force": bool(kwargs.get("force")),
        "params": kwargs.get("params") or {},
        "teachers": kwargs.get("teachers") or [],
        "recipe": kwargs.get("recipe", DEFAULT_RECIPE),
        "text": kwargs.get("text", "auto"),
        "documents_share": kwargs.get("documents_share"),
        "enqueued_at": _iso(job.enqueued_at),
        "started_at": _iso(job.started_at),
        "ended_at": _iso(job.ended_at),
        "retries_left": job.retries_left,
        "worker": worker,
        "progress": progress,
        "result": result,
        "error": _error(job) if status in (JobStatus.FAILED, JobStatus.STOPPED) else None,
    }
