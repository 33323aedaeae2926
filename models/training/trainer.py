"""The training loop shared by every method: seeded, resumable, with cached teacher signals.

A run writes `<out>/.resume/state.pt` every `save_every` steps (model, optimiser, scheduler,
step, RNG states, and a fingerprint of the run's inputs); a later call with the same inputs
continues from that step. The finished student is a sentence-transformers directory `<out>`
with `training.json` beside its weights: method, hyper-parameters, teachers, parent, data
checksums, dev metrics before and after, creation time, library versions.
"""

import hashlib
import json
import platform
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from models.atomic import atomic_write, atomic_write_json
from models.encoder import Encoder, load_encoder
from models.training.config import TrainConfig
from models.training.data import TrainingData, load_sentences, load_triples
from models.training.dev_eval import DevSetup, evaluate_dev
from models.training.methods import EmbeddingSignals, Method, SignalKind, method_spec
from models.training.signals import (
    batch_schedule,
    cosine_signals,
    encode_cached,
    rank_signals,
)

METADATA_FILE = "training.json"
RESUME_DIR = ".resume"
MAX_GRAD_NORM = 1.0


class ResumeMismatchError(RuntimeError):
    """The output directory holds a resumable run with different inputs."""


@dataclass(frozen=True)
class TrainResult:
    out_dir: Path
    steps: int
    resumed_from: int
    final_loss: float
    metadata: dict[str, Any]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _teacher_signals(
    method: Method,
    teachers: list[Path | None],
    data: TrainingData,
    schedule: torch.Tensor,
    config: TrainConfig,
    cache_dir: Path,
    anchor_corpus: Path,
) -> tuple[torch.Tensor | None, list[dict[str, str]]]:
    """(T, steps, B, B) teacher matrices (None for teacher-free methods) and teacher records."""
    spec = method_spec(method)
    low, high = spec.teachers
    if not low <= len(teachers) <= high:
        raise ValueError(f"{method} takes {low} to {high} teachers, got {len(teachers)}")
    records, signals = [], []
    for path in teachers:
        # Teachers read at their own maximum length: their signal is computed once, and their
        # anchor embeddings then share the cache with serving.
        teacher = load_encoder(path, device=config.device)
        records.append(
            {"name": teacher.name, "path": str(teacher.path), "checksum": teacher.checksum}
        )
        if spec.signal is SignalKind.RANK:
            signals.append(
                rank_signals(
                    teacher,
                    data.sentences,
                    schedule,
                    cache_dir,
                    anchor_corpus,
                    config.teacher_anchor_count,
                )
            )
        else:
            signals.append(cosine_signals(teacher, data.sentences, schedule, cache_dir))
        del teacher
    return (torch.stack(signals) if signals else None), records  # (T, steps, B, B)


def _embedding_signals(
    method: Method,
    teachers: list[Path | None],
    parent: Encoder,
    data: TrainingData,
    config: TrainConfig,
    cache_dir: Path,
) -> tuple[EmbeddingSignals, list[dict[str, str]]]:
    """The teacher's and the parent's embeddings of every distinct training text (cached)."""
    if len(teachers) != 1:
        raise ValueError(f"{method} takes one teacher, got {len(teachers)}")
    (path,) = teachers
    teacher = load_encoder(path, device=config.device)
    record = {"name": teacher.name, "path": str(teacher.path), "checksum": teacher.checksum}
    texts = data.texts
    signals = EmbeddingSignals(
        texts=texts,
        teacher=encode_cached(teacher, texts, cache_dir),  # (N, d_t)
        parent=encode_cached(parent, texts, cache_dir),  # (N, d)
    )
    return signals, [record]


