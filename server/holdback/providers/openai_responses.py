"""`openai-responses:<model>`: the OpenAI Responses API event stream.

The rule it keeps: every event of a Responses stream maps onto the event union, and nothing
else of the wire format leaves this module. The mapping (the event's JSON `type` decides):

- `response.output_text.delta` and `response.refusal.delta` -> `TextDelta("content")`;
- `response.reasoning_summary_text.delta` and `response.reasoning_text.delta` (raw reasoning,
  from open-weight models served behind the Responses API) -> `TextDelta("reasoning")`;
- `response.output_item.added` of a `function_call` item -> `ToolCallStart(call_id, name,
  output_index)`. The call id is the item's `call_id` (the id a tool result must quote), not
  its item `id`; argument deltas name the item, so both are tracked;
- `response.function_call_arguments.delta` -> `ToolCallDelta`. A server that streams no deltas
  and only sends `response.function_call_arguments.done` gets its whole arguments relayed once;
- `response.output_item.done` of a `function_call` item -> `ToolCallEnd`;
- `response.completed` -> `End(response.status, usage)`, i.e. finish reason `completed`;
  `response.incomplete` -> `End(incomplete_details.reason)`, e.g. `max_output_tokens`;
- `response.failed` and `error` -> `StreamError`. Other events (`response.created`,
  `*.done` summaries, annotations, ...) are ignored. A stream that ends before a terminal
  event was cut off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from holdback.providers import payloads as p
from holdback.providers.base import ChatRequest
from holdback.providers.events import (
    Channel,
    End,
    Event,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from holdback.providers.faults import cut_off, error_from_event, malformed_json, protocol_error
from holdback.providers.http import HTTPProvider, UpstreamCall, json_post
from holdback.providers.openai_chat import DEFAULT_BASE_URL
from holdback.providers.prompt import system_text
from holdback.providers.sse import SSEvent

PROVIDER = "openai-responses"

_TEXT_CHANNELS: dict[str, Channel] = {
    "response.output_text.delta": "content",
    "response.refusal.delta": "content",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.reasoning_text.delta": "reasoning",
}


@dataclass(slots=True)
class _Call:
    call_id: str
    item_id: str | None
    output_index: int | None
    streamed: bool = False
    ended: bool = False


class OpenAIResponsesParser:
    """Sans-I/O: Responses API SSE events in, provider events out."""

    def __init__(self, provider: str = PROVIDER, secrets: tuple[str, ...] = ()) -> None:
        self._provider = provider
        self._secrets = secrets
        self._done = False
        self._calls: list[_Call] = []

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
        channel = _TEXT_CHANNELS.get(kind)
        if channel is not None:
            piece = p.text(payload, "delta")
            return [TextDelta(channel, piece)] if piece else []
        if kind == "response.function_call_arguments.delta":
            return self._arguments(payload, p.text(payload, "delta"), final=False)
        if kind == "response.function_call_arguments.done":
            return self._arguments(payload, p.text(payload, "arguments"), final=True)
        if kind == "response.output_item.added":
            return self._item_added(payload)
        if kind == "response.output_item.done":
            return self._item_done(payload)
        if kind in ("response.completed", "response.incomplete"):
            response = p.obj(payload, "response")
            reason = p.opt_text(p.obj(response, "incomplete_details"), "reason")
            usage = p.usage_from(p.obj(response, "usage"), "input_tokens", "output_tokens")
            out = self._close_calls()
            status = p.opt_text(response, "status") or kind.removeprefix("response.")
            out.append(End(reason or status, usage))
            self._done = True
            return out
        if kind == "response.failed":
            error = p.obj(p.obj(payload, "response"), "error")
            return self._fail(error_from_event(self._provider, error, secrets=self._secrets))
        if kind == "error":
            return self._fail(error_from_event(self._provider, payload, secrets=self._secrets))
        return []

    def finish(self) -> list[Event]:
        if self._done:
            return []
        return self._fail(cut_off(self._provider, "response.completed"))

    def _find(self, item_id: object, output_index: object, call_id: object) -> _Call | None:
        """The open call an event refers to: by item id first, then by index or call id."""
        for call in self._calls:
            if item_id is not None and item_id in (call.item_id, call.call_id):
                return call
        for call in self._calls:
            if (output_index is not None and output_index == call.output_index) or (
                call_id is not None and call_id == call.call_id
            ):
                return call
        return None

    def _item_added(self, payload: Mapping[str, Any]) -> list[Event]:
        item = p.obj(payload, "item")
        if p.text(item, "type") != "function_call":
            return []
        index = p.integer(payload, "output_index")
        position = index if index is not None else len(self._calls)
        item_id = p.opt_text(item, "id")
        call_id = p.opt_text(item, "call_id") or item_id or f"call_{position}"
        call = _Call(call_id, item_id, index)
        self._calls.append(call)
        out: list[Event] = [ToolCallStart(call_id, p.text(item, "name"), position)]
        arguments = p.arguments_text(item.get("arguments"))
        if arguments:
            call.streamed = True
            out.append(ToolCallDelta(call_id, arguments))
        return out

    def _arguments(self, payload: Mapping[str, Any], piece: str, *, final: bool) -> list[Event]:
        call = self._find(
            payload.get("item_id"), payload.get("output_index"), payload.get("call_id")
        )
        if call is None or call.ended:
            return self._fail(
                protocol_error(self._provider, "tool arguments for a call that is not open")
            )
        if final and call.streamed:
            return []
        if not piece:
            return []
        call.streamed = True
        return [ToolCallDelta(call.call_id, piece)]

    def _item_done(self, payload: Mapping[str, Any]) -> list[Event]:
        item = p.obj(payload, "item")
        if p.text(item, "type") != "function_call":
            return []
        call = self._find(item.get("id"), payload.get("output_index"), item.get("call_id"))
        if call is None or call.ended:
            return []
        out: list[Event] = []
        arguments = p.arguments_text(item.get("arguments"))
        if arguments and not call.streamed:
            call.streamed = True
            out.append(ToolCallDelta(call.call_id, arguments))
        call.ended = True
        out.append(ToolCallEnd(call.call_id))
        return out

    def _close_calls(self) -> list[Event]:
        out: list[Event] = []
        for call in self._calls:
            if not call.ended:
                call.ended = True
                out.append(ToolCallEnd(call.call_id))
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
    """The HTTP request for a streamed Responses call (no I/O).

    `store: false` keeps the conversation out of the upstream's stored responses.
    """
    body: dict[str, Any] = {
        "model": request.model or model,
        "instructions": system_text(request.extra_instructions()),
        "input": [{"role": m.role, "content": m.content} for m in request.turns()],
        "stream": True,
        "store": False,
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            }
            for t in request.tools
        ]
    if request.max_output_tokens is not None:
        body["max_output_tokens"] = request.max_output_tokens
    return json_post(
        PROVIDER,
        base_url.rstrip("/") + "/responses",
        body,
        api_key=api_key,
        key_header=("authorization", f"Bearer {api_key}"),
    )


class OpenAIResponsesProvider(HTTPProvider):
    """Streams replies from a Responses API endpoint."""

    provider = PROVIDER
    default_base_url = DEFAULT_BASE_URL
    key_variable = "OPENAI_API_KEY"

    def build(self, request: ChatRequest) -> UpstreamCall:
        return build_call(request, model=self.model, base_url=self.base_url, api_key=self._api_key)

    def parser(self, secrets: tuple[str, ...]) -> OpenAIResponsesParser:
        return OpenAIResponsesParser(PROVIDER, secrets)
