"""POST /v1/embeddings: OpenAI's embeddings API, so its clients work unchanged."""

import base64

import numpy as np
import torch
from fastapi import APIRouter

from core.settings import Settings
from service.auth import data_router
from service.dependencies import BatcherDep, EngineDep
from service.errors import ENCODING_ROUTE_ERRORS
from service.limits import Limits
from service.schemas import EmbeddingsResponse, request_models
from service.vector_json import VectorJSONResponse, float32_rows


def base64_float32(vector: torch.Tensor) -> str:
    """OpenAI's base64 format: the raw little-endian float32 bytes of one vector."""
    return base64.b64encode(vector.numpy().astype("<f4", copy=False).tobytes()).decode("ascii")


def build_router(settings: Settings) -> APIRouter:
    models = request_models(Limits.from_settings(settings))
    router = data_router(settings, "openai")

    @router.post(
        "/v1/embeddings",
        response_model=EmbeddingsResponse,
        responses=ENCODING_ROUTE_ERRORS,
    )
    async def embeddings(
        body: models.embeddings, engine: EngineDep, batcher: BatcherDep
    ) -> VectorJSONResponse:
        """`input` is a string or a list of strings; usage counts the tokens the model read."""
        texts = [body.input] if isinstance(body.input, str) else body.input
        encoded = await batcher.encode(engine, texts)
        vectors: list[str] | np.ndarray
        if body.encoding_format == "base64":
            vectors = [base64_float32(row) for row in encoded.embeddings]
        else:
            vectors = float32_rows(encoded.embeddings)
        tokens = encoded.tokens_processed
        return VectorJSONResponse(
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": vector, "truncated": cut}
                    for i, (vector, cut) in enumerate(zip(vectors, encoded.truncated, strict=True))
                ],
                "model": body.model or engine.name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                "model_version": engine.version,
            }
        )

    return router
