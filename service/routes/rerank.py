"""POST /rerank: texts ordered by their Eq. 7 score against a query, in TEI's or Cohere's shape.

The scores are /similarity's for the pairs (query, text): the one pair scorer, through the
batcher, so a rerank shares encoder batches with every other request.
"""

from fastapi import APIRouter

from core.settings import Settings
from service.auth import data_router
from service.batching import Encoded
from service.dependencies import BatcherDep, EngineDep
from service.errors import ENCODING_ROUTE_ERRORS, InvalidRequestError
from service.limits import Limits
from service.pair_scoring import score_text_pairs
from service.request_id import REQUEST_ID
from service.routes.rerank_schemas import (
    CohereDocumentOut,
    CohereRerankResponse,
    CohereRerankResult,
    TeiRerankResponse,
    TeiRerankResult,
    rerank_models,
)


def _refuse_truncation(encoded: Encoded, _: list[int], right: list[int]) -> None:
    """TEI's `truncate: false`: a text the model would cut is an error, not a flag."""
    counts, limit = encoded.token_counts, encoded.max_tokens
    # distinct_texts puts the query first: every pair's left text is row 0.
    over = [("query", counts[0])] if counts[0] > limit else []
    over += [(f"texts[{k}]", counts[row]) for k, row in enumerate(right) if counts[row] > limit]
    if over:
        where, count = over[0]
        raise InvalidRequestError(
            f"{where}: {count} tokens, more than the {limit} the model reads; "
            "send truncate: true to have it cut instead"
        )


def build_router(settings: Settings) -> APIRouter:
    models = rerank_models(Limits.from_settings(settings))
    router = data_router(settings, "rerank")

    @router.post(
        "/rerank",
        response_model=TeiRerankResponse | CohereRerankResponse,
        # Optional fields (text, document) are left out unless asked for, as TEI and Cohere do.
        response_model_exclude_none=True,
        responses=ENCODING_ROUTE_ERRORS,
    )
    async def rerank(
        body: models.request,
        engine: EngineDep,
        batcher: BatcherDep,
    ) -> TeiRerankResponse | CohereRerankResponse:
        """Texts sorted by Eq. 7 against the query, best first, each with its input `index`.

        A body with `texts` is TEI's request and gets TEI's answer, a list of
        {index, score, text?}; a body with `documents` (strings or {"text": ...}) is Cohere's
        and gets {"results": [{index, relevance_score, document?}], ...}. Both carry `cosine`,
        `rank` and `truncated` beside the score.
        """
        tei = isinstance(body, models.tei)
        if tei:
            texts = body.texts
        else:
            texts = [doc if isinstance(doc, str) else doc.text for doc in body.documents]
        lambda_inf = settings.lambda_inf if body.lambda_ is None else body.lambda_
        check = _refuse_truncation if tei and not body.truncate else None
        scored = await score_text_pairs(
            engine, batcher, [(body.query, text) for text in texts], lambda_inf, check=check
        )
        blended = scored.score
        # Best first; a stable sort keeps equal scores in input order.
        order = sorted(range(len(texts)), key=lambda k: -blended[k])
        if tei:
            return [
                TeiRerankResult(
                    index=k,
                    score=blended[k],
                    cosine=scored.cosine[k],
                    rank=scored.rank[k],
                    truncated=scored.truncated[k],
                    text=texts[k] if body.return_text else None,
                )
                for k in order
            ]
        if body.top_n is not None:
            order = order[: body.top_n]
        return CohereRerankResponse(
            id=REQUEST_ID.get(),
            results=[
                CohereRerankResult(
                    index=k,
                    relevance_score=blended[k],
                    cosine=scored.cosine[k],
                    rank=scored.rank[k],
                    truncated=scored.truncated[k],
                    document=CohereDocumentOut(text=texts[k]) if body.return_documents else None,
                )
                for k in order
            ],
            model=body.model or engine.name,
            lambda_=lambda_inf,
            model_version=engine.version,
        )

    return router