def _fingerprint(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _save_state(path: Path, state: dict[str, Any]) -> None:
    atomic_write(path, lambda handle: torch.save(state, handle))


def library_versions() -> dict[str, str]:
    packages = ("torch", "transformers", "sentence-transformers", "numpy", "rankserve")
    return {"python": platform.python_version()} | {name: version(name) for name in packages}


def train(
    method: Method,
    base: Path | None,
    teachers: list[Path | None],
    data_paths: list[Path],
    out_dir: Path,
    config: TrainConfig,
    *,
    cache_dir: Path,
    dev: DevSetup,
    progress: bool = True,
    on_step: Callable[[int, int, float], None] | None = None,
) -> TrainResult:
    """Train a student of `base` with `method`; write the checkpoint, metadata, dev metrics."""
    seed_everything(config.seed)
    spec = method_spec(method)
    if spec.supervised:
        data = load_triples(
            data_paths, config.max_sentences, config.seed, hard_negatives=config.hard_negatives
        )
    else:
        data = load_sentences(data_paths, config.max_sentences, config.seed)
    schedule = batch_schedule(len(data), config.batch_size, config.epochs, config.seed)
    if config.max_steps is not None:
        schedule = schedule[: config.max_steps]
    total_steps = len(schedule)

    parent = load_encoder(base, device=config.device)
    embeddings: EmbeddingSignals | None = None
    if spec.signal is SignalKind.EMBEDDINGS:
        signals = None
        embeddings, teacher_records = _embedding_signals(
            method, teachers, parent, data, config, cache_dir
        )
    else:
        signals, teacher_records = _teacher_signals(
            method, teachers, data, schedule, config, cache_dir, dev.anchor_corpus
        )
    parent_record = {"name": parent.name, "path": str(parent.path), "checksum": parent.checksum}
    model = parent.model
    serving_length = model.max_seq_length
    model.max_seq_length = config.max_seq_length
    loss_fn = spec.loss(model, config, embeddings)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    scheduler = get_linear_schedule_with_warmup(
        optimizer, round(config.warmup_ratio * total_steps), total_steps
    )

    fingerprint = _fingerprint(
        method=method,
        config=config.model_dump(mode="json"),
        parent=parent.checksum,
        teachers=[t["checksum"] for t in teacher_records],
        data=data.checksum,
    )
    state_path = out_dir / RESUME_DIR / "state.pt"
    start, last_loss = 0, float("nan")
    if state_path.is_file():
        state = torch.load(state_path, weights_only=False)
        if state["fingerprint"] != fingerprint:
            raise ResumeMismatchError(
                f"{out_dir} holds a run with other inputs; pick another --out or delete it"
            )
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        if state.get("loss_table") is not None:
            loss_fn.table.copy_(state["loss_table"])
        start, last_loss = state["step"], state["loss"]

    def checkpoint(step: int) -> None:
        _save_state(
            state_path,
            {
                "fingerprint": fingerprint,
                "step": step,
                "loss": last_loss,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "torch_rng": torch.get_rng_state(),
                # A loss with state of its own (similarity distillation's memory table).
                "loss_table": getattr(loss_fn, "table", None),
            },
        )

    model.train()
    bar = tqdm(
        range(start, total_steps),
        total=total_steps,
        initial=start,
        desc=str(method),
        disable=not progress,
    )
    for step in bar:
        rows = schedule[step].tolist()
        if spec.supervised:
            batch = [data.triples[i] for i in rows]
            negatives = [t.negative or "" for t in batch] if config.hard_negatives else None
            loss = loss_fn([t.anchor for t in batch], [t.positive for t in batch], negatives)
        elif spec.signal is SignalKind.EMBEDDINGS:  # similarity distillation: rows of the table
            loss = loss_fn([data.sentences[i] for i in rows], schedule[step])
        elif signals is None:
            loss = loss_fn([data.sentences[i] for i in rows])
        else:
            teacher = signals[:, step].to(model.device)  # (T, B, B)
            if spec.signal is SignalKind.RANK:
                teacher = teacher[0]  # (B, B): RankEncoder takes exactly one teacher
            loss = loss_fn([data.sentences[i] for i in rows], teacher)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        last_loss = float(loss.detach())
        bar.set_postfix(loss=f"{last_loss:.4f}")
        if on_step is not None:
            # (steps done, total steps, loss): the retrain worker publishes job progress.
            on_step(step + 1, total_steps, last_loss)
        if (step + 1) % config.save_every == 0 and step + 1 < total_steps:
            checkpoint(step + 1)
    bar.close()

    model.eval()
    model.max_seq_length = serving_length
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save(str(out_dir), create_model_card=False)

    student = load_encoder(out_dir, device=config.device)
    before = evaluate_dev(load_encoder(base, device=config.device), dev, progress=progress)
    after = evaluate_dev(student, dev, progress=progress)
    metadata = {
        "method": str(method),
        "config": config.model_dump(mode="json"),
        "parent": parent_record,
        "teachers": teacher_records,
        "data": {"files": data.files, "examples": len(data), "examples_sha256": data.checksum},
        "steps": total_steps,
        "final_loss": last_loss,
        "dev_metrics": {
            "setup": {
                "anchors": dev.anchor_count,
                "lambda_inf": dev.lambda_inf,
                "anchor_corpus": str(dev.anchor_corpus),
            },
            "base": before,
            "student": after,
        },
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": library_versions(),
    }
    atomic_write_json(out_dir / METADATA_FILE, metadata, indent=2)
    shutil.rmtree(out_dir / RESUME_DIR, ignore_errors=True)
    return TrainResult(out_dir, total_steps, start, last_loss, metadata)
