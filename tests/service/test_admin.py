"""/admin through a real uvicorn server on the shared Redis: auth, jobs, versions, hot swap.

The server starts with the session's engine (no model load); bundles are written from the
same encoder, so each swap loads a verified copy of MiniLM from the store.
"""

import http.client
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from core.bundle_manifest import ANCHORS, ENCODER_DIR, MANIFEST
from core.redis_keys import RedisKeys
from core.registry import BundleStore
from core.settings import DATA_DIR, Settings
from core.versions import activate
from models.anchors import AnchorSet
from models.checksums import sha256_file
from models.encoder import Encoder
from service.engine import Engine
from service.swap import load_active_engine
from tests.polling import wait_until
from tests.service.conftest import AUTH, Server, fixed_engine, make_settings, serve
from tests.worker.conftest import delete_queue_keys
from worker.report import write_report

pytestmark = pytest.mark.slow

ADMIN_TOKEN = "admin-token-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _small_dev_sets(root: Path) -> Path:
    """The first 60 STS-B dev pairs: enough for every diagnostic, seconds to encode."""
    target = root / "senteval" / "STS" / "STSBenchmark" / "sts-dev.csv"
    target.parent.mkdir(parents=True)
    lines = (DATA_DIR / "senteval" / "STS" / "STSBenchmark" / "sts-dev.csv").read_text()
    target.write_text("\n".join(lines.splitlines()[:60]) + "\n")
    return root


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory, encoder: Encoder, anchors: AnchorSet):
    """Two good bundles, one with truncated weights, one whose anchors have the wrong width,
    and one carrying the diagnostics report the worker writes."""
    root = tmp_path_factory.mktemp("ops") / "store"
    store = BundleStore(root)
    for version in ("v1", "v2", "truncated", "narrow"):
        store.write(version, encoder=encoder, anchors=anchors, method="simcse", parent="base")
    report_settings = make_settings(root.parent / "var", data_dir=_small_dev_sets(root.parent))
    report = write_report(report_settings, "reported", encoder, anchors, root.parent / "report")
    store.write("reported", encoder=encoder, anchors=anchors, method="simcse", report=report)
    weights = store.path_for("truncated") / ENCODER_DIR / "model.safetensors"
    with weights.open("r+b") as handle:
        handle.truncate(1000)
    # Internally consistent (checksums match) but 128 wide: only loading can refuse it.
    narrow = store.path_for("narrow")
    np.save(narrow / ANCHORS, np.ones((anchors.count, 128), dtype=np.float32))
    manifest = json.loads((narrow / MANIFEST).read_text())
    manifest["files"][ANCHORS] = sha256_file(narrow / ANCHORS)
    (narrow / MANIFEST).write_text(json.dumps(manifest))
    return root


@pytest.fixture(scope="module")
def admin_server(
    tmp_path_factory: pytest.TempPathFactory, engine: Engine, store_dir: Path
) -> Iterator[Server]:
    settings = make_settings(
        tmp_path_factory.mktemp("var"),
        admin_token=ADMIN_TOKEN,
        store_dir=store_dir,
        # Far longer than any wait below: swaps in this module must come from the notice.
        reconcile_interval_s=600,
    )
    with serve(settings, loader=fixed_engine(engine)) as running:
        running.wait_ready()
        yield running
    client = redis.Redis.from_url(settings.redis_url)
    delete_queue_keys(client, RedisKeys(settings.redis_prefix))
    client.close()


@pytest.fixture
def admin(admin_server: Server) -> Iterator[httpx.Client]:
    with admin_server.client(headers=ADMIN) as client:
        yield client


def _serving(server: Server) -> str:
    with server.client() as client:
        return client.get("/ready").json()["model_version"]


