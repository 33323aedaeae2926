"""`rankserve train` end to end, every method, in a tiny configuration with the real MiniLM.

Base and teacher are both the packaged all-MiniLM-L6-v2; training text is the repository's
STS-B/SICK train splits and SNLI; evaluation reads a small SentEval-layout copy of the dev
sets' first pairs, with 32 anchors. Each run proves: the loss trains, the output loads with
SentenceTransformer, the metadata names everything, and the before/after table is printed.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from sentence_transformers import SentenceTransformer
from typer.testing import CliRunner

from cli.main import app
from core.settings import DATA_DIR, get_settings
from models.encoder import default_model_path
from tests.cli.conftest import flat

pytestmark = pytest.mark.slow

TINY = {
    "max_sentences": 24,
    "max_seq_length": 16,
    "batch_size": 8,
    "max_steps": 2,
    "teacher_anchor_count": 32,
    "eval_anchor_count": 32,
    "device": "cpu",
}


@pytest.fixture(scope="module")
def dev_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 40 pairs of STS-B dev and SICK trial in SentEval layout."""
    root = tmp_path_factory.mktemp("senteval")
    stsb = root / "STS" / "STSBenchmark" / "sts-dev.csv"
    sick = root / "SICK" / "SICK_trial.txt"
    stsb.parent.mkdir(parents=True)
    sick.parent.mkdir(parents=True)
    source = DATA_DIR / "senteval"
    stsb_lines = (source / "STS" / "STSBenchmark" / "sts-dev.csv").read_text().splitlines()
    sick_lines = (source / "SICK" / "SICK_trial.txt").read_text().splitlines()
    stsb.write_text("\n".join(stsb_lines[:40]) + "\n")
    sick.write_text("\n".join(sick_lines[:41]) + "\n")
    return root


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("var")


@pytest.fixture
def isolated(var_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RANKSERVE_VAR_DIR", str(var_dir))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def write_config(path: Path, dev_copy: Path, **extra: object) -> Path:
    path.write_text(json.dumps(TINY | {"eval_data": str(dev_copy)} | extra))
    return path


@pytest.mark.parametrize(
    ("method", "teacher"),
    [
        ("simcse", None),
        ("rankencoder", "default"),
        ("rankcse-listnet", "default,default"),
        ("rankcse-listmle", "default"),
        ("mnrl", None),
        ("similarity-distillation", "default"),
        ("mnrl-distillation", "default"),
    ],
)
def test_every_method_trains_end_to_end(isolated, dev_copy, tmp_path, method, teacher):
    out = tmp_path / "student"
    args = ["train", "--method", method, "--out", str(out), "--quiet"]
    args += ["--config", str(write_config(tmp_path / "c.json", dev_copy))]
    if teacher:
        args += ["--teacher", teacher]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    # The before/after table was printed (a wide terminal keeps its headers on one line).
    assert "student Eq7" in result.output and "SICK trial" in result.output

    student = SentenceTransformer(str(out), device="cpu")
    base = SentenceTransformer(str(default_model_path()), device="cpu")
    assert student.max_seq_length == base.max_seq_length  # serving length restored
    texts = ["a man is playing a guitar .", "stocks fell sharply ."]
    moved = torch.tensor(student.encode(texts)) - torch.tensor(base.encode(texts))
    assert moved.abs().max() > 0  # two optimiser steps changed the weights

    meta = json.loads((out / "training.json").read_text())
    assert meta["method"] == method
    assert meta["config"]["batch_size"] == 8 and meta["steps"] == 2
    assert meta["parent"]["checksum"] and len(meta["teachers"]) == len(
        teacher.split(",") if teacher else []
    )
    assert all(len(sha) == 64 for sha in meta["data"]["files"].values())
    assert meta["data"]["examples"] == 24
    for side in ("base", "student"):
        for scoring in ("cosine", "blend"):
            scores = meta["dev_metrics"][side][scoring]
            assert set(scores) == {"STSBenchmark-dev", "SICKRelatedness-trial", "avg"}
            assert all(-100 <= value <= 100 for value in scores.values())
    assert {"torch", "sentence-transformers", "python"} <= set(meta["versions"])
    assert not (out / ".resume").exists()


def test_training_on_a_dev_split_is_refused(isolated, dev_copy, tmp_path):
    config = write_config(tmp_path / "c.json", dev_copy)
    dev_file = dev_copy / "STS" / "STSBenchmark" / "sts-dev.csv"
    args = ["train", "--method", "simcse", "--out", str(tmp_path / "s"), "--config", str(config)]
    result = CliRunner().invoke(app, [*args, "--data", str(dev_file)])
    assert result.exit_code == 2
    assert "an evaluation split; never train on it" in flat(result.output)


def test_a_killed_run_resumes_from_its_last_checkpoint(var_dir, dev_copy, tmp_path, request):
    """Kill the process once a checkpoint exists; the rerun continues and ends where an
    uninterrupted run with the same seed ends."""
    env = os.environ | {"RANKSERVE_VAR_DIR": str(var_dir)}
    config = write_config(tmp_path / "c.json", dev_copy, max_steps=6, save_every=1)

    def command(out: Path) -> list[str]:
        return [sys.executable, "-m", "cli.main", "train", "--method", "simcse", "--quiet",
                "--out", str(out), "--config", str(config)]  # fmt: skip

    # The uninterrupted run goes alongside, in a var_dir of its own: a process start costs
    # about 10 s of imports on a 2-core Zen 3.
    straight = tmp_path / "straight"
    straight_env = env | {"RANKSERVE_VAR_DIR": str(tmp_path / "straight-var")}
    uninterrupted = subprocess.Popen(command(straight), env=straight_env, stdout=subprocess.DEVNULL)
    request.addfinalizer(lambda: (uninterrupted.kill(), uninterrupted.wait()))  # if we fail first
    interrupted = tmp_path / "interrupted"
    process = subprocess.Popen(command(interrupted), env=env, stdout=subprocess.DEVNULL)
    state = interrupted / ".resume" / "state.pt"
    deadline = time.monotonic() + 300
    while not state.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert state.exists(), "the run ended before it wrote a checkpoint"
    saved_step = torch.load(state, weights_only=False)["step"]
    assert 1 <= saved_step < 6

    resumed = subprocess.run(command(interrupted), env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed at step" in flat(resumed.stdout)
    assert uninterrupted.wait(timeout=600) == 0
    a = SentenceTransformer(str(interrupted), device="cpu").encode(["a dog runs ."])
    b = SentenceTransformer(str(straight), device="cpu").encode(["a dog runs ."])
    assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-5)
