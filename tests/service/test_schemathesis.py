"""schemathesis over the served OpenAPI document: all default checks, zero failures.

Its CLI runs against a real uvicorn server whose admin token is the API key, so one
Authorization header opens every operation: the examples, coverage (boundary and negative
values), fuzzing and stateful phases over the data and the admin routes alike. The
`ignored_auth` check also replays requests without the key.
(schemathesis's pytest plugin reads `Node._nodeid`, which pytest 9 no longer has.)
"""

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from core.redis_keys import RedisKeys
from service.engine import Engine
from tests.service.conftest import API_KEY, AUTH, Server, fixed_engine, make_settings, serve
from tests.worker.conftest import delete_queue_keys

# Per operation and phase. The whole test takes about a minute on two Zen 3 cores, now that
# schemathesis.toml leaves out the coverage phase of POST /search (it took 236 s alone).
MAX_EXAMPLES = 15


@pytest.fixture
def server(tmp_path: Path, engine: Engine) -> Iterator[Server]:
    settings = make_settings(tmp_path / "var", admin_token=API_KEY)
    with serve(settings, loader=fixed_engine(engine)) as running:
        running.wait_ready()
        yield running
    # Fuzzed POST /admin/retrain calls queue jobs that no worker will run.
    client = redis.Redis.from_url(settings.redis_url)
    delete_queue_keys(client, RedisKeys(settings.redis_prefix))
    client.close()


@pytest.mark.slow
def test_the_api_conforms_to_its_openapi_schema(server: Server, tmp_path: Path):
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(Path(__file__).with_name("schemathesis.toml")),
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
    # cwd: the CLI keeps a .schemathesis/ cache in its working directory, not in the checkout.
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path
    )
    assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]
    # Warnings may remain (e.g. random version names never find a bundle with a report: 404).
    assert "Failures:" not in run.stdout, run.stdout[-20_000:]
