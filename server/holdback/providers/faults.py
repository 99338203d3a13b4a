"""Upstream faults as `StreamError` events: one place decides their codes and their words.

The rule it keeps: an error message names the provider, the HTTP status and the upstream's
error type or code, and nothing else we did not choose to say. It never carries request text
or credentials, and what the upstream wrote is cut to a short excerpt with control characters
removed and anything that looks like a key, a secret we were given, or a long opaque string
replaced by `[redacted]`. Whether a fault is worth retrying is decided here too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from holdback.providers.events import ErrorCode, StreamError

EXCERPT_LIMIT = 120

_KEYLIKE = re.compile(
    r"(?:\b(?:sk|pk|rk|ak|key|sess|token)[-_][A-Za-z0-9_\-*.]{4,})"  # sk-..., key_..., token-...
    r"|(?:[A-Za-z0-9_\-+/=*]{28,})"  # long opaque runs: keys, hashes, base64
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_SPACES = re.compile(r"\s+")


def sanitize(text: str, *, secrets: Iterable[str] = (), limit: int = EXCERPT_LIMIT) -> str:
    """A short, single-line excerpt of upstream text that is safe to show and to log."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    text = _CONTROL.sub(" ", text)
    text = _KEYLIKE.sub("[redacted]", text)
    text = _SPACES.sub(" ", text).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def _short_word(value: object) -> str | None:
    """An error type or code, if it is a plausible identifier (never free text)."""
    if isinstance(value, str) and 0 < len(value) <= 64 and re.fullmatch(r"[\w.\-]+", value):
        return value
    return None


def describe_error_payload(payload: object) -> tuple[str | None, str | None]:
    """The (type or code, message) an upstream error object carries, in any common shape.

    Shapes: `{"error": {"type", "code", "message"}}` (OpenAI and compatibles, Anthropic),
    `{"error": "text"}` (Ollama, llama.cpp), `{"detail": ...}` (FastAPI-based servers),
    `{"code", "message"}` (Responses API `error` events and `response.error`).
    """
    if not isinstance(payload, Mapping):
        return None, None
    inner: Any = payload.get("error", payload)
    if isinstance(inner, str):
        return None, inner
    if not isinstance(inner, Mapping):
        return None, None
    kind = _short_word(inner.get("code")) or _short_word(inner.get("type"))
    message = inner.get("message")
    if not isinstance(message, str):
        detail = inner.get("detail")
        message = detail if isinstance(detail, str) else None
    if kind == "error":  # Anthropic's envelope type, not the error's own
        kind = None
    return kind, message


def code_for_kind(kind: str | None) -> tuple[ErrorCode, bool]:
    """The StreamError code and retryability for an upstream error type or code."""
    k = (kind or "").lower()
    if "rate_limit" in k or "rate-limit" in k or k == "insufficient_quota":
        return "upstream_rate_limited", k != "insufficient_quota"
    if "auth" in k or "permission" in k or "api_key" in k:
        return "upstream_auth", False
    if any(w in k for w in ("overloaded", "server_error", "api_error", "timeout", "unavailable")):
        return "upstream_error", True
    return "upstream_error", False


def code_for_status(status: int) -> tuple[ErrorCode, bool]:
    """The StreamError code for an HTTP status, and whether the request may be retried."""
    if status in (401, 403):
        return "upstream_auth", False
    if status == 429:
        return "upstream_rate_limited", True
    if status >= 500:
        return "upstream_error", True
    return "upstream_error", False


def _excerpt_part(message: str | None, secrets: Iterable[str]) -> str:
    if not message:
        return ""
    excerpt = sanitize(message, secrets=secrets)
    return f": {excerpt}" if excerpt else ""


def error_from_status(
    provider: str, status: int, body: bytes, *, secrets: Iterable[str] = ()
) -> StreamError:
    """The error event for an HTTP response that is not a stream."""
    secrets = tuple(secrets)
    code, retryable = code_for_status(status)
    try:
        payload: object = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        payload = None
    kind, message = describe_error_payload(payload)
    if payload is None and body:
        message = body.decode("utf-8", errors="replace")
    label = f" {kind}" if kind else ""
    return StreamError(
        code,
        f"{provider}: upstream returned {status}{label}{_excerpt_part(message, secrets)}",
        retryable,
    )


def error_from_event(provider: str, payload: object, *, secrets: Iterable[str] = ()) -> StreamError:
    """The error event for an error the upstream sent inside an open stream."""
    kind, message = describe_error_payload(payload)
    code, retryable = code_for_kind(kind)
    label = f" {kind}" if kind else ""
    return StreamError(
        code,
        f"{provider}: upstream sent an error mid-stream{label}"
        f"{_excerpt_part(message, tuple(secrets))}",
        retryable,
    )


def protocol_error(provider: str, what: str, *, retryable: bool = True) -> StreamError:
    """The error event for a stream that broke the upstream's own protocol."""
    return StreamError("upstream_protocol", f"{provider}: {what}", retryable)


def malformed_json(provider: str) -> StreamError:
    """The error event for an event whose payload is not a JSON object."""
    return protocol_error(provider, "malformed JSON in the event stream", retryable=False)


def cut_off(provider: str, missing: str) -> StreamError:
    """The error event for a stream that ended before its terminal event."""
    return protocol_error(provider, f"stream ended before the reply finished (no {missing})")
