"""POST /search over real HTTP: Eq. 7 ordering, filters, limits, and a missing Redis."""

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from models.anchors import AnchorSet
from models.encoder import Encoder
from service.corpus.schemas import SearchResponse
from service.engine import Engine
from tests.conftest import served
from tests.service.conftest import AUTH, Server, fixed_engine, make_settings, serve
from tests.service.corpus_helpers import (
    api,
    corpus_server,
    eq7_reference,
    free_port,
    search_ids,
    sick_sentences,
)

QUERY = "A man is playing a musical instrument"


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return sick_sentences(60)


@pytest.fixture(scope="module")
def server(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory, sentences: list[str]
) -> Iterator[Server]:
    """60 SICK sentences; every fifth is tagged French, every other one of those `kept`."""
    with corpus_server(engine, tmp_path_factory.mktemp("search-var")) as running:
        documents = [
            {
                "id": f"s{i:02d}",
                "text": text,
                "metadata": {"lang": "fr" if i % 5 == 0 else "en", "kept": i % 10 == 0},
            }
            for i, text in enumerate(sentences)
        ]
        with api(running) as client:
            assert client.post("/documents", json={"documents": documents}).status_code == 200
        yield running


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with api(server) as http:
        yield http


def brute_force(
    encoder: Encoder,
    anchors: AnchorSet,
    texts: list[str],
    query: str,
    lambda_inf: float,
) -> np.ndarray:
    """Eq. 7 of the query against every text, computed offline from the definitions, against
    the anchor matrix as the API holds it, in the settings' format (tests/conftest.py served())."""
    docs, encoded = encoder.encode(texts), encoder.encode([query])  # (n, dim), (1, dim)
    return eq7_reference(served(anchors), docs, encoded, lambda_inf)


def test_search_reports_where_its_time_went(client: httpx.Client):
    response = client.post("/search", json={"query": QUERY, "top_k": 3})
    assert response.status_code == 200
    timings = dict(
        part.strip().split(";dur=") for part in response.headers["server-timing"].split(",")
    )
    assert set(timings) == {"encode", "index"}
    assert all(float(value) > 0 for value in timings.values())
    metrics = client.get("/metrics").text
    count = [
        line
        for line in metrics.splitlines()
        if line.startswith("rankserve_search_index_seconds_count")
    ]
    assert count and float(count[0].split()[-1]) >= 1


def test_the_body_is_the_declared_model(client: httpx.Client):
    """The route writes its model itself (service/model_json.py): the body is what OpenAPI
    declares, `lambda` by its alias, as FastAPI would have written it."""
    response = client.post("/search", json={"query": QUERY, "top_k": 3, "lambda": 0.5})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = SearchResponse.model_validate_json(response.content, strict=True, by_alias=True)
    assert len(body.hits) == 3
    assert body.lambda_ == 0.5
    assert set(response.json()) == {"hits", "lambda", "model_version", "revision"}


@pytest.mark.parametrize("lambda_", [0.1, 0.5, 1.0])
def test_search_over_all_candidates_equals_brute_force_eq7(
    client: httpx.Client,
    encoder: Encoder,
    anchors: AnchorSet,
    sentences: list[str],
    lambda_: float,
):
    body = client.post(
        "/search", json={"query": QUERY, "top_k": 10, "candidates": 100, "lambda": lambda_}
    ).json()
    reference = brute_force(encoder, anchors, sentences, QUERY, lambda_)
    scores = np.array([hit["score"] for hit in body["hits"]])
    # Tie-tolerant (faiss contrib.evaluation): the 10 best scores, each that of its document.
    np.testing.assert_allclose(scores, np.sort(reference)[::-1][:10], atol=1e-4)
    for hit in body["hits"]:
        assert hit["score"] == pytest.approx(reference[int(hit["id"][1:])], abs=1e-4)
        assert hit["text"] == sentences[int(hit["id"][1:])]
        expected = lambda_ * hit["rank"] + (1 - lambda_) * hit["cosine"]
        assert hit["score"] == pytest.approx(expected, abs=1e-5)
    assert body["lambda"] == lambda_
    assert body["revision"] >= len(sentences)


