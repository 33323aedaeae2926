"""The active model version in Redis: read it, change it, and tell every replica.

The active-version key is the truth; the notice published with each change only wakes the
replicas early (pub/sub is at-most-once, so they also re-read the key on a timer). A change,
its history entry and its notice go in one MULTI/EXEC, guarded by WATCH on the key, so two
writers (a worker promoting, an operator rolling back) cannot interleave.
"""

import json
from datetime import UTC, datetime
from typing import Any

from redis import Redis
from redis.exceptions import WatchError

from core.redis_keys import RedisKeys

HISTORY_LENGTH = 1000


class _Unchecked:
    """Type of UNCHECKED: `activate` then does not compare the previous version."""


UNCHECKED = _Unchecked()


def active_version(client: Redis, keys: RedisKeys) -> str | None:
    value = client.get(keys.active_version)
    return value.decode() if isinstance(value, bytes) else value


def last_loaded(client: Redis, keys: RedisKeys) -> str | None:
    value = client.get(keys.last_loaded)
    return value.decode() if isinstance(value, bytes) else value


def activate(
    client: Redis,
    keys: RedisKeys,
    version: str,
    *,
    reason: str,
    expected: str | _Unchecked | None = UNCHECKED,
) -> bool:
    """Make `version` active and publish a notice; with `expected`, only if the active version
    is still that one (None = no active version). Returns whether it was set."""
    with client.pipeline() as pipe:
        while True:
            try:
                pipe.watch(keys.active_version)
                previous = pipe.get(keys.active_version)
                if isinstance(previous, bytes):
                    previous = previous.decode()
                if not isinstance(expected, _Unchecked) and previous != expected:
                    pipe.unwatch()
                    return False
                entry = {
                    "version": version,
                    "previous": previous,
                    "reason": reason,
                    "at": datetime.now(UTC).isoformat(timespec="seconds"),
                }
                pipe.multi()
                pipe.set(keys.active_version, version)
                pipe.lpush(keys.model_history, json.dumps(entry))
                pipe.ltrim(keys.model_history, 0, HISTORY_LENGTH - 1)
                pipe.publish(keys.model_notices, json.dumps({"version": version, "reason": reason}))
                pipe.execute()
                return True
            except WatchError:
                continue


def history(client: Redis, keys: RedisKeys, limit: int = 50) -> list[dict[str, Any]]:
    """Activations, newest first."""
    return [json.loads(entry) for entry in client.lrange(keys.model_history, 0, limit - 1)]
