"""Strict JSON: what `json.loads` lets through and RFC 8259 does not (invalid UTF-8, NaN and
Infinity, lone surrogate escapes, duplicate keys), and values nested past a depth limit.

The service parses request bodies with `parse_strict_json` (service/json_route.py); corpus files
are read line by line with `strict_loads` (core/corpus_files.py).
"""

import json
import re
from typing import Any

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
                raise ValueError(f"duplicate key {name} in an object")
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


def _depth_message(max_depth: int) -> str:
    return f"arrays and objects are nested deeper than the limit of {max_depth} levels"


def strict_loads(text: str) -> Any:
    """`json.loads` refusing NaN/Infinity and duplicate keys (ValueError); a value nested past
    Python's recursion limit raises RecursionError."""
    return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)


def parse_strict_json(body: bytes, max_depth: int) -> Any:
    """RFC 8259 JSON only: UTF-8, no NaN/Infinity, no unpaired surrogate escapes, no duplicate
    keys, arrays and objects nested at most `max_depth` levels.

    Raises json.JSONDecodeError, which the service answers with 422 (service/json_route.py).
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise json.JSONDecodeError("body is not valid UTF-8", "", error.start) from None
    try:
        value = strict_loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as error:
        raise json.JSONDecodeError(str(error), text, 0) from None
    except RecursionError:
        # Python's parser recurses per level: far past the limit, it fails before our check.
        raise json.JSONDecodeError(_depth_message(max_depth), text, 0) from None
    # Fewer brackets than levels allowed cannot nest too deep: most bodies skip the check.
    containers = body.count(b"[") + body.count(b"{")
    if containers > max_depth and _deeper_than(body, max_depth):
        raise json.JSONDecodeError(_depth_message(max_depth), text, 0)
    if _SURROGATE_ESCAPE.search(body) and _find_lone_surrogate(value):
        raise json.JSONDecodeError("unpaired UTF-16 surrogate escape in a string", text, 0)
    return value
