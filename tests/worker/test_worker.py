"""The worker process: progress, cancellation, bounded SIGTERM shutdown, death by SIGKILL."""

import json
import signal
import time

import pytest
import torch
from redis import Redis
from rq.job import JobStatus
from rq.registry import StartedJobRegistry
from safetensors.torch import load_file, save_file

from core.bundle_manifest import ENCODER_DIR, MANIFEST
from core.jobs import (
    PROGRESS,
    RetrainRequest,
    cancel,
    describe,
    fetch,
    reap_abandoned,
    retrain_queue,
    submit,
)
from core.registry import BundleStore
from models.checksums import sha256_directory, sha256_file
from tests.polling import wait_until
from tests.worker.conftest import LONG_PARAMS, OpsEnv, pid_alive

pytestmark = pytest.mark.slow


def _training(queue, job_id: str) -> dict:
    def progress() -> dict | None:
        state = fetch(queue, job_id).get_meta(refresh=True).get(PROGRESS) or {}
        return state if state.get("phase") == "training" and state.get("step", 0) >= 1 else None

    return wait_until(progress, 120, f"job {job_id} never started training")


def _status(queue, job_id: str) -> JobStatus:
    return fetch(queue, job_id).get_status(refresh=True)


def test_progress_cancel_and_bounded_sigterm(ops_env: OpsEnv):
    settings = ops_env.settings
    connection = Redis.from_url(settings.redis_url)
    queue = retrain_queue(connection, ops_env.keys)
    request = RetrainRequest(method="simcse", params=LONG_PARAMS, force=False, teachers=[])
    worker = ops_env.start_worker()

    # Progress is readable from another process while the job trains.
    first = submit(queue, request, settings)
    progress = _training(queue, first.id)
    assert progress["total"] == 8000 and 1 <= progress["step"] <= progress["total"]
    assert progress["percent"] == pytest.approx(100 * progress["step"] / 8000, abs=0.01)
    assert progress["loss"] > 0 and progress["eta_s"] > 0
    view = describe(fetch(queue, first.id))
    assert (view["status"], view["method"], view["params"]) == ("started", "simcse", LONG_PARAMS)

    # Cancelling a running job kills its work horse; the worker lives on.
    horse = progress["pid"]
    assert cancel(queue, fetch(queue, first.id)) == JobStatus.STOPPED
    wait_until(lambda: _status(queue, first.id) == JobStatus.STOPPED, 30, "job never stopped")
    wait_until(lambda: not pid_alive(horse), 10, "the cancelled work horse survived")
    assert describe(fetch(queue, first.id))["error"]
    assert worker.poll() is None

    # SIGTERM mid-job: the worker waits the 2 s grace, stops the job, requeues it, exits.
    second = submit(queue, request, settings)
    horse = _training(queue, second.id)["pid"]
    signalled = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, ops_env.log("worker")
    took = time.monotonic() - signalled
    assert took >= settings.worker_shutdown_grace_s
    assert not pid_alive(horse)
    requeued = fetch(queue, second.id)
    assert requeued.get_status(refresh=True) == JobStatus.QUEUED
    assert requeued.retries_left == 0
    assert second.id in queue.get_job_ids()

    # A queued job is cancelled without a worker.
    assert cancel(queue, requeued) == JobStatus.CANCELED
    assert _status(queue, second.id) == JobStatus.CANCELED
    assert second.id not in queue.get_job_ids()
    connection.close()


