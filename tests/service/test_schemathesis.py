"""schemathesis over the served OpenAPI document: all default checks, zero failures.

Its CLI runs against the session's real uvicorn server, authenticated with the API key: the
examples, coverage (boundary and negative values), fuzzing and stateful phases over every
operation of the app. The `ignored_auth` check also replays requests without the key.
(schemathesis's pytest plugin reads `Node._nodeid`, which pytest 9 no longer has.)
"""

import subprocess
import sys

import pytest

from tests.service.conftest import AUTH, Server

MAX_EXAMPLES = 15  # per operation and phase; about half a minute on two cores


@pytest.mark.slow
def test_the_api_conforms_to_its_openapi_schema(server: Server, tmp_path):
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{server.url}/openapi.json",
        "--header",
        f"Authorization: {AUTH['Authorization']}",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--workers",
        "1",
        "--seed",
        "20240601",
        "--report-dir",
        str(tmp_path),
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]
    assert "No issues found" in run.stdout
