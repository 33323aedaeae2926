"""The Document API over real HTTP, with Redis as the source of truth."""

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.engine import Engine
from tests.polling import wait_until
from tests.service.conftest import Server
from tests.service.corpus_helpers import api, corpus_server, fresh_prefix, private_redis, search_ids


@pytest.fixture(scope="module")
def prefix() -> str:
    """The store both replicas of this module share."""
    return fresh_prefix()


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("documents-var")


@pytest.fixture(scope="module")
def replica_a(engine: Engine, var_dir: Path, prefix: str) -> Iterator[Server]:
    with corpus_server(engine, var_dir, redis_prefix=prefix) as running:
        yield running


@pytest.fixture(scope="module")
def replica_b(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory, prefix: str, replica_a: Server
) -> Iterator[Server]:
    """A second app on the same Redis keys, with its own disk cache: another machine."""
    with corpus_server(engine, tmp_path_factory.mktemp("replica-b"), redis_prefix=prefix) as b:
        yield b


@pytest.fixture
def client(replica_a: Server) -> Iterator[httpx.Client]:
    with api(replica_a) as http:
        yield http


def test_upsert_get_list_and_delete(client: httpx.Client):
    docs = [
        {"id": f"crud-{i}", "text": f"Document number {i} about gardens", "metadata": {"n": i}}
        for i in range(5)
    ]
    written = client.post("/documents", json={"documents": docs})
    assert written.status_code == 200, written.text
    assert written.json()["ids"] == [d["id"] for d in docs]
    first_revision = written.json()["revision"]

    got = client.get("/documents/crud-3").json()
    assert got == {**docs[3], "revision": got["revision"]}
    assert got["revision"] <= first_revision

    replaced = client.post(
        "/documents", json={"documents": [{"id": "crud-3", "text": "A new text", "metadata": {}}]}
    ).json()
    assert replaced["revision"] > first_revision
    assert client.get("/documents/crud-3").json()["text"] == "A new text"

    listed: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = client.get("/documents", params=params).json()
        listed += [d["id"] for d in page["documents"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [i for i in listed if i.startswith("crud-")] == [f"crud-{i}" for i in range(5)]
    assert listed == sorted(listed)

    assert client.delete("/documents/crud-0").json()["deleted"] == ["crud-0"]
    batch = client.post("/documents/delete", json={"ids": ["crud-1", "crud-0", "never"]}).json()
    assert batch["deleted"] == ["crud-1"] and batch["not_found"] == ["crud-0", "never"]
    assert client.get("/documents/crud-0").status_code == 404
    assert client.get("/documents/crud-1").status_code == 404


def test_ids_are_generated_when_absent(client: httpx.Client):
    body = client.post("/documents", json={"documents": [{"text": "no id given"}]}).json()
    (doc_id,) = body["ids"]
    assert client.get(f"/documents/{doc_id}").json()["text"] == "no id given"


def test_the_later_of_two_writes_to_one_id_stays(client: httpx.Client):
    docs = [{"id": "twice", "text": "first version"}, {"id": "twice", "text": "second version"}]
    assert client.post("/documents", json={"documents": docs}).json()["ids"] == ["twice"] * 2
    assert client.get("/documents/twice").json()["text"] == "second version"
    assert search_ids(client, "first version", top_k=100).count("twice") == 1


def test_second_replica_sees_the_first_ones_writes(replica_a: Server, replica_b: Server):
    with api(replica_a) as a, api(replica_b) as b:
        text = "A lighthouse keeper watches ships in a storm"
        a.post("/documents", json={"documents": [{"id": "replicated", "text": text}]})
        assert b.get("/documents/replicated").json()["text"] == text
        # B indexes it from the change log, by itself.
        wait_until(lambda: search_ids(b, text, top_k=1) == ["replicated"])
        # Deleted through B: A never returns it, even before A applies the change.
        assert b.delete("/documents/replicated").status_code == 200
        assert "replicated" not in search_ids(a, text, top_k=10)
        wait_until(
            lambda: (
                a.post("/search", json={"query": "x"}).json()["revision"]
                == b.post("/search", json={"query": "x"}).json()["revision"]
            )
        )


def test_restart_rebuilds_from_redis_without_re_encoding(
    engine: Engine, var_dir: Path, prefix: str, replica_a: Server
):
    with api(replica_a) as a:
        docs = [{"id": f"kept-{i}", "text": f"Persistent note {i} on rivers"} for i in range(4)]
        a.post("/documents", json={"documents": docs})
        a.delete("/documents/kept-0")
    with corpus_server(engine, var_dir, redis_prefix=prefix) as restarted, api(restarted) as c:
        # Every document came back from Redis, every vector from the disk cache.
        assert restarted.metric("rankserve_batch_size_count") == 0
        assert search_ids(c, "Persistent note 2 on rivers", top_k=1) == ["kept-2"]
        assert "kept-0" not in search_ids(c, "Persistent note 0 on rivers", top_k=100)


@pytest.mark.slow
def test_acknowledged_documents_survive_a_redis_crash(engine: Engine, tmp_path: Path):
    """SIGKILL a private redis-server mid-stream of writes, restart it: every 200 is kept."""
    (tmp_path / "redis").mkdir()
    # A write that Redis took just before the kill then waits for this replica's index, which
    # cannot read the change log until Redis is back: with the default 30 s visibility timeout
    # that one request outlasted the 30 s wait for the writer's failures below (once in the
    # suite). The write is durable either way; its 200 only comes sooner.
    with (
        private_redis(tmp_path / "redis") as store,
        corpus_server(
            engine, tmp_path / "var", redis_url=store.url, write_visibility_timeout_s=3.0
        ) as server,
        api(server) as client,
    ):
        acknowledged: list[str] = []
        failures: list[int] = []
        stop = threading.Event()

        def write() -> None:
            batch = 0
            while not stop.is_set():
                docs = [
                    {"id": f"d-{batch}-{k}", "text": f"durable record {batch} item {k}"}
                    for k in range(3)
                ]
                try:
                    response = client.post("/documents", json={"documents": docs})
                except httpx.HTTPError:
                    failures.append(-1)
                    continue
                if response.status_code == 200:
                    acknowledged.extend(d["id"] for d in docs)
                else:
                    failures.append(response.status_code)
                    time.sleep(0.05)
                batch += 1

        writer = threading.Thread(target=write)
        writer.start()
        wait_until(lambda: len(acknowledged) >= 30)
        store.kill()
        wait_until(lambda: len(failures) >= 3)
        store.start()  # same port, same directory: replays the append-only file
        count_at_restart = len(acknowledged)
        wait_until(lambda: len(acknowledged) >= count_at_restart + 15)
        stop.set()
        writer.join()

        assert set(failures) <= {503, -1}
        assert len(acknowledged) == len(set(acknowledged))
        for doc_id in acknowledged:
            response = client.get(f"/documents/{doc_id}")
            assert response.status_code == 200, doc_id
        last = acknowledged[-1]
        batch, item = last.split("-")[1:]
        # A 200 that came at the visibility timeout is indexed once the follower reconnects.
        wait_until(
            lambda: search_ids(client, f"durable record {batch} item {item}", top_k=1) == [last]
        )


@pytest.mark.slow
def test_demo_corpus_is_indexed_once_and_deletes_stick(engine: Engine, tmp_path: Path):
    demo = tmp_path / "demo.jsonl"
    rows = [
        {"id": "demo-1", "text": "A chef cooks pasta", "metadata": {"source": "demo"}},
        {"id": "demo-2", "text": "A pilot flies a plane", "metadata": {"source": "demo"}},
    ]
    demo.write_text("".join(json.dumps(row) + "\n" for row in rows))
    settings = {"redis_prefix": fresh_prefix(), "demo_corpus": demo}
    with corpus_server(engine, tmp_path / "var", **settings) as first, api(first) as client:
        assert search_ids(client, "someone is cooking", top_k=1) == ["demo-1"]
        assert client.delete("/documents/demo-1").status_code == 200
    with corpus_server(engine, tmp_path / "var", **settings) as second, api(second) as client:
        assert client.get("/documents/demo-1").status_code == 404
        assert search_ids(client, "someone is cooking", top_k=5) == ["demo-2"]


@pytest.mark.slow
def test_anchor_source_documents_is_shared_and_follows_the_seed(engine: Engine, tmp_path: Path):
    demo = tmp_path / "demo.jsonl"
    demo.write_text(
        "".join(
            json.dumps({"id": f"a-{i:02d}", "text": f"Sentence {i} about the sea and ships"}) + "\n"
            for i in range(30)
        )
    )
    settings = {
        "redis_prefix": fresh_prefix(),
        "demo_corpus": demo,
        "anchor_source": "documents",
        "anchor_count": 12,
        "anchor_seed": 3,
    }
    texts = {f"Sentence {i} about the sea and ships" for i in range(30)}
    with (
        corpus_server(engine, tmp_path / "a", **settings) as first,
        corpus_server(engine, tmp_path / "b", **settings) as second,
    ):
        anchors = first.services.holder.current.anchors
        assert anchors.count == 12 and set(anchors.texts) <= texts
        assert second.services.holder.current.anchors.texts == anchors.texts
        with api(first) as client:
            assert client.get("/info").json()["anchor_count"] == 12
    with corpus_server(engine, tmp_path / "a", **(settings | {"anchor_seed": 4})) as reseeded:
        assert reseeded.services.holder.current.anchors.texts != anchors.texts


@pytest.mark.parametrize(
    ("method", "path", "payload", "status", "message"),
    [
        ("get", "/documents/unknown-id", None, 404, "no document with id 'unknown-id'"),
        ("delete", "/documents/unknown-id", None, 404, "no document with id 'unknown-id'"),
        ("get", "/documents/bad%20id", None, 404, "Not Found"),
        ("get", "/documents/delete", None, 405, "Method Not Allowed"),
        ("post", "/documents", {"documents": [{"id": "delete", "text": "t"}]}, 422, "reserved"),
        ("post", "/documents", {"documents": []}, 422, "at least 1 item"),
        (
            "post",
            "/documents",
            {"documents": [{"text": "t"}] * 257},
            422,
            "documents: List should have at most 256 items",
        ),
        (
            "post",
            "/documents",
            {
                "documents": [
                    {
                        "text": "t",
                        "metadata": {
                            "k": "v" * 256,
                            "l": "w" * 256,
                            **{f"x{i}": "y" * 250 for i in range(7)},
                        },
                    }
                ]
            },
            422,
            "metadata is larger than 2048 bytes",
        ),
        (
            "post",
            "/documents",
            {"documents": [{"text": "t", "metadata": {f"k{i}": i for i in range(17)}}]},
            422,
            "Dictionary should have at most 16 items",
        ),
        (
            "post",
            "/documents",
            {"documents": [{"text": "t", "metadata": {"nested": {"a": 1}}}]},
            422,
            "documents[0].metadata.nested",
        ),
        ("post", "/documents", {"documents": [{"id": "a/b", "text": "t"}]}, 422, "pattern"),
        ("post", "/documents", {"documents": [{"id": "x" * 129, "text": "t"}]}, 422, "pattern"),
        ("post", "/documents", {"documents": [{"text": ""}]}, 422, "at least 1 character"),
        ("post", "/documents/delete", {"ids": ["twice", "twice"]}, 422, "ids must be unique"),
        ("post", "/documents/delete", {"ids": []}, 422, "at least 1 item"),
        ("get", "/documents?limit=0", None, 422, "limit"),
        ("get", "/documents?limit=1001", None, 422, "limit"),
        ("get", "/documents?limt=5", None, 422, "Extra inputs are not permitted"),
    ],
)
def test_bad_input(
    client: httpx.Client, method: str, path: str, payload: dict | None, status: int, message: str
):
    response = client.request(method, path, json=payload)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status
    assert message in error["message"]
