"""JSON a client sends that the API refuses as 422 `invalid_request`, named (issue 10): bodies
nested deeper than the published depth limit, and duplicate keys at any level, metadata
included. Over real HTTP, and the parser (core/strict_json.py) in process.
"""

import json
from collections.abc import Iterator

import httpx
import pytest

from core.strict_json import parse_strict_json
from service.engine import Engine
from tests.service.conftest import AUTH, Server, fixed_engine, make_settings, serve

JSON = {"content-type": "application/json"}
DEPTH = 32  # the default of RANKSERVE_MAX_JSON_DEPTH, which /info publishes


def nested(levels: int) -> bytes:
    """`{"texts": [[...]]}`: the object plus `levels - 1` arrays, `levels` levels in all."""
    return b'{"texts": ' + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, engine: Engine) -> Iterator[Server]:
    with serve(make_settings(tmp_path_factory.mktemp("var")), loader=fixed_engine(engine)) as s:
        s.wait_ready()
        yield s


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client(headers=AUTH) as http:
        yield http


def refusal(response: httpx.Response) -> str:
    assert response.status_code == 422, response.text[:300]
    body = response.json()
    assert body["error"]["type"] == "invalid_request"
    assert body["error"]["code"] == 422
    return body["error"]["message"]


def test_info_publishes_the_depth_limit(client: httpx.Client):
    assert client.get("/info").json()["limits"]["max_json_depth"] == DEPTH


@pytest.mark.parametrize("levels", [DEPTH + 1, 950, 5_000, 200_000])
def test_nesting_past_the_limit_is_422_naming_it(client: httpx.Client, levels: int):
    """950 levels was a 400 `http_error` before; far deeper, Python's parser itself gives up."""
    message = refusal(client.post("/encode", content=nested(levels), headers=JSON))
    assert message == (
        f"invalid JSON body: arrays and objects are nested deeper than the limit of {DEPTH} levels"
    )


def test_nesting_at_the_limit_reaches_validation(client: httpx.Client):
    message = refusal(client.post("/encode", content=nested(DEPTH), headers=JSON))
    assert "nested deeper" not in message
    assert message.startswith("texts[0]: ")  # an array where a string belongs


def test_deep_metadata_is_refused_before_validation(client: httpx.Client):
    deep = b'{"documents": [{"text": "t", "metadata": {"a": ' + b"[" * 40 + b"]" * 40 + b"}}]}"
    message = refusal(client.post("/documents", content=deep, headers=JSON))
    assert f"limit of {DEPTH} levels" in message


@pytest.mark.parametrize(
    "raw",
    [
        b'{"texts": ["x"], "normalize": false, "normalize": true}',
        b'{"texts": ["x"], "normalize": true, "normalize": false}',
        b'{"texts": ["x"], "normalize": true, "normalize": true}',
    ],
)
def test_a_duplicate_top_level_key_is_422_naming_it(client: httpx.Client, raw: bytes):
    """Either order: a proxy keeping the first key and one keeping the last must not differ."""
    message = refusal(client.post("/encode", content=raw, headers=JSON))
    assert message == 'invalid JSON body: duplicate key "normalize" in an object'


def test_a_duplicate_metadata_key_is_422_and_nothing_is_stored(client: httpx.Client):
    raw = b'{"documents": [{"id": "dup-1", "text": "t", "metadata": {"a": 1, "a": 2}}]}'
    message = refusal(client.post("/documents", content=raw, headers=JSON))
    assert message == 'invalid JSON body: duplicate key "a" in an object'
    assert client.get("/documents/dup-1").status_code == 404


def test_a_duplicate_filter_key_is_422(client: httpx.Client):
    raw = b'{"query": "q", "filter": {"animal": "cat", "animal": "dog"}}'
    assert 'duplicate key "animal"' in refusal(client.post("/search", content=raw, headers=JSON))


def test_equal_keys_in_different_objects_are_fine(client: httpx.Client):
    raw = b'{"documents": [{"id": "same-1", "text": "t", "metadata": {"id": 1, "text": 2}}]}'
    response = client.post("/documents", content=raw, headers=JSON)
    assert response.status_code == 200, response.text[:300]
    client.delete("/documents/same-1")


# The parser in process: the same rules, without a server.


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        (b'{"a": 1, "a": 2}', '"a"'),
        (b'[{"b": {"c": 1, "c": 1}}]', '"c"'),
        (b'{"\\u00e9": 1, "\xc3\xa9": 2}', '"\\u00e9"'),  # one key, escaped and not
        (b'{"' + b"k" * 500 + b'": 1, "' + b"k" * 500 + b'": 2}', '"' + "k" * 64 + '"'),
    ],
    ids=["top", "nested", "escaped", "long-key-cut"],
)
def test_parser_names_the_duplicate_key(raw: bytes, key: str):
    with pytest.raises(json.JSONDecodeError) as raised:
        parse_strict_json(raw, DEPTH)
    assert raised.value.msg == f"duplicate key {key} in an object"


@pytest.mark.parametrize(
    ("value", "levels"),
    [
        ([], 1),
        ({"a": [{"b": []}]}, 4),
        ([[[]], [[[]]]], 4),  # the deepest branch counts, not the first
        ({"s": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "t": '\\"[[[['}, 1),  # brackets in strings
    ],
)
def test_parser_counts_levels_of_arrays_and_objects(value: object, levels: int):
    raw = json.dumps(value).encode()
    assert parse_strict_json(raw, max(levels, 1)) == value
    if levels > 1:
        with pytest.raises(json.JSONDecodeError, match="nested deeper than the limit"):
            parse_strict_json(raw, levels - 1)


def test_parser_refuses_what_python_cannot_parse_as_too_deep():
    with pytest.raises(json.JSONDecodeError, match=f"the limit of {DEPTH} levels"):
        parse_strict_json(b"[" * 500_000 + b"]" * 500_000, DEPTH)
