"""`rankserve serve` as a user runs it: a real process, answering /health before the model."""

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import redis

from core.settings import Settings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_serve_starts_uvicorn_and_stops_cleanly(tmp_path: Path):
    port = free_port()
    prefix = f"rankserve-test-serve-{uuid.uuid4().hex[:8]}"
    no_documents = tmp_path / "empty.jsonl"
    no_documents.touch()
    env = {
        **os.environ,
        "RANKSERVE_VAR_DIR": str(tmp_path),
        "RANKSERVE_ANCHOR_COUNT": "16",
        "RANKSERVE_DEVICE": "cpu",
        "RANKSERVE_DEMO_CORPUS": str(no_documents),
        "RANKSERVE_REDIS_PREFIX": prefix,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            while True:
                assert process.poll() is None, process.stdout.read() if process.stdout else ""
                try:
                    health = http.get("/health")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "rankserve serve never answered"
                    time.sleep(0.2)
            assert health.status_code == 200
            assert health.json() == {"status": "ok"}
            assert "X-Model-Version" in health.headers
            assert http.get("/docs").status_code == 200
            assert http.get("/openapi.json").json()["info"]["title"] == "rankserve"
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=120)
        store = redis.Redis.from_url(Settings().redis_url)
        for key in store.scan_iter(match=f"{prefix}:*"):
            store.delete(key)
        store.close()
    assert process.returncode == 0, output
    assert "Application shutdown complete" in output
