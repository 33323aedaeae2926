"""End to end: two API replicas and a worker, all real processes on the shared Redis.

A client hammers both replicas without pause (similarity, search, document writes) while a
retrain job goes through the admin API; both replicas must move to the new version with no
failed request and no replica ever going back. Then the worker is SIGKILLed mid-job: the job
is retried (requeued), and the replicas keep serving the version they have.
"""

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.polling import wait_until
from tests.worker.conftest import (
    ADMIN_TOKEN,
    DEMO_TEXTS,
    LONG_PARAMS,
    TINY_PARAMS,
    OpsEnv,
    make_ops_env,
    pid_alive,
)

pytestmark = pytest.mark.slow

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
PAIR = ["A man is playing a guitar.", "Someone plays an instrument."]


@dataclass
class Cluster:
    env: OpsEnv
    replicas: list[str]
    worker: subprocess.Popen[bytes]


@dataclass
class Observation:
    replica: int
    route: str
    status: int  # 0: no HTTP response at all
    version: str | None


@dataclass
class Hammer:
    """One thread sending requests back to back, round-robin over the replicas."""

    replicas: list[str]
    seen: list[Observation] = field(default_factory=list)
    written: dict[str, str] = field(default_factory=dict)  # live documents: id -> text
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> "Hammer":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=60)

    def _run(self) -> None:
        clients = [httpx.Client(base_url=url, timeout=60) for url in self.replicas]
        n = 0
        while not self._stop.is_set():
            for replica, client in enumerate(clients):
                n += 1
                if n % 5 == 0:  # odd and even n: both replicas take writes
                    doc_id, text = f"live-{n}", f"live note {n}: the {n % 7}th topic of the day"
                    self._send(
                        replica,
                        client,
                        "/documents",
                        {
                            "documents": [
                                {"id": doc_id, "text": text, "metadata": {"topic": "live"}}
                            ]
                        },
                    )
                    self.written[doc_id] = text
                elif n % 3 == 0:
                    self._send(replica, client, "/search", {"query": DEMO_TEXTS[n % 4]})
                else:
                    self._send(replica, client, "/similarity", {"pairs": [PAIR]})
        for client in clients:
            client.close()

    def _send(self, replica: int, client: httpx.Client, route: str, body: dict) -> None:
        try:
            response = client.post(route, json=body)
        except httpx.HTTPError:
            self.seen.append(Observation(replica, route, 0, None))
            return
        version = response.headers.get("X-Model-Version")
        if response.status_code == 200 and route != "/documents":
            assert response.json()["model_version"] == version
        self.seen.append(Observation(replica, route, response.status_code, version))

    def last_version(self, replica: int) -> str | None:
        for observation in reversed(self.seen):
            if observation.replica == replica and observation.status == 200:
                return observation.version
        return None


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, tiny_data: Path, anchor_cache: Path
) -> Iterator[Cluster]:
    with make_ops_env(tmp_path_factory.mktemp("cluster"), tiny_data, anchor_cache) as env:
        replicas = [env.start_api("api-0"), env.start_api("api-1")]
        worker = env.start_worker()

        def ready(url: str) -> bool:
            try:
                return httpx.get(f"{url}/ready", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        for name, url in zip(("api-0", "api-1"), replicas, strict=True):
            wait_until(lambda url=url: ready(url), 240, f"{name} never ready: {env.log(name)}")
        yield Cluster(env, replicas, worker)


def _job(cluster: Cluster, job_id: str, replica: int = 1) -> dict:
    url = f"{cluster.replicas[replica]}/admin/jobs/{job_id}"
    return httpx.get(url, headers=ADMIN, timeout=30).json()


def _versions_in_order(hammer: Hammer, replica: int) -> list[str]:
    versions: list[str] = []
    for observation in hammer.seen:
        ok = observation.replica == replica and observation.status == 200
        if ok and (not versions or versions[-1] != observation.version):
            versions.append(observation.version)
    return versions


def test_retrain_swaps_every_replica_without_a_failed_request(cluster: Cluster):
    base = httpx.get(f"{cluster.replicas[0]}/ready", timeout=5).json()["model_version"]
    assert base.startswith("base-")
    hammer = Hammer(cluster.replicas).start()
    try:
        submitted = httpx.post(
            f"{cluster.replicas[0]}/admin/retrain",
            headers=ADMIN,
            json={"method": "simcse", "params": TINY_PARAMS, "force": True},
            timeout=30,
        )
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["job_id"]
        # Read through the other replica: job state lives in Redis, not in a replica.
        job = wait_until(
            lambda: (j := _job(cluster, job_id))["status"] in ("finished", "failed") and j,
            300,
            "the retrain job never ended",
            interval=1.0,
        )
        assert job["status"] == "finished", (job, cluster.env.log("worker"))
        result = job["result"]
        version = result["version"]
        assert result["promoted"] is True and result["gate"]["forced"] is True
        assert job["progress"]["phase"] == "done"

        for replica in (0, 1):
            wait_until(
                lambda replica=replica: hammer.last_version(replica) == version,
                120,
                f"replica {replica} never served {version}",
            )
        time.sleep(1.0)  # some more traffic on the new version
    finally:
        hammer.stop()

    failures = [o for o in hammer.seen if o.status != 200]
    assert failures == [], failures[:10]
    for replica in (0, 1):
        assert _versions_in_order(hammer, replica) == [base, version]
    routes = {o.route for o in hammer.seen}
    assert routes == {"/similarity", "/search", "/documents"}

    # Every document, whether the bundle carried its embedding or it was written after the
    # bundle's corpus revision and caught up at the swap, is found by its own text.
    assert hammer.written
    for url in cluster.replicas:
        for doc_id, text in list(hammer.written.items())[-8:]:
            hits = httpx.post(f"{url}/search", json={"query": text, "top_k": 1}, timeout=30)
            assert hits.json()["hits"][0]["id"] == doc_id
            assert hits.json()["model_version"] == version

    models = httpx.get(f"{cluster.replicas[1]}/admin/models", headers=ADMIN, timeout=30).json()
    assert models["active"] == version
    by_version = {entry["version"]: entry for entry in models["versions"]}
    assert set(by_version) == {base, version}  # the first job bundled the base for rollback
    assert by_version[version]["parent"] == base
    assert by_version[base]["name"] == "all-MiniLM-L6-v2"
    assert by_version[version]["name"] == "all-MiniLM-L6-v2+simcse"
    for url in cluster.replicas:
        info = httpx.get(f"{url}/info", timeout=30).json()
        assert (info["model_version"], info["model_name"]) == (version, "all-MiniLM-L6-v2+simcse")
    assert by_version[version]["metrics"]["gate"]["candidate"] == result["gate"]["candidate"]
    assert by_version[version]["corpus_revision"] is not None
    assert [r["version"] for r in models["replicas"].values()] == [version, version]
    report = httpx.get(
        f"{cluster.replicas[0]}/admin/models/{version}/report", headers=ADMIN, timeout=30
    ).json()
    assert report["report"]["model"] == version
    assert {"heros", "geometry", "similar_pairs"} <= set(report["charts"])


def test_sigkilled_worker_mid_job_is_retried_and_serving_goes_on(cluster: Cluster):
    serving = [
        httpx.get(f"{url}/ready", timeout=5).json()["model_version"] for url in cluster.replicas
    ]
    assert serving[0] == serving[1]
    hammer = Hammer(cluster.replicas).start()
    try:
        submitted = httpx.post(
            f"{cluster.replicas[0]}/admin/retrain",
            headers=ADMIN,
            json={"method": "simcse", "params": LONG_PARAMS, "force": True},
            timeout=30,
        )
        job_id = submitted.json()["job_id"]
        progress = wait_until(
            lambda: (p := _job(cluster, job_id)["progress"]).get("phase") == "training" and p,
            120,
            "the long job never started training",
            interval=0.5,
        )
        cluster.worker.send_signal(signal.SIGKILL)
        wait_until(lambda: not pid_alive(progress["pid"]), 10, "the work horse outlived its worker")
        # GET /admin/jobs/{id} reaps abandoned jobs: with a retry left, the job is requeued.
        job = wait_until(
            lambda: (j := _job(cluster, job_id))["status"] != "started" and j,
            30,
            "the job stayed 'started' after its worker died",
        )
        assert job["status"] == "requeued" and job["retries_left"] == 0
        assert job["worker"] is None and job["progress"]["phase"] == "requeued"
        assert job["progress"]["last_attempt"]["phase"] == "training"
        time.sleep(1.0)
    finally:
        hammer.stop()

    assert [o for o in hammer.seen if o.status != 200] == []
    for replica in (0, 1):
        assert _versions_in_order(hammer, replica) == [serving[0]]
    cancelled = httpx.delete(f"{cluster.replicas[0]}/admin/jobs/{job_id}", headers=ADMIN)
    assert cancelled.json() == {"id": job_id, "status": "canceled"}