def _swaps(server: Server, outcome: str) -> float:
    with server.client() as client:
        text = client.get("/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rankserve_model_swaps_total" and sample.labels == {
                "outcome": outcome
            }:
                return sample.value
    return 0.0


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def test_admin_is_disabled_without_a_token(tmp_path: Path, engine: Engine):
    with (
        serve(make_settings(tmp_path), loader=fixed_engine(engine)) as server,
        server.client() as client,
    ):
        response = client.get("/admin/jobs", headers=ADMIN)
        anonymous = client.get("/admin/jobs")
    assert anonymous.status_code == 401  # unauthenticated first, whatever the configuration
    assert response.status_code == 403
    assert response.json()["error"] == {
        "message": "the admin API is disabled: set RANKSERVE_ADMIN_TOKEN to enable it",
        "type": "forbidden",
        "code": 403,
    }


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/admin/jobs"),
        ("GET", "/admin/models"),
        ("POST", "/admin/retrain"),
        ("DELETE", "/admin/jobs/abc"),
        ("POST", "/admin/models/v1/activate"),
    ],
)
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}])
def test_every_admin_route_needs_the_token(admin_server: Server, method, path, headers):
    with admin_server.client() as client:
        response = client.request(method, path, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert response.json()["error"]["type"] == "unauthorized"


def test_api_key_does_not_open_admin(admin_server: Server):
    settings: Settings = admin_server.services.settings
    assert settings.api_key is not None
    headers = {"Authorization": f"Bearer {settings.api_key.get_secret_value()}"}
    with admin_server.client() as client:
        assert client.get("/admin/models", headers=headers).status_code == 401


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"method": "nope"}, "method: Input should be 'simcse'"),
        ({"method": "simcse", "params": {"eval_data": "/etc"}}, "set by the worker's settings"),
        ({"method": "simcse", "params": {"batch_size": 1}}, "invalid params"),
        ({"method": "simcse", "params": {"no_such_knob": 1}}, "invalid params"),
        ({"method": "simcse", "teachers": ["default"]}, "takes 0 to 0 teachers"),
        ({"method": "rankencoder", "teachers": ["../../etc"]}, "invalid teacher name"),
        ({"method": "rankencoder", "teachers": ["missing"]}, "not installed"),
    ],
)
def test_retrain_requests_are_validated_before_queueing(admin, admin_server, body, message):
    before = admin.get("/admin/jobs").json()["jobs"]
    response = admin.post("/admin/retrain", json=body)
    assert response.status_code == 422
    assert message in response.json()["error"]["message"]
    # No path of the server in what a client reads (the models dir of "not installed").
    assert str(admin_server.services.settings.var_dir) not in response.text
    assert admin.get("/admin/jobs").json()["jobs"] == before


def test_job_lifecycle_without_a_worker(admin):
    response = admin.post(
        "/admin/retrain", json={"method": "simcse", "params": {"max_steps": 3}, "force": True}
    )
    assert response.status_code == 202
    job_id = response.json()["job_id"]
    job = admin.get(f"/admin/jobs/{job_id}").json()
    assert (job["status"], job["method"], job["force"]) == ("queued", "simcse", True)
    assert job["params"] == {"max_steps": 3}
    assert job["progress"] == {"phase": "queued"}
    assert job_id in [listed["id"] for listed in admin.get("/admin/jobs").json()["jobs"]]

    assert admin.delete(f"/admin/jobs/{job_id}").json() == {"id": job_id, "status": "canceled"}
    assert admin.get(f"/admin/jobs/{job_id}").json()["status"] == "canceled"
    conflict = admin.delete(f"/admin/jobs/{job_id}")
    assert conflict.status_code == 409
    assert "already ended" in conflict.json()["error"]["message"]
    assert admin.get("/admin/jobs/0123456789abcdef").status_code == 404
    assert admin.get("/admin/jobs/not..valid").status_code == 422


TRAVERSALS = [
    "%2e%2e",
    "..%2F..%2Fetc",
    "%2Fetc%2Fpasswd",
    "v1%2F..%2F..%2Fvar",
    "v1%00",
    ".hidden",
    "x" * 101,
]


