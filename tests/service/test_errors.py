"""Limits and bad input: each case's status, error type and message, over real HTTP.

Validation messages are checked by the fields they name, not by pydantic's wording.
"""

import json
from collections.abc import Iterator

import httpx
import pytest
from pydantic import TypeAdapter, ValidationError

from service.errors import validation_message
from service.limits import Limits
from service.routes.rerank_schemas import rerank_models
from service.schemas import request_models
from tests.service.conftest import Server

JSON = {"content-type": "application/json"}
# The defaults, which the test servers run with.
MAX_TEXTS = 2048
MAX_BODY = 16 * 1024 * 1024
TOO_LARGE = f"request body is larger than the limit of {MAX_BODY} bytes"


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "code"}
    assert body["error"]["code"] == response.status_code
    return body["error"]


def field_errors(message: str) -> list[tuple[str, str]]:
    """(field location, explanation) of each "; "-separated part of a validation message.

    The locations ("texts[0]") and the format are the service's own (service/errors.py); the
    explanations are pydantic's sentences, which change between releases: tests read only the
    values in them that come from the service (a limit, the allowed choices).
    """
    errors = []
    for part in message.split("; "):
        location, separator, explanation = part.partition(": ")
        assert separator and explanation.strip(), f"no 'field: explanation' in {message!r}"
        errors.append((location, explanation))
    return errors


LIMITS = Limits(max_texts_per_request=MAX_TEXTS, max_text_chars=10_000, max_body_bytes=MAX_BODY)
MODELS = request_models(LIMITS)
BODY_MODELS = {
    "/encode": MODELS.encode,
    "/similarity": MODELS.similarity,
    "/v1/embeddings": MODELS.embeddings,
    "/rerank": rerank_models(LIMITS).request,
}

# Body, then per failing field (location, pydantic's error type), then values the explanation
# must state (a limit, the allowed choices): pydantic's types are stable, its sentences are not.
INVALID_FIELDS = [
    ("/encode", {"texts": ["a"] * 2049}, [("texts", "too_long")], ["2048"]),
    ("/encode", {"texts": ["a" * 10_001]}, [("texts[0]", "string_too_long")], ["10000"]),
    ("/encode", {"texts": []}, [("texts", "too_short")], []),
    ("/encode", {"texts": "one string"}, [("texts", "list_type")], []),
    ("/encode", {"texts": [1, "b"]}, [("texts[0]", "string_type")], []),
    ("/encode", {"text": ["a"]}, [("texts", "missing"), ("text", "extra_forbidden")], []),
    ("/encode", {"texts": ["a"], "normalize": False}, [("normalize", "literal_error")], []),
    ("/similarity", {"pairs": [["a", "b"]], "lambda": 1.5}, [("lambda", "less_than_equal")], []),
    ("/similarity", {"pairs": [["a", "b"]], "lambda": "x"}, [("lambda", "float_type")], []),
    ("/similarity", {"pairs": [["a", "b", "c"]]}, [("pairs[0]", "too_long")], ["2"]),
    ("/similarity", {"pairs": [["a", "b"]] * 1025}, [("pairs", "too_long")], ["1024"]),
    ("/similarity", {"source": "a", "targets": ["b"] * 2048}, [("targets", "too_long")], ["2047"]),
    ("/similarity", {"source": "a"}, [("targets", "missing")], []),
    ("/v1/embeddings", {"input": []}, [("input", "too_short")], []),
    (
        "/v1/embeddings",
        {"input": "x", "encoding_format": "int8"},
        [("encoding_format", "literal_error")],
        ["float", "base64"],
    ),
    ("/v1/embeddings", {"input": "x", "dimensions": 128}, [("dimensions", "extra_forbidden")], []),
    (
        "/v1/embeddings",
        {"input": [[101, 2023], [102]]},
        [("input", "token_ids")],
        ["check_embedding_ctx_length=False"],
    ),
    ("/rerank", {"query": "q", "texts": ["a"] * 2048}, [("texts", "too_long")], ["2047"]),
    (
        "/rerank",
        {"query": "q", "documents": [{"text": 1}]},
        [("documents[0].text", "string_type")],
        [],
    ),
    ("/rerank", {"query": "q", "documents": ["a"], "top_n": True}, [("top_n", "value_error")], []),
    (
        "/rerank",
        {"texts": ["a"], "truncate": "no"},
        [("query", "missing"), ("truncate", "bool_type")],
        [],
    ),
]


@pytest.mark.parametrize(("path", "body", "failures", "facts"), INVALID_FIELDS)
def test_invalid_fields_are_422_naming_each_field(
    client: httpx.Client,
    path: str,
    body: dict,
    failures: list[tuple[str, str]],
    facts: list[str],
):
    response = client.post(path, content=json.dumps(body).encode(), headers=JSON)
    assert response.status_code == 422
    error = error_of(response)
    assert error["type"] == "invalid_request"
    errors = field_errors(error["message"])
    assert [location for location, _ in errors] == [location for location, _ in failures]
    for fact in facts:  # the limit or the choices the client must respect
        assert fact in errors[0][1], error["message"]


@pytest.mark.parametrize(("path", "body", "failures", "facts"), INVALID_FIELDS)
def test_each_field_fails_for_the_intended_reason(
    path: str, body: dict, failures: list[tuple[str, str]], facts: list[str]
):
    """The request models, in process: pydantic's error type per field, and the message the
    service builds from those errors names the same fields in the same order."""
    with pytest.raises(ValidationError) as raised:
        TypeAdapter(BODY_MODELS[path]).validate_json(json.dumps(body))
    errors = raised.value.errors()
    assert [error["type"] for error in errors] == [kind for _, kind in failures]
    message = validation_message(list(errors))
    assert [location for location, _ in field_errors(message)] == [loc for loc, _ in failures]


@pytest.mark.parametrize(
    ("path", "raw", "message"),
    [
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
    ],
)
def test_malformed_json_is_422_with_a_fixed_message(
    client: httpx.Client, path: str, raw: bytes, message: str
):
    """The service's own strict parser (service/limits.py) words these, and Python's json."""
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
    response = client.post("/encode", content=b" " * (MAX_BODY + 1), headers=JSON)
    assert response.status_code == 413
    assert error_of(response) == {"message": TOO_LARGE, "type": "payload_too_large", "code": 413}


def test_chunked_body_over_the_limit_is_413(client: httpx.Client):
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(MAX_BODY // 65_536 + 8):  # 64 KiB pieces past the limit, no length
            sent += 1
            yield b" " * 65_536

    response = client.post("/encode", content=chunks(), headers=JSON)
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert response.status_code == 413
    assert error_of(response)["message"] == TOO_LARGE


def test_body_just_under_the_limit_passes_the_middleware(client: httpx.Client):
    # A full request of texts of 8,000 characters each: 16,390,000+ bytes of JSON.
    texts = ["word " * 1_600] * MAX_TEXTS
    raw = json.dumps({"texts": texts, "unknown": 1}).encode()
    assert 16_000_000 < len(raw) <= MAX_BODY
    response = client.post("/encode", content=raw, headers=JSON)
    assert response.status_code == 422  # validated, so not cut off by the size limit
    assert [location for location, _ in field_errors(error_of(response)["message"])] == ["unknown"]


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
        client.post("/encode", content=b" " * (MAX_BODY + 1024 * 1024), headers=JSON),
    ):
        assert response.headers["X-Model-Version"] == version
