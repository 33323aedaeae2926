"""POST /similarity: Eq. 7 against the anchor matrix, equal to the offline scorer."""

import httpx
import pytest
import torch

from models.anchors import AnchorSet
from models.encoder import Encoder
from models.scoring import score_pairs
from tests.conftest import served as served_anchors

PAIRS = [
    ("A man is playing a guitar.", "Someone plays the guitar."),
    ("A man is playing a guitar.", "The stock market fell sharply today."),
    ("", "An empty sentence meets a full one."),
]


def test_pairs_match_the_offline_scorer(client: httpx.Client, encoder: Encoder, anchors: AnchorSet):
    response = client.post("/similarity", json={"pairs": [list(p) for p in PAIRS]})
    assert response.status_code == 200
    body = response.json()
    expected = score_pairs(encoder, served_anchors(anchors), PAIRS)
    assert body["lambda"] == pytest.approx(0.1)
    assert response.headers["X-Model-Version"] == body["model_version"]
    served = {
        key: torch.tensor([item[key] for item in body["scores"]]) for key in body["scores"][0]
    }
    assert torch.allclose(served["cosine"], expected.cosine.cpu(), atol=1e-4)
    assert torch.allclose(served["rank"], expected.rank.cpu(), atol=1e-3)
    assert torch.allclose(served["score"], expected.blended(0.1).cpu(), atol=1e-3)
    assert served["score"][0] > served["score"][1]
    assert [item["truncated"] for item in body["scores"]] == [False, False, False]


def test_source_and_targets_equal_the_same_pairs(client: httpx.Client):
    source, targets = PAIRS[0][0], [PAIRS[0][1], PAIRS[1][1]]
    one_to_many = client.post("/similarity", json={"source": source, "targets": targets}).json()
    pairs = client.post("/similarity", json={"pairs": [[source, t] for t in targets]}).json()
    for a, b in zip(one_to_many["scores"], pairs["scores"], strict=True):
        assert a["score"] == pytest.approx(b["score"], abs=1e-5)


@pytest.mark.parametrize(("lambda_", "equals"), [(0.0, "cosine"), (1.0, "rank")])
def test_lambda_selects_the_blend(client: httpx.Client, lambda_: float, equals: str):
    body = client.post(
        "/similarity", json={"pairs": [list(PAIRS[0]), list(PAIRS[1])], "lambda": lambda_}
    ).json()
    assert body["lambda"] == lambda_
    for item in body["scores"]:
        assert item["score"] == pytest.approx(item[equals], abs=1e-6)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (
            {"pairs": [["a", "b"]], "lambda": 1.5},
            "lambda: Input should be less than or equal to 1",
        ),
        (
            {"pairs": [["a", "b", "c"]]},
            "pairs[0]: List should have at most 2 items after validation, not 3",
        ),
    ],
)
def test_invalid_similarity_requests_are_422(client: httpx.Client, payload: dict, message: str):
    response = client.post("/similarity", json=payload)
    assert response.status_code == 422
    assert response.json()["error"]["type"] == "invalid_request"
    assert message in response.json()["error"]["message"]


def test_both_forms_at_once_are_rejected(client: httpx.Client):
    response = client.post(
        "/similarity", json={"pairs": [["a", "b"]], "source": "a", "targets": ["b"]}
    )
    assert response.status_code == 422
    assert "Extra inputs are not permitted" in response.json()["error"]["message"]
