"""Hot swap in every API replica: follow the active-version key, load bundles beside the live
engine, swap one reference; refuse bad bundles and keep serving.

The key (core/versions.py) is the truth. A replica re-reads it when a notice arrives on
the pub/sub channel and, because pub/sub drops messages while a replica is disconnected, on a
timer (`reconcile_interval_s`) and on every (re)subscription. When the key names another
version, the replica loads that bundle in a thread (checksums, dimensions, smoke encode:
core/registry.py), builds the document index for the new encoder from the bundle's corpus
embeddings plus the documents changed since their revision, and then swaps engine and index
together (service/engine_switch.py). Requests that already hold the old engine finish on it.

A bundle that fails to load is refused: logged, counted in `rankserve_model_swaps_total
{outcome="refused"}`, recorded in Redis for GET /admin/models, and not retried until an
operator activates it again; the replica keeps serving what it has.
"""

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import redis.asyncio as aioredis
from fastapi import FastAPI
from prometheus_client import Counter, Histogram
from redis import Redis
from redis.exceptions import RedisError
from rq import Queue

from core.bundle_manifest import BundleStoreUnavailableError
from core.jobs import retrain_queue
from core.loading import settings_bundle
from core.redis_clients import async_redis, sync_redis
from core.redis_keys import RedisKeys
from core.registry import BundleStore
from core.settings import Settings
from core.store_types import LoadedBundle
from core.stores import open_store
from core.threads import in_own_thread
from core.versions import active_version, last_loaded
from service.background import background_task
from service.dependencies import Services
from service.engine import Engine, load_engine

logger = logging.getLogger(__name__)

_RETRY_S = (1.0, 2.0, 5.0, 10.0)
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/[^\s'\"]+")
_SWAP_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)


def engine_from_bundle(loaded: LoadedBundle) -> Engine:
    return Engine(
        encoder=loaded.encoder,
        anchors=loaded.anchors,
        version=loaded.manifest.version,
        name=loaded.manifest.encoder.name,
    )


class NoLoadableVersionError(RuntimeError):
    """Neither the active version nor the last one the cluster served loads here."""


def _versions_at_start(settings: Settings) -> tuple[str | None, str | None]:
    """(active version, last version a replica served); both None when Redis is down."""
    client = sync_redis(settings, socket_connect_timeout=5, socket_timeout=5)
    keys = RedisKeys(settings.redis_prefix)
    try:
        return active_version(client, keys), last_loaded(client, keys)
    except RedisError as error:
        logger.warning(
            "cannot read the active version (%s); starting with the settings model", error
        )
        return None, None
    finally:
        client.close()


def load_active_engine(settings: Settings) -> Engine:
    """The first engine of a replica, by the rule the README states:

    1. no active version (or Redis down): the settings checkpoint; the swap manager moves to
       the active version as soon as Redis answers;
    2. else the active bundle, so a replica that starts after a promotion never serves an
       older model first;
    3. if it does not load here, the last version a replica of this cluster loaded and served
       (the settings checkpoint when that is its version);
    4. if that fails too: NoLoadableVersionError, and the replica stays not ready while its
       swap manager retries the active version (a bundle store that is mounted late).
    """
    active, last = _versions_at_start(settings)
    if active is None:
        return load_engine(settings)
    store = open_store(settings)
    for version in dict.fromkeys(v for v in (active, last) if v is not None):
        try:
            return engine_from_bundle(settings_bundle(settings, store, version))
        except Exception as error:
            logger.error("version %s does not load at start: %s", version, error)
        try:
            missing = not store.exists(version)
        except BundleStoreUnavailableError:
            missing = False  # object storage down says nothing about whether it exists
        if missing:
            engine = load_engine(settings)
            if engine.version == version:
                return engine
    raise NoLoadableVersionError(
        "neither the active version nor the last served one loads; retrying"
    )


def replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class SwapManager:
    def __init__(
        self,
        services: Services,
        client: aioredis.Redis,
        store: BundleStore,
    ) -> None:
        self.services = services
        self.settings = services.settings
        self.client = client
        self.store = store
        self.keys = RedisKeys(self.settings.redis_prefix)
        self.replica = replica_id()
        self.loading: str | None = None
        self.refused: dict[str, str] = {}  # version -> why this replica refused it
        self._lock = asyncio.Lock()
        registry = services.metrics.registry
        self.swaps = Counter(
            "rankserve_model_swaps",
            "Hot swaps attempted by this replica, by outcome (swapped, refused)",
            ["outcome"],
            registry=registry,
        )
        self.swap_seconds = Histogram(
            "rankserve_model_swap_seconds",
            "Time from reading a new active version to serving it (load, verify, index)",
            buckets=_SWAP_BUCKETS,
            registry=registry,
        )

    @property
    def serving(self) -> str | None:
        engine = self.services.holder.current
        return engine.version if engine is not None else None

    async def run(self) -> None:
        """Until cancelled: wake on a notice or every reconcile interval; survive Redis outages."""
        await self.services.holder.first_attempt.wait()
        failures = 0
        interval = self.settings.reconcile_interval_s
        while True:
            try:
                async with self.client.pubsub() as pubsub:
                    await pubsub.subscribe(self.keys.model_notices)
                    failures = 0
                    await self.reconcile()
                    due = time.monotonic() + interval
                    while True:
                        wait = max(0.0, due - time.monotonic())
                        message = await pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=wait
                        )
                        if message is not None:
                            await self.reconcile(notice=True)
                        if message is None or time.monotonic() >= due:
                            await self.reconcile()
                            due = time.monotonic() + interval
            except (RedisError, OSError) as error:
                delay = _RETRY_S[min(failures, len(_RETRY_S) - 1)]
                failures += 1
                logger.warning("model notices: %s; reconnecting in %.0fs", error, delay)
                await asyncio.sleep(delay)

    async def reconcile(self, *, notice: bool = False) -> None:
        """Serve the active version if this replica does not already; one swap at a time."""
        async with self._lock:
            target = await self.client.get(self.keys.active_version)
            serving = self.serving
            # A refused bundle is immutable, so only an explicit notice (an operator
            # activating it again, say after repairing the store) earns another try; a replica
            # that serves nothing yet retries on every round (a store mounted late).
            retry = notice or target not in self.refused or serving is None
            if target is not None and target != serving and retry:
                await self._swap_to(target)
            if self.serving is not None:
                await self.client.set(self.keys.last_loaded, self.serving)
            await self._report()

    async def _swap_to(self, version: str) -> None:
        started = time.perf_counter()
        self.loading = version
        await self._report()
        try:
            loaded = await in_own_thread(settings_bundle, self.settings, self.store, version)
            engine = engine_from_bundle(loaded)
            await self.services.switch.swap(engine, loaded.corpus)
        except BundleStoreUnavailableError as error:
            # Object storage down is no fault of the bundle: try again next round, unrefused.
            logger.warning("hot swap to %s postponed: %s", version, error)
            return
        except Exception as error:
            await self._refuse(version, error)
            return
        finally:
            self.loading = None
        self.refused.pop(version, None)
        self.swaps.labels(outcome="swapped").inc()
        took = time.perf_counter() - started
        self.swap_seconds.observe(took)
        logger.info("hot swap: now serving %s (%s) after %.1fs", version, engine.name, took)

    async def _refuse(self, version: str, error: Exception) -> None:
        logger.error("hot swap to %s refused, still serving %s: %s", version, self.serving, error)
        # What GET /admin/models shows: the reason without this host's filesystem paths.
        message = _ABSOLUTE_PATH.sub("<path>", f"{type(error).__name__}: {error}")
        self.refused[version] = message
        self.swaps.labels(outcome="refused").inc()
        record = {"error": message, "replica": self.replica, "at": _now()}
        with contextlib.suppress(RedisError):
            await self.client.hset(self.keys.refused_bundles, version, json.dumps(record))

    async def _report(self) -> None:
        """This replica's state for GET /admin/models, expiring when the replica is gone."""
        state = {
            "version": self.serving,
            "loading": self.loading,
            "refused": self.refused,
            "at": _now(),
        }
        ttl = max(10, int(3 * self.settings.reconcile_interval_s))
        with contextlib.suppress(RedisError):
            await self.client.set(self.keys.replica(self.replica), json.dumps(state), ex=ttl)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Operations:
    """What the admin routes use; lives on `app.state.operations`."""

    settings: Settings
    keys: RedisKeys
    redis: Redis  # synchronous, bytes: what RQ needs; admin handlers run in threads
    store: BundleStore
    swap: SwapManager

    @property
    def queue(self) -> Queue:
        return retrain_queue(self.redis, self.keys)


@asynccontextmanager
async def swap_component(app: FastAPI, services: Services) -> AsyncIterator[None]:
    """The swap manager's task and the admin API's connections (service/app.py COMPONENTS)."""
    settings = services.settings
    # No socket timeout: a pub/sub read legitimately waits a whole reconcile interval.
    client = async_redis(settings, decode_responses=True, socket_connect_timeout=5)
    sync = sync_redis(settings, socket_connect_timeout=5, socket_timeout=30)
    store = open_store(settings)
    manager = SwapManager(services, client, store)
    app.state.operations = Operations(settings, manager.keys, sync, store, manager)
    try:
        async with background_task(manager.run(), "model-swap"):
            yield
    finally:
        await client.aclose()
        sync.close()
