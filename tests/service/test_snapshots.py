"""/admin/snapshots through two real uvicorn servers on one Redis prefix and one bundle store:
a snapshot holds the corpus at one revision; a restore through one replica brings the corpus
back for both (the other follows the change log), writes only what differs, and refuses
unknown, badly named or duplicate snapshots with the error body and no server paths."""

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.snapshots import DOCUMENTS, MANIFEST, SNAPSHOTS_DIR
from service.engine import Engine
from tests.polling import wait_until
from tests.service.conftest import AUTH, Server, fixed_engine, make_settings, serve
from tests.service.corpus_helpers import fresh_prefix, search_ids, sick_sentences

pytestmark = pytest.mark.slow

ADMIN_TOKEN = "snapshot-admin-token-0123"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture(scope="module")
def replicas(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server, Path]]:
    root = tmp_path_factory.mktemp("snapshots")
    shared = {"redis_prefix": fresh_prefix(), "admin_token": ADMIN_TOKEN, "store_dir": root}
    with (
        serve(make_settings(root / "a", **shared), loader=fixed_engine(engine)) as a,
        serve(make_settings(root / "b", **shared), loader=fixed_engine(engine)) as b,
    ):
        a.wait_ready()
        b.wait_ready()
        yield a, b, root


def listing(server: Server) -> dict[str, tuple[str, dict]]:
    with server.client(headers=AUTH) as http:
        page = http.get("/documents", params={"limit": 1000}).json()
    return {doc["id"]: (doc["text"], doc["metadata"]) for doc in page["documents"]}


def applied(server: Server) -> int:
    return server.app.state.corpus.follower.applied_revision


def test_a_restore_through_one_replica_is_served_by_both(replicas: tuple[Server, Server, Path]):
    a, b, store = replicas
    texts = sick_sentences(60)
    docs = [{"id": f"sick-{i:02d}", "text": t, "metadata": {"i": i}} for i, t in enumerate(texts)]
    with a.client(headers=AUTH) as data, a.client(headers=ADMIN) as admin:
        assert data.post("/documents", json={"documents": docs[:40]}).status_code == 200
        taken = admin.post("/admin/snapshots", json={"name": "before"})
        assert taken.status_code == 201, taken.text
        snapshot = taken.json()
        assert (snapshot["name"], snapshot["count"], snapshot["model_version"]) == (
            "before",
            40,
            None,
        )
        revision = snapshot["revision"]
        assert revision == data.get("/documents/sick-39").json()["revision"]
        folder = store / SNAPSHOTS_DIR / "before"
        assert sorted(p.name for p in folder.iterdir()) == sorted([DOCUMENTS, MANIFEST])
        snapshot_state = listing(a)

        # After the snapshot: 10 deleted, 5 rewritten, 20 added.
        ids = [doc["id"] for doc in docs[:10]]
        assert data.post("/documents/delete", json={"ids": ids}).status_code == 200
        rewritten = [{**doc, "text": f"rewritten: {doc['text']}"} for doc in docs[10:15]]
        assert data.post("/documents", json={"documents": rewritten + docs[40:]}).status_code == 200
        assert len(listing(a)) == 50

        names = [s["name"] for s in admin.get("/admin/snapshots").json()["snapshots"]]
        assert "before" in names
        restored = admin.post("/admin/snapshots/before/restore")
        assert restored.status_code == 200, restored.text
        body = restored.json()
        assert (body["upserted"], body["deleted"], body["indexed"]) == (15, 20, True)
        assert body["snapshot"]["revision"] == revision
        assert listing(a) == snapshot_state
        assert search_ids(data, texts[3], top_k=1) == ["sick-03"]

    # The other replica follows the restore's change-log entries.
    wait_until(lambda: applied(b) >= body["revision"], timeout=60)
    assert listing(b) == snapshot_state
    with b.client(headers=AUTH) as other:
        assert search_ids(other, texts[3], top_k=1) == ["sick-03"]
        assert search_ids(other, texts[12], top_k=1) == ["sick-12"]
        assert "sick-50" not in search_ids(other, texts[50], top_k=5)

    # Restoring the corpus it already is writes nothing.
    with b.client(headers=ADMIN) as admin:
        again = admin.post("/admin/snapshots/before/restore").json()
    assert (again["upserted"], again["deleted"], again["revision"]) == (0, 0, body["revision"])


def test_snapshot_errors_have_stable_types_and_no_paths(replicas: tuple[Server, Server, Path]):
    a, _, store = replicas
    with a.client(headers=ADMIN) as admin:
        assert admin.post("/admin/snapshots", json={"name": "dup"}).status_code == 201
        cases = [
            (admin.post("/admin/snapshots", json={"name": "dup"}), 409, "conflict"),
            (admin.post("/admin/snapshots/missing/restore"), 404, "not_found"),
            (admin.post("/admin/snapshots/..%2Fetc/restore"), 422, "invalid_request"),
            (admin.post("/admin/snapshots/a/b/restore"), 422, "invalid_request"),
            (admin.post("/admin/snapshots", json={"name": ".hidden"}), 422, "invalid_request"),
            (admin.post("/admin/snapshots", json={"nmae": "x"}), 422, "invalid_request"),
        ]
        for response, status, kind in cases:
            assert response.status_code == status, response.text
            error = response.json()["error"]
            assert (error["type"], error["code"]) == (kind, status)
            assert str(store) not in response.text and "/tmp" not in response.text
        assert "no snapshot named 'missing'" in cases[1][0].json()["error"]["message"]

        # A default name, and the listing oldest first.
        unnamed = admin.post("/admin/snapshots")
        assert unnamed.status_code == 201
        assert unnamed.json()["name"].startswith("snapshot-")
        names = [s["name"] for s in admin.get("/admin/snapshots").json()["snapshots"]]
        assert names.index("dup") < names.index(unnamed.json()["name"])

    # The admin token, never the API key, opens these routes.
    with httpx.Client(base_url=a.url, headers=AUTH) as wrong:
        assert wrong.get("/admin/snapshots").status_code == 401
        assert wrong.post("/admin/snapshots/dup/restore").status_code == 401


def test_a_corrupt_snapshot_changes_nothing(replicas: tuple[Server, Server, Path]):
    a, _, store = replicas
    with a.client(headers=ADMIN) as admin:
        assert admin.post("/admin/snapshots", json={"name": "damaged"}).status_code == 201
        documents = store / SNAPSHOTS_DIR / "damaged" / DOCUMENTS
        documents.write_bytes(documents.read_bytes()[:-5] + b"xxxxx")
        before = listing(a)
        response = admin.post("/admin/snapshots/damaged/restore")
        assert response.status_code == 409
        assert response.json()["error"]["message"] == (
            "snapshot 'damaged' is unusable; the corpus was not changed"
        )
        assert listing(a) == before
