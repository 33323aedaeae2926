"""A typed Python client for the rankserve HTTP API, blocking (`Client`) or asyncio
(`AsyncClient`), on httpx and the standard library only.

    from rankserve_client import Client

    with Client("http://127.0.0.1:8000", api_key="...") as client:
        client.encode(["A man is playing a guitar."])["embeddings"]

Responses are the service's JSON, typed as the TypedDicts of `rankserve_client.types`; errors
are `APIError`s carrying the body's `type`, `message` and `code` (docs/api.md, Python client).
It imports nothing of the service, so it can be vendored or packaged on its own.
"""

from rankserve_client.aio import AsyncClient
from rankserve_client.errors import (
    APIError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InternalServerError,
    InvalidRequestError,
    MethodNotAllowedError,
    NotFoundError,
    NotReadyError,
    OverloadedError,
    PayloadTooLargeError,
    RankserveError,
    RequestTimeoutError,
    StoreUnavailableError,
    UnauthorizedError,
)
from rankserve_client.sync import Client

__all__ = [
    "APIError",
    "AsyncClient",
    "BadRequestError",
    "Client",
    "ConflictError",
    "ForbiddenError",
    "InternalServerError",
    "InvalidRequestError",
    "MethodNotAllowedError",
    "NotFoundError",
    "NotReadyError",
    "OverloadedError",
    "PayloadTooLargeError",
    "RankserveError",
    "RequestTimeoutError",
    "StoreUnavailableError",
    "UnauthorizedError",
]
