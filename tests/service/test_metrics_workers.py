"""`rankserve serve --workers 2` as a user runs it: /metrics, whichever worker answers, counts
the requests every worker served, and a worker that dies leaves its counts but not its live
gauges (prometheus_client's multiprocess mode, service/metrics.py)."""

import os
import shutil
import signal
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from core.settings import REPO_ROOT, Settings
from models.anchors import AnchorSet
from tests.polling import wait_until
from tests.service.conftest import TEST_ANCHORS, TEST_REDIS_PREFIX
from tests.service.corpus_helpers import free_port

HEALTH = {"route": "/health", "method": "GET", "status": "200"}


def accepts(url: str) -> bool:
    """Whether the server answers at all (any status): its socket is accepting."""
    try:
        httpx.get(url, timeout=10)
    except httpx.TransportError:
        return False
    return True


def health_count(samples: list) -> float:
    return sum(
        s.value
        for s in samples
        if s.name == "rankserve_requests_total" and {k: s.labels.get(k) for k in HEALTH} == HEALTH
    )


def scraped(url: str) -> list:
    """One scrape of /metrics on a connection of its own (either worker may answer)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def served_by(directory: Path, scratch: Path) -> dict[int, float]:
    """GET /health answers counted in each worker's own file: pid -> count."""
    counts = {}
    for path in directory.glob("counter_*.db"):
        alone = scratch / path.stem
        alone.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, alone / path.name)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(alone))
        samples = [s for metric in registry.collect() for s in metric.samples]
        counts[int(path.stem.split("_")[1])] = health_count(samples)
    return counts


@pytest.mark.slow
def test_metrics_add_up_over_two_workers(tmp_path: Path, anchors: AnchorSet, anchor_cache: Path):
    assert anchors.count == TEST_ANCHORS  # the session's anchors are in the cache copied below
    var_dir, temp = tmp_path / "var", tmp_path / "tmp"
    shutil.copytree(anchor_cache, var_dir / "cache")
    temp.mkdir()
    port, prefix = free_port(), f"{TEST_REDIS_PREFIX}-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "RANKSERVE_VAR_DIR": str(var_dir),
        "RANKSERVE_ANCHOR_COUNT": str(TEST_ANCHORS),
        "RANKSERVE_ANCHOR_SEED": "",
        "RANKSERVE_DEVICE": "cpu",
        "RANKSERVE_DEMO_CORPUS": "",
        "RANKSERVE_REDIS_PREFIX": prefix,
        "RANKSERVE_START_REDIS": "false",
        "RANKSERVE_TORCH_THREADS": "1",  # two workers on two shared cores
        "TMPDIR": str(temp),  # where the supervisor makes its multiprocess directory
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("wb")
    command = ["cli.main", "serve", "--workers", "2", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(
        [sys.executable, "-m", *command], cwd=REPO_ROOT, env=env, stdout=log, stderr=log
    )
    try:
        wait_until(
            lambda: list(temp.glob("rankserve-metrics-*")),
            180,
            "timed out waiting for the multiprocess directory",
        )
        (directory,) = temp.glob("rankserve-metrics-*")
        # Each worker's queue gauge is created with its app: two files, two workers up.
        wait_until(
            lambda: len(list(directory.glob("gauge_livesum_*.db"))) == 2,
            180,
            "timed out waiting for two workers",
        )
        # A worker's app (and its gauge file) exists before its server accepts connections: on
        # a loaded machine the first requests could otherwise be refused.
        # /ready, not /health: the /health answers are the ones counted below.
        wait_until(
            lambda: accepts(f"{url}/ready"),
            180,
            "timed out waiting for the server to accept connections",
        )

        def health(_: int) -> None:
            # A connection per request, several at once: the kernel hands them to both workers.
            assert httpx.get(f"{url}/health", timeout=60).status_code == 200

        sent = 0
        with ThreadPoolExecutor(max_workers=8) as pool:
            while sent < 2000:
                list(pool.map(health, range(40)))
                sent += 40
                counts = served_by(directory, tmp_path / "scratch")
                if len(counts) == 2 and min(counts.values()) > 0:
                    break
        wait_until(
            lambda: sum(served_by(directory, tmp_path / "scratch").values()) == sent,
            180,
            "timed out waiting for counts",
        )
        counts = served_by(directory, tmp_path / "scratch")
        assert len(counts) == 2 and min(counts.values()) > 0, counts

        # Every scrape, whichever worker answers it, has the total of both.
        for _ in range(6):
            samples = scraped(url)
            assert health_count(samples) == sent
            durations = [
                s.value
                for s in samples
                if s.name == "rankserve_request_duration_seconds_count"
                and s.labels["route"] == "/health"
            ]
            assert durations == [sent]
            queued = [s.value for s in samples if s.name == "rankserve_queue_texts"]
            assert queued == [0.0]  # one livesum over both workers, not a series per process

        # A worker killed outright: the supervisor marks it dead, so its live gauge file goes,
        # while what it served stays in the totals.
        victim = min(counts)
        os.kill(victim, signal.SIGKILL)
        wait_until(
            lambda: not (directory / f"gauge_livesum_{victim}.db").exists(),
            180,
            "timed out waiting for the dead worker",
        )
        assert health_count(scraped(url)) == sent
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=120)
        finally:
            log.close()
            store = redis.Redis.from_url(Settings().redis_url)
            for key in store.scan_iter(match=f"{prefix}:*"):
                store.delete(key)
            store.close()
    assert process.returncode == 0, (tmp_path / "serve.log").read_text(errors="replace")[-5000:]
    assert not directory.exists()  # removed with the supervisor
