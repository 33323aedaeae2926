"""GET /health (alive), /ready (model and anchors loaded), /info (model and limits)."""

from fastapi import APIRouter

from core.settings import Settings
from service.dependencies import EngineDep, ServicesDep
from service.errors import NotReadyError, error_responses
from service.schemas import HealthResponse, InfoResponse, LimitsInfo, ReadyResponse


def build_router(settings: Settings) -> APIRouter:
    router = APIRouter(tags=["health"])

    @router.get("/health", response_model=HealthResponse)
    async def health() -> HealthResponse:
        """Answers as soon as the process serves HTTP, model loaded or not."""
        return HealthResponse()

    @router.get("/ready", response_model=ReadyResponse, responses=error_responses(NotReadyError))
    async def ready(engine: EngineDep, services: ServicesDep) -> ReadyResponse:
        """200 once the model, the anchors and every registered component are loaded."""
        waiting = [reason for check in services.readiness if (reason := check()) is not None]
        if waiting:
            raise NotReadyError("; ".join(waiting))
        return ReadyResponse(model_version=engine.version)

    @router.get("/info", response_model=InfoResponse, responses=error_responses(NotReadyError))
    async def info(engine: EngineDep, services: ServicesDep) -> InfoResponse:
        """The live model and every request limit, so clients can size their batches."""
        limits, current = services.limits, services.settings
        return InfoResponse(
            model_name=engine.name,
            model_version=engine.version,
            dim=engine.dim,
            device=str(engine.anchors.device),
            encoder_backend=engine.encoder.backend.value,
            anchor_count=engine.anchors.count,
            lambda_inf=current.lambda_inf,
            limits=LimitsInfo(
                max_texts_per_request=limits.max_texts_per_request,
                max_text_chars=limits.max_text_chars,
                max_body_bytes=limits.max_body_bytes,
                max_tokens_per_text=engine.max_tokens,
                max_similarity_pairs=limits.max_similarity_pairs,
                max_similarity_targets=limits.max_similarity_targets,
                max_rerank_texts=limits.max_rerank_texts,
                max_top_k=current.max_top_k,
                max_search_candidates=current.max_search_candidates,
                max_search_offset=current.max_search_offset,
                queue_capacity_texts=current.queue_capacity,
                max_batch_size=current.encode_batch_size,
                max_batch_tokens=engine.encoder.batch_tokens,
                batch_wait_ms=current.batch_wait_ms,
                batch_rejoin_ms=current.batch_rejoin_ms,
                max_json_depth=current.max_json_depth,
                max_header_bytes=current.max_header_bytes,
                max_headers=current.max_headers,
                header_timeout_s=current.header_timeout_s,
                body_timeout_s=current.body_timeout_s,
                keep_alive_timeout_s=current.keep_alive_timeout_s,
            ),
        )

    return router
