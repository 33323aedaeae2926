"""POST /v1/embeddings through the official `openai` client, pointed at the real server."""

import base64
import json
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest
import torch

from models.encoder import Encoder
from service.schemas import EmbeddingsResponse
from tests.service.conftest import API_KEY, Server

TEXTS = ["A man is playing a guitar.", "", "Der Himmel ist blau."]


@pytest.fixture
def sent() -> list[dict]:
    """JSON bodies the client sent, recorded by an httpx event hook."""
    return []


@pytest.fixture
def client(server: Server, sent: list[dict]) -> Iterator[openai.OpenAI]:
    def record(request: httpx.Request) -> None:
        sent.append(json.loads(request.content))

    http = httpx.Client(event_hooks={"request": [record]})
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, http_client=http) as oai:
        yield oai


@pytest.fixture
def encoded(server: Server) -> torch.Tensor:
    with server.client(headers={"Authorization": f"Bearer {API_KEY}"}) as http:
        return torch.tensor(http.post("/encode", json={"texts": TEXTS}).json()["embeddings"])


@pytest.mark.parametrize("encoding_format", ["float", "base64", None])
def test_official_client_gets_the_encode_vectors(
    client: openai.OpenAI,
    sent: list[dict],
    encoded: torch.Tensor,
    encoder: Encoder,
    encoding_format: str | None,
):
    kwargs = {} if encoding_format is None else {"encoding_format": encoding_format}
    result = client.embeddings.create(input=TEXTS, model="my-model-name", **kwargs)
    # Left unsaid, the official client asks for base64 and decodes it itself.
    assert sent[-1]["encoding_format"] == (encoding_format or "base64")
    if encoding_format == "base64":
        # Asked for explicitly, base64 reaches the caller undecoded: little-endian float32.
        rows = [
            np.frombuffer(base64.b64decode(item.embedding), dtype="<f4") for item in result.data
        ]
        vectors = torch.from_numpy(np.stack(rows))  # (3, dim)
    else:
        vectors = torch.tensor([item.embedding for item in result.data])  # (3, dim)
    assert torch.equal(vectors, encoded)
    assert [item.index for item in result.data] == [0, 1, 2]
    assert result.model == "my-model-name"
    tokens = sum(min(n, encoder.max_seq_length) for n in encoder.token_counts(TEXTS))
    assert result.usage.prompt_tokens == tokens
    assert result.usage.total_tokens == tokens


def test_a_single_string_input(client: openai.OpenAI, encoded: torch.Tensor):
    result = client.embeddings.create(input=TEXTS[0], model="x", encoding_format="float")
    assert len(result.data) == 1
    # Alone in its batch rather than padded beside others: equal up to float rounding.
    assert torch.allclose(torch.tensor(result.data[0].embedding), encoded[0], atol=1e-5)


@pytest.mark.parametrize("encoding_format", ["float", "base64"])
def test_the_body_is_the_declared_model(server: Server, encoding_format: str):
    # Written by orjson, not through the route's model (service/vector_json.py).
    with server.client(headers={"Authorization": f"Bearer {API_KEY}"}) as http:
        body = {"input": TEXTS, "model": "m", "encoding_format": encoding_format}
        response = http.post("/v1/embeddings", json=body)
    assert response.status_code == 200
    parsed = EmbeddingsResponse.model_validate(response.json(), strict=True)
    assert all(
        isinstance(item.embedding, list if encoding_format == "float" else str)
        for item in parsed.data
    )


def test_errors_reach_the_client_with_their_message(client: openai.OpenAI):
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        client.embeddings.create(input=[], model="x")
    assert raised.value.status_code == 422
    assert raised.value.body == {
        "message": "input: List should have at least 1 item after validation, not 0",
        "type": "invalid_request",
        "code": 422,
    }


@pytest.mark.parametrize("ids", [[101, 2023, 102], [[101, 2023], [102]]])
def test_token_id_inputs_are_refused_naming_the_setting(client: openai.OpenAI, ids: list):
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        client.embeddings.create(input=ids, model="x")
    assert raised.value.body["type"] == "invalid_request"
    message = raised.value.body["message"]
    assert message.startswith("input: token ids are not accepted, only strings")
    assert "check_embedding_ctx_length=False" in message


def test_a_request_of_2048_texts_is_served(client: openai.OpenAI, server: Server):
    # OpenAI's own cap, and what LangChain and LlamaIndex may send in one request.
    limit = server.services.settings.max_texts_per_request
    assert limit == 2048
    texts = [f"n{i}" for i in range(limit)]
    result = client.embeddings.create(input=texts, model="x", encoding_format="float")
    assert [item.index for item in result.data] == list(range(limit))
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        client.embeddings.create(input=[*texts, "one more"], model="x")
    assert "at most 2048 items" in raised.value.body["message"]


def test_wrong_key_is_401(server: Server):
    with (
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0) as oai,
        pytest.raises(openai.AuthenticationError),
    ):
        oai.embeddings.create(input="x", model="x")
