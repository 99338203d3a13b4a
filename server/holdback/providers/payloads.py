"""Reading the JSON an upstream streams: untrusted, loosely typed, sometimes extended.

The rule it keeps: adapters read upstream payloads only through these helpers, which take a
field when it has the expected type and treat anything else as absent. Unknown fields are
never an error (upstreams add them freely: `obfuscation`, `logprobs`, `x_groq`, ...), and no
payload type leaves an adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from holdback.providers.events import Usage

Payload = Mapping[str, Any]


def json_object(data: str) -> Payload | None:
    """The JSON object an SSE `data` field holds, or None if it is not one."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def obj(payload: Payload, key: str) -> Payload:
    """A nested object, or an empty one."""
    value = payload.get(key)
    return value if isinstance(value, dict) else {}


def text(payload: Payload, key: str) -> str:
    """A string field, or the empty string."""
    value = payload.get(key)
    return value if isinstance(value, str) else ""


def opt_text(payload: Payload, key: str) -> str | None:
    """A non-empty string field, or None."""
    value = payload.get(key)
    return value if isinstance(value, str) and value else None


def integer(payload: Payload, key: str) -> int | None:
    """An integer field (booleans are not integers here), or None."""
    value = payload.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def items(payload: Payload, key: str) -> list[Payload]:
    """The objects of a list field; anything that is not an object is skipped."""
    value = payload.get(key)
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, dict)]


def arguments_text(value: object) -> str:
    """Tool-call arguments as JSON text: servers that send an object get it serialized."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return ""


def usage_from(payload: Payload, input_key: str, output_key: str) -> Usage | None:
    """A `Usage` from two integer fields; None unless at least one of them is there."""
    inp = integer(payload, input_key)
    out = integer(payload, output_key)
    if inp is None and out is None:
        return None
    return Usage(inp or 0, out or 0)
