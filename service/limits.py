"""Request limits: what one request (`Limits`) and one connection (`ServerLimits`, enforced by
service/http_protocol.py) may carry, and the body-size middleware. The strict parser of request
bodies is core/strict_json.py's (service/json_route.py calls it).
"""

from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.settings import Settings
from service.errors import PayloadTooLargeError, error_response


@dataclass(frozen=True)
class Limits:
    """What one request may carry; /info publishes these so clients can chunk."""

    max_texts_per_request: int
    max_text_chars: int
    max_body_bytes: int

    @classmethod
    def from_settings(cls, settings: Settings) -> "Limits":
        return cls(
            max_texts_per_request=settings.max_texts_per_request,
            max_text_chars=settings.max_text_chars,
            max_body_bytes=settings.max_body_bytes,
        )

    @property
    def max_similarity_pairs(self) -> int:
        """Two texts per pair: a full request of pairs stays within max_texts_per_request."""
        return max(1, self.max_texts_per_request // 2)

    @property
    def max_similarity_targets(self) -> int:
        return max(1, self.max_texts_per_request - 1)

    @property
    def max_rerank_texts(self) -> int:
        """/rerank's `texts` or `documents`: the query is encoded beside them."""
        return self.max_similarity_targets


@dataclass(frozen=True)
class ServerLimits:
    """What the protocol enforces; /info publishes the same values."""

    max_header_bytes: int
    max_headers: int
    header_timeout_s: float
    body_timeout_s: float
    keep_alive_timeout_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> "ServerLimits":
        return cls(
            max_header_bytes=settings.max_header_bytes,
            max_headers=settings.max_headers,
            header_timeout_s=settings.header_timeout_s,
            body_timeout_s=settings.body_timeout_s,
            keep_alive_timeout_s=settings.keep_alive_timeout_s,
        )


class BodyLimitMiddleware:
    """Pure ASGI: counts body bytes as they stream in and stops at `max_bytes`.

    A declared Content-Length over the limit is answered before any byte is read; a chunked
    upload (no Content-Length) is cut off by the byte that crosses the limit. Starlette's own
    RequestBodyLimitMiddleware replaces the response with plain text; this one keeps the
    error body every other error has.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.message = f"request body is larger than the limit of {max_bytes} bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            response = error_response(413, PayloadTooLargeError.error_type, self.message)
            await response(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # An HTTPException, because FastAPI re-raises those from body parsing
                    # (anything else it reports as a 400) and the error handlers shape it.
                    raise HTTPException(413, detail=self.message)
            return message

        await self.app(scope, counting_receive, send)
