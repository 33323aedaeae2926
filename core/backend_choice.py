"""Which backend runs an encoder: the one the settings name, or for `auto` the fastest one that
passes the parity check (models/parity.py) on this checkpoint's real weights.

`auto`, per checkpoint: every installed backend is loaded (exported variants from the bundle,
else exported once into the cache), its parity with torch fp32 is read from the bundle's
`variants/parity.json` (the worker wrote it, on a CPU with the same instruction sets) or
measured on the dev sets, and the passing backends are timed on dev sentences at batch sizes
1 and 64 in interleaved rounds. The winner has the best geometric-mean speed-up over torch
fp32. The choice and its numbers are cached under `<cache>/backend-choices/`, keyed by the
checkpoint, the maximum length, the threads, the CPU (models/cpu_info.py: its name and model,
and the instruction sets that rank the backends), the packages' versions and the export
recipe's format, so a restart does not measure again.
"""

import hashlib
import json
import logging
import os
import statistics
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from core.settings import Settings
from models.atomic import atomic_write_json
from models.backends import (
    EXPORTED,
    VARIANT_FORMAT,
    Backend,
    available,
    build_variant,
    openvino_precisions,
)
from models.checksums import sha256_directory, sha256_texts
from models.cpu_info import cpu_has_bf16, cpu_identity
from models.encoder import Encoder, default_model_path, load_encoder, pick_device
from models.evaluation.senteval import SentEvalFormatError, load_sts_tasks
from models.packing import ROW_TOKENS
from models.parity import Parity, ParitySet, check_parity, embed, parity_set, sentences_per_second
from models.training.dev_eval import DEV_TASKS

logger = logging.getLogger(__name__)

AUTO = "auto"
PARITY_JSON = "parity.json"
SPEED_BATCHES = (1, 64)
SPEED_ROUNDS = 3
SPEED_TEXTS = 128


def encoder_for(
    settings: Settings, path: Path | None, variants: Path | None, backend: Backend
) -> Encoder:
    """The checkpoint at `path` (default: the settings') run by `backend`, as settings say."""
    return load_encoder(
        path or settings.model_path,
        device=settings.device,
        max_seq_length=settings.max_seq_length,
        batch_size=settings.encode_batch_size,
        batch_tokens=settings.max_batch_tokens,
        backend=backend,
        variants=variants,
        export_cache=settings.cache.encoder_variants,
        threads=settings.torch_threads,
        calibration=settings.anchor_corpus,
        single_lengths=settings.openvino_single_lengths,
        on_demand_lengths=settings.openvino_single_lengths_on_demand,
    )


def dev_parity_set(settings: Settings, max_pairs: int | None = None) -> ParitySet:
    tasks = [t for t in load_sts_tasks(settings.senteval_dir) if t.name in DEV_TASKS]
    if not tasks:
        raise FileNotFoundError(f"{settings.senteval_dir}: neither STS-B dev nor SICK trial")
    return parity_set(tasks, max_pairs)


def _setup(settings: Settings, dev: ParitySet) -> dict[str, Any]:
    """What parity numbers depend on besides the weights and the backend. The instruction
    sets and runtimes count too: without VNNI, int8 products round otherwise, enough to fail
    `openvino-int8-static` (models/openvino_export.py), and the CPU decides OpenVINO's
    precision (models/openvino_runner.py), so a worker's numbers hold only for replicas on CPUs
    like its own, running each graph in the precision it was checked in. So does the export
    recipe: a replica that re-exports an older bundle's variants runs other graphs."""
    cpu = cpu_identity()
    return {
        "variant_format": VARIANT_FORMAT,
        "max_seq_length": settings.max_seq_length,
        "dev_texts": sha256_texts(dev.texts),
        "cpu_vendor": cpu["vendor"],
        "cpu_flags": cpu["flags"],
        "packages": _package_versions(),
        "openvino_precisions": openvino_precisions(),
    }


# From docs/benchmarks.md (the fifteenth and twenty-second sessions): `auto` does not spend a
# start timing a backend this slow.
_EMULATED_BF16 = (
    "torch emulates bf16 on a CPU without AVX512-BF16 or AMX, "
    "at 0.18-0.53x torch fp32 wherever measured"
)


