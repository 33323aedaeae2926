"""POST /v1/embeddings: OpenAI's embeddings API, so its clients work unchanged."""

import base64

import torch
from fastapi import APIRouter

from core.settings import Settings
from service.dependencies import BatcherDep, EngineDep
from service.errors import ENCODING_ROUTE_ERRORS
from service.limits import Limits, StrictJSONRoute
from service.schemas import EmbeddingItem, EmbeddingsResponse, Usage, request_models


def base64_float32(vector: torch.Tensor) -> str:
    """OpenAI's base64 format: the raw little-endian float32 bytes of one vector."""
    return base64.b64encode(vector.numpy().astype("<f4", copy=False).tobytes()).decode("ascii")


def build_router(settings: Settings) -> APIRouter:
    models = request_models(Limits.from_settings(settings))
    router = APIRouter(tags=["openai"], route_class=StrictJSONRoute)

    @router.post(
        "/v1/embeddings",
        response_model=EmbeddingsResponse,
        responses=ENCODING_ROUTE_ERRORS,
    )
    async def embeddings(
        body: models.embeddings, engine: EngineDep, batcher: BatcherDep
    ) -> EmbeddingsResponse:
        """`input` is a string or a list of strings; usage counts the tokens the model read."""
        texts = [body.input] if isinstance(body.input, str) else body.input
        encoded = await batcher.encode(engine, texts)
        vectors: list[str] | list[list[float]]
        if body.encoding_format == "base64":
            vectors = [base64_float32(row) for row in encoded.embeddings]
        else:
            vectors = encoded.embeddings.tolist()
        data = [
            EmbeddingItem(index=i, embedding=vector, truncated=truncated)
            for i, (vector, truncated) in enumerate(zip(vectors, encoded.truncated, strict=True))
        ]
        tokens = encoded.tokens_processed
        return EmbeddingsResponse(
            data=data,
            model=body.model or engine.name,
            usage=Usage(prompt_tokens=tokens, total_tokens=tokens),
            model_version=engine.version,
        )

    return router