def test_filter_applies_before_the_cut_to_top_k(
    client: httpx.Client, encoder: Encoder, anchors: AnchorSet, sentences: list[str]
):
    french = [i for i in range(len(sentences)) if i % 5 == 0]
    hits = client.post(
        "/search",
        json={"query": QUERY, "top_k": 5, "candidates": 5, "filter": {"lang": "fr"}},
    ).json()["hits"]
    assert len(hits) == 5 and all(hit["metadata"]["lang"] == "fr" for hit in hits)
    reference = brute_force(encoder, anchors, sentences, QUERY, 0.1)
    best_french = sorted(french, key=lambda i: -reference[i])
    # 5 candidates from the 12 French documents by cosine, then Eq. 7: compare as sets of the
    # cosine-best five, which the index must have searched among French documents only.
    cosines = (encoder.encode([sentences[i] for i in french]) @ encoder.encode([QUERY])[0]).cpu()
    expected = {f"s{french[i]:02d}" for i in torch.argsort(cosines, descending=True)[:5]}
    assert {hit["id"] for hit in hits} == expected
    everything = search_ids(client, QUERY, top_k=100, filter={"lang": "fr"})
    assert everything == [f"s{i:02d}" for i in best_french]
    both = search_ids(client, QUERY, top_k=100, filter={"lang": "fr", "kept": True})
    assert sorted(both) == [f"s{i:02d}" for i in range(0, len(sentences), 10)]
    assert search_ids(client, QUERY, filter={"lang": "de"}) == []
    assert search_ids(client, QUERY, filter={"kept": 1}) == []  # JSON true is not 1


def test_deleted_documents_are_never_returned(client: httpx.Client, sentences: list[str]):
    client.post("/documents", json={"documents": [{"id": "gone", "text": QUERY}]})
    assert search_ids(client, QUERY, top_k=1) == ["gone"]
    assert client.delete("/documents/gone").status_code == 200
    assert "gone" not in search_ids(client, QUERY, top_k=100, candidates=1000)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"query": "q", "top_k": 0}, "top_k: Input should be greater than or equal to 1"),
        ({"query": "q", "top_k": 101}, "top_k: Input should be less than or equal to 100"),
        ({"query": "q", "candidates": 1001}, "candidates: Input should be less than or equal"),
        ({"query": "q", "lambda": 1.5}, "lambda: Input should be less than or equal to 1"),
        ({"query": ""}, "query: String should have at least 1 character"),
        ({"query": "q", "filter": {"a": [1]}}, "filter.a"),
        ({"query": "q", "filter": {f"k{i}": 1 for i in range(17)}}, "at most 16 items"),
        ({"query": "q", "top": 3}, "top: Extra inputs are not permitted"),
        ({"top_k": 3}, "query: Field required"),
    ],
)
def test_invalid_searches_are_422(client: httpx.Client, payload: dict, message: str):
    response = client.post("/search", json=payload)
    assert response.status_code == 422
    assert message in response.json()["error"]["message"]


@pytest.mark.slow
def test_ivf_index_from_settings(engine: Engine, tmp_path: Path):
    """search_index=ivf trains once 39 * nlist documents exist; filters still fill top_k."""
    with (
        corpus_server(engine, tmp_path, search_index="ivf", ivf_nlist=2, ivf_nprobe=1) as running,
        api(running) as client,
    ):
        documents = [
            {"id": f"n{i:03d}", "text": f"Note {i}: the {i % 7}th river", "metadata": {"m": i % 3}}
            for i in range(80)
        ]
        assert client.post("/documents", json={"documents": documents}).status_code == 200
        assert running.app.state.corpus.state.index.kind == "ivf"
        hits = search_ids(client, "Note 5: the 5th river", top_k=20, filter={"m": 2})
        assert len(hits) == 20 and all(int(h[1:]) % 3 == 2 for h in hits)
        assert hits[0] == "n005"


def test_without_redis_the_corpus_routes_are_503_and_the_rest_serves(
    engine: Engine, tmp_path: Path
):
    settings = make_settings(tmp_path, redis_url=f"redis://127.0.0.1:{free_port()}/0")
    with (
        serve(settings, loader=fixed_engine(engine)) as running,
        running.client(headers=AUTH) as client,
    ):
        assert client.post("/encode", json={"texts": ["still works"]}).status_code == 200
        ready = client.get("/ready")
        assert ready.status_code == 503
        assert "document index" in ready.json()["error"]["message"]
        search = client.post("/search", json={"query": "q"})
        assert search.status_code == 503
        assert search.json()["error"]["type"] == "not_ready"
        write = client.post("/documents", json={"documents": [{"text": "t"}]})
        assert write.status_code == 503
        assert write.json()["error"]["type"] == "store_unavailable"
        assert client.get("/documents/x").json()["error"]["type"] == "store_unavailable"
