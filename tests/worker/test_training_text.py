"""Where a retrain job's text comes from, and a tiny job trained on the corpus documents."""

import asyncio
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis import Redis

from core.documents import DocumentStore, NewDocument
from core.jobs import RetrainRequest, fetch, retrain_queue, submit
from core.registry import BundleStore
from models.training.data import read_text_file
from tests.polling import wait_until
from tests.worker.conftest import TINY_PARAMS, OpsEnv
from worker.training_text import (
    TEXT_FILE,
    NotEnoughDocumentsError,
    TextSource,
    mix_texts,
    resolve_source,
    training_text,
)

CAPTIONS = [f"A person number {i} is slicing a vegetable in the kitchen." for i in range(24)]


def test_auto_picks_documents_only_past_the_minimum():
    assert resolve_source(TextSource.AUTO, 999, 1000) is TextSource.GENERAL
    assert resolve_source(TextSource.AUTO, 1000, 1000) is TextSource.DOCUMENTS
    assert resolve_source(TextSource.GENERAL, 5000, 1000) is TextSource.GENERAL
    assert resolve_source(TextSource.DOCUMENTS, 2, 1000) is TextSource.DOCUMENTS
    with pytest.raises(NotEnoughDocumentsError):
        resolve_source(TextSource.DOCUMENTS, 1, 1000)


@pytest.mark.parametrize(("share", "extra"), [(1.0, 0), (0.5, 10), (0.25, 30), (0.2, 40)])
def test_mix_keeps_every_document_and_reaches_the_share(share: float, extra: int):
    documents = [f"doc {i}" for i in range(10)]
    general = [f"general {i}" for i in range(100)] + documents[:3]
    mixed = mix_texts(documents, general, share, seed=0)
    assert mixed[:10] == documents
    assert len(mixed) == 10 + extra
    assert len(set(mixed)) == len(mixed)
    assert all(text.startswith("general") for text in mixed[10:])
    assert mix_texts(documents, general, share, seed=0) == mixed


def test_mix_is_bounded_by_the_general_text_and_refuses_a_bad_share():
    assert len(mix_texts(["a", "b"], ["c"], 0.1, seed=0)) == 3
    with pytest.raises(ValueError, match="documents_share"):
        mix_texts(["a"], ["b"], 0.0, seed=0)


def test_documents_are_written_one_per_line_with_their_record(tmp_path: Path):
    general = tmp_path / "general.txt"
    general.write_text("\n".join(f"general sentence {i}" for i in range(20)) + "\n")
    text = training_text(
        TextSource.DOCUMENTS,
        general_files=[general],
        documents=["first\ndocument  spread\tover lines", "second", "second"],
        revision=7,
        share=0.5,
        seed=0,
        out_dir=tmp_path / "text",
    )
    assert text.files == [tmp_path / "text" / TEXT_FILE]
    lines = read_text_file(text.files[0])
    assert lines[:2] == ["first document spread over lines", "second"]
    assert len(lines) == 4
    assert text.record == {
        "source": "documents",
        "corpus_revision": 7,
        "documents": 2,
        "general": 2,
        "documents_share": 0.5,
    }
    plain = training_text(
        TextSource.GENERAL,
        general_files=[general],
        documents=[],
        revision=0,
        share=0.5,
        seed=0,
        out_dir=tmp_path / "unused",
    )
    assert (plain.files, plain.record) == ([general], {"source": "general"})


async def _write_documents(url: str, env: OpsEnv) -> int:
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        store = DocumentStore(client, env.keys)
        documents = [NewDocument(f"caption-{i}", text, {}) for i, text in enumerate(CAPTIONS)]
        _, revision = await store.upsert(documents)
        return revision
    finally:
        await client.aclose()


@pytest.mark.slow
def test_a_retrain_job_trains_on_the_corpus_documents(ops_env: OpsEnv):
    settings = ops_env.settings
    revision = asyncio.run(_write_documents(settings.redis_url, ops_env))
    connection = Redis.from_url(settings.redis_url)
    queue = retrain_queue(connection, ops_env.keys)
    request = RetrainRequest(
        method="simcse",
        params=TINY_PARAMS,
        force=True,
        teachers=[],
        recipe="quick",
        text="documents",
        documents_share=0.5,
    )
    job = submit(queue, request, settings)
    ops_env.start_worker()

    def finished() -> dict | None:
        fetched = fetch(queue, job.id)
        status = fetched.get_status(refresh=True).value
        assert status not in ("failed", "stopped"), ops_env.log("worker")
        return fetched.return_value() if status == "finished" else None

    result = wait_until(finished, 600, "the documents job never finished")
    manifest = BundleStore(settings.bundle_store).manifest(result["version"])
    assert manifest.metrics["training_text"] == {
        "source": "documents",
        "corpus_revision": revision,
        "documents": len(CAPTIONS),
        "general": len(CAPTIONS),
        "documents_share": 0.5,
    }
    assert manifest.metrics["recipe"] == "quick"
    job_dir = BundleStore(settings.bundle_store).job_dir(job.id)
    assert not job_dir.exists() and not job_dir.with_name(f"{job_dir.name}-text").exists()
    connection.close()
