"""Limits and bad input: each case's status, error type and fixed message, over real HTTP."""

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.service.conftest import Server

JSON = {"content-type": "application/json"}
TOO_LARGE = "request body is larger than the limit of 2097152 bytes"


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "code"}
    assert body["error"]["code"] == response.status_code
    return body["error"]


@pytest.mark.parametrize(
    ("path", "raw", "message"),
    [
        (
            "/encode",
            json.dumps({"texts": ["a"] * 257}).encode(),
            "texts: List should have at most 256 items after validation, not 257",
        ),
        (
            "/encode",
            json.dumps({"texts": ["a" * 10_001]}).encode(),
            "texts[0]: String should have at most 10000 characters",
        ),
        (
            "/encode",
            b'{"texts": []}',
            "texts: List should have at least 1 item after validation, not 0",
        ),
        ("/encode", b'{"texts": ["caf\xe9"]}', "invalid JSON body: body is not valid UTF-8"),
        (
            "/encode",
            b'{"texts": ["\\ud800 alone"]}',
            "invalid JSON body: unpaired UTF-16 surrogate escape in a string",
        ),
        (
            "/encode",
            b'{"texts": ["trailing \\udfff"]}',
            "invalid JSON body: unpaired UTF-16 surrogate escape in a string",
        ),
        ("/encode", b'{"texts": [NaN]}', "invalid JSON body: NaN is not a valid JSON number"),
        ("/encode", b'{"texts": "one string"}', "texts: Input should be a valid list"),
        ("/encode", b'{"texts": [1, "b"]}', "texts[0]: Input should be a valid string"),
        (
            "/encode",
            b'{"text": ["a"]}',
            "texts: Field required; text: Extra inputs are not permitted",
        ),
        ("/encode", b'{"texts": ["a"], "normalize": false}', "normalize: Input should be True"),
        ("/encode", b'{"texts": ["a"', "invalid JSON body: Expecting ',' delimiter"),
        (
            "/similarity",
            b'{"pairs": [["a", "b"]], "lambda": Infinity}',
            "invalid JSON body: Infinity is not a valid JSON number",
        ),
        (
            "/similarity",
            b'{"pairs": [["a", "b"]], "lambda": -Infinity}',
            "invalid JSON body: -Infinity is not a valid JSON number",
        ),
        (
            "/similarity",
            b'{"pairs": [["a", "b"]], "lambda": 1.5}',
            "lambda: Input should be less than or equal to 1",
        ),
        (
            "/similarity",
            b'{"pairs": [["a", "b"]], "lambda": "x"}',
            "lambda: Input should be a valid number",
        ),
        (
            "/similarity",
            b'{"pairs": [["a", "b", "c"]]}',
            "pairs[0]: List should have at most 2 items after validation, not 3",
        ),
        (
            "/similarity",
            json.dumps({"pairs": [["a", "b"]] * 129}).encode(),
            "pairs: List should have at most 128 items after validation, not 129",
        ),
        (
            "/similarity",
            json.dumps({"source": "a", "targets": ["b"] * 256}).encode(),
            "targets: List should have at most 255 items after validation, not 256",
        ),
        ("/similarity", b'{"source": "a"}', "targets: Field required"),
        (
            "/v1/embeddings",
            b'{"input": []}',
            "input: List should have at least 1 item after validation, not 0",
        ),
        (
            "/v1/embeddings",
            b'{"input": "x", "encoding_format": "int8"}',
            "encoding_format: Input should be 'float' or 'base64'",
        ),
        (
            "/v1/embeddings",
            b'{"input": "x", "dimensions": 128}',
            "dimensions: Extra inputs are not permitted",
        ),
    ],
)
def test_bad_input_is_422_with_a_fixed_message(
    client: httpx.Client, path: str, raw: bytes, message: str
):
    response = client.post(path, content=raw, headers=JSON)
    assert response.status_code == 422
    error = error_of(response)
    assert error["type"] == "invalid_request"
    assert error["message"].startswith(message)


def test_a_valid_surrogate_pair_is_accepted(client: httpx.Client):
    escaped = client.post("/encode", content=b'{"texts": ["smile \\ud83d\\ude00"]}', headers=JSON)
    literal = client.post("/encode", json={"texts": ["smile 😀"]})
    assert escaped.status_code == 200
    assert escaped.json()["embeddings"] == literal.json()["embeddings"]


def test_declared_body_over_the_limit_is_413(client: httpx.Client):
    response = client.post("/encode", content=b" " * (2 * 1024 * 1024 + 1), headers=JSON)
    assert response.status_code == 413
    assert error_of(response) == {"message": TOO_LARGE, "type": "payload_too_large", "code": 413}


def test_chunked_body_over_the_limit_is_413(client: httpx.Client):
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(40):  # 40 x 64 KiB = 2.5 MiB, with no Content-Length
            sent += 1
            yield b" " * 65_536

    response = client.post("/encode", content=chunks(), headers=JSON)
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert response.status_code == 413
    assert error_of(response)["message"] == TOO_LARGE


def test_body_just_under_the_limit_passes_the_middleware(client: httpx.Client):
    texts = ["word " * 1_600] * 256  # 8,000 characters each: 2,048,000+ bytes of JSON
    raw = json.dumps({"texts": texts, "unknown": 1}).encode()
    assert 2_000_000 < len(raw) <= 2 * 1024 * 1024
    response = client.post("/encode", content=raw, headers=JSON)
    assert response.status_code == 422  # validated, so not cut off by the size limit
    assert error_of(response)["message"] == "unknown: Extra inputs are not permitted"


def test_unknown_path_is_404(client: httpx.Client):
    missing = client.get("/nothing-here")
    assert missing.status_code == 404
    assert error_of(missing) == {"message": "Not Found", "type": "not_found", "code": 404}


def test_wrong_method_is_405_allowing_every_method_of_the_path(client: httpx.Client):
    paths = client.get("/openapi.json").json()["paths"]
    for path, operations in paths.items():
        concrete = path.replace("{", "").replace("}", "")  # any value fills a path parameter
        response = client.request("OPTIONS", concrete)
        assert response.status_code == 405, path
        assert error_of(response)["type"] == "method_not_allowed"
        allowed = set(response.headers["Allow"].split(", "))
        assert {method.upper() for method in operations} <= allowed, path


def test_every_response_names_the_model_version(server: Server, client: httpx.Client):
    version = client.get("/ready").json()["model_version"]
    for response in (
        client.get("/health"),
        client.get("/metrics"),
        client.get("/nothing-here"),
        client.post("/encode", content=b"{", headers=JSON),
        client.post("/encode", content=b" " * (3 * 1024 * 1024), headers=JSON),
    ):
        assert response.headers["X-Model-Version"] == version
