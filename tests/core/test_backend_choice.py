"""`auto` and the thread policy: the choice is measured once per checkpoint and CPU, only a
backend passing parity can win, and a bundle's prebuilt variants spare replicas the export."""

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch

import core.backend_choice as choice
import core.threads as threads
from core.loading import settings_bundle
from core.registry import BundleStore
from core.settings import DATA_DIR, Settings
from models.anchors import AnchorSet
from models.backends import Backend, available
from models.encoder import Encoder
from models.parity import COSINE_FLOOR, ParitySet


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(var_dir=tmp_path / "var", data_dir=DATA_DIR, encoder_backend="auto")


def test_thread_policy_is_applied_once(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    monkeypatch.setattr(threads, "_applied", None)
    try:
        applied = threads.apply_thread_policy(Settings(torch_threads=1, blas_threads=1))
        assert applied["torch_threads"] == torch.get_num_threads() == 1
        assert applied["blas_threads"] in (1, None)
        # Later calls, whatever their settings, keep what the first one set.
        assert threads.apply_thread_policy(Settings(torch_threads=2)) == applied
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
        if threads._blas_limiter is not None:
            threads._blas_limiter.restore_original_limits()
        monkeypatch.setattr(threads, "_blas_limiter", None)


def test_a_named_backend_is_taken_as_is(settings: Settings) -> None:
    named = settings.model_copy(update={"encoder_backend": "onnx-int8"})
    assert choice.choose_backend(named, None, None) == Backend.ONNX_INT8


@pytest.mark.parametrize("has_bf16", [True, False])
def test_torch_bf16_on_a_cpu_that_emulates_bf16_is_warned_of(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    has_bf16: bool,
) -> None:
    # Which CPU CI runs on is not ours to choose: the flags are set here, the reading of
    # /proc/cpuinfo is tested in tests/models/test_cpu_info.py.
    monkeypatch.setattr(choice, "cpu_has_bf16", lambda: has_bf16)
    named = settings.model_copy(update={"encoder_backend": "torch-bf16", "device": "cpu"})
    with caplog.at_level(logging.WARNING, logger=choice.__name__):
        assert choice.choose_backend(named, None, None) == Backend.TORCH_BF16
    warned = [r.getMessage() for r in caplog.records if "emulates bf16" in r.getMessage()]
    assert len(warned) == (0 if has_bf16 else 1)


@pytest.mark.parametrize("mean_cosine", [0.971, 0.9968])
def test_a_named_backend_that_failed_the_bundles_parity_check_is_warned_of(
    settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture, mean_cosine: float
) -> None:
    named = settings.model_copy(update={"encoder_backend": "openvino-int8-static"})
    dev = choice.dev_parity_set(named)
    parity = {
        "backend": "openvino-int8-static",
        "spearman": {"STS": 80.0},
        "reference": {"STS": 80.0},
        "mean_cosine": mean_cosine,
        "min_cosine": 0.5,
        "pairs": 1,
    }
    record = {"setup": choice._setup(named, dev), "parity": {"openvino-int8-static": parity}}
    (tmp_path / choice.PARITY_JSON).write_text(json.dumps(record))
    with caplog.at_level(logging.WARNING, logger=choice.__name__):
        assert choice.choose_backend(named, None, tmp_path) == Backend.OPENVINO_INT8_STATIC
    warned = [r.getMessage() for r in caplog.records if "failed the parity check" in r.getMessage()]
    assert len(warned) == (mean_cosine < COSINE_FLOOR)
    assert all("0.9710" in message for message in warned)


@pytest.fixture
def measurements(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """`auto`'s measurements, replaced by a pick of onnx; the list of calls made."""
    calls: list[tuple[object, ...]] = []

    def measured(*args: object, **kwargs: object) -> dict:
        calls.append(args)
        return {"backend": "onnx", "speedup": {"torch": 1.0, "onnx": 2.5}}

    monkeypatch.setattr(choice, "measure_backends", measured)
    return calls


def test_auto_measures_once_then_reads_its_cache(
    settings: Settings, measurements: list[tuple[object, ...]]
) -> None:
    calls = measurements
    assert choice.choose_backend(settings, None, None) == Backend.ONNX
    assert choice.choose_backend(settings, None, None) == Backend.ONNX
    assert len(calls) == 1
    [cached] = list(settings.cache.backend_choices.iterdir())
    assert json.loads(cached.read_text())["key"]["cpu"]


def test_auto_measures_again_on_a_cpu_with_other_instruction_sets(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A var_dir that moves between machines of one CPU name (a shared volume, a resized VM)
    # must not carry a choice measured where bf16 or AMX made another backend fastest.
    picks = iter(["torch-bf16", "onnx-int8"])
    monkeypatch.setattr(
        choice, "measure_backends", lambda *_, **__: {"backend": next(picks), "speedup": {}}
    )
    name = {"name": "Intel(R) Xeon(R) Processor", "family": "6", "model": "207"}
    amx = {**name, "flags": ["amx_bf16", "amx_tile", "avx512_bf16", "avx512f"]}
    monkeypatch.setattr(choice, "cpu_identity", lambda: amx)
    assert choice.choose_backend(settings, None, None) == Backend.TORCH_BF16
    monkeypatch.setattr(choice, "cpu_identity", lambda: {**name, "flags": ["avx512f"]})
    assert choice.choose_backend(settings, None, None) == Backend.ONNX_INT8
    monkeypatch.setattr(choice, "cpu_identity", lambda: amx)
    assert choice.choose_backend(settings, None, None) == Backend.TORCH_BF16  # its own cache
    assert len(list(settings.cache.backend_choices.iterdir())) == 2


def test_auto_measures_again_when_single_texts_run_in_other_graphs(
    settings: Settings, measurements: list[tuple[object, ...]]
) -> None:
    # Half of what `auto` times is single texts, whose speed the static graphs change.
    calls = measurements
    dynamic = settings.model_copy(update={"openvino_single_lengths": []})
    for each in (settings, dynamic, settings, dynamic):
        assert choice.choose_backend(each, None, None) == Backend.ONNX
    assert len(calls) == 2


def test_auto_measures_again_when_openvino_runs_in_another_precision(
    settings: Settings, measurements: list[tuple[object, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A choice made while a graph ran in bf16 (and failed parity there) says nothing of it in f32.
    for precision in ("bf16", "f32", "bf16"):
        monkeypatch.setattr(choice, "openvino_precisions", lambda p=precision: {"openvino": p})
        assert choice.choose_backend(settings, None, None) == Backend.ONNX
    assert len(measurements) == 2


def test_auto_measures_again_for_variants_of_another_export_recipe(
    settings: Settings, measurements: list[tuple[object, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Recipe 4 packed ONNX Runtime's passes: a choice timed with padded ones is stale.
    for recipe in (choice.VARIANT_FORMAT - 1, choice.VARIANT_FORMAT, choice.VARIANT_FORMAT - 1):
        monkeypatch.setattr(choice, "VARIANT_FORMAT", recipe)
        assert choice.choose_backend(settings, None, None) == Backend.ONNX
    assert len(measurements) == 2


def test_auto_without_dev_sets_keeps_torch(tmp_path: Path) -> None:
    bare = Settings(var_dir=tmp_path / "var", data_dir=tmp_path, encoder_backend="auto")
    assert choice.choose_backend(bare, None, None) == Backend.TORCH


@pytest.mark.slow
def test_auto_picks_the_fastest_backend_that_passes(
    settings: Settings, exported_variants: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same checkpoint's variants as tests/models/test_backends.py loads: exported once.
    settings.cache.encoder_variants.parent.mkdir(parents=True)
    settings.cache.encoder_variants.symlink_to(exported_variants, target_is_directory=True)
    small = choice.dev_parity_set(settings, 50)
    monkeypatch.setattr(choice, "dev_parity_set", lambda *_: small)
    monkeypatch.setattr(choice, "SPEED_ROUNDS", 1)
    report = choice.measure_backends(settings, None, None, seconds=0.05)
    passing = {name for name, p in report["parity"].items() if p["passed"]} | {"torch"}
    assert set(report["speedup"]) == passing
    assert report["backend"] == max(report["speedup"], key=report["speedup"].get)
    installed = {b.value for b in Backend if b != Backend.TORCH and available(b)}
    assert set(report["parity"]) | set(report["failures"]) | set(report["skipped"]) == installed


@pytest.mark.parametrize("has_bf16", [True, False])
def test_auto_leaves_out_torch_bf16_where_bf16_is_emulated(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, has_bf16: bool
) -> None:
    monkeypatch.setattr(choice, "cpu_has_bf16", lambda: has_bf16)
    on_cpu = settings.model_copy(update={"device": "cpu"})
    checked = choice._candidates(on_cpu)
    assert (Backend.TORCH_BF16 in checked) == (has_bf16 and available(Backend.TORCH_BF16))
    assert (Backend.TORCH_BF16.value in choice._skipped(on_cpu)) == (not has_bf16)
    assert set(checked) | {Backend(name) for name in choice._skipped(on_cpu)} == {
        b for b in Backend if b != Backend.TORCH and available(b)
    }


@pytest.mark.slow
def test_a_bundle_carries_its_variants_so_replicas_do_not_export(
    tmp_path: Path,
    encoder: Encoder,
    anchors: AnchorSet,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not available(Backend.ONNX):
        pytest.skip("onnxruntime is not installed")
    worker = Settings(var_dir=tmp_path / "worker", data_dir=DATA_DIR, encoder_backend="onnx")
    small: ParitySet = choice.dev_parity_set(worker, 50)
    monkeypatch.setattr(choice, "dev_parity_set", lambda *_: small)
    variants = choice.build_variants(worker, None, tmp_path / "variants")
    assert variants is not None
    record = json.loads((variants / choice.PARITY_JSON).read_text())
    assert set(record["parity"]) == {"onnx"} and record["parity"]["onnx"]["passed"]
    store = BundleStore(tmp_path / "store")
    store.write("v1", encoder=encoder, anchors=anchors, variants=variants)

    replica = worker.model_copy(update={"var_dir": tmp_path / "replica"})
    loaded = settings_bundle(replica, store, "v1")
    assert loaded.encoder.backend == Backend.ONNX
    assert not replica.cache.encoder_variants.exists()  # used the bundle's, exported nothing
    torch.testing.assert_close(
        loaded.encoder.encode(["a bundle"]), encoder.encode(["a bundle"]), atol=2e-3, rtol=0
    )


def test_a_bundles_parity_holds_only_on_a_cpu_with_the_workers_vendor_and_instruction_sets(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = ParitySet(["a sentence"], [])
    stored = {
        "backend": "onnx-int8",
        "spearman": {"STS": 80.0},
        "reference": {"STS": 80.1},
        "mean_cosine": 0.998,
        "min_cosine": 0.99,
        "pairs": 1,
    }

    def setup_on(vendor: str, flags: list[str]) -> dict[str, Any]:
        monkeypatch.setattr(choice, "cpu_identity", lambda: {"vendor": vendor, "flags": flags})
        return choice._setup(settings, dev)

    vnni = ["avx2", "avx512_bf16", "avx512_vnni"]
    record = {"setup": setup_on("GenuineIntel", vnni), "parity": {"onnx-int8": stored}}
    (tmp_path / choice.PARITY_JSON).write_text(json.dumps(record))
    same = choice.read_parity(tmp_path, setup_on("GenuineIntel", vnni))
    assert same[Backend.ONNX_INT8].mean_cosine == 0.998
    # Without VNNI int8 products saturate and round otherwise: the numbers do not carry over.
    assert choice.read_parity(tmp_path, setup_on("GenuineIntel", ["avx2"])) == {}
    # With AVX512-BF16 OpenVINO runs in bf16 on AMD's cores and in f32 on Intel's.
    assert choice.read_parity(tmp_path, setup_on("AuthenticAMD", vnni)) == {}
    # Nor do numbers a policy measured in another precision (as int8-static in bf16 on AMX was).
    other = {"openvino-int8-static": "bf16"}
    monkeypatch.setattr(choice, "openvino_precisions", lambda: other)
    assert choice.read_parity(tmp_path, setup_on("GenuineIntel", vnni)) == {}
    monkeypatch.undo()
    # Nor numbers of graphs an older export recipe made (models/backends.py VARIANT_FORMAT).
    older = setup_on("GenuineIntel", vnni) | {"variant_format": choice.VARIANT_FORMAT - 1}
    (tmp_path / choice.PARITY_JSON).write_text(json.dumps(record | {"setup": older}))
    assert choice.read_parity(tmp_path, setup_on("GenuineIntel", vnni)) == {}
