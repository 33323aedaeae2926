"""POST /encode: unit embeddings of a list of texts."""

from fastapi import APIRouter

from core.settings import Settings
from service.auth import data_router
from service.dependencies import BatcherDep, EngineDep
from service.errors import ENCODING_ROUTE_ERRORS
from service.limits import Limits
from service.schemas import EncodeResponse, request_models
from service.vector_json import VectorJSONResponse, float32_rows


def build_router(settings: Settings) -> APIRouter:
    models = request_models(Limits.from_settings(settings))
    router = data_router(settings, "encode")

    @router.post(
        "/encode",
        response_model=EncodeResponse,
        responses=ENCODING_ROUTE_ERRORS,
    )
    async def encode(
        body: models.encode, engine: EngineDep, batcher: BatcherDep
    ) -> VectorJSONResponse:
        """L2-normalised embeddings, in the order of `texts`; too-long texts are truncated."""
        encoded = await batcher.encode(engine, body.texts)
        return VectorJSONResponse(
            {
                "embeddings": float32_rows(encoded.embeddings),
                "dim": engine.dim,
                "model_version": engine.version,
                "truncated": encoded.truncated,
            }
        )

    return router