def _skipped(settings: Settings) -> dict[str, str]:
    """Installed backends `auto` leaves out on this machine, and why."""
    if pick_device(settings.device).type == "cpu" and not cpu_has_bf16():
        return {Backend.TORCH_BF16.value: _EMULATED_BF16}
    return {}


def _candidates(settings: Settings) -> list[Backend]:
    skipped = _skipped(settings)
    return [
        backend
        for backend in Backend
        if backend != Backend.TORCH and available(backend) and backend.value not in skipped
    ]


def measure_parity(
    settings: Settings,
    reference: Encoder,
    variants: Path | None,
    dev: ParitySet,
    backends: list[Backend],
) -> tuple[dict[Backend, Parity], dict[Backend, Encoder], dict[str, str]]:
    """Parity of each backend against `reference` (torch fp32), stored numbers reused; the
    encoders that loaded, and why the others did not."""
    stored = read_parity(variants, _setup(settings, dev))
    reference_embeddings = embed(reference, dev)
    results: dict[Backend, Parity] = {}
    encoders: dict[Backend, Encoder] = {}
    failures: dict[str, str] = {}
    for backend in backends:
        try:
            encoder = encoder_for(settings, reference.path, variants, backend)
        except Exception as error:  # an export or a runtime that fails here is not a choice
            logger.warning("encoder backend %s does not load: %s", backend, error)
            failures[backend.value] = f"{type(error).__name__}: {error}"
            continue
        encoders[backend] = encoder
        results[backend] = stored.get(backend) or check_parity(
            backend.value, embed(encoder, dev), reference_embeddings, dev
        )
    return results, encoders, failures


def read_parity(variants: Path | None, setup: dict[str, Any]) -> dict[Backend, Parity]:
    """The parity numbers a worker stored with a bundle's variants, if measured alike."""
    path = variants / PARITY_JSON if variants is not None else None
    if path is None or not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("setup") != setup:
        return {}
    return {Backend(name): Parity.from_json(value) for name, value in data["parity"].items()}


def _stored_parity(settings: Settings, variants: Path | None, backend: Backend) -> Parity | None:
    """`backend`'s parity as the bundle's worker measured it on a CPU like this one, if it did."""
    if variants is None or not (variants / PARITY_JSON).is_file():
        return None
    try:
        dev = dev_parity_set(settings)
    except (FileNotFoundError, SentEvalFormatError):
        return None
    return read_parity(variants, _setup(settings, dev)).get(backend)


def build_variants(settings: Settings, checkpoint: Path | None, out_dir: Path) -> Path | None:
    """What the worker puts into a bundle's `variants/`: the exported backends a replica with
    these settings may run, and their parity on the dev sets. None when there are none.
    `out_dir` must lie outside the checkpoint, whose checksum covers every file in it."""
    wanted = settings.encoder_backend
    checked = _candidates(settings) if wanted == AUTO else [Backend(wanted)]
    exported = [b for b in checked if b in EXPORTED]
    if not exported:
        return None
    reference = encoder_for(settings, checkpoint, None, Backend.TORCH)
    for backend in exported:
        build_variant(reference.model, reference.checksum, backend, out_dir, settings.anchor_corpus)
    dev = dev_parity_set(settings)
    parity, _, failures = measure_parity(settings, reference, out_dir, dev, checked)
    record = {
        "setup": _setup(settings, dev),
        "parity": {b.value: p.to_json() for b, p in parity.items()},
        "failures": failures,
    }
    atomic_write_json(out_dir / PARITY_JSON, record, indent=2)
    return out_dir


