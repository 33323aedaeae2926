"""`rankserve serve` needs Redis: use the configured one, or start a local redis-server.

The local server keeps an append-only file fsynced on every write (`appendfsync always`), so a
document the API acknowledged survives a crash of Redis or of the machine; its data lives under
`<var_dir>/redis`. It is a child of `serve` and stops (cleanly, flushing the file) with it.
"""

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import redis
from redis.exceptions import RedisError

_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
_START_TIMEOUT_S = 15.0


class RedisUnavailableError(RuntimeError):
    """No Redis answers and none could be started; the message says how to get one."""


def redis_answers(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        return bool(client.ping())
    except RedisError:
        return False
    finally:
        client.close()


def redis_server_command(binary: str, port: int, data_dir: Path, host: str) -> list[str]:
    return [
        binary,
        "--port", str(port),
        "--bind", host,
        "--dir", str(data_dir),
        "--appendonly", "yes",
        "--appendfsync", "always",
        "--save", "",
        "--daemonize", "no",
        "--logfile", "redis.log",
    ]  # fmt: skip


@contextmanager
def ensure_redis(url: str, data_dir: Path, *, start: bool = True) -> Iterator[Path | None]:
    """Yield None if Redis answers at `url`; else start a local redis-server for the duration.

    Yields the data directory of the server it started. Raises RedisUnavailableError when
    nothing answers and no local server can be started.
    """
    if redis_answers(url):
        yield None
        return
    parsed = urlparse(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 6379
    how = (
        "install Redis (`apt-get install redis-server`) and run `rankserve serve` again, "
        "or start everything with `docker compose up`"
    )
    if not start or host not in _LOCAL_HOSTS:
        raise RedisUnavailableError(f"no Redis answers at {url}; start it, {how}")
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisUnavailableError(
            f"no Redis answers at {url} and redis-server is not installed: {how}"
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        redis_server_command(binary, port, data_dir, host),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not redis_answers(url):
            if process.poll() is not None or time.monotonic() > deadline:
                log = data_dir / "redis.log"
                tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
                raise RedisUnavailableError(f"redis-server did not start on port {port}:\n{tail}")
            time.sleep(0.1)
        yield data_dir
    finally:
        if process.poll() is None:
            # SIGTERM: Redis fsyncs the append-only file and exits.
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
