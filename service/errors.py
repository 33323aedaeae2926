"""The one place where error kinds become status codes and the body every error shares.

Body: `{"error": {"message": str, "type": str, "code": int}}`, `code` being the HTTP status.
Route modules raise an `ApiError` subclass; the document store's and the batcher's own
errors (plain exceptions, so that core/ and the batcher know nothing of HTTP) and any
RedisError are mapped here too; FastAPI's own validation errors and Starlette's
HTTP exceptions (404, 405, 413 from the body limit) are rewritten into the same body, and a
catch-all keeps even an unexpected failure in that shape. The HTTP server's own refusals
(service/http_protocol.py: malformed requests, oversized headers, timeouts) take their
status and type from the kinds below too, and write the same body with `error_body`.

Client messages are fixed strings: a cause that could name a host, a port or a path goes to
the log, under the request id the response carries in X-Request-Id (service/request_id.py).
"""

import logging
from collections.abc import Mapping
from typing import Any, ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from core.documents import StoreUnavailableError
from service.metrics import MODEL_VERSION_HEADER, NO_MODEL, SCOPE_MODEL_VERSION
from service.queue_full import QueueFullError
from service.request_id import REQUEST_ID_HEADER, scope_request_id

logger = logging.getLogger(__name__)


class ErrorDetail(BaseModel):
    message: str
    type: str
    code: int


class ErrorBody(BaseModel):
    error: ErrorDetail


class ApiError(Exception):
    """Base of every error a handler raises on purpose; subclasses fix status and type."""

    status_code: ClassVar[int] = 500
    error_type: ClassVar[str] = "internal_error"

    def __init__(self, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = dict(headers or {})


class BadRequestError(ApiError):
    """Not HTTP the server could parse, or a body that could not be read."""

    status_code = 400
    error_type = "bad_request"


class InvalidRequestError(ApiError):
    status_code = 422
    error_type = "invalid_request"


class UnauthorizedError(ApiError):
    status_code = 401
    error_type = "unauthorized"

    def __init__(
        self, message: str = "a valid API key is required (Authorization: Bearer)"
    ) -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class ForbiddenError(ApiError):
    """The endpoint exists but is switched off here (the admin API without a token)."""

    status_code = 403
    error_type = "forbidden"


class NotFoundError(ApiError):
    status_code = 404
    error_type = "not_found"


class ConflictError(ApiError):
    """The target's state forbids the operation: an ended job, a corrupt bundle."""

    status_code = 409
    error_type = "conflict"


class RequestTimeoutError(ApiError):
    """The client did not send a request's headers, or its body, within the server's limits."""

    status_code = 408
    error_type = "request_timeout"


class PayloadTooLargeError(ApiError):
    status_code = 413
    error_type = "payload_too_large"


class UriTooLongError(ApiError):
    """The request line alone is over the header limit (service/http_protocol.py)."""

    status_code = 414
    error_type = "uri_too_long"


class HeadersTooLargeError(ApiError):
    """The request line and headers are over the byte limit, or there are too many headers."""

    status_code = 431
    error_type = "headers_too_large"


class OverloadedError(ApiError):
    status_code = 429
    error_type = "overloaded"

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(
            "the encoder queue is full; retry later",
            headers={"Retry-After": str(retry_after_s)},
        )


class NotReadyError(ApiError):
    status_code = 503
    error_type = "not_ready"

    def __init__(self, message: str = "the model is still loading") -> None:
        super().__init__(message)


class StoreDownError(ApiError):
    """Redis, the source of truth, did not answer: nothing was written or read."""

    status_code = 503
    error_type = "store_unavailable"

    def __init__(self, message: str = "the document store is unavailable") -> None:
        super().__init__(message)


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

# Statuses Starlette raises itself, by the type name they get in the body.
_HTTP_TYPES = {
    # FastAPI's 400 for a body it could not read (the client went away mid-body).
    400: BadRequestError.error_type,
    401: UnauthorizedError.error_type,
    404: NotFoundError.error_type,
    405: "method_not_allowed",
    413: PayloadTooLargeError.error_type,
    422: InvalidRequestError.error_type,
    429: OverloadedError.error_type,
    503: NotReadyError.error_type,
}


def error_response(
    status_code: int, error_type: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(message=message, type=error_type, code=status_code))
    return JSONResponse(body.model_dump(), status_code=status_code, headers=headers)


def error_body(error: type[ApiError], message: str) -> bytes:
    """The JSON body of an error of this kind, for responses written below the ASGI app."""
    detail = ErrorDetail(message=message, type=error.error_type, code=error.status_code)
    return ErrorBody(error=detail).model_dump_json().encode()


def _location(loc: tuple[int | str, ...]) -> str:
    """("body", "texts", 3) -> "texts[3]".

    "body" says nothing to the client, and pydantic's union-branch labels ("text-list",
    "list[constrained-str]") are not field names: both are dropped.
    """
    parts = [part for part in loc if isinstance(part, int) or part.isidentifier()]
    if parts[:1] == ["body"]:
        parts = parts[1:]
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "body"


def validation_message(errors: list[Any]) -> str:
    """One line naming each failing field and what pydantic (or the JSON parser) objected to."""
    messages = []
    for error in errors[:5]:
        if error.get("type") == "json_invalid":
            reason = error.get("ctx", {}).get("error", "invalid JSON")
            messages.append(f"invalid JSON body: {reason}")
        else:
            messages.append(f"{_location(tuple(error.get('loc', ())))}: {error.get('msg')}")
    if len(errors) > 5:
        messages.append(f"and {len(errors) - 5} more errors")
    return "; ".join(messages)


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status_code, exc.error_type, exc.message, exc.headers)


