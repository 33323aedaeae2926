"""schemathesis over the served OpenAPI document: every default check, zero failures.

The run covers every operation of the app (its own examples, the coverage phase's boundary
and negative cases, then random cases), authenticated with the API key; the `ignored_auth`
check also replays each request without it and expects a 401.
"""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.service.conftest import AUTH, Server


@pytest.fixture(scope="session")
def api_schema(server: Server) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case: schemathesis.Case):
    case.call_and_validate(headers=AUTH)
