"""The retrain job: train a student of the active model, gate it on the dev sets, bundle it,
and promote it when it is better beyond noise (or when the job says `force`).

It runs in the RQ work horse. Steps and where their output goes:
1. parent: the active version's bundle (loaded as a replica would), or the settings
   checkpoint when none is active; text: the corpus documents or the general clean text
   (worker/training_text.py);
2. train (models/training, the request's recipe) into `<store>/jobs/retrain-<job>`
   (resumable, and in the store every worker shares, so a retried job continues from its last
   checkpoint on any worker), reporting progress into the job's meta;
3. the trainer evaluates parent and student on the dev sets (STS-B dev, SICK trial) with
   cosine and Eq. 7; the gate (worker/gate.py) bootstraps the student's Eq. 7 advantage
   over the active version on the same dev pairs;
4. bundle: student weights, its anchor embeddings, its embeddings of every document at the
   corpus revision read before the scan, its diagnostics report (worker/report.py); the
   gate's decision and all metrics go into the manifest, promoted or not;
5. promote: set the active-version key and publish a notice (core/versions.py).
The first job also bundles the settings checkpoint itself as `base-<checksum>`, so that an
operator can roll back to where the service started.
"""

import asyncio
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from redis import Redis
from rq import get_current_job

from core.backend_choice import build_variants, encoder_for
from core.bundle_manifest import ENCODER_DIR
from core.jobs import DEFAULT_RECIPE, RetrainRequest, parse_request
from core.loading import (
    base_version,
    settings_bundle,
    settings_dev_setup,
    settings_encoder,
)
from core.redis_clients import sync_redis
from core.redis_keys import RedisKeys
from core.registry import BundleStore
from core.settings import Settings, get_settings
from core.store_types import CorpusSnapshot
from core.stores import open_store
from core.versions import activate, active_version
from models.backends import Backend
from models.checksums import sha256_directory
from models.encoder import default_model_path
from models.training.dev_eval import dev_predictions
from models.training.methods import Method, method_spec
from models.training.trainer import ResumeMismatchError, TrainResult, train
from worker.bundle_corpus import embed_documents, scan_documents, serving_anchors
from worker.gate import gate
from worker.progress import ProgressReporter
from worker.report import write_report
from worker.training_text import TextSource, TrainingText, resolve_source, training_text

_PROMOTION_ATTEMPTS = 5


def _training_text(
    settings: Settings,
    keys: RedisKeys,
    request: RetrainRequest,
    supervised: bool,
    text_dir: Path,
) -> TrainingText:
    """The job's text: worker/training_text.py decides between documents and general text."""
    revision, documents, source = 0, [], TextSource.GENERAL
    if not supervised:
        revision, stored, _ = asyncio.run(scan_documents(settings, keys))
        documents = [doc.text for doc in stored]
        source = resolve_source(
            TextSource(request.text), len(set(documents)), settings.retrain_min_documents
        )
    return training_text(
        source,
        general_files=settings.training_files(supervised=supervised),
        documents=documents,
        revision=revision,
        share=request.documents_share or settings.retrain_documents_share,
        seed=0,
        out_dir=text_dir,
    )


def _base_bundle(
    store: BundleStore, settings: Settings, version: str, metrics: dict[str, Any]
) -> None:
    """The settings checkpoint as a bundle, so that rolling back to it is one activation."""
    with tempfile.TemporaryDirectory(prefix="rankserve-variants-") as tmp:
        variants = build_variants(settings, None, Path(tmp) / "variants")
        encoder = settings_encoder(settings, None, variants)
        anchors = serving_anchors(settings, encoder, None)
        store.write(version, encoder=encoder, anchors=anchors, metrics=metrics, variants=variants)


def _train_resuming(out_dir: Path, run: Callable[[], TrainResult]) -> TrainResult:
    """Resume a retried job's run; start afresh if its inputs changed (a new active version)."""
    try:
        return run()
    except ResumeMismatchError:
        shutil.rmtree(out_dir, ignore_errors=True)
        return run()


def student_name(store: BundleStore, parent: str, method: Method) -> str:
    """What /info shows: the family of the root checkpoint plus the latest method."""
    family = store.manifest(parent).encoder.name.split("+")[0] if store.exists(parent) else parent
    return f"{family}+{method.value}"


def run_retrain(
    method: str,
    params: dict[str, Any],
    force: bool,
    teachers: list[str],
    recipe: str = DEFAULT_RECIPE,
    text: str = TextSource.AUTO.value,
    documents_share: float | None = None,
) -> dict[str, Any]:
    """The RQ job function; its JSON return value is the job's result."""
    settings = get_settings()
    job = get_current_job()
    job_id = job.id if job is not None else datetime.now(UTC).strftime("%H%M%S%f")
    progress = ProgressReporter(job)
    progress.phase("preparing")
    client = sync_redis(settings, decode_responses=True)
    try:
        request = RetrainRequest(
            method, params, force, teachers, recipe, text=text, documents_share=documents_share
        )
        return _retrain(settings, client, job_id, progress, request)
    finally:
        client.close()