def _package_versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in ("torch", "onnxruntime", "onnx", "openvino", "nncf", "sentence-transformers"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def time_backends(encoders: dict[Backend, Encoder], texts: list[str], seconds: float) -> dict:
    """Sentences/s per backend and batch size: median of interleaved rounds, so a change in
    the machine's load hits every backend alike."""
    runs: dict[tuple[Backend, int], list[float]] = {}
    for _ in range(SPEED_ROUNDS):
        for batch in SPEED_BATCHES:
            for backend, encoder in encoders.items():
                speed = sentences_per_second(encoder, texts, batch, seconds)
                runs.setdefault((backend, batch), []).append(speed)
    return {key: statistics.median(values) for key, values in runs.items()}


def measure_backends(
    settings: Settings, path: Path | None, variants: Path | None, *, seconds: float = 0.5
) -> dict[str, Any]:
    """`auto`'s measurements for one checkpoint and the backend it picks."""
    dev = dev_parity_set(settings)
    reference = encoder_for(settings, path, variants, Backend.TORCH)
    parity, encoders, failures = measure_parity(
        settings, reference, variants, dev, _candidates(settings)
    )
    passing = {b: e for b, e in encoders.items() if parity[b].passed}
    passing[Backend.TORCH] = reference
    speeds = time_backends(passing, dev.texts[:SPEED_TEXTS], seconds)
    score = {
        b: statistics.geometric_mean(
            [speeds[(b, n)] / speeds[(Backend.TORCH, n)] for n in SPEED_BATCHES]
        )
        for b in passing
    }
    chosen = max(score, key=lambda b: score[b])
    return {
        "backend": chosen.value,
        "speedup": {b.value: s for b, s in score.items()},
        "sentences_per_s": {f"{b.value}@{n}": v for (b, n), v in speeds.items()},
        "parity": {b.value: p.to_json() for b, p in parity.items()},
        "failures": failures,
        "skipped": _skipped(settings),
        "load_average": os.getloadavg(),
    }


def choose_backend(settings: Settings, path: Path | None, variants: Path | None) -> Backend:
    """The backend the settings name; for `auto`, the cached or newly measured choice."""
    if settings.encoder_backend != AUTO:
        named = Backend(settings.encoder_backend)
        if reason := _skipped(settings).get(named.value):
            logger.warning(
                "encoder backend %s: %s; torch or auto will be faster",
                named.value,
                reason,
            )
        if (parity := _stored_parity(settings, variants, named)) and not parity.passed:
            # The operator's choice stands, but embeddings this far from fp32's (openvino-int8-
            # static in bf16 on AMX read a mean cosine of 0.971) must not go unnoticed.
            logger.warning(
                "encoder backend %s failed the parity check on this CPU (mean cosine %.4f, "
                "Spearman gap %.3f); auto would not run it",
                named.value,
                parity.mean_cosine,
                parity.max_spearman_gap,
            )
        return named
    checkpoint = Path(path or settings.model_path or default_model_path())
    key = {
        "checkpoint": sha256_directory(checkpoint),
        "max_seq_length": settings.max_seq_length,
        "threads": [settings.torch_threads, torch.get_num_threads()],
        # Single texts, half of what `auto` times, run in static graphs of these lengths.
        "single_lengths": settings.openvino_single_lengths,
        "cpu": [cpu_identity(), os.cpu_count()],
        "packages": _package_versions(),
        "openvino_precisions": openvino_precisions(),
        # Passes packed in rows of this many tokens (torch fp32, OpenVINO, ONNX Runtime), which
        # made them up to 1.7x as fast: a choice timed with padded passes (no such entry, or,
        # for ONNX Runtime, an older export recipe) is timed again.
        "packed_row_tokens": ROW_TOKENS,
        "variant_format": VARIANT_FORMAT,
        "installed": [b.value for b in _candidates(settings)],
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    cache = settings.cache.backend_choices / f"{digest}.json"
    if cache.is_file():
        return Backend(json.loads(cache.read_text(encoding="utf-8"))["backend"])
    try:
        report = measure_backends(settings, checkpoint, variants)
    except (FileNotFoundError, SentEvalFormatError) as error:
        # No dev sets, no parity check: only the reference is known to be right.
        logger.warning("encoder backend auto: %s; using torch", error)
        return Backend.TORCH
    atomic_write_json(cache, {"key": key, **report}, indent=2)
    logger.info("encoder backend auto chose %s: %s", report["backend"], report["speedup"])
    return Backend(report["backend"])
