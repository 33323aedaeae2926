"""The corpus as an app component (service/app.py COMPONENTS) and its route dependency."""

from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, Request

from core.documents import DocumentStore
from core.redis_clients import async_redis
from core.redis_keys import RedisKeys
from models.ranking import warm_up
from service.background import background_task
from service.corpus.anchor_sync import AnchorSync
from service.corpus.changelog import ChangeLogTrimmer
from service.corpus.corpus import Corpus
from service.corpus.embedder import DocumentEmbedder
from service.corpus.follower import IndexFollower
from service.dependencies import Services
from service.errors import NotReadyError

# Longer than the follower's XREAD BLOCK, short enough that a hung Redis fails a request.
_SOCKET_TIMEOUT_S = 10.0


@asynccontextmanager
async def corpus_component(app: FastAPI, services: Services) -> AsyncIterator[None]:
    """Connect to Redis, load the corpus in the background, follow its change log and trim
    it to what the live replicas still need."""
    settings = services.settings
    client = async_redis(
        settings,
        decode_responses=True,
        socket_connect_timeout=5,
        socket_timeout=_SOCKET_TIMEOUT_S,
        health_check_interval=30,
    )
    store = DocumentStore(client, RedisKeys(settings.redis_prefix))
    embedder = DocumentEmbedder(settings, services.batcher)
    anchors = AnchorSync(settings, store, services.holder, embedder, services.switch)
    follower = IndexFollower(settings, store, services.holder, embedder, anchors)
    services.switch.index = follower
    rescoring = ThreadPoolExecutor(settings.search_threads, thread_name_prefix="rescore")
    rescoring.submit(warm_up)  # the rank kernel compiles (or loads) here, not in a request
    app.state.corpus = Corpus(
        store,
        embedder,
        follower,
        rescoring,
        services.metrics,
        exact_ranks=settings.precomputed_ranks_exact,
    )
    services.readiness.append(follower.not_ready_reason)
    trimmer = ChangeLogTrimmer(settings, store, follower)
    app.state.change_log_trimmer = trimmer
    try:
        async with (
            background_task(trimmer.run(), "change-log-trim"),
            background_task(follower.run(), "corpus"),
        ):
            yield
    finally:
        services.switch.index = None
        follower.ranks.stop()
        rescoring.shutdown(wait=True)
        await client.aclose()
        embedder.close()


async def get_corpus(request: Request) -> Corpus:
    corpus = getattr(request.app.state, "corpus", None)
    if corpus is None:
        raise NotReadyError("the document store is not configured in this app")
    return corpus


CorpusDep = Annotated[Corpus, Depends(get_corpus)]