def _retrain(
    settings: Settings,
    client: Redis,
    job_id: str,
    progress: ProgressReporter,
    request: RetrainRequest,
) -> dict[str, Any]:
    parsed, config, teacher_paths = parse_request(request, settings)
    force = request.force
    if config.device is None and settings.device is not None:
        config = config.model_copy(update={"device": settings.device})
    keys = RedisKeys(settings.redis_prefix)
    store = open_store(settings)

    base_path = settings.model_path or default_model_path()
    base = base_version(sha256_directory(base_path))
    parent = active_version(client, keys) or base
    if store.exists(parent):
        # Loaded as a replica loads it (weights, smoke encode): a broken parent fails the job
        # now, not after minutes of training.
        settings_bundle(settings, store, parent)
        parent_path = store.path_for(parent) / ENCODER_DIR
    elif parent == base:
        parent_path = base_path
    else:
        raise FileNotFoundError(f"the active version {parent!r} has no bundle in the store")

    dev = settings_dev_setup(settings, config.eval_anchor_count)
    checkpoints = store.job_checkpoints(job_id)
    # The newest resume checkpoint of an earlier attempt, from wherever the store keeps it.
    out_dir = checkpoints.restore()
    text_dir = out_dir.with_name(f"{out_dir.name}-text")
    text = _training_text(settings, keys, request, method_spec(parsed).supervised, text_dir)

    def on_step(done: int, total: int, loss: float) -> None:
        checkpoints.save()  # uploads a resume checkpoint the trainer has just replaced
        progress.step(done, total, loss)
        if done == total:
            progress.phase("evaluating")

    progress.phase("training")
    result = _train_resuming(
        out_dir,
        lambda: train(
            parsed,
            parent_path,
            teacher_paths,
            text.files,
            out_dir,
            config,
            cache_dir=settings.cache_dir,
            dev=dev,
            progress=False,
            on_step=on_step,
        ),
    )
    dev_metrics = result.metadata["dev_metrics"]
    setup = dev_metrics["setup"]

    progress.phase("bundling")
    if parent == base and not store.exists(base):
        _base_bundle(store, settings, base, {"dev": dev_metrics["base"], "dev_setup": setup})
    # Exported beside the run, not in it: the checkpoint's checksum covers its every file.
    variants_dir = out_dir.with_name(f"{out_dir.name}-variants")
    variants = build_variants(settings, out_dir, variants_dir)
    student = settings_encoder(settings, out_dir, variants)
    student.name = student_name(store, parent, parsed)
    revision, documents, record = asyncio.run(scan_documents(settings, keys))
    anchors = serving_anchors(settings, student, record.texts if record else None)
    corpus = CorpusSnapshot(
        revision=revision,
        ids=[doc.number for doc in documents],
        embeddings=embed_documents(settings, student, [doc.text for doc in documents]),
    )
    version = f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{parsed.value}-{job_id[:8]}"

    progress.phase("diagnosing")
    report = write_report(settings, version, student, anchors, out_dir / "report")

    progress.phase("promoting")
    # The gate judges weights, so both sides run torch fp32: under `auto`, student and active
    # version may run different backends, whose dev scores differ by up to the parity bound.
    candidate = dev_predictions(encoder_for(settings, out_dir, None, Backend.TORCH), dev)

    def decide(active: str | None) -> dict[str, Any]:
        version = active or base
        if version == parent:
            path: Path | None = parent_path
        elif version == base:
            path = base_path
        else:
            path = store.fetch(version) / ENCODER_DIR if store.exists(version) else None
        return gate(
            candidate,
            dev_predictions(encoder_for(settings, path, None, Backend.TORCH), dev)
            if path
            else None,
            active_version=version,
            margin=settings.gate_margin,
            confidence=settings.gate_confidence,
            samples=settings.gate_bootstrap_samples,
            force=force,
        )

    raw_active = active_version(client, keys)
    decision = decide(raw_active)
    store.write(
        version,
        encoder=student,
        anchors=anchors,
        corpus=corpus,
        method=parsed.value,
        parent=parent,
        report=report,
        variants=variants,
        metrics={
            "dev": dev_metrics["student"],
            "parent_dev": dev_metrics["base"],
            "dev_setup": setup,
            "gate": decision,
            "job_id": job_id,
            "steps": result.steps,
            "final_loss": result.final_loss,
            "config": result.metadata["config"],
            "teachers": result.metadata["teachers"],
            "training_text": text.record,
            "recipe": request.recipe,
        },
    )
    if decision["promote"]:
        # Loaded as every replica will load it: a bundle that does not is never activated.
        settings_bundle(settings, store, version)
    promoted = False
    for _ in range(_PROMOTION_ATTEMPTS):
        if not decision["promote"]:
            break
        reason = f"promoted by job {job_id}"
        if activate(client, keys, version, reason=reason, expected=raw_active):
            promoted = True
            break
        # An operator activated another version between the gate and now: gate against it.
        # The manifest keeps the first decision; the job's result has the final one.
        raw_active = active_version(client, keys)
        decision = decide(raw_active)
    checkpoints.discard()
    shutil.rmtree(text_dir, ignore_errors=True)
    shutil.rmtree(variants_dir, ignore_errors=True)
    progress.phase("done", version=version, promoted=promoted)
    return {"version": version, "promoted": promoted, "gate": decision, "dev": dev_metrics}
