"""HTTP/1.1 and OpenAI SSE bytes for the fake upstream, with no I/O.

The rule it keeps: the fake upstream speaks exactly the wire format a real OpenAI-compatible
server does (chunked `text/event-stream`, `chat.completion.chunk` objects, a usage chunk with
`"choices": []`, then `data: [DONE]`), and it refuses what it cannot parse with a clear error
instead of guessing. Requests are parsed incrementally (`RequestParser.feed`), so a request
split over any number of reads parses the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import orjson

MAX_HEAD: Final = 16 * 1024
MAX_BODY: Final = 8 * 1024 * 1024
MODEL: Final = "bench-model"


class BadRequestError(ValueError):
    """A request the fake upstream cannot parse: its head or its length is malformed."""


@dataclass(slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""


@dataclass(slots=True)
class RequestParser:
    """Bytes in, complete requests out. Needs `Content-Length` for a body (no chunked upload)."""

    _buf: bytearray = field(default_factory=bytearray)
    _head: Request | None = None
    _need: int = 0

    def feed(self, data: bytes) -> list[Request]:
        self._buf += data
        out: list[Request] = []
        while True:
            if self._head is None:
                end = self._buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buf) > MAX_HEAD:
                        raise BadRequestError("request head too large")
                    return out
                self._head = _parse_head(bytes(self._buf[:end]))
                del self._buf[: end + 4]
                self._need = _body_length(self._head.headers)
            if len(self._buf) < self._need:
                return out
            self._head.body = bytes(self._buf[: self._need])
            del self._buf[: self._need]
            out.append(self._head)
            self._head = None


def _parse_head(raw: bytes) -> Request:
    try:
        text = raw.decode("latin-1")
        request_line, *lines = text.split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError:
        raise BadRequestError("malformed request line") from None
    if not version.startswith("HTTP/1."):
        raise BadRequestError("only HTTP/1.x is spoken here")
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon:
            raise BadRequestError("malformed header line")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise BadRequestError("chunked request bodies are not supported; send Content-Length")
    return Request(method, target.split("?", 1)[0], headers)


def _body_length(headers: dict[str, str]) -> int:
    raw = headers.get("content-length", "0")
    if not raw.isdigit():
        raise BadRequestError("Content-Length must be a number")
    length = int(raw)
    if length > MAX_BODY:
        raise BadRequestError("request body too large")
    return length


def response(
    status: int,
    reason: str,
    body: bytes,
    content_type: str = "application/json",
    *,
    closing: bool = False,
) -> bytes:
    """A complete response with a Content-Length; the connection stays open unless
    `closing` (then it says `connection: close`, so no client sends on it again)."""
    close = "connection: close\r\n" if closing else ""
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\n{close}\r\n"
    )
    return head.encode("ascii") + body


STREAM_HEAD: Final = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
STREAM_END: Final = b"0\r\n\r\n"


def chunked(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(stream_id: str, created: int, delta: object, finish: str | None) -> bytes:
    chunk = {
        "id": stream_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": MODEL,
        "system_fingerprint": "fp_bench",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def role_event(stream_id: str, created: int) -> bytes:
    return _event(stream_id, created, {"role": "assistant", "content": "", "refusal": None}, None)


def content_event(stream_id: str, created: int, text: str) -> bytes:
    return _event(stream_id, created, {"content": text}, None)


def closing_events(stream_id: str, created: int, prompt_tokens: int, completion: int) -> bytes:
    """The finish chunk, the usage chunk and `[DONE]`, as a real stream ends."""
    usage = {
        "id": stream_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": MODEL,
        "system_fingerprint": "fp_bench",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        },
    }
    return (
        _event(stream_id, created, {}, "stop")
        + b"data: "
        + orjson.dumps(usage)
        + b"\n\n"
        + b"data: [DONE]\n\n"
    )


def error_body(message: str, kind: str = "server_error") -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "code": None}})


def last_user_text(body: bytes) -> str:
    """The text of the last user message of a Chat Completions request."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise BadRequestError("request body is not JSON") from None
    messages = payload.get("messages") if isinstance(payload, dict) else None
    if not isinstance(messages, list):
        raise BadRequestError("request has no messages list")
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(
                    part.get("text", "")
                    for part in content
                    if isinstance(part, dict) and isinstance(part.get("text"), str)
                )
    raise BadRequestError("request has no user message")
