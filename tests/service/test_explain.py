"""POST /similarity/explain: /similarity's scores, and the anchors nearest each text."""

import httpx
import pytest
import torch

from models.anchors import AnchorSet
from models.encoder import Encoder
from tests.conftest import served

SOURCE = "A man is playing a guitar."
TARGETS = ["Someone plays the guitar.", "The stock market fell sharply today."]


def test_scores_equal_similarity_and_anchors_are_the_nearest_by_cosine(
    client: httpx.Client, encoder: Encoder, anchors: AnchorSet
):
    body = {"source": SOURCE, "targets": TARGETS, "lambda": 0.5, "anchors": 4}
    response = client.post("/similarity/explain", json=body)
    assert response.status_code == 200, response.text
    explained = response.json()
    plain = client.post("/similarity", json={"source": SOURCE, "targets": TARGETS, "lambda": 0.5})
    for ours, theirs in zip(explained["targets"], plain.json()["scores"], strict=True):
        for field in ("score", "cosine", "rank", "truncated"):
            assert ours[field] == pytest.approx(theirs[field], abs=1e-6)
    assert explained["lambda"] == 0.5
    assert explained["anchor_count"] == anchors.count
    assert explained["model_version"] == response.headers["X-Model-Version"]

    # Brute force over the whole anchor matrix: the same anchors, texts and cosines, best first.
    embeddings = encoder.encode([SOURCE, *TARGETS])  # (3, dim)
    held = served(anchors).embeddings.float()  # the matrix as the API holds it
    cosines = embeddings.to(held.device) @ held.T  # (3, m)
    texts = [explained["source"], *explained["targets"]]
    for row, text in zip(cosines, texts, strict=True):
        expected = torch.topk(row, 4)
        listed = text["nearest_anchors"]
        assert [a["anchor"] for a in listed] == expected.indices.tolist()
        assert [a["text"] for a in listed] == [anchors.texts[i] for i in expected.indices]
        assert [a["cosine"] for a in listed] == pytest.approx(expected.values.tolist(), abs=1e-4)
    source = {a["anchor"] for a in explained["source"]["nearest_anchors"]}
    for target in explained["targets"]:
        listed = {a["anchor"] for a in target["nearest_anchors"]}
        assert target["shared_anchors"] == len(source & listed)


def test_a_text_against_itself_shares_every_anchor(client: httpx.Client):
    explained = client.post(
        "/similarity/explain", json={"source": SOURCE, "targets": [SOURCE]}
    ).json()
    (target,) = explained["targets"]
    assert len(target["nearest_anchors"]) == 5  # the default
    assert target["shared_anchors"] == 5
    assert target["rank"] == pytest.approx(1.0, abs=1e-5)
    assert target["nearest_anchors"] == explained["source"]["nearest_anchors"]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"source": "a", "targets": ["b"], "anchors": 0}, "anchors: Input should be greater"),
        ({"source": "a", "targets": ["b"], "anchors": 21}, "anchors: Input should be less"),
        ({"source": "a", "targets": ["b"], "anchors": True}, "Input should be a valid integer"),
        ({"source": "a", "targets": ["b"] * 33}, "targets: List should have at most 32 items"),
        ({"source": "a", "targets": []}, "targets: List should have at least 1 item"),
        ({"source": "a", "targets": ["b"], "pairs": [["a", "b"]]}, "pairs: Extra inputs"),
    ],
)
def test_invalid_requests_are_422(client: httpx.Client, payload: dict, message: str):
    response = client.post("/similarity/explain", json=payload)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "invalid_request"
    assert message in error["message"]


def test_the_api_key_is_required(server):
    with server.client() as anonymous:
        response = anonymous.post("/similarity/explain", json={"source": "a", "targets": ["b"]})
    assert response.status_code == 401
