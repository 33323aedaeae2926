"""POST /encode over real HTTP: the served vectors are the encoder's, in order, flagged."""

import math

import httpx
import torch

from core.loading import default_version
from models.encoder import Encoder
from service.schemas import EncodeResponse


def test_embeddings_equal_the_in_process_encoder(client: httpx.Client, encoder: Encoder):
    texts = ["A man is playing a guitar.", "", "Ein Mann spielt Gitarre 🎸", "   "]
    response = client.post("/encode", json={"texts": texts, "normalize": True})
    assert response.status_code == 200
    body = response.json()
    # Written by orjson, not through the route's model (service/vector_json.py): still that model.
    EncodeResponse.model_validate(body, strict=True)
    served = torch.tensor(body["embeddings"])  # (4, dim)
    assert served.shape == (len(texts), encoder.dim)
    assert body["dim"] == encoder.dim
    assert torch.allclose(served, encoder.encode(texts).cpu(), atol=1e-5)
    assert body["model_version"] == default_version(encoder)
    assert response.headers["X-Model-Version"] == body["model_version"]


def test_empty_string_has_a_finite_unit_embedding(client: httpx.Client):
    body = client.post("/encode", json={"texts": [""]}).json()
    vector = body["embeddings"][0]
    assert all(math.isfinite(x) for x in vector)
    assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-4)


def test_texts_past_the_token_limit_are_truncated_and_flagged(
    client: httpx.Client, encoder: Encoder
):
    long_text = "the quick brown fox jumps over the lazy dog " * 80  # ~720 tokens, 3.6k chars
    texts = ["short sentence", long_text]
    assert encoder.token_counts(texts)[1] > encoder.max_seq_length
    body = client.post("/encode", json={"texts": texts}).json()
    assert body["truncated"] == [False, True]
    # Truncation keeps the first max_seq_length tokens: the tail cannot change the vector.
    extended = client.post("/encode", json={"texts": [long_text + " completely different"]})
    assert torch.allclose(
        torch.tensor(extended.json()["embeddings"][0]),
        torch.tensor(body["embeddings"][1]),
        atol=1e-5,
    )
