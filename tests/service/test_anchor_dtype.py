"""RANKSERVE_ANCHOR_DTYPE=bfloat16 or int8 (the default): the API holds the anchor matrix in
that format, and every score, searched or paired, is Eq. 7 against that matrix's values."""

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from models.anchor_formats import hold
from models.ranking import blend
from service.engine import Engine
from tests.polling import wait_until
from tests.service.conftest import Server
from tests.service.corpus_helpers import api, corpus_server, served_eq7, sick_sentences
from tests.service.test_search import QUERY
from tests.service.test_search_ranks import rank_store_size


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return sick_sentences(40)


@pytest.fixture(scope="module", params=["bfloat16", "int8"])
def anchor_format(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def server(
    engine: Engine,
    tmp_path_factory: pytest.TempPathFactory,
    sentences: list[str],
    anchor_format: str,
) -> Iterator[Server]:
    var_dir = tmp_path_factory.mktemp(f"{anchor_format}-var")
    with corpus_server(
        engine, var_dir, precomputed_ranks="8bit", anchor_dtype=anchor_format
    ) as running:
        documents = [{"id": f"s{i:02d}", "text": text} for i, text in enumerate(sentences)]
        with api(running) as client:
            assert client.post("/documents", json={"documents": documents}).status_code == 200
        yield running


def test_the_live_engine_holds_its_anchors_in_that_format(
    server: Server, engine: Engine, anchor_format: str
) -> None:
    live = server.services.holder.current
    assert live.anchors.embeddings.dtype == torch.bfloat16  # int8's grid too, exactly
    assert torch.equal(live.anchors.embeddings, hold(engine.anchors.embeddings, anchor_format))
    assert live.anchors.key != engine.anchors.key  # rank stores are not shared across formats


def test_search_scores_are_eq7_against_the_held_anchors(
    server: Server, engine: Engine, sentences: list[str], anchor_format: str
) -> None:
    wait_until(lambda: rank_store_size(server) == len(sentences))
    with api(server) as client:
        body = client.post(
            "/search", json={"query": QUERY, "top_k": 10, "candidates": 100, "lambda": 1.0}
        ).json()
    anchors = engine.anchors.stored_as(anchor_format)
    reference = served_eq7(server, anchors, len(sentences), QUERY, 1.0)
    scores = np.array([hit["score"] for hit in body["hits"]])
    np.testing.assert_allclose(scores, np.sort(reference)[::-1][:10], atol=1e-5)


def test_similarity_is_eq7_against_the_held_anchors(
    server: Server, engine: Engine, anchor_format: str
) -> None:
    pair = ["A man is playing a guitar.", "A person plays an instrument."]
    with api(server) as client:
        body = client.post("/similarity", json={"pairs": [pair], "lambda": 0.5}).json()
    embeddings = engine.encoder.encode(pair)  # (2, dim)
    ranks = engine.anchors.stored_as(anchor_format).rank_vectors(embeddings)  # (2, m)
    expected = blend(embeddings[0] @ embeddings[1], ranks[0] @ ranks[1], 0.5)
    assert body["scores"][0]["score"] == pytest.approx(float(expected), abs=1e-5)
    fp32 = engine.anchors.rank_vectors(embeddings)
    assert body["scores"][0]["rank"] == pytest.approx(float(fp32[0] @ fp32[1]), abs=2e-3)