@pytest.mark.parametrize("name", TRAVERSALS)
def test_traversal_in_version_names_is_422_and_touches_nothing(admin, store_dir: Path, name):
    before = _tree(store_dir.parent)
    active_before = admin.get("/admin/models").json()["active"]
    response = admin.post(f"/admin/models/{name}/activate")
    assert response.status_code == 422, response.text
    assert "version: String should match pattern" in response.json()["error"]["message"]
    assert _tree(store_dir.parent) == before
    assert admin.get("/admin/models").json()["active"] == active_before


def test_literal_dot_dot_is_422_too(admin_server: Server, store_dir: Path):
    """httpx normalises "/../" away; http.client sends the path as written, as curl
    --path-as-is would."""
    before = _tree(store_dir.parent)
    url = httpx.URL(admin_server.url)
    connection = http.client.HTTPConnection(url.host, url.port, timeout=30)
    try:
        for path in ("/admin/models/../activate", "/admin/models/../../etc/activate"):
            connection.request("POST", path, headers=ADMIN)
            response = connection.getresponse()
            body = json.loads(response.read())
            assert response.status == 422, body
            assert "version: String should match pattern" in body["error"]["message"]
    finally:
        connection.close()
    assert _tree(store_dir.parent) == before


def test_activate_refuse_and_roll_back(admin, admin_server: Server, engine: Engine):
    missing = admin.post("/admin/models/missing/activate")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "no bundle named 'missing'"

    # Bundles that do not load (checksums fail; checksums pass but 128-wide anchors) are
    # refused by the API itself, which loads them as a replica would: nothing changes.
    for name in ("truncated", "narrow"):
        refused = admin.post(f"/admin/models/{name}/activate")
        assert refused.status_code == 409
        assert refused.json()["error"]["type"] == "conflict"
        assert name in refused.json()["error"]["message"]
        assert admin.get("/admin/models").json()["active"] is None
    assert _serving(admin_server) == engine.version

    # Roll forward to v1, then v2: every replica (this one) follows the active key.
    assert admin.post("/admin/models/v1/activate").json() == {"active": "v1", "previous": None}
    wait_until(lambda: _serving(admin_server) == "v1", 60, "the replica never swapped to v1")
    admin.post("/admin/models/v2/activate")
    wait_until(lambda: _serving(admin_server) == "v2", 60, "the replica never swapped to v2")

    # The active key names a bundle this replica cannot load (set past the API, as by a
    # worker on another machine whose store differs): refused by the replica's loader,
    # reported, and the replica keeps serving v2.
    refused_before = _swaps(admin_server, "refused")
    settings = admin_server.services.settings
    client = redis.Redis.from_url(settings.redis_url)
    activate(client, RedisKeys(settings.redis_prefix), "narrow", reason="set past the API")
    client.close()
    wait_until(
        lambda: _swaps(admin_server, "refused") > refused_before, 60, "narrow was never refused"
    )
    assert _serving(admin_server) == "v2"
    models = admin.get("/admin/models").json()
    narrow = next(v for v in models["versions"] if v["version"] == "narrow")
    assert (models["active"], narrow["active"]) == ("narrow", True)
    assert "encoder's dimension is 384" in narrow["refused"]["error"]
    (replica,) = models["replicas"].values()
    assert replica["version"] == "v2" and "narrow" in replica["refused"]

    # Roll back to v1.
    assert admin.post("/admin/models/v1/activate").json() == {
        "active": "v1",
        "previous": "narrow",
    }
    wait_until(lambda: _serving(admin_server) == "v1", 60, "the replica never rolled back")
    models = admin.get("/admin/models").json()
    assert [entry["version"] for entry in models["history"][:4]] == ["v1", "narrow", "v2", "v1"]
    assert {v["version"] for v in models["versions"]} == {
        "v1",
        "v2",
        "truncated",
        "narrow",
        "reported",
    }
    assert [v["version"] for v in models["versions"] if v["active"]] == ["v1"]
    assert _swaps(admin_server, "swapped") == 3


