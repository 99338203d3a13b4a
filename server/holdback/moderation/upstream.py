"""One JSON POST to a moderation service, through the process's upstream client, bounded.

The rules it keeps:
- the request goes through `providers.transport.UpstreamClient` (no redirects, no
  compression asked for and inflation capped, proxies from the environment, URLs masked in
  logs); connecting, the wait for the response head and every wait for bytes are each
  bounded by the moderator's timeout, and the body by `max_bytes`: one byte more is a
  failure, never a truncated verdict;
- only a `200` with a JSON media type is an answer. `5xx`, `429`, a refused or dropped
  connection and a timeout are `ModerationUnavailableError` (asking again may help); every
  other status, framing fault or oversized body is `ModerationFailedError`;
- the response body is untrusted text: it is parsed, never logged, and never quoted in an
  error. Messages give the status and the cause in our own words (the caller names the
  service, by `where`: scheme, host and port); a key given in a header is never in one.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

import orjson

from holdback.errors import (
    UpstreamDisconnectedError,
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from holdback.moderation.base import ModerationFailedError, ModerationUnavailableError
from holdback.providers.limits import UpstreamLimits
from holdback.providers.transport import UpstreamClient, UpstreamResponse

MAX_ANSWER_BYTES = 64 * 1024  # an OpenAI moderation answer is about 2 KiB
_JSON_TYPES = ("application/json",)


def where(url: str) -> str:
    """A service as it may be named in a message or a log line: scheme, host and port only."""
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}:{parts.port or default}"


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media in _JSON_TYPES or (media.startswith("application/") and media.endswith("+json"))


def _failure(exc: UpstreamError) -> ModerationFailedError:
    """Our error for one of the transport's, by whether asking again could help."""
    if isinstance(exc, UpstreamTimeoutError):
        return ModerationUnavailableError("the service did not answer in time")
    if isinstance(exc, UpstreamUnreachableError | UpstreamDisconnectedError):
        return ModerationUnavailableError("the service could not be reached, or dropped its answer")
    return ModerationFailedError("the service sent an answer that is not valid HTTP, or too large")


async def _body(response: UpstreamResponse, max_bytes: int) -> bytes:
    body = await response.read_limited(max_bytes + 1)
    if len(body) > max_bytes:
        raise ModerationFailedError(f"the service's answer is larger than {max_bytes} bytes")
    return body


async def post_json(
    client: UpstreamClient,
    url: str,
    payload: Mapping[str, object],
    *,
    time_limit: float,
    headers: Mapping[str, str] | None = None,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> object:
    """POST `payload` as JSON to `url`; the parsed JSON of a `200` answer. `time_limit`
    bounds connecting, the wait for the head and each wait for bytes (the caller, usually
    `calls.ModerationCalls`, bounds the whole)."""
    sent = {"content-type": "application/json", "accept": "application/json", **(headers or {})}
    limits = UpstreamLimits(head_timeout=time_limit, reply_timeout=time_limit)
    response: UpstreamResponse | None = None
    try:
        response = await client.request(
            "POST",
            url,
            headers=sent,
            body=orjson.dumps(payload),
            connect=time_limit,
            read=time_limit,
            head=time_limit,
            limits=limits,
        )
        status = response.status
        if status >= 500 or status == 429:
            raise ModerationUnavailableError(f"the service answered HTTP {status}")
        if status != 200:
            raise ModerationFailedError(f"the service answered HTTP {status}, not 200")
        if not _is_json(response.headers.get("content-type", "")):
            raise ModerationFailedError("the service answered with a body that is not JSON")
        body = await _body(response, max_bytes)
    except UpstreamError as exc:
        raise _failure(exc) from None
    finally:
        if response is not None:
            await response.aclose()
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ModerationFailedError("the service answered with a body that is not JSON") from None
