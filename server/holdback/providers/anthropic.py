"""`anthropic:<model>`: Anthropic Messages streaming.

The rule it keeps: every event of a Messages stream maps onto the event union, and nothing
else of the wire format leaves this module. The mapping:

- `content_block_start` of a `text` or `thinking` block opens it (any initial text is relayed);
  of a `tool_use` (or `server_tool_use`) block -> `ToolCallStart(id, name, block index)`;
- `text_delta` -> `TextDelta("content")`, `thinking_delta` -> `TextDelta("reasoning")`,
  `input_json_delta` -> `ToolCallDelta` of its block's call; `signature_delta` and
  `citations_delta` carry nothing the user reads and are ignored;
- `content_block_stop` of a tool block -> `ToolCallEnd`;
- `message_start` and `message_delta` carry usage: input tokens (uncached, cache-creation and
  cache-read tokens added up) and the cumulative output count; `message_delta.stop_reason`
  is the finish reason;
- `message_stop` -> `End(stop_reason, usage)`. A tool block still open there (a reply cut by
  `max_tokens` inside a tool call has no `content_block_stop`) is ended first;
- `ping` is ignored, `error` -> `StreamError`; unknown event types are ignored (Anthropic
  documents that new ones may appear). A stream that ends before `message_stop` was cut off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from holdback.providers import payloads as p
from holdback.providers.base import ChatRequest
from holdback.providers.events import (
    End,
    Event,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from holdback.providers.faults import cut_off, error_from_event, malformed_json, protocol_error
from holdback.providers.http import HTTPProvider, UpstreamCall, json_post
from holdback.providers.prompt import system_text
from holdback.providers.sse import SSEvent

PROVIDER = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096

_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use"})
_INPUT_KEYS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


class AnthropicParser:
    """Sans-I/O: Messages SSE events in, provider events out."""

    def __init__(self, provider: str = PROVIDER, secrets: tuple[str, ...] = ()) -> None:
        self._provider = provider
        self._secrets = secrets
        self._done = False
        self._blocks: dict[int, str] = {}  # block index -> block type
        self._open_calls: dict[int, str] = {}  # block index -> call id, while open
        self._stop_reason: str | None = None
        self._input_tokens: int | None = None
        self._output_tokens: int | None = None

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, event: SSEvent) -> list[Event]:
        if self._done:
            return []
        payload = p.json_object(event.data)
        if payload is None:
            return self._fail(malformed_json(self._provider))
        kind = p.text(payload, "type") or event.event
        out: list[Event] = []
        if kind == "content_block_delta":
            return self._delta(payload)
        if kind == "content_block_start":
            self._block_start(payload, out)
        elif kind == "content_block_stop":
            index = p.integer(payload, "index")
            call_id = self._open_calls.pop(index, None) if index is not None else None
            if call_id is not None:
                out.append(ToolCallEnd(call_id))
        elif kind == "message_start":
            self._count_usage(p.obj(p.obj(payload, "message"), "usage"))
        elif kind == "message_delta":
            self._stop_reason = p.opt_text(p.obj(payload, "delta"), "stop_reason") or (
                self._stop_reason
            )
            self._count_usage(p.obj(payload, "usage"))
        elif kind == "message_stop":
            return self._end()
        elif kind == "error":
            return self._fail(error_from_event(self._provider, payload, secrets=self._secrets))
        return out

    def finish(self) -> list[Event]:
        if self._done:
            return []
        return self._fail(cut_off(self._provider, "message_stop"))

    def _block_start(self, payload: Mapping[str, Any], out: list[Event]) -> None:
        index = p.integer(payload, "index")
        block = p.obj(payload, "content_block")
        block_type = p.text(block, "type")
        if index is None:
            return
        self._blocks[index] = block_type
        if block_type == "text" and p.text(block, "text"):
            out.append(TextDelta("content", p.text(block, "text")))
        elif block_type == "thinking" and p.text(block, "thinking"):
            out.append(TextDelta("reasoning", p.text(block, "thinking")))
        elif block_type in _TOOL_BLOCKS:
            call_id = p.opt_text(block, "id") or f"toolu_{index}"
            self._open_calls[index] = call_id
            out.append(ToolCallStart(call_id, p.text(block, "name"), index))
            initial = block.get("input")
            if initial:  # a non-empty input given whole at the start, not streamed
                out.append(ToolCallDelta(call_id, p.arguments_text(initial)))

    def _delta(self, payload: Mapping[str, Any]) -> list[Event]:
        delta = p.obj(payload, "delta")
        delta_type = p.text(delta, "type")
        if delta_type == "text_delta":
            piece = p.text(delta, "text")
            return [TextDelta("content", piece)] if piece else []
        if delta_type == "thinking_delta":
            piece = p.text(delta, "thinking")
            return [TextDelta("reasoning", piece)] if piece else []
        if delta_type == "input_json_delta":
            index = p.integer(payload, "index")
            call_id = self._open_calls.get(index) if index is not None else None
            if call_id is None:
                return self._fail(
                    protocol_error(
                        self._provider, "tool arguments for a block that is not an open tool call"
                    )
                )
            piece = p.text(delta, "partial_json")
            return [ToolCallDelta(call_id, piece)] if piece else []
        return []  # signature_delta, citations_delta and future kinds carry no reply text

    def _count_usage(self, usage: Mapping[str, Any]) -> None:
        counts = [p.integer(usage, key) for key in _INPUT_KEYS]
        if any(c is not None for c in counts):
            self._input_tokens = sum(c or 0 for c in counts)
        output = p.integer(usage, "output_tokens")
        if output is not None:
            self._output_tokens = output

    def _end(self) -> list[Event]:
        out: list[Event] = [ToolCallEnd(call_id) for _, call_id in sorted(self._open_calls.items())]
        self._open_calls.clear()
        usage = None
        if self._input_tokens is not None or self._output_tokens is not None:
            usage = Usage(self._input_tokens or 0, self._output_tokens or 0)
        out.append(End(self._stop_reason, usage))
        self._done = True
        return out

    def _fail(self, error: StreamError) -> list[Event]:
        self._done = True
        return [error]


def build_call(
    request: ChatRequest,
    *,
    model: str,
    base_url: str = DEFAULT_BASE_URL,
    api_key: str | None = None,
) -> UpstreamCall:
    """The HTTP request for a streamed Messages call (no I/O)."""
    body: dict[str, Any] = {
        "model": request.model or model,
        "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS,
        "system": system_text(request.extra_instructions()),
        "messages": [{"role": m.role, "content": m.content} for m in request.turns()],
        "stream": True,
    }
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
            for t in request.tools
        ]
    return json_post(
        PROVIDER,
        base_url.rstrip("/") + "/v1/messages",
        body,
        api_key=api_key,
        key_header=("x-api-key", api_key or ""),
        extra_headers={"anthropic-version": API_VERSION},
    )


class AnthropicProvider(HTTPProvider):
    """Streams replies from the Anthropic Messages API."""

    provider = PROVIDER
    default_base_url = DEFAULT_BASE_URL
    key_variable = "ANTHROPIC_API_KEY"

    def build(self, request: ChatRequest) -> UpstreamCall:
        return build_call(request, model=self.model, base_url=self.base_url, api_key=self._api_key)

    def parser(self, secrets: tuple[str, ...]) -> AnthropicParser:
        return AnthropicParser(PROVIDER, secrets)
