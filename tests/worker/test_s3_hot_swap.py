"""End to end with bundles in S3-compatible storage: a real replica process hot-swaps to a bundle
published to a real S3 HTTP server on loopback (moto), and refuses a tampered one.

The replica (`rankserve serve`, RANKSERVE_STORE_URL=s3://...) shares no directory with the
publisher: everything it loads comes through the bucket into its own cache, verified against
the manifest. A client sends requests the whole time; none may fail.
"""

import dataclasses
import io
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from redis import Redis

from core.bundle_manifest import ANCHORS
from core.registry import TMP_PREFIX
from core.s3_client import s3_client
from core.s3_store import S3BundleStore
from core.settings import Settings
from core.stores import open_store
from core.versions import activate
from models.anchors import AnchorSet
from models.encoder import Encoder
from tests.moto_s3 import CREDENTIALS, REGION, credentials, moto_server
from tests.polling import wait_until
from tests.worker.conftest import ADMIN_TOKEN, make_ops_env

pytestmark = pytest.mark.slow

BUCKET = "rankserve-e2e"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
PAIR = ["A man is playing a guitar.", "Someone plays an instrument."]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with credentials(), moto_server() as url:
        s3_client(Settings(s3_endpoint_url=url, s3_region=REGION)).create_bucket(Bucket=BUCKET)
        yield url


class Client(threading.Thread):
    """/similarity back to back until stopped; every status and version it saw."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.seen: list[tuple[int, str | None]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self.stop.is_set():
                try:
                    response = client.post("/similarity", json={"pairs": [PAIR]})
                except httpx.HTTPError:
                    self.seen.append((0, None))
                    continue
                self.seen.append((response.status_code, response.headers.get("X-Model-Version")))


def _serving(url: str) -> str | None:
    try:
        response = httpx.get(f"{url}/ready", timeout=5)
    except httpx.HTTPError:
        return None
    return response.json().get("model_version") if response.status_code == 200 else None


def test_replica_hot_swaps_to_a_bundle_from_s3_and_refuses_a_tampered_one(
    endpoint: str,
    tmp_path: Path,
    tiny_data: Path,
    anchor_cache: Path,
    encoder: Encoder,
    anchors: AnchorSet,
):
    prefix = f"e2e-{uuid.uuid4().hex[:8]}"
    store_url = f"s3://{BUCKET}/{prefix}"
    with make_ops_env(tmp_path / "cluster", tiny_data, anchor_cache) as env:
        env.variables |= {
            "RANKSERVE_STORE_URL": store_url,
            "RANKSERVE_S3_ENDPOINT_URL": endpoint,
            "RANKSERVE_S3_REGION": REGION,
            **CREDENTIALS,
        }
        url = env.start_api("api-0")
        wait_until(lambda: _serving(url), 240, f"the replica never got ready: {env.log('api-0')}")
        base = _serving(url)
        assert base is not None and base.startswith("base-")

        # Published from another "pod": its own cache, nothing shared but the bucket.
        publisher = open_store(
            Settings(
                store_url=store_url,
                s3_endpoint_url=endpoint,
                s3_region=REGION,
                store_dir=tmp_path / "publisher",
            )
        )
        assert isinstance(publisher, S3BundleStore)
        student = dataclasses.replace(encoder, name="all-MiniLM-L6-v2+s3")
        for version in ("s3-v1", "s3-bad"):
            publisher.publish(version, encoder=student, anchors=anchors, parent=base)
        key = f"{prefix}/bundles/s3-bad/{ANCHORS}"
        body = publisher.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        matrix = np.load(io.BytesIO(body))
        matrix[:, 0] = -matrix[:, 0]  # well-formed, finite, and not what was published
        tampered = io.BytesIO()
        np.save(tampered, matrix)
        publisher.client.put_object(Bucket=BUCKET, Key=key, Body=tampered.getvalue())

        redis = Redis.from_url(env.settings.redis_url)
        client = Client(url)
        client.start()
        try:
            activate(redis, env.keys, "s3-v1", reason="test: published to S3")
            wait_until(
                lambda: _serving(url) == "s3-v1",
                180,
                f"the replica never served s3-v1: {env.log('api-0')}",
            )
            activate(redis, env.keys, "s3-bad", reason="test: tampered in S3")

            def refused() -> dict | None:
                models = httpx.get(f"{url}/admin/models", headers=ADMIN, timeout=30).json()
                entries = {entry["version"]: entry for entry in models["versions"]}
                return models if entries.get("s3-bad", {}).get("refused") else None

            models = wait_until(refused, 120, f"s3-bad was never refused: {env.log('api-0')}")
            assert _serving(url) == "s3-v1"
        finally:
            client.stop.set()
            client.join(timeout=60)
            redis.close()

    assert client.seen and all(status == 200 for status, _ in client.seen), client.seen[-5:]
    versions = [version for _, version in client.seen]
    assert versions[0] == base and versions[-1] == "s3-v1"
    assert "s3-bad" not in versions
    by_version = {entry["version"]: entry for entry in models["versions"]}
    assert set(by_version) == {"s3-v1", "s3-bad"}  # listed from the bucket
    assert by_version["s3-v1"]["name"] == "all-MiniLM-L6-v2+s3"
    assert "sha256" in by_version["s3-bad"]["refused"]["error"]
    # The replica's cache holds the verified bundle, and nothing of the refused one.
    cache = tmp_path / "cluster" / "var" / "store" / "bundles"
    assert sorted(p.name for p in cache.iterdir()) == ["s3-v1"]
    assert not any(p.name.startswith(TMP_PREFIX) for p in cache.iterdir())
