"""POST /rerank over real HTTP: TEI's and Cohere's request and response shapes, Eq. 7 order."""

import httpx
import pytest
import torch

from models.anchors import AnchorSet
from models.encoder import Encoder
from models.scoring import score_pairs
from tests.service.conftest import Server

QUERY = "A man is playing a guitar."
TEXTS = [
    "The stock market fell sharply today.",
    "Someone plays the guitar.",
    "",
    "A man plays an instrument on stage.",
    "Someone plays the guitar.",  # a duplicate: encoded once, listed twice
]
LONG = "word " * 400  # more tokens than MiniLM reads (256)


def test_tei_form_is_sorted_by_the_offline_eq7_score(
    client: httpx.Client, encoder: Encoder, anchors: AnchorSet
):
    response = client.post("/rerank", json={"query": QUERY, "texts": TEXTS})
    assert response.status_code == 200
    results = response.json()
    assert isinstance(results, list)
    expected = score_pairs(encoder, anchors, [(QUERY, text) for text in TEXTS])
    blended = expected.blended(0.1)
    assert sorted(item["index"] for item in results) == list(range(len(TEXTS)))
    scores = [item["score"] for item in results]
    assert scores == sorted(scores, reverse=True)
    for item in results:
        k = item["index"]
        assert set(item) == {"index", "score", "cosine", "rank", "truncated"}  # no text
        assert item["score"] == pytest.approx(blended[k].item(), abs=1e-3)
        assert item["cosine"] == pytest.approx(expected.cosine[k].item(), abs=1e-4)
        assert item["rank"] == pytest.approx(expected.rank[k].item(), abs=1e-3)
        assert item["truncated"] is False
    # The guitar paraphrases lead; the duplicates tie and keep their input order.
    assert [item["index"] for item in results[:2]] == [1, 4]
    assert results[-1]["index"] in (0, 2)


def test_tei_return_text_and_flags_accepted(client: httpx.Client):
    body = {
        "query": QUERY,
        "texts": TEXTS[:2],
        "return_text": True,
        "raw_scores": True,
        "truncate": True,
    }
    results = client.post("/rerank", json=body).json()
    assert [item["text"] for item in results] == [TEXTS[1], TEXTS[0]]


def test_cohere_form_with_strings_and_objects(client: httpx.Client):
    tei = client.post("/rerank", json={"query": QUERY, "texts": TEXTS}).json()
    documents = [text if k % 2 else {"text": text} for k, text in enumerate(TEXTS)]
    response = client.post(
        "/rerank",
        json={
            "query": QUERY,
            "documents": documents,
            "top_n": 3,
            "return_documents": True,
            "model": "my-reranker",
        },
    )
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"id", "results", "model", "lambda", "model_version"}
    assert body["id"] == response.headers["X-Request-Id"]
    assert body["model"] == "my-reranker"
    assert body["lambda"] == pytest.approx(0.1)
    assert body["model_version"] == response.headers["X-Model-Version"]
    assert len(body["results"]) == 3
    for ours, theirs in zip(body["results"], tei[:3], strict=True):
        assert ours["index"] == theirs["index"]
        assert ours["relevance_score"] == pytest.approx(theirs["score"], abs=1e-5)
        assert ours["document"] == {"text": TEXTS[ours["index"]]}
        assert {"cosine", "rank", "truncated"} <= set(ours)


def test_cohere_defaults_return_every_result_without_documents(client: httpx.Client):
    body = client.post("/rerank", json={"query": QUERY, "documents": TEXTS[:3]}).json()
    assert len(body["results"]) == 3
    assert all("document" not in item for item in body["results"])
    # top_n past the number of documents returns them all, as Cohere does.
    capped = client.post("/rerank", json={"query": QUERY, "documents": TEXTS[:2], "top_n": 50})
    assert len(capped.json()["results"]) == 2


@pytest.mark.parametrize(("lambda_", "equals"), [(0.0, "cosine"), (1.0, "rank")])
def test_lambda_selects_the_blend(client: httpx.Client, lambda_: float, equals: str):
    results = client.post(
        "/rerank", json={"query": QUERY, "texts": TEXTS, "lambda": lambda_}
    ).json()
    for item in results:
        assert item["score"] == pytest.approx(item[equals], abs=1e-6)
    body = client.post(
        "/rerank", json={"query": QUERY, "documents": TEXTS, "lambda": lambda_}
    ).json()
    assert body["lambda"] == lambda_


def test_long_texts_are_cut_unless_truncate_is_false(client: httpx.Client, encoder: Encoder):
    cut = client.post("/rerank", json={"query": QUERY, "texts": ["short", LONG]})
    assert cut.status_code == 200
    assert {item["index"]: item["truncated"] for item in cut.json()} == {0: False, 1: True}
    refused = client.post(
        "/rerank", json={"query": QUERY, "texts": ["short", LONG], "truncate": False}
    )
    assert refused.status_code == 422
    tokens = encoder.token_counts([LONG])[0]
    assert refused.json()["error"] == {
        "message": f"texts[1]: {tokens} tokens, more than the {encoder.max_seq_length} the "
        "model reads; send truncate: true to have it cut instead",
        "type": "invalid_request",
        "code": 422,
    }
    query = client.post("/rerank", json={"query": LONG, "texts": ["a"], "truncate": False})
    assert query.json()["error"]["message"].startswith(f"query: {tokens} tokens")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"query": "q", "texts": ["a"], "documents": ["b"]}, "documents: Extra inputs"),
        ({"query": "q"}, "documents: Field required"),
        ({"query": "q", "texts": []}, "texts: List should have at least 1 item"),
        ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n: Input should be greater"),
        ({"query": "q", "documents": [{"text": "a", "title": "t"}]}, "documents[0].title"),
        ({"query": "q", "documents": [{"txt": "a"}]}, "documents[0].text: Field required"),
        ({"query": "q", "texts": ["a"], "top_n": 1}, "top_n: Extra inputs"),
        ({"query": "q", "texts": ["a"], "return_text": "yes"}, "return_text: Input should be"),
        ({"query": "q", "texts": ["a" * 10_001]}, "texts[0]: String should have at most 10000"),
    ],
)
def test_invalid_rerank_requests_are_422(client: httpx.Client, body: dict, message: str):
    response = client.post("/rerank", json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "invalid_request"
    assert message in error["message"]


def test_the_limit_is_published_and_enforced(server: Server, client: httpx.Client):
    limit = client.get("/info").json()["limits"]["max_rerank_texts"]
    assert limit == server.services.settings.max_texts_per_request - 1
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    assert schema["TeiRerankRequest"]["properties"]["texts"]["maxItems"] == limit
    assert schema["CohereRerankRequest"]["properties"]["documents"]["maxItems"] == limit
    response = client.post("/rerank", json={"query": "q", "documents": ["d"] * (limit + 1)})
    assert response.status_code == 422
    assert response.json()["error"]["message"].startswith("documents: List should have at most")
    assert str(limit) in response.json()["error"]["message"]


def test_rerank_needs_the_api_key(server: Server):
    with server.client() as anonymous:
        response = anonymous.post("/rerank", json={"query": "q", "texts": ["a"]})
    assert response.status_code == 401


def test_scores_do_not_depend_on_batch_neighbours(client: httpx.Client):
    alone = client.post("/rerank", json={"query": QUERY, "texts": [TEXTS[1]]}).json()[0]
    among = client.post("/rerank", json={"query": QUERY, "texts": TEXTS}).json()
    same = next(item for item in among if item["index"] == 1)
    assert torch.isclose(torch.tensor(alone["score"]), torch.tensor(same["score"]), atol=1e-4)