def test_a_lost_notice_is_made_up_for_by_the_timer(tmp_path: Path, engine: Engine, store_dir: Path):
    settings = make_settings(tmp_path, store_dir=store_dir, reconcile_interval_s=0.5)
    with serve(settings, loader=fixed_engine(engine)) as server:
        server.wait_ready()
        client = redis.Redis.from_url(settings.redis_url)
        # The key changes with no notice published, as when a replica was disconnected.
        client.set(RedisKeys(settings.redis_prefix).active_version, "v2")
        client.close()
        wait_until(lambda: _serving(server) == "v2", 60, "the timer never reconciled")


def test_symlinked_bundle_leaving_the_store_is_refused(admin, store_dir: Path, tmp_path: Path):
    outside = tmp_path / "outside"
    shutil.copytree(store_dir / "bundles" / "v1", outside)
    link = store_dir / "bundles" / "escape"
    link.symlink_to(outside)
    try:
        response = admin.post("/admin/models/escape/activate")
        assert response.status_code == 422
        assert "link or resolves outside" in response.json()["error"]["message"]
    finally:
        link.unlink()


def test_a_versions_diagnostics_report_and_its_charts(admin):
    response = admin.get("/admin/models/reported/report")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["version"] == "reported"
    versions = {v["version"]: v for v in admin.get("/admin/models").json()["versions"]}
    assert (versions["reported"]["has_report"], versions["v1"]["has_report"]) == (True, False)
    assert {"heros", "geometry", "ranking", "similar_pairs"} <= set(body["report"])
    assert set(body["charts"]) == {"heros", "geometry", "similar_pairs"}
    for url in body["charts"].values():
        chart = admin.get(url)
        assert chart.status_code == 200
        assert chart.headers["content-type"] == "image/png"
        assert chart.content.startswith(b"\x89PNG")


def test_report_errors(admin):
    no_report = admin.get("/admin/models/v1/report")
    assert no_report.status_code == 404
    assert "no diagnostics report" in no_report.json()["error"]["message"]
    assert admin.get("/admin/models/missing/report").status_code == 404
    assert admin.get("/admin/models/reported/report/other.png").status_code == 404
    assert admin.get("/admin/models/.hidden/report").status_code == 422


def _set_versions(settings: Settings, **values: str) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    keys = RedisKeys(settings.redis_prefix)
    for name, version in values.items():
        client.set(getattr(keys, name), version)
    client.close()


def test_a_restarted_replica_serves_the_last_loaded_version_never_the_base(
    tmp_path: Path, store_dir: Path
):
    # The active key names a bundle no replica can load; the cluster last served v1.
    settings = make_settings(tmp_path, store_dir=store_dir, reconcile_interval_s=600)
    _set_versions(settings, active_version="narrow", last_loaded="v1")
    with serve(settings, loader=load_active_engine) as server:
        server.wait_ready()
        assert _serving(server) == "v1"
        with server.client() as client:
            assert client.get("/info").json()["model_version"] == "v1"


def test_a_replica_that_can_load_nothing_stays_not_ready_until_the_store_appears(
    tmp_path: Path, store_dir: Path
):
    # The bundle store is mounted late: at start it is empty, so neither the active version
    # nor the last served one loads. The replica must not serve the base model meanwhile.
    late_store = tmp_path / "late-store"
    settings = make_settings(tmp_path / "var", store_dir=late_store, reconcile_interval_s=0.5)
    _set_versions(settings, active_version="v1", last_loaded="v2")
    with serve(settings, loader=load_active_engine) as server, server.client() as client:
        wait_until(
            lambda: server.services.holder.first_attempt.is_set(), 120, "no first load attempt"
        )
        ready = client.get("/ready")
        assert ready.status_code == 503 and ready.json()["error"]["type"] == "not_ready"
        encoded = client.post("/encode", json={"texts": ["x"]}, headers=AUTH)
        assert encoded.status_code == 503 and encoded.json()["error"]["type"] == "not_ready"
        assert server.services.holder.current is None
        shutil.copytree(store_dir / "bundles" / "v1", late_store / "bundles" / "v1")
        wait_until(lambda: client.get("/ready").status_code == 200, 120, "v1 was never loaded")
        assert _serving(server) == "v1"
