"""rankserve_client's snapshot methods against a real uvicorn with an admin token and a bundle
store of its own: take, list and restore, blocking and asyncio, and the errors they raise."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from rankserve_client import (
    AsyncClient,
    Client,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    UnauthorizedError,
)
from service.engine import Engine
from tests.service.conftest import API_KEY, Server, fixed_engine, make_settings, serve

pytestmark = pytest.mark.slow

ADMIN_TOKEN = "client-snapshot-token-0123"


@pytest.fixture(scope="module")
def admin_server(tmp_path_factory: pytest.TempPathFactory, engine: Engine) -> Iterator[Server]:
    root: Path = tmp_path_factory.mktemp("client-snapshots")
    settings = make_settings(root / "var", admin_token=ADMIN_TOKEN, store_dir=root / "store")
    with serve(settings, loader=fixed_engine(engine)) as running:
        running.wait_ready()
        yield running


def test_take_list_and_restore(admin_server: Server):
    with Client(admin_server.url, api_key=API_KEY, admin_token=ADMIN_TOKEN) as client:
        docs = [{"id": f"c{i}", "text": f"A note about the number {i}."} for i in range(5)]
        client.upsert_documents(docs)
        taken = client.create_snapshot("five")
        assert (taken["name"], taken["count"], taken["model_version"]) == ("five", 5, None)
        assert taken["bytes"] > 0
        assert [s["name"] for s in client.snapshots()["snapshots"]] == ["five"]

        client.delete_documents(["c0", "c1"])
        client.upsert_documents([{"id": "c9", "text": "Added after the snapshot."}])
        restored = client.restore_snapshot("five")
        assert restored["snapshot"] == taken
        assert (restored["upserted"], restored["deleted"], restored["indexed"]) == (2, 1, True)
        ids = [doc["id"] for doc in client.iter_documents()]
        assert ids == [f"c{i}" for i in range(5)]

        with pytest.raises(ConflictError) as taken_twice:
            client.create_snapshot("five")
        assert taken_twice.value.type == "conflict"
        with pytest.raises(NotFoundError) as missing:
            client.restore_snapshot("missing")
        assert (missing.value.type, missing.value.message) == (
            "not_found",
            "no snapshot named 'missing'",
        )
        # A name is one path segment: a slash in it reaches the name rule, no other route.
        with pytest.raises(InvalidRequestError):
            client.restore_snapshot("five/restore")

    with Client(admin_server.url, admin_token=API_KEY) as wrong, pytest.raises(UnauthorizedError):
        wrong.snapshots()


async def test_async_take_list_and_restore(admin_server: Server):
    async with AsyncClient(admin_server.url, api_key=API_KEY, admin_token=ADMIN_TOKEN) as client:
        taken = await client.create_snapshot()
        assert taken["name"].startswith("snapshot-")
        listed = [s["name"] for s in (await client.snapshots())["snapshots"]]
        assert listed[-1] == taken["name"]
        restored = await client.restore_snapshot(taken["name"])
        assert (restored["upserted"], restored["deleted"]) == (0, 0)
        with pytest.raises(NotFoundError):
            await client.restore_snapshot("missing")
