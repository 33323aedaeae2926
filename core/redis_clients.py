"""Every Redis client rankserve opens, made here from the settings: API, follower, swap, RQ.

Two topologies:
- one server at `redis_url` (the default);
- Redis with Sentinel: `redis_sentinels` (host:port, ...) and `redis_sentinel_master`. A client
  then asks the sentinels for the master's address on every new connection, so after a
  failover it reconnects to the promoted replica by itself; a connection still open to a
  demoted master is dropped on its first READONLY reply (redis-py's SentinelManagedConnection).
  `redis_url`'s host and port are not used; its user, password, database and `rediss://`
  scheme still apply to the master.

Each client also carries the deployment's write durability, `ReplicaWait`: how many replicas
must have a write before it is acknowledged (WAIT). The document store (core/documents.py) and
version activation (core/versions.py) read it from the client they are given, so every writer
that uses a client from here gets it without passing it around.
"""

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis import Redis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.connection import parse_url
from redis.exceptions import RedisError
from redis.sentinel import Sentinel

from core.settings import Settings

# Sentinels answer one small command: a short timeout lets a client skip a dead one quickly.
_SENTINEL_TIMEOUT_S = 2.0


class NotReplicatedError(RedisError):
    """WAIT timed out before enough replicas confirmed the write.

    The master did apply it; whether it survives a failover is unknown. A RedisError, so the
    API answers 503 (service/errors.py) and the document store reports it as unavailable.
    """


@dataclass(frozen=True)
class ReplicaWait:
    """WAIT <replicas> <timeout_ms> after each acknowledged write; replicas 0 = no wait."""

    replicas: int = 0
    timeout_ms: int = 1000

    @classmethod
    def from_settings(cls, settings: Settings) -> "ReplicaWait":
        return cls(settings.redis_wait_replicas, round(settings.redis_wait_timeout_s * 1000))

    def check(self, acknowledged: int) -> None:
        """Raise NotReplicatedError when WAIT's reply is short of the required count."""
        if acknowledged < self.replicas:
            raise NotReplicatedError(
                f"{acknowledged} of {self.replicas} replicas confirmed the write "
                f"within {self.timeout_ms} ms"
            )


NO_WAIT = ReplicaWait()


class RankserveRedis(Redis):
    """A synchronous client that knows its ReplicaWait and closes its sentinel connections."""

    replica_wait: ReplicaWait = NO_WAIT
    sentinel: Sentinel | None = None

    def close(self) -> None:
        super().close()
        if self.sentinel is not None:
            for client in self.sentinel.sentinels:
                client.close()


class AsyncRankserveRedis(aioredis.Redis):
    """The asyncio counterpart of RankserveRedis."""

    replica_wait: ReplicaWait = NO_WAIT
    sentinel: AsyncSentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.sentinel is not None:
            for client in self.sentinel.sentinels:
                await client.aclose()


def replica_wait_of(client: Any) -> ReplicaWait:
    """The ReplicaWait a client from this module carries; NO_WAIT for any other client."""
    wait = getattr(client, "replica_wait", NO_WAIT)
    return wait if isinstance(wait, ReplicaWait) else NO_WAIT


def uses_sentinel(settings: Settings) -> bool:
    return bool(settings.redis_sentinels)


def _options(
    settings: Settings,
    decode_responses: bool,
    socket_connect_timeout: float | None,
    socket_timeout: float | None,
    health_check_interval: int,
) -> dict[str, Any]:
    options: dict[str, Any] = {
        "decode_responses": decode_responses,
        "socket_connect_timeout": socket_connect_timeout,
        "socket_timeout": socket_timeout,
        "health_check_interval": health_check_interval,
    }
    if uses_sentinel(settings):
        # The master's credentials, database and TLS come from redis_url; its address from the
        # sentinels.
        parsed = parse_url(settings.redis_url)
        for name in ("username", "password", "db"):
            if parsed.get(name) is not None:
                options[name] = parsed[name]
        if settings.redis_url.startswith("rediss://"):
            options["ssl"] = True
    return options


def _sentinel_kwargs(settings: Settings) -> dict[str, Any]:
    password = settings.redis_sentinel_password
    return {
        "socket_timeout": _SENTINEL_TIMEOUT_S,
        "socket_connect_timeout": _SENTINEL_TIMEOUT_S,
        "password": password.get_secret_value() if password is not None else None,
    }


def sync_redis(
    settings: Settings,
    *,
    decode_responses: bool = False,
    socket_connect_timeout: float | None = None,
    socket_timeout: float | None = None,
    health_check_interval: int = 0,
) -> RankserveRedis:
    """A synchronous client of the current master. RQ needs decode_responses=False."""
    options = _options(
        settings, decode_responses, socket_connect_timeout, socket_timeout, health_check_interval
    )
    if uses_sentinel(settings):
        sentinel = Sentinel(
            settings.redis_sentinel_addresses,
            sentinel_kwargs=_sentinel_kwargs(settings),
        )
        client = sentinel.master_for(
            settings.redis_sentinel_master, redis_class=RankserveRedis, **options
        )
        client.sentinel = sentinel
    else:
        client = RankserveRedis.from_url(settings.redis_url, **options)
    client.replica_wait = ReplicaWait.from_settings(settings)
    return client


def async_redis(
    settings: Settings,
    *,
    decode_responses: bool = False,
    socket_connect_timeout: float | None = None,
    socket_timeout: float | None = None,
    health_check_interval: int = 0,
) -> AsyncRankserveRedis:
    """An asyncio client of the current master."""
    options = _options(
        settings, decode_responses, socket_connect_timeout, socket_timeout, health_check_interval
    )
    if uses_sentinel(settings):
        sentinel = AsyncSentinel(
            settings.redis_sentinel_addresses,
            sentinel_kwargs=_sentinel_kwargs(settings),
        )
        client = sentinel.master_for(
            settings.redis_sentinel_master, redis_class=AsyncRankserveRedis, **options
        )
        client.sentinel = sentinel
    else:
        client = AsyncRankserveRedis.from_url(settings.redis_url, **options)
    client.replica_wait = ReplicaWait.from_settings(settings)
    return client
