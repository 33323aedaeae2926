"""Schemathesis over /documents and /search: generated requests, valid and invalid, against a
live server. No 5xx, every status and body as the OpenAPI document declares them, and bad
input (too many documents, oversized metadata, top_k out of range...) answered with a 422.

The server's limits are small so that generated batches stay cheap to encode; the OpenAPI
document carries them, so schemathesis generates around them.
"""

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from service.engine import Engine
from tests.service.conftest import Server
from tests.service.corpus_helpers import corpus_server


@pytest.fixture(scope="module")
def corpus_api(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    var_dir: Path = tmp_path_factory.mktemp("schemathesis-var")
    with corpus_server(
        engine,
        var_dir,
        max_documents_per_request=3,
        max_text_chars=64,
        max_metadata_keys=3,
        # Above anything 3 schema-valid keys and values can reach (arrays of 64 strings of 256
        # characters, each escaped to 6 bytes, included): JSON Schema cannot state a byte
        # limit, so a smaller one would refuse schema-valid data (tested in test_documents).
        max_metadata_bytes=320_000,
        max_top_k=5,
        max_search_candidates=20,
        # No API key: schemathesis's negative cases would drop the header and expect a 401
        # (auth has its own tests); here the bodies and parameters are what is under test.
        api_key=None,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def corpus_schema(corpus_api: Server) -> schemathesis.BaseSchema:
    # FastAPI builds the document once, then serves it cached: built here without
    # schemathesis's 10 s read timeout, which a busy machine can exceed.
    httpx.get(f"{corpus_api.url}/openapi.json", timeout=300).raise_for_status()
    schema = schemathesis.openapi.from_url(f"{corpus_api.url}/openapi.json")
    return schema.include(path_regex="^/(documents|search)")


def operations(schema: schemathesis.BaseSchema) -> list[schemathesis.APIOperation]:
    return [result.ok() for result in schema.get_all_operations()]


# schemathesis's pytest plugin (`from_fixture`) does not run under pytest 9, so each operation's
# strategy is driven by hypothesis directly, in both generation modes.
@pytest.mark.slow
@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode), ids=str)
def test_document_and_search_api_conform_to_their_schema(
    corpus_schema: schemathesis.BaseSchema, mode: schemathesis.GenerationMode
):
    tested = []
    for operation in operations(corpus_schema):

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=25,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate()

        check()
        tested.append(operation.label)
    assert sorted(tested) == [
        "DELETE /documents/{doc_id}",
        "GET /documents",
        "GET /documents/{doc_id}",
        "POST /documents",
        "POST /documents/delete",
        "POST /search",
    ]
