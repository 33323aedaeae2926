"""The change log stays bounded while replicas follow it, and a replica whose position is gone
(trimmed, or rewritten by a failover that lost writes) rebuilds instead of missing changes."""

import logging
import time
from pathlib import Path

import pytest
import redis

from core.settings import Settings
from service.engine import Engine
from tests.polling import wait_until
from tests.service.corpus_helpers import api, corpus_server, fresh_prefix, search_ids

pytestmark = pytest.mark.slow

WRITES = 300  # single-document writes in the long loop
LOOP_DEADLINE_S = 240.0
TRIM_INTERVAL_S = 0.2


def test_the_change_log_stays_bounded_under_a_long_write_loop(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    prefix = fresh_prefix()
    overrides = {
        "redis_prefix": prefix,
        "changes_trim_interval_s": TRIM_INTERVAL_S,
        "changes_keep": 10,
    }
    store = redis.Redis.from_url(Settings().redis_url, decode_responses=True)
    with (
        corpus_server(engine, tmp_path / "a", **overrides) as replica_a,
        corpus_server(engine, tmp_path / "b", **overrides) as replica_b,
        api(replica_a) as client,
        caplog.at_level(logging.WARNING, logger="service.corpus.follower"),
    ):
        changes = f"{prefix}:corpus:changes"
        lengths: list[int] = []
        deadline = time.monotonic() + LOOP_DEADLINE_S
        for i in range(WRITES):
            assert time.monotonic() < deadline, f"only {i} writes in {LOOP_DEADLINE_S}s"
            doc = {"id": f"loop-{i}", "text": f"Entry {i} in a long diary of tides"}
            response = client.post("/documents", json={"documents": [doc]})
            assert response.status_code == 200, response.text
            lengths.append(store.xlen(changes))
        revision = response.json()["revision"]

        # Both replicas followed every write (no rebuild, no gap) while the log was trimmed.
        for replica in (replica_a, replica_b):
            follower = replica.app.state.corpus.follower
            wait_until(lambda f=follower: f.applied_revision == revision, timeout=30)
        trimmer = replica_a.app.state.change_log_trimmer
        # Once both report the last revision, only the kept entries remain.
        wait_until(lambda: trimmer.oldest == revision, timeout=30)
        wait_until(lambda: store.xlen(changes) == 10, timeout=30)
        assert "rebuilding" not in caplog.text
        # Bounded: never more than the kept entries plus what a few trim rounds let through.
        assert max(lengths) <= 10 + 100, max(lengths)
        assert max(lengths[WRITES // 2 :]) < WRITES // 2
        with api(replica_b) as other:
            assert search_ids(other, f"Entry {WRITES - 1} in a long diary of tides", top_k=1) == [
                f"loop-{WRITES - 1}"
            ]
            assert search_ids(other, "Entry 3 in a long diary of tides", top_k=1) == ["loop-3"]
    store.close()


def test_a_replica_whose_position_is_gone_rebuilds(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    prefix = fresh_prefix()
    store = redis.Redis.from_url(Settings().redis_url, decode_responses=True)
    keys_changes = f"{prefix}:corpus:changes"
    with (
        corpus_server(engine, tmp_path / "var", redis_prefix=prefix) as replica,
        api(replica) as client,
        caplog.at_level(logging.WARNING, logger="service.corpus.follower"),
    ):
        follower = replica.app.state.corpus.follower
        written = client.post(
            "/documents",
            json={"documents": [{"id": "lost", "text": "A violin maker varnishes a cello"}]},
        )
        revision = written.json()["revision"]
        wait_until(lambda: follower.applied_revision == revision)

        # A failover that lost this write: the new master never had it, and reuses its
        # revision for another write (what a replica promoted without WAIT can do).
        kept_entries = store.xrange(keys_changes, "-", f"{revision - 1}-0") if revision > 1 else []
        with store.pipeline(transaction=True) as pipe:
            pipe.delete(f"{prefix}:document:lost", keys_changes)
            pipe.zrem(f"{prefix}:documents", "lost")
            for entry_id, fields in kept_entries:
                pipe.xadd(keys_changes, fields, id=entry_id)
            pipe.decr(f"{prefix}:corpus:revision")
            pipe.execute()
        rewritten = client.post(
            "/documents",
            json={"documents": [{"id": "kept", "text": "A baker shapes loaves at dawn"}]},
        )
        assert rewritten.json()["revision"] == revision
        wait_until(lambda: "rebuilding" in caplog.text, timeout=30)
        wait_until(lambda: search_ids(client, "A baker shapes loaves at dawn", top_k=1) == ["kept"])
        assert "lost" not in search_ids(client, "A violin maker varnishes a cello", top_k=10)

        # The log trimmed past its position while it was away: rebuilt again, nothing missed.
        caplog.clear()
        client.post(
            "/documents",
            json={"documents": [{"id": "later", "text": "A ferry crosses the fjord at night"}]},
        )
        applied = follower.applied_revision
        # Trimmed past its position, and a change it can only learn of by a full scan, since
        # its log entry is gone: one transaction, so the follower sees all of it or none.
        with store.pipeline(transaction=True) as pipe:
            pipe.xtrim(keys_changes, minid=f"{applied + 1}-0", approximate=False)
            pipe.hset(
                f"{prefix}:document:sneaked",
                mapping={"text": "Owls hunt mice in the barn", "metadata": "{}",
                         "number": 999, "revision": applied + 1},
            )  # fmt: skip
            pipe.zadd(f"{prefix}:documents", {"sneaked": 0})
            pipe.xadd(
                keys_changes, {"op": "upsert", "id": "x", "number": 998}, id=f"{applied + 2}-0"
            )
            pipe.set(f"{prefix}:corpus:revision", applied + 2)
            pipe.execute()
        wait_until(lambda: "rebuilding" in caplog.text, timeout=30)
        wait_until(lambda: search_ids(client, "Owls hunt mice in the barn", top_k=1) == ["sneaked"])
    store.close()
