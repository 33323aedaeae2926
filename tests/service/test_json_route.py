"""StrictJSONRoute's lean handler (service/json_route.py): which routes take it, and that its
answers equal those of FastAPI's own handler, over real HTTP, for good requests and bad."""

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from fastapi import APIRouter, Body, Depends, Request, Response
from pydantic import BaseModel

from service.dependencies import get_batcher
from service.engine import Engine
from service.json_route import StrictJSONRoute
from service.routes import embeddings, encode, rerank, search, similarity
from tests.service.conftest import API_KEY, AUTH, Server, fixed_engine, make_settings, serve


class Texts(BaseModel):
    texts: list[str]


async def of_request(request: Request) -> str:
    return request.url.path


async def of_other(path: Annotated[str, Depends(of_request)]) -> str:
    return path.upper()


def sync_dependency(request: Request) -> str:
    return request.url.path


async def yielding(request: Request) -> AsyncIterator[str]:
    yield request.url.path


def lean(endpoint: Any) -> bool:
    router = APIRouter(route_class=StrictJSONRoute)
    router.post("/x")(endpoint)
    (route,) = router.routes
    assert isinstance(route, StrictJSONRoute)
    return route.is_lean


def test_a_body_model_async_dependencies_and_a_response_are_lean():
    async def endpoint(
        body: Texts, path: Annotated[str, Depends(of_other)], request: Request
    ) -> Response:
        return Response(path)

    assert lean(endpoint)


def test_anything_else_is_left_to_fastapi():
    async def query(body: Texts, limit: int = 3) -> Response:
        return Response()

    async def sync(body: Texts, path: Annotated[str, Depends(sync_dependency)]) -> Response:
        return Response()

    async def generator(body: Texts, path: Annotated[str, Depends(yielding)]) -> Response:
        return Response()

    async def model(body: Texts) -> Texts:
        return body

    async def embedded(body: Annotated[Texts, Body(embed=True)]) -> Response:
        return Response()

    async def two_bodies(body: Texts, other: Texts) -> Response:
        return Response()

    def sync_endpoint(body: Texts) -> Response:
        return Response()

    for endpoint in (query, sync, generator, model, embedded, two_bodies, sync_endpoint):
        assert not lean(endpoint), endpoint.__name__


@pytest.mark.parametrize("api_key", [None, API_KEY])
def test_the_service_routes_that_are_lean(tmp_path: Path, api_key: str | None):
    """/encode, /v1/embeddings and /search write their own response; the others return models,
    which FastAPI validates and writes."""
    settings = make_settings(tmp_path, api_key=api_key)
    routes = {
        route.path: route.is_lean
        for module in (encode, embeddings, search, similarity, rerank)
        for route in module.build_router(settings).routes
        if isinstance(route, StrictJSONRoute)
    }
    assert routes == {
        "/encode": True,
        "/v1/embeddings": True,
        "/search": True,
        "/similarity": False,
        "/similarity/explain": False,
        "/rerank": False,
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, engine: Engine) -> Iterator[Server]:
    with serve(make_settings(tmp_path_factory.mktemp("var")), loader=fixed_engine(engine)) as s:
        s.wait_ready()
        yield s


JSON = "application/json"
# (path, body, content type, with the API key): what clients send, well and badly.
REQUESTS = [
    ("/encode", b'{"texts": ["a man plays the guitar", "x"]}', JSON, True),
    ("/encode", b'{"texts": ["a"]}', "Application/JSON; charset=utf-8", True),
    ("/encode", b'{"texts": ["a"]}', "text/plain", True),
    ("/encode", b'{"texts": ["a"]}', None, True),
    ("/encode", b"", JSON, True),
    ("/encode", b'{"texts": ["a"', JSON, True),
    ("/encode", b'{"texts": ["a"], "texts": ["b"]}', JSON, True),
    ("/encode", b'{"texts": [NaN]}', JSON, True),
    ("/encode", b'{"texts": 5}', JSON, True),
    ("/encode", b'{"texts": []}', JSON, True),
    ("/encode", b'{"texts": ["a"], "extra": 1}', JSON, True),
    ("/encode", b"[1, 2]", JSON, True),
    ("/encode", b'{"texts": ["\xff"]}', JSON, True),
    ("/encode", b'{"texts": ["a"]}', JSON, False),
    ("/encode", b'{"texts": 5}', JSON, False),
    ("/v1/embeddings", b'{"input": "a man plays the guitar"}', JSON, True),
    ("/v1/embeddings", b'{"input": "a", "encoding_format": "base64"}', JSON, True),
    ("/v1/embeddings", b'{"input": []}', JSON, True),
    ("/v1/embeddings", b'{"input": "a", "dimensions": 7}', JSON, True),
    ("/search", b'{"query": "a man plays the guitar", "top_k": 3}', JSON, True),
    ("/search", b'{"query": "a", "lambda": 2}', JSON, True),
    ("/search", b'{"query": 5}', JSON, True),
]


def answer(
    server: Server, path: str, body: bytes, content_type: str | None, keyed: bool
) -> tuple[int, Any]:
    headers = dict(AUTH) if keyed else {}
    if content_type is not None:
        headers["content-type"] = content_type
    with server.client() as http:
        response = http.post(path, content=body, headers=headers)
    assert response.headers["content-type"] == "application/json"
    return response.status_code, response.json()


@pytest.mark.parametrize(("path", "body", "content_type", "keyed"), REQUESTS)
def test_answers_equal_fastapis_own(
    server: Server, path: str, body: bytes, content_type: str | None, keyed: bool
):
    lean_answer = answer(server, path, body, content_type, keyed)
    # Any dependency override sends every request to FastAPI's own handler; this one changes
    # nothing else.
    server.app.dependency_overrides[get_batcher] = get_batcher
    try:
        fastapi_answer = answer(server, path, body, content_type, keyed)
    finally:
        server.app.dependency_overrides.clear()
    assert lean_answer == fastapi_answer
