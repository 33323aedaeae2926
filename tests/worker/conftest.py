"""Real worker (and API) processes on the shared Redis, each test under its own key prefix.

Retrain jobs here are tiny: 64 training sentences, batches of 8, a dev set cut to 39 STS-B and
40 SICK pairs, 16 evaluation anchors, 64 serving anchors. A "long" job is the same with a
thousand epochs: it trains until it is stopped.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from core.redis_keys import RedisKeys
from core.settings import DATA_DIR, REPO_ROOT, Settings

SERVING_ANCHORS = 64
TINY_PARAMS: dict[str, Any] = {
    "max_sentences": 64,
    "batch_size": 8,
    "max_steps": 2,
    "max_seq_length": 16,
    "eval_anchor_count": 16,
}
ADMIN_TOKEN = "admin-secret-for-tests"
DEMO_TEXTS = (
    "A man is playing a guitar on stage.",
    "The central bank raised interest rates again.",
    "Two dogs run through the snow.",
    "A chef slices onions in a busy kitchen.",
)
LONG_PARAMS: dict[str, Any] = TINY_PARAMS | {
    "max_steps": None,
    "epochs": 1000,
    "save_every": 1_000_000,
}


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_data(tmp_path_factory.mktemp("data"))


def write_tiny_data(root: Path) -> Path:
    """A SentEval dir with the first lines of the real dev sets (the gate's input)."""
    stsb = root / "senteval" / "STS" / "STSBenchmark"
    sick = root / "senteval" / "SICK"
    stsb.mkdir(parents=True)
    sick.mkdir(parents=True)
    source = DATA_DIR / "senteval"
    lines = (source / "STS" / "STSBenchmark" / "sts-dev.csv").read_text().splitlines()[:40]
    (stsb / "sts-dev.csv").write_text("\n".join(lines) + "\n")
    lines = (source / "SICK" / "SICK_trial.txt").read_text().splitlines()[:41]
    (sick / "SICK_trial.txt").write_text("\n".join(lines) + "\n")
    return root


@dataclass
class OpsEnv:
    """Settings for every process of one test, as RANKSERVE_* variables."""

    root: Path
    variables: dict[str, str]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def settings(self) -> Settings:
        values = {k.removeprefix("RANKSERVE_").lower(): v for k, v in self.variables.items()}
        return Settings(**values)

    @property
    def keys(self) -> RedisKeys:
        return RedisKeys(self.variables["RANKSERVE_REDIS_PREFIX"])

    def environ(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("RANKSERVE_")}
        return base | self.variables | extra

    def spawn(self, args: list[str], log_name: str, **extra: str) -> subprocess.Popen[bytes]:
        log = (self.root / f"{log_name}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=REPO_ROOT,
            env=self.environ(**extra),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.processes.append(process)
        return process

    def start_worker(self, name: str = "worker", **extra: str) -> subprocess.Popen[bytes]:
        prefix = self.variables["RANKSERVE_REDIS_PREFIX"]
        return self.spawn(["cli.main", "worker", "--name", f"{prefix}-{name}"], name, **extra)

    def start_api(self, name: str) -> str:
        """A replica (`rankserve serve`) on a free port; returns its base URL."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.spawn(
            ["cli.main", "serve", "--host", "127.0.0.1", "--port", str(port)],
            name,
        )
        return f"http://127.0.0.1:{port}"

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")


@contextmanager
def make_ops_env(root: Path, tiny_data: Path, anchor_cache: Path) -> Iterator[OpsEnv]:
    prefix = f"rankserve-ops-test-{uuid.uuid4().hex[:8]}"
    var_dir = root / "var"
    # The session's anchor cache holds the MiniLM anchors already; nothing re-encodes them.
    shutil.copytree(anchor_cache, var_dir / "cache")
    demo = root / "demo.jsonl"
    demo.write_text(
        "".join(
            json.dumps({"id": f"doc-{i}", "text": text, "metadata": {"topic": "demo"}}) + "\n"
            for i, text in enumerate(DEMO_TEXTS)
        )
    )
    env = OpsEnv(
        root=root,
        variables={
            "RANKSERVE_REDIS_PREFIX": prefix,
            "RANKSERVE_VAR_DIR": str(var_dir),
            "RANKSERVE_DATA_DIR": str(tiny_data),
            "RANKSERVE_ANCHOR_COUNT": str(SERVING_ANCHORS),
            "RANKSERVE_DEVICE": "cpu",
            "RANKSERVE_DEMO_CORPUS": str(demo),
            "RANKSERVE_START_REDIS": "false",
            "RANKSERVE_WORKER_HEARTBEAT_S": "1",
            "RANKSERVE_WORKER_SHUTDOWN_GRACE_S": "2",
            "RANKSERVE_RECONCILE_INTERVAL_S": "1",
            "RANKSERVE_JOB_RETRIES": "1",
            "RANKSERVE_ADMIN_TOKEN": ADMIN_TOKEN,
            # Two cores shared by every process of a test: one thread each keeps them fair.
            "OMP_NUM_THREADS": "1",
        },
    )
    try:
        yield env
    finally:
        for process in env.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(timeout=30)
        _delete_keys(env)


@pytest.fixture
def ops_env(tmp_path: Path, tiny_data: Path, anchor_cache: Path) -> Iterator[OpsEnv]:
    with make_ops_env(tmp_path, tiny_data, anchor_cache) as env:
        yield env


def _delete_keys(env: OpsEnv) -> None:
    client = Redis.from_url(env.settings.redis_url)
    delete_queue_keys(client, env.keys)
    for key in client.scan_iter(match=env.keys.pattern, count=1000):
        client.delete(key)
    client.close()


def delete_queue_keys(client: Redis, keys: RedisKeys) -> None:
    """RQ's keys for one prefix's queue: the queue's, its jobs', its workers'."""
    queue_name = keys.retrain_queue
    job_ids = set()
    for key in client.scan_iter(match="rq:job:*", count=1000):
        if client.hget(key, "origin") == queue_name.encode():
            job_ids.add(key.decode().removeprefix("rq:job:"))
    for key in client.scan_iter(match="rq:*", count=1000):
        text = key.decode()
        if keys.prefix in text or any(job_id in text for job_id in job_ids):
            client.delete(key)
    # RQ's global sets of queues and workers (a SIGKILLed worker never deregisters).
    for registry in ("rq:queues", "rq:workers"):
        for member in client.smembers(registry):
            if keys.prefix in member.decode():
                client.srem(registry, member)


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