def _domain_error(exc: Exception) -> ApiError:
    """The HTTP kind of an error raised below the routes (core/, the batcher, RQ's Redis).

    Their messages can name a host, a port or a path: the client gets the kind's fixed
    message and the cause goes to the log.
    """
    if isinstance(exc, QueueFullError):
        return OverloadedError(exc.retry_after_s)
    return StoreDownError()


async def _store_error(request: Request, exc: Exception) -> JSONResponse:
    error = _domain_error(exc)
    cause = exc.__cause__ or exc
    # The record carries the request id (`%(request_id)s`, service/server.py's log format).
    logger.warning(
        "%s %s: %s (%s)",
        request.method,
        request.url.path,
        error.error_type,
        cause,
        extra={"request_id": scope_request_id(request.scope)},
    )
    return await _api_error(request, error)


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(
        422, InvalidRequestError.error_type, validation_message(list(exc.errors()))
    )


def _allowed_methods(request: Request) -> str:
    """Every method some route serves at this path.

    Starlette's 405 names only the methods of the first route whose path matched, which is
    wrong when one path is served by several routes (GET and POST /documents).
    """
    routes = request.app.router.routes
    allowed = [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes
        )
    ]
    return ", ".join(allowed)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    error_type = _HTTP_TYPES.get(exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    return error_response(exc.status_code, error_type, str(exc.detail), headers)


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    request_id = scope_request_id(request.scope)
    # On the record explicitly, not only through the filter: any handler sees it.
    logger.exception(
        "unhandled error on %s %s",
        request.method,
        request.url.path,
        exc_info=exc,
        extra={"request_id": request_id},
    )
    # This response leaves from outside the middleware that stamps the version and the
    # request id: stamp them here.
    live = request.app.state.services.holder.current
    version = request.scope.get(SCOPE_MODEL_VERSION) or (live.version if live else NO_MODEL)
    return error_response(
        500,
        ApiError.error_type,
        "internal server error",
        {MODEL_VERSION_HEADER: version, REQUEST_ID_HEADER: request_id},
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    for domain_error in (StoreUnavailableError, RedisError, QueueFullError):
        app.add_exception_handler(domain_error, _store_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)


def error_responses(*errors: type[ApiError]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries for the errors a route can return, all with ErrorBody."""
    documented: dict[int | str, dict[str, Any]] = {}
    for error in errors:
        entry: dict[str, Any] = {"model": ErrorBody, "description": error.error_type}
        if error is OverloadedError:
            entry["headers"] = {
                "Retry-After": {"description": "seconds", "schema": {"type": "integer"}}
            }
        if error.status_code in documented:
            # Two kinds share a status (503: not_ready, store_unavailable): name both.
            earlier = documented[error.status_code]["description"]
            entry["description"] = f"{earlier} or {error.error_type}"
        documented[error.status_code] = entry
    return documented


# What any route that encodes a request body can answer besides 200 (401 added with auth).
ENCODING_ROUTE_ERRORS = error_responses(
    InvalidRequestError, PayloadTooLargeError, OverloadedError, NotReadyError
)
