"""The searchable corpus as routes see it: writes that wait until this replica indexed them,
and Eq. 7 search whose hits are read back from the store (the source of truth)."""

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import torch

from core.documents import DocumentStore, NewDocument, StoredDocument
from models.metadata_filter import Clause, compile_predicate
from models.rescoring import SearchHits
from service.corpus.embedder import DocumentEmbedder
from service.corpus.follower import IndexFollower
from service.corpus.index_state import IndexState
from service.engine import Engine
from service.metrics import Metrics


@dataclass(frozen=True)
class Hit:
    document: StoredDocument
    score: float
    cosine: float
    rank: float


@dataclass(frozen=True)
class SearchResult:
    hits: list[Hit]
    index_seconds: float  # faiss and Eq. 7 on the rescoring threads, queueing excluded


class Corpus:
    def __init__(
        self,
        store: DocumentStore,
        embedder: DocumentEmbedder,
        follower: IndexFollower,
        rescoring: Executor,
        metrics: Metrics,
        *,
        exact_ranks: bool,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.follower = follower
        self.rescoring = rescoring  # runs the faiss search and the Eq. 7 rescoring
        self.metrics = metrics
        self.exact_ranks = exact_ranks  # a rank store rules candidates out, or scores them

    @property
    def applied_revision(self) -> int:
        return self.follower.applied_revision

    @property
    def state(self) -> IndexState | None:
        return self.follower.state

    def not_ready_reason(self) -> str | None:
        return self.follower.not_ready_reason()

    def ready_state(self, engine: Engine) -> IndexState:
        return self.follower.ready_state(engine)

    async def upsert(self, engine: Engine, documents: Sequence[NewDocument]) -> int:
        """Embed (so the follower finds the vectors cached), write, wait until indexed here."""
        await self.embedder.embed(engine, [doc.text for doc in documents])
        _, revision = await self.store.upsert(documents)
        await self.follower.wait_applied(revision)
        return revision

    async def delete(self, ids: Sequence[str]) -> tuple[list[bool], int]:
        existed, revision = await self.store.delete(ids)
        await self.follower.wait_applied(revision)
        return existed, revision

    async def search(
        self,
        engine: Engine,
        state: IndexState,
        query: torch.Tensor,
        *,
        top_k: int,
        candidates: int,
        lambda_inf: float,
        where: Clause | None,
        offset: int = 0,
    ) -> SearchResult:
        """Eq. 7 hits offset..offset + top_k, with each document's current text and metadata.

        The index ranks offset + top_k documents (from at least as many candidates) and the
        page is cut from them, so with candidates >= offset + top_k consecutive pages are the
        slices of one longer search. Reading the page back from Redis drops any document
        deleted, or whose metadata no longer passes the filter, after this replica last
        applied the change log.
        """
        ranked = offset + top_k

        def search() -> tuple[SearchHits, float]:
            # The anchors' key (a digest of the matrix, once per anchor set) only when a rank
            # store could use it, and on this thread rather than the event loop.
            start = time.perf_counter()
            with_store = state.index.rank_store is not None
            hits = state.index.search(
                query,
                engine.anchors.embeddings,
                top_k=ranked,
                candidates=candidates,  # the index takes max(candidates, top_k)
                lambda_inf=lambda_inf,
                where=where,
                anchors_key=engine.anchors.key if with_store else None,
                exact=self.exact_ranks,
            )
            return hits, time.perf_counter() - start

        # Threads of its own: a search never queues behind encoder batches (issue 13).
        hits, seconds = await asyncio.get_running_loop().run_in_executor(self.rescoring, search)
        self.metrics.search_index.observe(seconds)
        numbers = hits.ids.tolist()
        ids = [state.ids.get(number) for number in numbers]
        known = [k for k, doc_id in enumerate(ids) if doc_id is not None and k >= offset]
        documents = await self.store.get_many([ids[k] for k in known])
        passes = compile_predicate(where) if where is not None else None
        results = []
        for k, doc in zip(known, documents, strict=True):
            if doc is None or doc.number != numbers[k]:
                continue
            if passes is not None and not passes(doc.metadata):
                continue
            results.append(
                Hit(doc, float(hits.scores[k]), float(hits.cosine[k]), float(hits.rank[k]))
            )
        return SearchResult(results, seconds)
