"""The encoder and anchor matrix that the settings name, and the version name of the settings'
checkpoint: what the API, the worker and the CLI each load the same way."""

from pathlib import Path

from core.backend_choice import choose_backend, encoder_for
from core.registry import BundleStore
from core.settings import Settings
from core.store_types import LoadedBundle
from core.threads import apply_thread_policy
from models.anchors import AnchorSet, load_anchor_set
from models.encoder import Encoder
from models.training.dev_eval import DevSetup


def default_version(encoder: Encoder) -> str:
    """Stable across restarts of the same checkpoint: derived from its checksum."""
    return base_version(encoder.checksum)


def base_version(checksum: str) -> str:
    """The version name of the settings' checkpoint, from its sha256_directory (no loading)."""
    return f"base-{checksum[:12]}"


def settings_encoder(
    settings: Settings, path: Path | None = None, variants: Path | None = None
) -> Encoder:
    """The encoder at `path` (default: the settings' checkpoint) with the settings' device,
    maximum length, batch size, backend and threads; an exported backend's variant from
    `variants` (core/backend_choice.build_variants) when it holds one, else from the cache."""
    apply_thread_policy(settings)  # a no-op after the process's first call
    return encoder_for(settings, path, variants, choose_backend(settings, path, variants))


def settings_anchors(settings: Settings, encoder: Encoder, count: int | None = None) -> AnchorSet:
    """The anchor matrix the settings name (corpus file, M, seed), cached on disk."""
    return load_anchor_set(
        encoder,
        settings.anchor_corpus,
        count if count is not None else settings.anchor_count,
        seed=settings.anchor_seed,
        cache_dir=settings.cache_dir,
    )


def settings_dev_setup(
    settings: Settings, anchor_count: int | None, data_dir: Path | None = None
) -> DevSetup:
    """How students are scored on the dev sets: the settings' anchors and lambda, `anchor_count`
    anchors (a training config's eval_anchor_count), dev data from `data_dir` or the settings."""
    return DevSetup(
        data_dir=data_dir or settings.senteval_dir,
        anchor_corpus=settings.anchor_corpus,
        anchor_count=anchor_count,
        anchor_seed=settings.anchor_seed,
        lambda_inf=settings.lambda_inf,
        cache_dir=settings.cache_dir,
    )


def settings_bundle(settings: Settings, store: BundleStore, version: str) -> LoadedBundle:
    """A bundle loaded as every replica loads it (checksums, weights, smoke encode, anchors),
    run by the settings' backend: its prebuilt variant when the bundle has one."""
    apply_thread_policy(settings)
    return store.load(
        version,
        encoder_loader=lambda encoder_dir, variants: encoder_for(
            settings, encoder_dir, variants, choose_backend(settings, encoder_dir, variants)
        ),
    )
