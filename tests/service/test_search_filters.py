"""POST /search with Qdrant filters and `offset`, over real HTTP: the hits are exactly the
documents the reference semantics select, a filter never returns fewer than
min(top_k, matches), pages concatenate to one longer search, and mistakes are 422s."""

import random
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from service.engine import Engine
from tests.service.conftest import Server
from tests.service.corpus_helpers import api, corpus_server, search_ids, sick_sentences
from tests.service.filter_reference import KEYS, filters, reference

QUERY = "A man is playing a musical instrument"
POOL = [None, True, False, 0, 1, 1.0, 2, 2.5, -1, "x", "y", "1", ""]


def random_metadata(rng: random.Random) -> dict:
    """Keys of the reference's strategies: scalars, arrays (empty ones too) or absent."""
    metadata = {}
    for key in KEYS:
        shape = rng.random()
        if shape < 0.25:
            continue
        if shape < 0.45:
            metadata[key] = [rng.choice(POOL) for _ in range(rng.randint(0, 3))]
        else:
            metadata[key] = rng.choice(POOL)
    return metadata


@pytest.fixture(scope="module")
def corpus(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    rng = random.Random(20240611)
    documents = [
        {"id": f"d{i:02d}", "text": text, "metadata": random_metadata(rng)}
        for i, text in enumerate(sick_sentences(80))
    ]
    with corpus_server(engine, tmp_path_factory.mktemp("filters-var")) as running:
        with api(running) as client:
            assert client.post("/documents", json={"documents": documents}).status_code == 200
        yield running, {d["id"]: d["metadata"] for d in documents}


@pytest.fixture
def client(corpus: tuple[Server, dict]) -> Iterator[httpx.Client]:
    with api(corpus[0]) as http:
        yield http


def test_metadata_arrays_are_stored_and_returned(client: httpx.Client, corpus: tuple):
    stored = corpus[1]
    with_array = next(
        i for i, metadata in stored.items() if any(isinstance(v, list) for v in metadata.values())
    )
    assert client.get(f"/documents/{with_array}").json()["metadata"] == stored[with_array]


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(body_filter=filters)
def test_filtered_hits_are_the_reference_matches(
    client: httpx.Client, corpus: tuple, body_filter: dict
):
    stored = corpus[1]
    expected = {i for i, metadata in stored.items() if reference(body_filter, metadata)}
    # top_k over the corpus size: every match is a hit, and nothing else is.
    assert set(search_ids(client, QUERY, top_k=100, filter=body_filter)) == expected
    # A filter is applied inside the candidate search: 5 candidates still give
    # min(5, matches) hits, all matching.
    few = search_ids(client, QUERY, top_k=5, candidates=5, filter=body_filter)
    assert len(few) == min(5, len(expected)) and set(few) <= expected


@pytest.mark.parametrize(
    "body_filter",
    [
        None,
        {"must_not": {"is_empty": {"key": "a"}}},
        {"should": [{"key": "b", "range": {"gte": 0}}, {"key": "c", "match": {"any": ["x", "y"]}}]},
    ],
)
def test_pages_concatenate_to_one_longer_search(client: httpx.Client, body_filter: dict | None):
    def hits(**body: object) -> list[tuple[str, float]]:
        response = client.post("/search", json={"query": QUERY, "filter": body_filter, **body})
        assert response.status_code == 200, response.text
        return [(hit["id"], hit["score"]) for hit in response.json()["hits"]]

    longer = hits(top_k=30)
    pages = [hits(top_k=10, offset=offset) for offset in (0, 10, 20)]
    assert [hit for page in pages for hit in page] == longer
    if len(longer) < 30:  # the filter matched fewer: the page after the last is empty
        assert hits(top_k=10, offset=len(longer)) == []


def test_an_offset_past_the_matches_is_an_empty_page(client: httpx.Client, corpus: tuple):
    matches = sum(
        reference({"must": {"key": "a", "match": {"value": "x"}}}, m) for m in corpus[1].values()
    )
    body = {"filter": {"must": {"key": "a", "match": {"value": "x"}}}, "top_k": 5}
    assert search_ids(client, QUERY, offset=matches, **body) == []
    assert len(search_ids(client, QUERY, offset=max(0, matches - 2), **body)) == min(2, matches)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"filter": {"must": [{"key": "year", "range": {"gte": "2020-01-01"}}]}},
            "filter.must[0]: Value error, condition on key 'year': range.gte: Input should be a "
            "valid number",
        ),
        (
            {"filter": {"should": {"key": "tags", "match": {"any": ["a", 2]}}}},
            "condition on key 'tags': match.any[1]",
        ),
        (
            {"filter": {"must": {"key": "tags", "match": {}}}},
            "condition on key 'tags': match.value",
        ),
        ({"filter": {"must_not": [{"key": "tags"}]}}, "condition on key 'tags': needs `match`"),
        ({"filter": {"must": [{"tags": "a"}]}}, "filter.must[0].tags: Extra inputs"),
        ({"offset": 1001}, "offset: Input should be less than or equal to 1000"),
        ({"offset": -1}, "offset: Input should be greater than or equal to 0"),
        ({"offset": "2"}, "offset: Value error, Input should be a valid integer"),
    ],
)
def test_malformed_filters_and_offsets_are_422_naming_the_key(
    client: httpx.Client, body: dict, message: str
):
    response = client.post("/search", json={"query": "q", **body})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "invalid_request" and message in error["message"]
