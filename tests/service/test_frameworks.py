"""LangChain's OpenAIEmbeddings and LlamaIndex's OpenAILikeEmbedding against the real server.

Both are the frameworks' own OpenAI classes, unchanged, pointed at /v1. Requests are recorded
by an httpx event hook, so the tests see what the frameworks actually send.
"""

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
import tiktoken
import torch
from langchain_openai import OpenAIEmbeddings
from llama_index.embeddings.openai_like import OpenAILikeEmbedding

from tests.service.conftest import API_KEY, AUTH, Server

# More than the old cap of 256 texts a request: frameworks send up to 1,000 (LangChain) or
# 2,048 (LlamaIndex's maximum embed_batch_size) at once.
TEXTS = [f"Sentence {i}: a cat sits on mat number {i}." for i in range(300)]
MODEL = "all-MiniLM-L6-v2"


@pytest.fixture
def sent() -> list[dict]:
    return []


def _recording(sent: list[dict]) -> dict:
    def record(request: httpx.Request) -> None:
        sent.append(json.loads(request.content))

    async def arecord(request: httpx.Request) -> None:
        record(request)

    return {
        "http_client": httpx.Client(event_hooks={"request": [record]}),
        "http_async_client": httpx.AsyncClient(event_hooks={"request": [arecord]}),
    }


@pytest.fixture
def encoded(server: Server) -> torch.Tensor:
    with server.client(headers=AUTH) as http:
        return torch.tensor(http.post("/encode", json={"texts": TEXTS}).json()["embeddings"])


@pytest.fixture
def byte_level_tiktoken(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """tiktoken downloads OpenAI's BPE files at run time, and this machine has no network: a
    byte-level encoding built here stands in, so LangChain tokenises and sends token ids
    exactly as it does with OpenAI's (only the id values differ)."""
    encoding = tiktoken.Encoding(
        name="bytes-for-tests",
        pat_str=r"\S+|\s+",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={},
    )
    monkeypatch.setattr(tiktoken, "encoding_for_model", lambda _name: encoding)
    yield


def test_langchain_default_sends_token_ids_and_learns_the_setting(
    server: Server, sent: list[dict], byte_level_tiktoken: None
):
    embeddings = OpenAIEmbeddings(
        model=MODEL,
        base_url=f"{server.url}/v1",
        api_key=API_KEY,
        http_client=_recording(sent)["http_client"],
    )
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        embeddings.embed_documents(TEXTS[:3])
    assert all(isinstance(token, int) for token in sent[-1]["input"][0])
    assert raised.value.status_code == 422
    assert "check_embedding_ctx_length=False" in raised.value.body["message"]


def test_langchain_with_text_input(server: Server, sent: list[dict], encoded: torch.Tensor):
    clients = _recording(sent)
    embeddings = OpenAIEmbeddings(
        model=MODEL,
        base_url=f"{server.url}/v1",
        api_key=API_KEY,
        check_embedding_ctx_length=False,
        **clients,
    )
    documents = torch.tensor(embeddings.embed_documents(TEXTS))
    assert torch.allclose(documents, encoded, atol=1e-5)
    # One request for all 300 texts (LangChain's chunk_size is 1,000), with their text.
    assert [len(body["input"]) for body in sent] == [len(TEXTS)]
    assert sent[0]["input"] == TEXTS
    query = torch.tensor(embeddings.embed_query(TEXTS[7]))
    assert torch.allclose(query, encoded[7], atol=1e-5)


async def test_langchain_async(server: Server, sent: list[dict], encoded: torch.Tensor):
    embeddings = OpenAIEmbeddings(
        model=MODEL,
        base_url=f"{server.url}/v1",
        api_key=API_KEY,
        check_embedding_ctx_length=False,
        **_recording(sent),
    )
    documents = torch.tensor(await embeddings.aembed_documents(TEXTS[:20]))
    assert torch.allclose(documents, encoded[:20], atol=1e-5)


def test_llamaindex_openai_like(server: Server, sent: list[dict], encoded: torch.Tensor):
    clients = _recording(sent)
    embed_model = OpenAILikeEmbedding(
        model_name=MODEL,
        api_base=f"{server.url}/v1",
        api_key=API_KEY,
        embed_batch_size=2048,  # LlamaIndex's maximum, our cap
        http_client=clients["http_client"],
        async_http_client=clients["http_async_client"],
    )
    documents = torch.tensor(embed_model.get_text_embedding_batch(TEXTS))
    assert torch.allclose(documents, encoded, atol=1e-5)
    assert [len(body["input"]) for body in sent] == [len(TEXTS)]
    query = torch.tensor(embed_model.get_query_embedding(TEXTS[3]))
    assert torch.allclose(query, encoded[3], atol=1e-5)


async def test_llamaindex_async(server: Server, sent: list[dict], encoded: torch.Tensor):
    clients = _recording(sent)
    embed_model = OpenAILikeEmbedding(
        model_name=MODEL,
        api_base=f"{server.url}/v1",
        api_key=API_KEY,
        http_client=clients["http_client"],
        async_http_client=clients["http_async_client"],
    )
    documents = torch.tensor(await embed_model.aget_text_embedding_batch(TEXTS[:25]))
    assert torch.allclose(documents, encoded[:25], atol=1e-5)
    # LlamaIndex's default embed_batch_size here is 10: three requests.
    assert [len(body["input"]) for body in sent] == [10, 10, 5]