def test_sigkilled_worker_takes_its_job_down_and_the_job_fails(ops_env: OpsEnv):
    ops_env.variables["RANKSERVE_JOB_RETRIES"] = "0"
    settings = ops_env.settings
    connection = Redis.from_url(settings.redis_url)
    queue = retrain_queue(connection, ops_env.keys)
    worker = ops_env.start_worker()
    job = submit(
        queue,
        RetrainRequest(method="simcse", params=LONG_PARAMS, force=False, teachers=[]),
        settings,
    )
    horse = _training(queue, job.id)["pid"]
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    # PR_SET_PDEATHSIG: the kernel kills the orphaned work horse too, so it cannot go on to
    # write or promote a bundle unsupervised.
    wait_until(lambda: not pid_alive(horse), 10, "the work horse outlived its worker")
    assert _status(queue, job.id) == JobStatus.STARTED  # nobody has noticed yet

    def reaped() -> bool:
        reap_abandoned(queue)
        return _status(queue, job.id) != JobStatus.STARTED

    # Heartbeats stop; after three missed ones (3 s here) the job counts as abandoned and,
    # with no retries left, fails.
    wait_until(reaped, 30, "the abandoned job stayed started")
    failed = describe(fetch(queue, job.id))
    assert failed["status"] == "failed"
    assert "AbandonedJobError" in failed["error"]
    assert job.id not in StartedJobRegistry(queue=queue).get_job_ids()
    connection.close()


def test_a_retry_on_another_worker_resumes_from_the_shared_checkpoint(ops_env: OpsEnv, tmp_path):
    settings = ops_env.settings
    connection = Redis.from_url(settings.redis_url)
    queue = retrain_queue(connection, ops_env.keys)
    first = ops_env.start_worker("first")
    params = LONG_PARAMS | {"save_every": 20}
    job = submit(queue, RetrainRequest("simcse", params, False, [], recipe="quick"), settings)

    def past_checkpoint() -> dict | None:
        state = fetch(queue, job.id).get_meta(refresh=True).get(PROGRESS) or {}
        return state if state.get("step", 0) > 21 else None

    wait_until(past_checkpoint, 300, "the job never passed its first checkpoint")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    checkpoint = BundleStore(settings.bundle_store).job_dir(job.id) / ".resume" / "state.pt"
    assert checkpoint.is_file()

    def requeued() -> dict | None:
        reap_abandoned(queue)
        view = describe(fetch(queue, job.id))
        return view if view["status"] == "requeued" else None

    view = wait_until(requeued, 30, "the abandoned job was never requeued")
    assert view["worker"] is None and "worker stopped" in view["progress"]["reason"]

    # Another worker with a var dir of its own, as another container would have: it finds the
    # checkpoint in the shared store and goes on from there instead of step 0.
    ops_env.start_worker("second", RANKSERVE_VAR_DIR=str(tmp_path / "other-var"))
    resumed = _training(queue, job.id)
    assert resumed["step"] > 20, resumed
    cancel(queue, fetch(queue, job.id))
    connection.close()


def _nan_bundle(store: BundleStore, version: str, encoder, anchors) -> None:
    """A bundle whose manifest is self-consistent but whose weights are all NaN."""
    store.write(version, encoder=encoder, anchors=anchors, method="simcse", parent="base")
    root = store.path_for(version)
    weights = root / ENCODER_DIR / "model.safetensors"
    tensors = {
        name: torch.full_like(t, float("nan")) if t.is_floating_point() else t
        for name, t in load_file(weights).items()
    }
    save_file(tensors, weights)
    manifest = json.loads((root / MANIFEST).read_text())
    manifest["files"][f"{ENCODER_DIR}/model.safetensors"] = sha256_file(weights)
    manifest["encoder"]["checksum"] = sha256_directory(root / ENCODER_DIR)
    (root / MANIFEST).write_text(json.dumps(manifest))


def test_a_parent_that_does_not_load_fails_the_job_before_training(
    ops_env: OpsEnv, encoder, anchors
):
    settings = ops_env.settings
    _nan_bundle(BundleStore(settings.bundle_store), "nan-parent", encoder, anchors)
    connection = Redis.from_url(settings.redis_url)
    connection.set(ops_env.keys.active_version, "nan-parent")
    queue = retrain_queue(connection, ops_env.keys)
    job = submit(queue, RetrainRequest("simcse", LONG_PARAMS, False, [], recipe="quick"), settings)
    ops_env.start_worker()
    wait_until(lambda: _status(queue, job.id) == JobStatus.FAILED, 120, "the job never failed")
    view = describe(fetch(queue, job.id))
    assert "CorruptBundleError" in view["error"] and "not finite" in view["error"]
    # It failed while preparing: no training step ever ran.
    assert view["progress"]["phase"] == "preparing"
    connection.close()
