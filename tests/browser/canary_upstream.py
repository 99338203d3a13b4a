"""The fake model server of the browser tests: OpenAI Chat Completions SSE on 127.0.0.1.

The rule it keeps: the reply is chosen by a marker at the start of the last user message
(`canary:<script>[:<arg>] <body>`), so a test scripts the model through the browser alone, and
every request is recorded whole, so a test can prove the model never received an original
value. The body is the text *as the model got it*, tokens and all. Scripts:

- `echo`: the body back, cut into chunks of 1–5 characters (tokens get split);
- `chars`: the body back, one character per chunk;
- `split:K`: the body back in two chunks, cut at character K;
- `inject`: a reply that invents values of every kind and writes forbidden terms, and refers
  to the first token of the body (which must come back restored);
- `invent`: the body back, followed by tokens that are in no vault;
- `think`: the body as reasoning (`reasoning_content`), then again as the answer;
- `xss`: script payloads, each cut across chunks;
- `slow:N`: the body N times, slowly, so a test can cancel or reconnect mid-reply.

A message without a marker is echoed like `echo`.
"""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from holdback.tokens import TOKEN_RE
from tests.browser.canaries import INVENTED_TOKENS, XSS_PAYLOADS, injection_text
from tests.providers.fakeserver import FakeUpstream, RecordedRequest, Reply, split_random

MARKER_RE = re.compile(r"\Acanary:(?P<script>[a-z]+)(?::(?P<arg>\d+))?[ \n]?")
FAST_DELAY = 0.002
SLOW_DELAY = 0.05


class UnknownScriptError(Exception):
    """A test asked the fake model for a script it does not have."""


@dataclass(frozen=True)
class Script:
    name: str
    arg: int | None
    body: str


def parse_script(text: str) -> Script:
    m = MARKER_RE.match(text)
    if m is None:
        return Script("echo", None, text)
    arg = m.group("arg")
    return Script(m.group("script"), int(arg) if arg else None, text[m.end() :])


def last_user_text(request: RecordedRequest) -> str:
    body: Any = request.json()
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            return str(message.get("content", ""))
    return ""


def xss_pieces() -> list[str]:
    """Every payload cut in three, mid-tag; the last one also one character at a time."""
    pieces: list[str] = ["Here you go:\n\n"]
    for payload in XSS_PAYLOADS:
        a, b = len(payload) // 3, 2 * len(payload) // 3
        pieces += [payload[:a], payload[a:b], payload[b:], "\n\n"]
    pieces += list(XSS_PAYLOADS[0])
    pieces.append("\n\nDone.")
    return pieces


Piece = tuple[str, str]  # (channel, text): "content" or "reasoning"


def pieces_for(script: Script) -> tuple[list[Piece], float]:
    """The deltas a script streams, and the delay between them."""
    if script.name == "think":
        rng = random.Random(len(script.body))
        reasoning = [("reasoning", p) for p in split_random(script.body, rng)]
        answer = [("content", p) for p in split_random(script.body, rng)]
        return reasoning + answer, FAST_DELAY
    pieces, delay = content_pieces(script)
    return [("content", p) for p in pieces], delay


def content_pieces(script: Script) -> tuple[list[str], float]:
    """The content deltas a script streams, and the delay between them."""
    body = script.body
    rng = random.Random(len(body))
    if script.name == "echo":
        return split_random(body, rng), FAST_DELAY
    if script.name == "chars":
        return list(body), FAST_DELAY
    if script.name == "split":
        k = script.arg or 0
        return [p for p in (body[:k], body[k:]) if p], FAST_DELAY
    if script.name == "inject":
        m = TOKEN_RE.search(body)
        return split_random(injection_text(m.group(0) if m else "you"), rng), FAST_DELAY
    if script.name == "invent":
        text = body + " Also reach " + ", ".join(INVENTED_TOKENS) + "."
        return split_random(text, rng), FAST_DELAY
    if script.name == "xss":
        return xss_pieces(), FAST_DELAY
    if script.name == "slow":
        pieces: list[str] = []
        for i in range(script.arg or 1):
            pieces += split_random(f"Part {i + 1}: {body}\n\n", rng, 4, 12)
        return pieces, SLOW_DELAY
    raise UnknownScriptError(f"the fake model has no script named {script.name!r}")


def _event(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
    chunk = {
        "id": "chatcmpl-canary",
        "object": "chat.completion.chunk",
        "created": 1727346168,
        "model": "canary",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def sse_chunks(pieces: Sequence[Piece]) -> list[bytes]:
    """A Chat Completions stream: a role delta, one event per piece, the finish, `[DONE]`."""
    field = {"content": "content", "reasoning": "reasoning_content"}
    events = [_event({"role": "assistant", "content": ""})]
    events += [_event({field[channel]: text}) for channel, text in pieces]
    events.append(_event({}, "stop"))
    events.append(b"data: [DONE]\n\n")
    return events


def scripted_reply(request: RecordedRequest) -> Reply:
    try:
        pieces, delay = pieces_for(parse_script(last_user_text(request)))
    except UnknownScriptError as exc:
        return Reply.json(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
    return Reply(chunks=sse_chunks(pieces), chunk_delay=delay)


class CanaryUpstream(FakeUpstream):
    """A `FakeUpstream` that answers each request from its own text instead of a queue."""

    def reply_for(self, request: RecordedRequest) -> Reply:
        return scripted_reply(request)

    def bodies(self) -> list[bytes]:
        with self._lock:
            return [r.body for r in self.requests]


@contextlib.contextmanager
def running_canary_upstream() -> Iterator[CanaryUpstream]:
    server = CanaryUpstream()
    server.start()
    try:
        yield server
    finally:
        server.stop()
