"""GET /health, /ready, /info, /metrics, and the startup sequence: alive first, ready later."""

import threading
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from core.loading import default_version
from core.settings import Settings
from models.encoder import Encoder
from service.engine import Engine
from tests.service.conftest import AUTH, Server, make_settings, serve


def test_health_and_ready(server: Server, encoder: Encoder):
    with server.client() as public:  # no API key: these stay public
        assert public.get("/health").json() == {"status": "ok"}
        ready = public.get("/ready")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "model_version": default_version(encoder)}


def test_info_publishes_the_model_and_every_limit(server: Server, encoder: Encoder):
    with server.client() as public:
        info = public.get("/info").json()
    settings = server.services.settings
    assert info["model_name"] == encoder.name
    assert info["model_version"] == default_version(encoder)
    assert info["dim"] == encoder.dim
    assert info["device"] == "cpu"
    assert info["encoder_backend"] == encoder.backend.value == "torch"
    assert info["anchor_count"] == settings.anchor_count
    assert info["lambda_inf"] == settings.lambda_inf
    assert info["limits"] == {
        "max_texts_per_request": 2048,
        "max_text_chars": 10_000,
        "max_body_bytes": 16 * 1024 * 1024,
        "max_tokens_per_text": encoder.max_seq_length,
        "max_similarity_pairs": 1024,
        "max_similarity_targets": 2047,
        "max_rerank_texts": 2047,
        "max_top_k": 100,
        "max_search_candidates": 1000,
        "max_search_offset": 1000,
        "queue_capacity_texts": settings.queue_capacity,
        "max_batch_size": settings.encode_batch_size,
        "max_batch_tokens": encoder.batch_tokens,
        "batch_wait_ms": settings.batch_wait_ms,
        "batch_rejoin_ms": settings.batch_rejoin_ms,
        "max_json_depth": 32,
        "max_header_bytes": 16 * 1024,
        "max_headers": 100,
        "header_timeout_s": 10.0,
        "body_timeout_s": 60.0,
        "keep_alive_timeout_s": 5.0,
    }


def test_metrics_count_requests_per_route_and_status(server: Server, client: httpx.Client):
    client.post("/encode", json={"texts": ["counted"]})
    client.post("/encode", json={"texts": []})
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    requests = {
        (s.labels["route"], s.labels["status"]): s.value
        for s in families["rankserve_requests"].samples
        if s.name == "rankserve_requests_total" and s.labels["method"] == "POST"
    }
    assert requests[("/encode", "200")] >= 1
    assert requests[("/encode", "422")] >= 1
    version = client.get("/ready").json()["model_version"]
    assert [s.labels["version"] for s in families["rankserve_model_info"].samples] == [version]
    for name in ("rankserve_batch_size", "rankserve_queue_wait_seconds"):
        count = next(s.value for s in families[name].samples if s.name == f"{name}_count")
        assert count >= 1
    assert "rankserve_request_duration_seconds" in families


def test_alive_at_once_ready_only_after_the_model_loads(tmp_path, engine: Engine):
    release = threading.Event()

    def slow_loader(_settings: Settings) -> Engine:
        release.wait(timeout=60)
        return engine

    with serve(make_settings(tmp_path), loader=slow_loader) as loading, loading.client() as http:
        try:
            assert http.get("/health").status_code == 200
            for path in ("/ready", "/info"):
                response = http.get(path)
                assert response.status_code == 503
                assert response.json()["error"] == {
                    "message": "the model is still loading",
                    "type": "not_ready",
                    "code": 503,
                }
            encode = http.post("/encode", json={"texts": ["x"]}, headers=AUTH)
            assert encode.status_code == 503
            assert encode.headers["X-Model-Version"] == "none"
        finally:
            release.set()
        loading.wait_ready(timeout=60)
        assert http.post("/encode", json={"texts": ["x"]}, headers=AUTH).status_code == 200


def test_a_model_that_fails_to_load_keeps_ready_at_503(tmp_path):
    def broken_loader(_settings: Settings) -> Engine:
        raise FileNotFoundError("no checkpoint at /nowhere")

    with serve(make_settings(tmp_path), loader=broken_loader) as failed, failed.client() as http:
        assert http.get("/health").status_code == 200
        deadline = time.monotonic() + 30
        while (response := http.get("/ready")).json()["error"]["message"] == (
            "the model is still loading"
        ) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert response.status_code == 503
        # A fixed message: the cause, with its path, is in the log only.
        assert response.json()["error"]["message"] == "the model failed to load"


def test_the_model_loads_in_a_thread_that_has_ended_once_ready(tmp_path, engine: Engine):
    # A thread that lives on would keep the OpenMP pool its load started (core/threads.py).
    loading_threads: list[threading.Thread] = []

    def recording_loader(_settings: Settings) -> Engine:
        loading_threads.append(threading.current_thread())
        return engine

    with serve(make_settings(tmp_path), loader=recording_loader) as started:
        started.wait_ready(timeout=60)
        assert len(loading_threads) == 1
        assert loading_threads[0] is not threading.main_thread()
        assert not loading_threads[0].is_alive()
