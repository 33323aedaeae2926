"""The active model version in Redis: read it, change it, and tell every replica.

The active-version key is the truth; the notice published with each change only wakes the
replicas early (pub/sub is at-most-once, so they also re-read the key on a timer). A change,
its history entry and its notice go in one Lua script that also compares the previous version,
so two writers (a worker promoting, an operator rolling back) cannot interleave. With a
ReplicaWait (core/redis_clients.py), WAIT follows the script on the same connection, and an
activation that too few replicas confirmed raises NotReplicatedError: it may still have taken
effect, and activating the same version again is harmless.
"""

import json
from datetime import UTC, datetime
from typing import Any

from redis import Redis

from core.redis_clients import ReplicaWait, replica_wait_of
from core.redis_keys import RedisKeys

HISTORY_LENGTH = 1000


class _Unchecked:
    """Type of UNCHECKED: `activate` then does not compare the previous version."""


UNCHECKED = _Unchecked()

_ACTIVATE = """#!lua
-- KEYS: active version, history. ARGV: check flag, expected ('' = none), version, reason,
-- time, history length, notice channel, notice.
local previous = redis.call('GET', KEYS[1])
if ARGV[1] == '1' and (previous or '') ~= ARGV[2] then
  return 0
end
local entry = cjson.encode({version = ARGV[3], previous = previous or cjson.null,
                            reason = ARGV[4], at = ARGV[5]})
redis.call('SET', KEYS[1], ARGV[3])
redis.call('LPUSH', KEYS[2], entry)
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[6]) - 1)
redis.call('PUBLISH', ARGV[7], ARGV[8])
return 1
"""


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
    wait: ReplicaWait | None = None,
) -> bool:
    """Make `version` active and publish a notice; with `expected`, only if the active version
    is still that one (None = no active version). Returns whether it was set.

    `wait` defaults to the client's (core/redis_clients.py); short of it: NotReplicatedError.
    """
    wait = wait if wait is not None else replica_wait_of(client)
    checked = not isinstance(expected, _Unchecked)
    args = [
        "1" if checked else "0",
        expected if isinstance(expected, str) else "",
        version,
        reason,
        datetime.now(UTC).isoformat(timespec="seconds"),
        HISTORY_LENGTH,
        keys.model_notices,
        json.dumps({"version": version, "reason": reason}),
    ]
    script = client.register_script(_ACTIVATE)
    script_keys = [keys.active_version, keys.model_history]
    if not wait.replicas:
        return bool(script(keys=script_keys, args=args))
    # WAIT counts what its own connection wrote: the script and WAIT share one pipeline.
    with client.pipeline(transaction=False) as pipe:
        script(keys=script_keys, args=args, client=pipe)
        pipe.wait(wait.replicas, wait.timeout_ms)
        changed, acknowledged = pipe.execute()
    if changed:
        wait.check(int(acknowledged))
    return bool(changed)


def history(client: Redis, keys: RedisKeys, limit: int = 50) -> list[dict[str, Any]]:
    """Activations, newest first."""
    return [json.loads(entry) for entry in client.lrange(keys.model_history, 0, limit - 1)]
