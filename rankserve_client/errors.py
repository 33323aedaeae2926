"""Exceptions: one per error `type` the service answers with, all carrying the error body.

The service answers every error with `{"error": {"message", "type", "code"}}` (docs/api.md,
Errors); `APIError` keeps those three, the HTTP status, the request id the service logged the
cause under, and the `Retry-After` it asked for. Network failures are httpx's own exceptions
(`httpx.TransportError`), raised unchanged.
"""

import email.utils
import time
from collections.abc import Mapping
from typing import Any


class RankserveError(Exception):
    """Base of everything this client raises on purpose."""


class APIError(RankserveError):
    """The service answered with an error status."""

    def __init__(
        self,
        status_code: int,
        error_type: str,
        message: str,
        *,
        code: int | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(f"{status_code} {error_type}: {message}")
        self.status_code = status_code
        self.type = error_type
        self.message = message
        self.code = status_code if code is None else code
        self.request_id = request_id
        self.retry_after = retry_after
        self.body = body


class BadRequestError(APIError):
    """400: not HTTP the server could parse."""


class UnauthorizedError(APIError):
    """401: a missing or wrong API key or admin token."""


class ForbiddenError(APIError):
    """403: a token sent to /admin while the service has no admin token set."""


class NotFoundError(APIError):
    """404: unknown path, document, job or model version."""


class MethodNotAllowedError(APIError):
    """405."""


class RequestTimeoutError(APIError):
    """408: the request's headers or body arrived too slowly."""


class ConflictError(APIError):
    """409: an ended job cancelled, a damaged bundle activated."""


class PayloadTooLargeError(APIError):
    """413: the body is over the service's byte limit (GET /info: limits.max_body_bytes)."""


class InvalidRequestError(APIError):
    """422: validation or a limit; the message names the field."""


class OverloadedError(APIError):
    """429: the encoder queue is full (retried, honouring Retry-After, before this is raised)."""


class NotReadyError(APIError):
    """503: the model is still loading, or failed to load."""


class StoreUnavailableError(APIError):
    """503: Redis did not answer; nothing was written or read."""


class InternalServerError(APIError):
    """500: an unexpected failure, logged by the service under `request_id`."""


_BY_TYPE: dict[str, type[APIError]] = {
    "bad_request": BadRequestError,
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "not_found": NotFoundError,
    "method_not_allowed": MethodNotAllowedError,
    "request_timeout": RequestTimeoutError,
    "conflict": ConflictError,
    "payload_too_large": PayloadTooLargeError,
    "invalid_request": InvalidRequestError,
    "overloaded": OverloadedError,
    "not_ready": NotReadyError,
    "store_unavailable": StoreUnavailableError,
    "internal_error": InternalServerError,
}
# A proxy in front of the service may answer without the service's body: its status decides.
_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    408: RequestTimeoutError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: InvalidRequestError,
    429: OverloadedError,
    503: NotReadyError,
    500: InternalServerError,
}


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """`Retry-After` as seconds from now: delta-seconds or an HTTP date (RFC 9110); None when
    absent or unreadable."""
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_from_response(
    status_code: int, headers: Mapping[str, str], content: bytes, body: Any
) -> APIError:
    """The exception for an error response; `body` is its parsed JSON, or None."""
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("type"), str):
        error_type = detail["type"]
        message = str(detail.get("message", ""))
        code = detail.get("code") if isinstance(detail.get("code"), int) else None
        kind = _BY_TYPE.get(error_type) or _BY_STATUS.get(status_code, APIError)
    else:
        error_type = "http_error"
        message = content[:500].decode("utf-8", "replace") or f"HTTP {status_code}"
        code = None
        kind = _BY_STATUS.get(status_code, APIError)
    return kind(
        status_code,
        error_type,
        message,
        code=code,
        request_id=headers.get("x-request-id"),
        retry_after=retry_after_seconds(headers),
        body=body,
    )
