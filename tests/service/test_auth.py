"""The optional API key: Bearer, required by data routes only, declared in OpenAPI."""

import httpx
import pytest

from service.engine import Engine
from tests.service.conftest import API_KEY, Server, make_settings, serve

DATA_CALLS = [
    ("/encode", {"texts": ["x"]}),
    ("/similarity", {"pairs": [["x", "y"]]}),
    ("/v1/embeddings", {"input": "x"}),
    ("/rerank", {"query": "x", "texts": ["y"]}),
]


@pytest.mark.parametrize(("path", "payload"), DATA_CALLS)
@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong-key", f"Basic {API_KEY}", f"Bearer {API_KEY}x", "Bearer"]
)
def test_data_routes_refuse_a_missing_or_wrong_key(
    server: Server, path: str, payload: dict, authorization: str | None
):
    headers = {} if authorization is None else {"Authorization": authorization}
    with server.client() as http:
        response = http.post(path, json=payload, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert response.json()["error"] == {
        "message": "a valid API key is required (Authorization: Bearer)",
        "type": "unauthorized",
        "code": 401,
    }


@pytest.mark.parametrize(("path", "payload"), DATA_CALLS)
def test_data_routes_accept_the_key(client: httpx.Client, path: str, payload: dict):
    assert client.post(path, json=payload).status_code == 200


def test_public_routes_need_no_key(server: Server):
    with server.client() as http:
        for path in ("/health", "/ready", "/metrics", "/info", "/openapi.json", "/docs"):
            assert http.get(path).status_code == 200, path


def test_openapi_declares_bearer_on_data_routes_only(server: Server):
    with server.client() as http:
        schema = http.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    assert schema["paths"]["/encode"]["post"]["security"] == [{"ApiKey": []}]
    assert "401" in schema["paths"]["/encode"]["post"]["responses"]
    for path in ("/health", "/ready", "/metrics"):
        assert "security" not in schema["paths"][path]["get"]


def test_without_a_key_data_routes_are_open(tmp_path, engine: Engine):
    settings = make_settings(tmp_path, api_key=None)
    with serve(settings, loader=lambda _settings: engine) as open_server:
        open_server.wait_ready()
        with open_server.client() as http:
            assert http.post("/encode", json={"texts": ["x"]}).status_code == 200
            schema = http.get("/openapi.json").json()
    assert "ApiKey" not in schema["components"].get("securitySchemes", {})
    assert "security" not in schema["paths"]["/encode"]["post"]
