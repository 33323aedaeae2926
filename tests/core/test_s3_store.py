"""The S3 bundle store against a real S3-compatible HTTP server on loopback (moto).

Publish, list, download and verify; the manifest goes last, so a half-published bundle is
never seen; a tampered object, a torn download and an unsafe manifest are refused and leave
nothing behind; a damaged cached copy is fetched again; retrain checkpoints follow a job to
another pod; and no request carries the CRC checksum headers that MinIO and Ceph reject.
"""

import dataclasses
import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ConnectionClosedError, EndpointConnectionError
from botocore.response import StreamingBody
from urllib3.exceptions import ProtocolError

from core.bundle_manifest import (
    ANCHORS,
    CORPUS,
    MANIFEST,
    REPORT_JSON,
    BundleExistsError,
    BundleNotFoundError,
    BundleStoreUnavailableError,
    CorruptBundleError,
)
from core.registry import TMP_PREFIX, BundleStore
from core.s3_checkpoints import RESUME_STATE, SHA256_METADATA
from core.s3_client import S3Location, s3_client
from core.s3_store import S3BundleStore
from core.settings import Settings
from core.store_types import CorpusSnapshot, JobCheckpoints, ModelStore
from core.stores import open_store
from models.anchors import AnchorSet
from models.checksums import sha256_file
from models.encoder import Encoder
from tests.moto_s3 import REGION, credentials, moto_server

pytestmark = pytest.mark.slow

BUCKET = "rankserve-test"
CORPUS_TEXTS = ["first document", "a second, longer document about cats", "third"]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with credentials(), moto_server() as url:
        settings = Settings(s3_endpoint_url=url, s3_region=REGION)
        s3_client(settings).create_bucket(Bucket=BUCKET)
        yield url


def settings_for(endpoint: str, cache: Path, prefix: str, **extra: Any) -> Settings:
    return Settings(
        store_url=f"s3://{BUCKET}/{prefix}",
        s3_endpoint_url=endpoint,
        s3_region=REGION,
        store_dir=cache,
        **extra,
    )


def store_at(endpoint: str, cache: Path, prefix: str) -> S3BundleStore:
    store = open_store(settings_for(endpoint, cache, prefix))
    assert isinstance(store, S3BundleStore)
    return store


@dataclasses.dataclass
class Published:
    endpoint: str
    prefix: str
    tmp: Path

    def fresh_store(self) -> S3BundleStore:
        """Another pod: same bucket, an empty cache of its own."""
        return store_at(self.endpoint, self.tmp / uuid.uuid4().hex[:8], self.prefix)


def publish_v1(store: S3BundleStore, encoder: Encoder, anchors: AnchorSet) -> None:
    corpus = CorpusSnapshot(
        revision=17, ids=[4, 9, 11], embeddings=encoder.encode(CORPUS_TEXTS).cpu().numpy()
    )
    report = store.root.parent / f"report-{uuid.uuid4().hex[:8]}"
    report.mkdir(parents=True)
    (report / REPORT_JSON).write_text(json.dumps({"model": "v1"}))
    (report / "chart.png").write_bytes(b"\x89PNG not really")
    store.publish(
        "v1",
        encoder=encoder,
        anchors=anchors,
        corpus=corpus,
        method="simcse",
        parent="base",
        report=report,
    )


@pytest.fixture(scope="module")
def published(
    endpoint: str,
    tmp_path_factory: pytest.TempPathFactory,
    encoder: Encoder,
    anchors: AnchorSet,
) -> Published:
    tmp = tmp_path_factory.mktemp("s3")
    prefix = f"published-{uuid.uuid4().hex[:8]}"
    publish_v1(store_at(endpoint, tmp / "publisher", prefix), encoder, anchors)
    return Published(endpoint, prefix, tmp)


