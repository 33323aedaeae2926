"""`rankserve serve`'s Redis step: use the one that answers, else start one, else say how."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from core.settings import REPO_ROOT, Settings
from service.corpus import local_redis
from service.corpus.local_redis import RedisUnavailableError, ensure_redis, redis_answers
from tests.service.corpus_helpers import free_port


def test_a_running_redis_is_used_as_is(tmp_path: Path):
    with ensure_redis(Settings().redis_url, tmp_path / "redis") as started:
        assert started is None
    assert not (tmp_path / "redis").exists()


def test_a_local_redis_server_is_started_with_an_append_only_file(tmp_path: Path):
    url = f"redis://127.0.0.1:{free_port()}/0"
    with ensure_redis(url, tmp_path / "redis") as started:
        assert started == tmp_path / "redis"
        client = redis.Redis.from_url(url)
        client.set("k", "v")
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "always"}
        client.close()
    assert not redis_answers(url)  # stopped with `serve`
    assert any((tmp_path / "redis").rglob("*.aof"))


def test_without_redis_server_the_message_says_how_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(local_redis.shutil, "which", lambda _name: None)
    url = f"redis://127.0.0.1:{free_port()}/0"
    with (
        pytest.raises(RedisUnavailableError, match="apt-get install redis-server"),
        ensure_redis(url, tmp_path),
    ):
        pass
    with (
        pytest.raises(RedisUnavailableError, match="docker compose up"),
        ensure_redis("redis://redis.invalid:6379/0", tmp_path),
    ):
        pass


@pytest.mark.slow
def test_serve_exits_with_the_message(tmp_path: Path):
    """The real command, with a PATH that has no redis-server and a port nothing answers on."""
    bin_dir = Path(sys.executable).parent
    env = {
        "PATH": str(bin_dir),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "RANKSERVE_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "RANKSERVE_VAR_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [str(bin_dir / "rankserve"), "serve"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "redis-server is not installed" in result.stderr
    assert "docker compose up" in result.stderr
