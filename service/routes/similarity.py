"""POST /similarity: Eq. 7 scores for pairs, or for one source against several targets.
POST /similarity/explain: the same scores with the nearest anchors of each text."""

from fastapi import APIRouter

from core.settings import Settings
from service.auth import data_router
from service.dependencies import BatcherDep, EngineDep
from service.engine import Engine
from service.errors import ENCODING_ROUTE_ERRORS
from service.limits import Limits
from service.pair_scoring import NearestAnchors, score_text_pairs
from service.routes.explain_schemas import (
    ExplainedSource,
    ExplainedTarget,
    ExplainResponse,
    NearestAnchor,
    explain_request_model,
)
from service.schemas import SimilarityResponse, SimilarityScore, request_models


def _anchors(engine: Engine, nearest: NearestAnchors) -> list[NearestAnchor]:
    return [
        NearestAnchor(anchor=i, text=engine.anchors.texts[i], cosine=cosine)
        for i, cosine in zip(nearest.index, nearest.cosine, strict=True)
    ]


def build_router(settings: Settings) -> APIRouter:
    limits = Limits.from_settings(settings)
    models = request_models(limits)
    explain_model = explain_request_model(limits)
    router = data_router(settings, "similarity")

    @router.post(
        "/similarity",
        response_model=SimilarityResponse,
        responses=ENCODING_ROUTE_ERRORS,
    )
    async def similarity(
        body: models.similarity,
        engine: EngineDep,
        batcher: BatcherDep,
    ) -> SimilarityResponse:
        """RankEncoder Eq. 7: lambda * z_i.z_j + (1 - lambda) * cos, z against the anchors."""
        if isinstance(body, models.similarity_pairs):
            pairs = [(a, b) for a, b in body.pairs]
        else:
            pairs = [(body.source, target) for target in body.targets]
        lambda_inf = settings.lambda_inf if body.lambda_ is None else body.lambda_
        scored = await score_text_pairs(engine, batcher, pairs, lambda_inf)
        items = [
            SimilarityScore(
                score=scored.score[k],
                cosine=scored.cosine[k],
                rank=scored.rank[k],
                truncated=scored.truncated[k],
            )
            for k in range(len(pairs))
        ]
        return SimilarityResponse(scores=items, lambda_=lambda_inf, model_version=engine.version)

    @router.post(
        "/similarity/explain",
        response_model=ExplainResponse,
        responses=ENCODING_ROUTE_ERRORS,
    )
    async def explain(
        body: explain_model,
        engine: EngineDep,
        batcher: BatcherDep,
    ) -> ExplainResponse:
        """Eq. 7 of the source against each target, with the anchors nearest each text: the
        top of the rank vectors whose agreement is the rank term."""
        pairs = [(body.source, target) for target in body.targets]
        lambda_inf = settings.lambda_inf if body.lambda_ is None else body.lambda_
        scored = await score_text_pairs(
            engine, batcher, pairs, lambda_inf, nearest_anchors=body.anchors
        )
        source = set(scored.left_anchors[0].index)
        targets = [
            ExplainedTarget(
                score=scored.score[k],
                cosine=scored.cosine[k],
                rank=scored.rank[k],
                truncated=scored.truncated[k],
                nearest_anchors=_anchors(engine, scored.right_anchors[k]),
                shared_anchors=len(source.intersection(scored.right_anchors[k].index)),
            )
            for k in range(len(pairs))
        ]
        return ExplainResponse(
            source=ExplainedSource(nearest_anchors=_anchors(engine, scored.left_anchors[0])),
            targets=targets,
            lambda_=lambda_inf,
            anchor_count=engine.anchors.count,
            model_version=engine.version,
        )

    return router
