"""POST /similarity: Eq. 7 scores for pairs, or for one source against several targets."""

from fastapi import APIRouter

from core.settings import Settings
from service.dependencies import BatcherDep, EngineDep, SettingsDep
from service.errors import ENCODING_ROUTE_ERRORS
from service.limits import Limits, StrictJSONRoute
from service.pair_scoring import score_text_pairs
from service.schemas import SimilarityResponse, SimilarityScore, request_models


def build_router(settings: Settings) -> APIRouter:
    models = request_models(Limits.from_settings(settings))
    router = APIRouter(tags=["similarity"], route_class=StrictJSONRoute)

    @router.post(
        "/similarity",
        response_model=SimilarityResponse,
        responses=ENCODING_ROUTE_ERRORS,
    )
    async def similarity(
        body: models.similarity,
        engine: EngineDep,
        batcher: BatcherDep,
        settings: SettingsDep,
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

    return router
