"""POST /search: faiss candidates from the corpus, ordered by RankEncoder's Eq. 7."""

import time

from fastapi import APIRouter

from core.settings import Settings
from service.auth import data_router
from service.corpus.filters import condition_tree
from service.corpus.lifespan import CorpusDep
from service.corpus.schemas import (
    DocumentLimits,
    SearchHit,
    SearchResponse,
    document_models,
)
from service.dependencies import BatcherDep, EngineDep
from service.errors import ENCODING_ROUTE_ERRORS, StoreDownError, error_responses
from service.model_json import ModelJSONResponse


def build_router(settings: Settings) -> APIRouter:
    models = document_models(DocumentLimits.from_settings(settings))
    router = data_router(settings, "search")

    @router.post(
        "/search",
        response_model=SearchResponse,
        responses={**ENCODING_ROUTE_ERRORS, **error_responses(StoreDownError)},
    )
    async def search(
        body: models.search,
        engine: EngineDep,
        batcher: BatcherDep,
        corpus: CorpusDep,
    ) -> ModelJSONResponse:
        """The top_k documents by lambda * z_q.z_d + (1 - lambda) * cos among the candidates,
        after skipping `offset` of them.

        `filter` is Qdrant's (must/should/must_not of match, range, is_null and is_empty
        conditions) or a flat object of metadata values to equal; it applies inside the
        candidate search, so up to offset + top_k matching documents are ranked.
        """
        state = corpus.ready_state(engine)
        revision = corpus.applied_revision
        start = time.perf_counter()
        encoded = await batcher.encode(engine, [body.query])
        encode_seconds = time.perf_counter() - start
        lambda_inf = settings.lambda_inf if body.lambda_ is None else body.lambda_
        result = await corpus.search(
            engine,
            state,
            encoded.embeddings[0],
            top_k=body.top_k,
            candidates=body.candidates,
            lambda_inf=lambda_inf,
            where=condition_tree(body.filter),
            offset=body.offset,
        )
        found = SearchResponse(
            hits=[
                SearchHit(
                    id=hit.document.id,
                    text=hit.document.text,
                    metadata=hit.document.metadata,
                    score=hit.score,
                    cosine=hit.cosine,
                    rank=hit.rank,
                )
                for hit in result.hits
            ],
            lambda_=lambda_inf,
            model_version=engine.version,
            revision=revision,
        )
        # W3C Server-Timing: where the time went, for browser dev tools and bench.http_search.
        timing = (
            f"encode;dur={encode_seconds * 1e3:.3f}, index;dur={result.index_seconds * 1e3:.3f}"
        )
        return ModelJSONResponse(found, headers={"Server-Timing": timing})

    return router