def _objects(endpoint: str, prefix: str) -> dict[str, dict[str, Any]]:
    client = s3_client(Settings(s3_endpoint_url=endpoint, s3_region=REGION))
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return {entry["Key"]: entry for entry in listed.get("Contents", [])}


def _on(store: S3BundleStore, event: str, handler: Any) -> None:
    store.client.meta.events.register(event, handler)


def _store_down(store: S3BundleStore) -> None:
    """Every request fails as one to a dead endpoint would, without botocore's retry waits."""

    def refuse(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

    _on(store, "before-send.s3.*", refuse)


def _assert_no_crc_headers(sent: list[dict[str, str]]) -> None:
    for headers in sent:
        lowered = {name.lower() for name in headers}
        assert not any(name.startswith("x-amz-checksum-") for name in lowered), lowered
        assert "x-amz-sdk-checksum-algorithm" not in lowered
        assert "x-amz-trailer" not in lowered


def _cache_entries(store: BundleStore) -> list[str]:
    return sorted(p.name for p in store.bundles.iterdir()) if store.bundles.is_dir() else []


def test_settings_pick_the_store():
    assert type(open_store(Settings(store_dir=Path("/tmp/x")))) is BundleStore
    assert S3Location.parse("s3://bucket/a/b/") == S3Location("bucket", "a/b/")
    assert S3Location.parse("s3://bucket") == S3Location("bucket", "")
    for wrong in ("http://bucket/prefix", "s3://", "bucket/prefix"):
        with pytest.raises(ValueError, match="store_url"):
            Settings(store_url=wrong)


def test_publish_download_verify_and_load(published: Published, encoder: Encoder):
    objects = _objects(published.endpoint, published.prefix)
    manifest_key = f"{published.prefix}/bundles/v1/{MANIFEST}"
    assert manifest_key in objects

    store = published.fresh_store()
    assert isinstance(store, ModelStore) and isinstance(BundleStore(store.root), ModelStore)
    assert store.location == f"s3://{BUCKET}/{published.prefix}/bundles"
    assert store.versions() == ["v1"] and store.exists("v1") and not store.exists("v2")
    manifest = store.manifest("v1")  # from the bucket: nothing is cached yet
    assert not store.path_for("v1").exists()
    assert {f"{published.prefix}/bundles/v1/{name}" for name in manifest.files} | {
        manifest_key
    } == set(objects)

    loaded = store.load("v1", device="cpu")
    assert loaded.manifest == manifest
    assert loaded.encoder.checksum == encoder.checksum
    assert loaded.corpus is not None and loaded.corpus.ids == [4, 9, 11]
    # Downloaded into a temporary folder and renamed into place: nothing else is left.
    assert _cache_entries(store) == ["v1"]
    root = store.fetch("v1")
    assert root == store.path_for("v1")
    for name, digest in manifest.files.items():
        assert sha256_file(root / name) == digest
    report, folder = published.fresh_store().report("v1")  # fetches the bundle first
    assert report == {"model": "v1"} and (folder / "chart.png").is_file()
    with pytest.raises(BundleNotFoundError):
        store.load("no-such-version", device="cpu")


def test_manifest_is_uploaded_last_and_a_version_is_published_once(
    endpoint: str, tmp_path: Path, encoder: Encoder, anchors: AnchorSet
):
    store = store_at(endpoint, tmp_path / "cache", f"order-{uuid.uuid4().hex[:8]}")
    uploaded: list[str] = []
    for operation in ("PutObject", "CreateMultipartUpload"):
        _on(
            store,
            f"provide-client-params.s3.{operation}",
            lambda params, **_: uploaded.append(params["Key"]),
        )
    sent: list[dict[str, str]] = []
    _on(store, "before-send.s3.*", lambda request, **_: sent.append(dict(request.headers)))
    publish_v1(store, encoder, anchors)
    assert uploaded[-1].endswith(f"/v1/{MANIFEST}")
    assert len(uploaded) == len(store.manifest("v1").files) + 1
    # The encoder's weights (~90 MB) went up in parts: no CRC headers there either.
    assert any(request.get("Content-Length") for request in sent)
    _assert_no_crc_headers(sent)

    with pytest.raises(BundleExistsError):
        publish_v1(store, encoder, anchors)
    # Two publishers that both found the version absent: the conditional manifest upload
    # lets only the first one make it visible.
    with pytest.raises(BundleExistsError, match="appeared meanwhile"):
        store._upload("v1", store.manifest("v1"))


def test_half_published_bundle_is_never_visible(
    endpoint: str, tmp_path: Path, encoder: Encoder, anchors: AnchorSet
):
    prefix = f"half-{uuid.uuid4().hex[:8]}"
    publisher = store_at(endpoint, tmp_path / "publisher", prefix)

    def crash_at_the_manifest(params: dict[str, Any], **_: Any) -> None:
        if params["Key"].endswith(MANIFEST):
            raise ConnectionClosedError(endpoint_url=endpoint)  # the publisher's pod died

    _on(publisher, "provide-client-params.s3.PutObject", crash_at_the_manifest)
    with pytest.raises(BundleStoreUnavailableError):
        publish_v1(publisher, encoder, anchors)
    # Every other file is in the bucket, and still no reader sees a version.
    orphans = _objects(endpoint, prefix)
    assert len(orphans) > 5 and not any(key.endswith(MANIFEST) for key in orphans)
    assert _cache_entries(publisher) == []  # no local copy passes for a published bundle
    reader = store_at(endpoint, tmp_path / "reader", prefix)
    assert reader.versions() == [] and not reader.exists("v1")
    with pytest.raises(BundleNotFoundError):
        reader.load("v1", device="cpu")

    # The next worker to start removes the orphaned objects once they are old enough.
    reader.remove_stale_temporaries(older_than_s=3600)
    assert _objects(endpoint, prefix)
    reader.remove_stale_temporaries(older_than_s=0)
    assert _objects(endpoint, prefix) == {}


def test_tampered_object_is_refused(published: Published, tmp_path: Path):
    prefix = f"tampered-{uuid.uuid4().hex[:8]}"
    client = published.fresh_store().client
    for key in _objects(published.endpoint, published.prefix):
        client.copy_object(
            Bucket=BUCKET,
            Key=key.replace(published.prefix, prefix, 1),
            CopySource={"Bucket": BUCKET, "Key": key},
        )
    key = f"{prefix}/bundles/v1/{ANCHORS}"
    matrix = np.load(io.BytesIO(client.get_object(Bucket=BUCKET, Key=key)["Body"].read()))
    matrix[0, 0] += 0.5  # a well-formed file with different numbers
    buffer = io.BytesIO()
    np.save(buffer, matrix)
    client.put_object(Bucket=BUCKET, Key=key, Body=buffer.getvalue())

    store = store_at(published.endpoint, tmp_path / "cache", prefix)
    with pytest.raises(CorruptBundleError, match=r"anchors\.npy .* does not match its sha256"):
        store.load("v1", device="cpu")
    assert _cache_entries(store) == []  # neither the bundle nor a temporary folder


def test_unsafe_manifest_names_are_refused(published: Published, tmp_path: Path):
    prefix = f"unsafe-{uuid.uuid4().hex[:8]}"
    store = store_at(published.endpoint, tmp_path / "cache", prefix)
    manifest = published.fresh_store().manifest("v1")
    for name in ("../../escape.txt", "/etc/passwd", "encoder/../../x", MANIFEST):
        evil = manifest.model_copy(update={"files": {name: "0" * 64}})
        store.client.put_object(
            Bucket=BUCKET, Key=f"{prefix}/bundles/v1/{MANIFEST}", Body=evil.model_dump_json()
        )
        with pytest.raises(CorruptBundleError, match="unsafe file"):
            store.fetch("v1")
    assert _cache_entries(store) == []
    assert not (tmp_path / "escape.txt").exists()


class _BrokenStream(io.BytesIO):
    """A response body whose connection breaks after half of it, as urllib3 reports that."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data[: len(data) // 2])

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        if not chunk:
            raise ProtocolError("Connection broken: IncompleteRead")
        return chunk


def _replace_bodies(store: S3BundleStore, make: Any, length: Any = len) -> Any:
    """Every GetObject body but the manifest's becomes `make(data)`, announced as
    `length(data)` bytes (the Content-Length that botocore checks the stream against)."""

    def swap(parsed: dict[str, Any], **_: Any) -> None:
        data = parsed["Body"].read()
        if data.startswith(b"{"):  # the manifest (and other JSON objects) stay intact
            parsed["Body"] = StreamingBody(io.BytesIO(data), len(data))
        else:
            parsed["Body"] = StreamingBody(make(data), length(data))

    _on(store, "after-call.s3.GetObject", swap)
    return swap


def test_half_finished_download_is_never_served(published: Published):
    # The connection is refused halfway through the bundle's files.
    store = published.fresh_store()
    calls = {"n": 0}

    def connection_drops(params: dict[str, Any], **_: Any) -> None:
        if not params["Key"].endswith(MANIFEST):
            calls["n"] += 1
            if calls["n"] == 3:
                raise ConnectionClosedError(endpoint_url=published.endpoint)

    _on(store, "provide-client-params.s3.GetObject", connection_drops)
    with pytest.raises(BundleStoreUnavailableError, match="Connection was closed"):
        store.load("v1", device="cpu")
    assert _cache_entries(store) == []

    # The connection breaks in the middle of a file's body.
    store = published.fresh_store()
    _replace_bodies(store, _BrokenStream)
    with pytest.raises(BundleStoreUnavailableError, match="Connection broken"):
        store.fetch("v1")
    assert _cache_entries(store) == []

    # A stream shorter than announced: botocore's length check.
    store = published.fresh_store()
    _replace_bodies(store, lambda data: io.BytesIO(data[: len(data) // 2]))
    with pytest.raises(BundleStoreUnavailableError, match="IncompleteReadError"):
        store.fetch("v1")
    assert _cache_entries(store) == []

    # A server that sends a short object with a matching length: the manifest's sha256.
    store = published.fresh_store()
    torn = _replace_bodies(
        store, lambda data: io.BytesIO(data[: len(data) // 2]), lambda data: len(data) // 2
    )
    with pytest.raises(CorruptBundleError, match="does not match its sha256"):
        store.fetch("v1")
    assert _cache_entries(store) == []

    # A crashed process's temporary folder is never taken for the bundle, and is cleaned up.
    leftover = store.bundles / f"{TMP_PREFIX}v1-deadbeef"
    (leftover / "encoder").mkdir(parents=True)
    store.client.meta.events.unregister("after-call.s3.GetObject", torn)
    assert store.fetch("v1") == store.path_for("v1")
    assert store.remove_stale_temporaries(older_than_s=0) == [leftover]
    assert _cache_entries(store) == ["v1"]


def test_cached_copy_is_checked_and_used_while_the_store_is_down(
    published: Published, tmp_path: Path
):
    store = published.fresh_store()
    root = store.fetch("v1")
    corpus = root / CORPUS
    good = corpus.read_bytes()
    corpus.write_bytes(good[:-8] + b"\0" * 8)  # bit rot in the cache
    store.load("v1", device="cpu")  # noticed, fetched again
    assert (store.path_for("v1") / CORPUS).read_bytes() == good

    # Object storage unreachable: the verified cached copy serves, nothing else does.
    offline = store_at(published.endpoint, store.root, published.prefix)
    _store_down(offline)
    assert offline.load("v1", device="cpu").manifest.version == "v1"
    (offline.path_for("v1") / CORPUS).write_bytes(b"rot")
    with pytest.raises(CorruptBundleError):
        offline.load("v1", device="cpu")  # and only while it still verifies
    empty = store_at(published.endpoint, tmp_path / "empty", published.prefix)
    _store_down(empty)
    for call in (empty.fetch, empty.exists, empty.manifest):
        with pytest.raises(BundleStoreUnavailableError):
            call("v1")
    with pytest.raises(BundleStoreUnavailableError):
        empty.versions()


def test_job_checkpoints_follow_a_job_to_another_pod(endpoint: str, tmp_path: Path):
    prefix = f"jobs-{uuid.uuid4().hex[:8]}"
    first = store_at(endpoint, tmp_path / "pod-a", prefix).job_checkpoints("job-1")
    out_dir = first.restore()
    assert out_dir == tmp_path / "pod-a" / "jobs" / "retrain-job-1"
    first.save()  # nothing written yet: nothing uploaded
    assert _objects(endpoint, prefix) == {}

    state = out_dir / RESUME_STATE
    state.parent.mkdir(parents=True)
    state.write_bytes(b"step 50" * 1000)
    puts: list[str] = []
    _on(first.store, "provide-client-params.s3.PutObject", lambda params, **_: puts.append(1))
    first.save()
    first.save()  # unchanged since: a stat, no upload
    assert len(puts) == 1
    key = f"{prefix}/jobs/retrain-job-1/{RESUME_STATE}"
    head = first.store.client.head_object(Bucket=BUCKET, Key=key)
    assert head["Metadata"][SHA256_METADATA] == sha256_file(state)
    replacement = state.with_name("new")
    replacement.write_bytes(b"step 100" * 1000)
    replacement.replace(state)  # as the trainer's atomic write replaces it
    first.save()
    assert len(puts) == 2

    # A retry on another pod resumes from the bucket's checkpoint.
    second = store_at(endpoint, tmp_path / "pod-b", prefix).job_checkpoints("job-1")
    assert (second.restore() / RESUME_STATE).read_bytes() == b"step 100" * 1000
    # A checkpoint that is not what was uploaded is not resumed from.
    second.store.client.put_object(
        Bucket=BUCKET, Key=key, Body=b"garbage", Metadata={SHA256_METADATA: "0" * 64}
    )
    third = store_at(endpoint, tmp_path / "pod-c", prefix).job_checkpoints("job-1")
    assert not (third.restore() / RESUME_STATE).exists()

    second.discard()
    assert _objects(endpoint, prefix) == {} and not second.path.exists()

    shared = BundleStore(tmp_path / "shared").job_checkpoints("job-2")
    assert type(shared) is JobCheckpoints
    assert shared.restore() == tmp_path / "shared" / "jobs" / "retrain-job-2"


def test_no_crc_checksum_headers_for_minio_and_ceph(endpoint: str, tmp_path: Path):
    """boto3 >= 1.36 adds x-amz-checksum-crc32 (and x-amz-sdk-checksum-algorithm) to uploads
    unless told `when_required`, and to DeleteObjects in any case; some MinIO and Ceph RGW
    versions refuse those requests."""
    store = store_at(endpoint, tmp_path, f"crc-{uuid.uuid4().hex[:8]}")
    config = store.client.meta.config
    assert config.request_checksum_calculation == "when_required"
    assert config.response_checksum_validation == "when_required"
    sent: list[dict[str, str]] = []
    _on(store, "before-send.s3.*", lambda request, **_: sent.append(dict(request.headers)))
    checkpoints = store.job_checkpoints("crc")
    state = checkpoints.restore() / RESUME_STATE
    state.parent.mkdir(parents=True)
    state.write_bytes(b"x" * 4096)
    checkpoints.save()
    checkpoints.discard()
    assert len(sent) >= 4  # head, put, list, delete
    _assert_no_crc_headers(sent)
