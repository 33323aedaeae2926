"""docker-compose.yml and its GPU override, as the compose tool itself resolves them.

No container engine runs here: `config` parses, validates and interpolates the files without
one. `docker compose` (the v2 plugin) is used when present, else Debian's `docker-compose`
(1.29, which `.ci/run` installs); the tests skip only when neither exists.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.settings import REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"
GPU_OVERRIDE = REPO_ROOT / "deploy" / "docker-compose.gpu.yml"
NGINX = REPO_ROOT / "deploy" / "nginx.conf"


def _compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


COMPOSE_CMD = _compose_command()
pytestmark = pytest.mark.skipif(
    COMPOSE_CMD is None,
    reason="neither `docker compose` nor `docker-compose` is installed (.ci/run installs it)",
)


def resolved(*files: Path, **env: str) -> dict[str, Any]:
    assert COMPOSE_CMD is not None
    args = [*COMPOSE_CMD]
    for file in files:
        args += ["-f", str(file)]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RANKSERVE_")}
    result = subprocess.run(
        [*args, "config"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=environment | {"RANKSERVE_ADMIN_TOKEN": "test-token"} | env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """target -> source of a service's volumes, in either short or long syntax."""
    mounts = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        mounts[target] = source
    return mounts


def _healthcheck_text(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    return " ".join(test) if isinstance(test, list) else test


def test_services_volumes_and_healthchecks():
    config = resolved(COMPOSE)
    services = config["services"]
    assert set(services) == {"redis", "api", "worker", "proxy"}

    redis = services["redis"]
    command = redis["command"]
    command = command if isinstance(command, list) else command.split()
    assert command[command.index("--appendonly") + 1] == "yes"
    assert "ping" in _healthcheck_text(redis)
    assert _mounts(redis)["/data"] == "redis-data"

    api, worker = services["api"], services["worker"]
    assert "/ready" in _healthcheck_text(api)
    # No fixed host port on a replica, so `--scale api=N` cannot collide; nginx is the door.
    assert "ports" not in api
    assert api["deploy"]["replicas"] == 2
    assert services["proxy"]["ports"]
    assert services["proxy"]["depends_on"]["api"]["condition"] == "service_healthy"
    for service in (api, worker):
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert service["environment"]["RANKSERVE_REDIS_URL"].startswith("redis://redis:")
        assert service["environment"]["RANKSERVE_ADMIN_TOKEN"] == "test-token"
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
    # The bundle store (var/store) is one volume that the worker writes and replicas read.
    assert _mounts(api)["/app/var"] == _mounts(worker)["/app/var"] == "rankserve-var"
    assert "rankserve-var" in config["volumes"]
    assert worker["command"] == ["rankserve", "worker"]


def test_replica_count_comes_from_the_environment():
    services = resolved(COMPOSE, RANKSERVE_API_REPLICAS="5")["services"]
    assert services["api"]["deploy"]["replicas"] == 5


def test_gpu_override_gives_api_and_worker_a_gpu():
    services = resolved(COMPOSE, GPU_OVERRIDE)["services"]
    for name in ("api", "worker"):
        service = services[name]
        assert service["build"]["dockerfile"] == "deploy/Dockerfile.gpu"
        assert service["environment"]["RANKSERVE_DEVICE"] == "cuda"
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
        # The override keeps everything else of the base service.
        assert _mounts(service)["/app/var"] == "rankserve-var"
    assert services["api"]["deploy"]["replicas"] == 2


def test_proxy_points_at_the_api_service_port():
    services = resolved(COMPOSE)["services"]
    port = str(services["api"]["expose"][0])
    upstreams = re.findall(r"^\s*server\s+([\w.-]+:\d+)", NGINX.read_text(), flags=re.MULTILINE)
    assert upstreams == [f"api:{port}"]
    mounted = _mounts(services["proxy"])["/etc/nginx/conf.d/default.conf"]
    assert Path(mounted).resolve() == NGINX.resolve()


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.gpu"])
def test_dockerfiles_copy_only_what_exists_and_pin_torch(dockerfile: str):
    text = (REPO_ROOT / "deploy" / dockerfile).read_text()
    sources = re.findall(r"^COPY\s+(.+)\s+\S+$", text, flags=re.MULTILINE)
    assert sources
    for source in (part for line in sources for part in line.split()):
        assert (REPO_ROOT / source).exists(), f"{dockerfile} copies missing {source}"
    assert "torch==2.13.0" in text
    assert "download.pytorch.org/whl/" in text
