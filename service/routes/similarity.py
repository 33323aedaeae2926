"""POST /similarity: Eq. 7 scores for pairs, or for one source against several targets."""

from fastapi import APIRouter

from core.settings import Settings
from models.scoring import distinct_texts
from service.dependencies import BatcherDep, EngineDep, SettingsDep
from service.errors import ENCODING_ROUTE_ERRORS
from service.limits import Limits, StrictJSONRoute
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
        unique, left, right = distinct_texts(pairs)
        encoded = await batcher.encode(engine, unique)
        scores = await batcher.run(engine.score_pairs, encoded.embeddings, left, right)
        lambda_inf = settings.lambda_inf if body.lambda_ is None else body.lambda_
        blended = scores.blended(lambda_inf).tolist()
        cosines = scores.cosine.tolist()
        ranks = scores.rank.tolist()
        truncated = encoded.truncated
        items = [
            SimilarityScore(
                score=blended[k],
                cosine=cosines[k],
                rank=ranks[k],
                truncated=truncated[left[k]] or truncated[right[k]],
            )
            for k in range(len(pairs))
        ]
        return SimilarityResponse(scores=items, lambda_=lambda_inf, model_version=engine.version)

    return router
