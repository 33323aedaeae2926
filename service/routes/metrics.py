"""GET /metrics: Prometheus exposition of this process's registry, or of every worker's."""

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from core.settings import Settings
from service.dependencies import ServicesDep


def build_router(settings: Settings) -> APIRouter:
    router = APIRouter(tags=["health"])

    @router.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    async def metrics(services: ServicesDep) -> Response:
        """Requests and latency per route and status, batch sizes, queue wait, model version.

        With several workers, the sum over all of them, whichever worker answers.
        """
        return Response(services.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return router
