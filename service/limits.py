"""Request limits: what one request (`Limits`) and one connection (`ServerLimits`, enforced by
service/http_protocol.py) may carry, the body-size middleware, and the strict JSON parser that
rejects what `json.loads` lets through (invalid UTF-8, NaN/Infinity, lone surrogates, duplicate
keys) and bodies nested deeper than the depth limit (service/json_route.py parses with it).
"""

import json
import re
from dataclasses import dataclass
from typing import Any

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


# A \uD800-\uDFFF escape; only a lone one survives json.loads as an unencodable str.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a valid JSON number")


def _find_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_find_lone_surrogate(k) or _find_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_find_lone_surrogate(item) for item in value)
    return False


class _DuplicateKeyError(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """object_pairs_hook: a repeated key is an error, not "the last one wins".

    A proxy or a client library that keeps the first of two equal keys would otherwise read
    another request than the one served.
    """
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                # ASCII-escaped and cut: the key is the client's, and goes back in a message.
                name = json.dumps(key[:64])
                raise _DuplicateKeyError(f"duplicate key {name} in an object")
            seen.add(key)
    return value


# A JSON string (escapes included), and every byte but the four brackets.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_INNERMOST = re.compile(rb"\[\]|\{\}")


def _deeper_than(body: bytes, max_depth: int) -> bool:
    """Whether arrays and objects in `body`, valid JSON, nest more than `max_depth` levels.

    On the bytes, at C speed (a walk over the parsed value costs as much as the parse): strip
    the strings and all but the brackets, then remove the innermost pairs, one level a pass.
    """
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    for _ in range(max_depth):
        if not brackets:
            return False
        brackets = _INNERMOST.sub(b"", brackets)
    return bool(brackets)


def depth_message(max_depth: int) -> str:
    return f"arrays and objects are nested deeper than the limit of {max_depth} levels"


def parse_strict_json(body: bytes, max_depth: int) -> Any:
    """RFC 8259 JSON only: UTF-8, no NaN/Infinity, no unpaired surrogate escapes, no duplicate
    keys, arrays and objects nested at most `max_depth` levels.

    Raises json.JSONDecodeError, which FastAPI turns into a RequestValidationError (422).
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise json.JSONDecodeError("body is not valid UTF-8", "", error.start) from None
    try:
        value = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError:
        raise
    except ValueError as error:
        raise json.JSONDecodeError(str(error), text, 0) from None
    except RecursionError:
        # Python's parser recurses per level: far past the limit, it fails before our check.
        raise json.JSONDecodeError(depth_message(max_depth), text, 0) from None
    # Fewer brackets than levels allowed cannot nest too deep: most bodies skip the check.
    containers = body.count(b"[") + body.count(b"{")
    if containers > max_depth and _deeper_than(body, max_depth):
        raise json.JSONDecodeError(depth_message(max_depth), text, 0)
    if _SURROGATE_ESCAPE.search(body) and _find_lone_surrogate(value):
        raise json.JSONDecodeError("unpaired UTF-16 surrogate escape in a string", text, 0)
    return value


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
