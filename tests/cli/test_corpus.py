"""`rankserve corpus export` and `import` against the shared Redis, each test under a key prefix
of its own: a round trip keeps every id, text and metadata value; import is idempotent and
checks every line before writing one; and a replica indexes what was imported, embedding
through its cache, so texts it has embedded before are never encoded again."""

import gzip
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from cli.main import app
from core.corpus_files import document_line
from core.documents import NewDocument
from core.loading import default_version
from core.redis_keys import RedisKeys
from core.settings import Settings, get_settings
from models.anchors import AnchorSet
from models.encoder import Encoder
from service.engine import Engine
from tests.cli.conftest import flat
from tests.polling import wait_until
from tests.service.conftest import AUTH, Server, fixed_engine, make_settings, serve
from tests.service.corpus_helpers import search_ids, sick_sentences


@pytest.fixture
def prefix(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    prefix = f"rankserve-test-corpus-cli-{uuid.uuid4().hex[:8]}"
    url = Settings().redis_url  # before a test points the CLI elsewhere
    monkeypatch.setenv("RANKSERVE_REDIS_PREFIX", prefix)
    get_settings.cache_clear()
    yield prefix
    get_settings.cache_clear()
    client = redis.Redis.from_url(url)
    for key in client.scan_iter(match=RedisKeys(prefix).pattern, count=1000):
        client.delete(key)
    client.close()


def documents(count: int, label: str = "text") -> list[dict[str, Any]]:
    values: list[Any] = [7, -2.25, False, None, "Grüße, 世界", 2**53]
    return [
        {
            "id": f"doc:{i:05d}",
            "text": f"{label} {i}: “quotes”, tabs\t and \\ backslashes",
            "metadata": {"k": values[i % len(values)], "i": i},
        }
        for i in range(count)
    ]


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return path


def read(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def corpus(*args: str) -> str:
    result = CliRunner().invoke(app, ["corpus", *args])
    assert result.exit_code == 0, result.output
    return flat(result.output)


def corpus_process(prefix: str, *args: str) -> None:
    """The CLI in its own process, for tests with a server running in this one: CliRunner
    swaps sys.stdout while the server's threads log, and a stream it loses that way closes
    its buffer mid-call (click issue 3110)."""
    env = {**os.environ, "RANKSERVE_REDIS_PREFIX": prefix}
    command = [sys.executable, "-m", "cli.main", "corpus", *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def revision(prefix: str) -> int:
    client = redis.Redis.from_url(Settings().redis_url)
    try:
        return int(client.get(RedisKeys(prefix).corpus_revision) or 0)
    finally:
        client.close()


def test_export_then_import_round_trips_every_field(prefix: str, tmp_path: Path):
    rows = documents(1203)
    source = write(tmp_path / "in.jsonl.gz", rows[::-1])  # any order in, id order out
    assert "1203 written, 0 unchanged, corpus revision 1203" in corpus("import", str(source))

    exported = tmp_path / "out" / "corpus.jsonl"
    assert "exported 1203 documents at corpus revision 1203" in corpus("export", str(exported))
    assert read(exported) == sorted(rows, key=lambda row: row["id"])
    assert [p.name for p in exported.parent.iterdir()] == ["corpus.jsonl"]  # no temporaries
    compressed = tmp_path / "corpus.jsonl.gz"
    corpus("export", str(compressed))
    assert compressed.read_bytes()[:2] == b"\x1f\x8b"
    assert read(compressed) == read(exported)

    # Importing what is already there writes nothing: no revision, no change-log entry.
    again = corpus("import", str(compressed))
    assert "1203 written" not in again and "0 written, 1203 unchanged" in again
    assert revision(prefix) == 1203


def test_import_writes_only_what_is_new_or_different(prefix: str, tmp_path: Path):
    rows = documents(300)
    corpus("import", str(write(tmp_path / "a.jsonl", rows)))
    changed = [dict(row) for row in rows]
    changed[10]["text"] = "a new text"
    changed[20]["metadata"] = {**changed[20]["metadata"], "i": True}  # 20 -> true: a change
    changed.append({"id": "doc:00005", "text": "the later line wins", "metadata": {}})
    changed.append({"id": "new-one", "text": "added"})  # metadata defaults to {}
    output = corpus("import", "--batch-size", "64", str(write(tmp_path / "b.jsonl", changed)))
    assert "4 written, 298 unchanged, corpus revision 304" in output
    corpus("export", str(tmp_path / "x.jsonl"))
    exported = {row["id"]: row for row in read(tmp_path / "x.jsonl")}
    assert exported["doc:00010"]["text"] == "a new text"
    assert exported["doc:00020"]["metadata"]["i"] is True
    assert exported["doc:00005"]["text"] == "the later line wins"
    assert exported["new-one"]["metadata"] == {}
    assert len(exported) == 301


def test_a_file_with_invalid_lines_imports_nothing(prefix: str, tmp_path: Path):
    rows = documents(20)
    rows[3]["id"] = "no spaces allowed"
    rows[7]["metadata"] = {"nested": {"a": 1}}
    rows[9]["text"] = ""
    path = write(tmp_path / "bad.jsonl", rows)
    with path.open("a") as handle:
        handle.write("{not json\n")
    result = CliRunner().invoke(app, ["corpus", "import", str(path)])
    assert result.exit_code == 1
    output = flat(result.output)
    for line in ("line 4: id:", "line 8: metadata.nested", "line 10: text:", "line 21: not JSON"):
        assert line in output
    assert "nothing was imported" in output
    assert revision(prefix) == 0


def test_a_line_nested_too_deeply_is_a_clean_error(prefix: str, tmp_path: Path):
    """Python's parser gives up far past any real document's depth: a message, not a trace."""
    path = write(tmp_path / "deep.jsonl", documents(3))
    with path.open("a") as handle:
        handle.write('{"id": "deep", "text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    result = CliRunner().invoke(app, ["corpus", "import", str(path)])
    assert result.exit_code == 1
    assert "line 4: not JSON (nested too deeply)" in flat(result.output)
    assert revision(prefix) == 0


def test_an_unreachable_store_is_a_clean_error(
    prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("RANKSERVE_REDIS_URL", "redis://127.0.0.1:1/0")
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["corpus", "export", str(tmp_path / "x.jsonl")])
    assert result.exit_code == 1
    assert "the document store is unavailable" in flat(result.output)
    assert not (tmp_path / "x.jsonl").exists()


# A replica follows an import through the change log, embedding through its cache.


@pytest.fixture(scope="module")
def engine(encoder: Encoder, anchors: AnchorSet) -> Engine:
    return Engine(encoder=encoder, anchors=anchors, version=default_version(encoder), name="t")


def encoded_texts(server: Server) -> float:
    """Texts the server's encoder has encoded (requests and document indexing alike)."""
    return server.metric("rankserve_batch_size_sum")


@pytest.mark.slow
def test_replicas_index_an_import_and_reencode_nothing_their_cache_has(
    engine: Engine, tmp_path: Path
):
    texts = sick_sentences(120)
    rows = [{"id": f"s{i:03d}", "text": text, "metadata": {"i": i}} for i, text in enumerate(texts)]
    path = write(tmp_path / "sick.jsonl.gz", rows)
    var_dir = tmp_path / "var"  # one embedding cache for both servers
    first = make_settings(var_dir)
    second = make_settings(var_dir)
    try:
        with serve(first, loader=fixed_engine(engine)) as server:
            server.wait_ready()
            corpus_process(first.redis_prefix, "import", str(path))
            follower = server.app.state.corpus.follower
            wait_until(lambda: follower.applied_revision == 120, timeout=120)
            assert encoded_texts(server) == 120
            corpus_process(first.redis_prefix, "import", str(path))  # nothing new
            time.sleep(1.0)  # a follower round would have seen any new entry by now
            assert follower.applied_revision == 120 and encoded_texts(server) == 120
            with server.client(headers=AUTH) as http:
                assert search_ids(http, texts[42], top_k=1) == ["s042"]

        # Another corpus, the same texts: this replica's cache has them all.
        with serve(second, loader=fixed_engine(engine)) as server:
            server.wait_ready()
            corpus_process(second.redis_prefix, "import", str(path))
            follower = server.app.state.corpus.follower
            wait_until(lambda: follower.applied_revision == 120, timeout=120)
            assert encoded_texts(server) == 0
            with server.client(headers=AUTH) as http:
                assert search_ids(http, texts[7], top_k=1) == ["s007"]
    finally:
        client = redis.Redis.from_url(Settings().redis_url)
        for settings in (first, second):
            for key in client.scan_iter(match=RedisKeys(settings.redis_prefix).pattern):
                client.delete(key)
        client.close()


def test_document_lines_are_compact_with_sorted_metadata():
    doc = NewDocument("a", "ü\n", {"b": 1, "a": None})
    assert document_line(doc) == '{"id":"a","text":"ü\\n","metadata":{"a":null,"b":1}}\n'
