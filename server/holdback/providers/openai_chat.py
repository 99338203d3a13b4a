"""`openai:<model>`: Chat Completions streaming, for OpenAI and every compatible server.

The rule it keeps: every chunk of a Chat Completions stream maps onto the event union, and
nothing else of the wire format leaves this module. The mapping, for choice index 0 only (a
request made with `n > 1` relays its first choice and drops the others):

- `delta.content` -> `TextDelta("content")`; `delta.refusal` -> `TextDelta("content")` too,
  because a refusal is what the user gets to read;
- `delta.reasoning_content` (DeepSeek, vLLM) or, failing that, `delta.reasoning` (Ollama,
  OpenRouter, Groq) -> `TextDelta("reasoning")`. A server that sends both in one delta sends
  the same text twice, so only the first is relayed;
- `delta.tool_calls[]`, keyed by their `index`: the first fragment of an index opens the call
  (`ToolCallStart` with its `id` and `function.name`; a server that gives no id gets
  `call_<index>`), later `function.arguments` fragments are `ToolCallDelta`s. Calls close
  (`ToolCallEnd`, in index order) when the choice's `finish_reason` arrives;
- `usage` (usually a last chunk with `"choices": []`) -> the `End`'s `Usage`;
- `data: [DONE]` -> `End(finish_reason, usage)`. A server that closes the stream after a
  `finish_reason` but without `[DONE]` still ends cleanly; one that closes before any
  `finish_reason` was cut off (`upstream_protocol`);
- `{"error": ...}` payloads (vLLM, OpenRouter, llama.cpp report mid-stream faults that way) or
  an SSE `event: error` -> `StreamError`. Unknown fields are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
from holdback.providers.faults import cut_off, error_from_event, malformed_json
from holdback.providers.http import HTTPProvider, UpstreamCall, json_post
from holdback.providers.prompt import system_text
from holdback.providers.sse import SSEvent

PROVIDER = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass(slots=True)
class _Call:
    call_id: str
    name: str
    index: int
    started: bool = False
    held: list[str] = field(default_factory=list)  # arguments that came before the name


class OpenAIChatParser:
    """Sans-I/O: Chat Completions SSE events in, provider events out."""

    def __init__(self, provider: str = PROVIDER, secrets: tuple[str, ...] = ()) -> None:
        self._provider = provider
        self._secrets = secrets
        self._done = False
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self._calls: dict[int, _Call] = {}
        self._closed_calls = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, event: SSEvent) -> list[Event]:
        if self._done:
            return []
        data = event.data.strip()
        if data == "[DONE]":
            return self._end()
        payload = p.json_object(data)
        if event.event == "error":
            return self._fail(error_from_event(self._provider, payload, secrets=self._secrets))
        if payload is None:
            return self._fail(malformed_json(self._provider))
        if payload.get("error") is not None:
            return self._fail(error_from_event(self._provider, payload, secrets=self._secrets))
        usage = p.usage_from(p.obj(payload, "usage"), "prompt_tokens", "completion_tokens")
        if usage is not None:
            self._usage = usage
        out: list[Event] = []
        for choice in p.items(payload, "choices"):
            if p.integer(choice, "index") not in (0, None):
                continue
            self._choice(choice, out)
        return out

    def finish(self) -> list[Event]:
        if self._done:
            return []
        if self._finish_reason is not None:
            return self._end()
        return self._fail(cut_off(self._provider, "[DONE]"))

    def _choice(self, choice: Mapping[str, Any], out: list[Event]) -> None:
        delta = p.obj(choice, "delta")
        reasoning = p.opt_text(delta, "reasoning_content") or p.opt_text(delta, "reasoning")
        if reasoning:
            out.append(TextDelta("reasoning", reasoning))
        for key in ("content", "refusal"):
            piece = p.opt_text(delta, key)
            if piece:
                out.append(TextDelta("content", piece))
        for position, fragment in enumerate(p.items(delta, "tool_calls")):
            self._tool_fragment(position, fragment, out)
        finish_reason = p.opt_text(choice, "finish_reason")
        if finish_reason is not None:
            self._finish_reason = finish_reason
            self._close_calls(out)

    def _tool_fragment(self, position: int, fragment: Mapping[str, Any], out: list[Event]) -> None:
        index = p.integer(fragment, "index")
        fragment_id = p.opt_text(fragment, "id")
        if index is None:
            # Servers that omit the index send each call whole; only an id tells calls apart.
            index = self._index_of(fragment_id) if fragment_id else position
        function = p.obj(fragment, "function")
        call = self._calls.get(index)
        if call is None:
            call_id = fragment_id or f"call_{index}"
            call = self._calls[index] = _Call(call_id, p.text(function, "name"), index)
        elif not call.name:
            call.name = p.text(function, "name")
        arguments = p.arguments_text(function.get("arguments"))
        if not call.started and call.name:
            self._start(call, out)
        if not arguments:
            return
        if call.started:
            out.append(ToolCallDelta(call.call_id, arguments))
        else:
            call.held.append(arguments)

    def _index_of(self, call_id: str) -> int:
        for index, call in self._calls.items():
            if call.call_id == call_id:
                return index
        return max(self._calls, default=-1) + 1

    @staticmethod
    def _start(call: _Call, out: list[Event]) -> None:
        call.started = True
        out.append(ToolCallStart(call.call_id, call.name, call.index))
        if call.held:
            out.append(ToolCallDelta(call.call_id, "".join(call.held)))
            call.held.clear()

    def _close_calls(self, out: list[Event]) -> None:
        if self._closed_calls:
            return
        self._closed_calls = True
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call.started:
                self._start(call, out)
            out.append(ToolCallEnd(call.call_id))

    def _end(self) -> list[Event]:
        out: list[Event] = []
        self._close_calls(out)
        out.append(End(self._finish_reason, self._usage))
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
    provider: str = PROVIDER,
) -> UpstreamCall:
    """The HTTP request for a streamed Chat Completion (no I/O)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_text(request.extra_instructions())}
    ]
    messages += [{"role": m.role, "content": m.content} for m in request.turns()]
    body: dict[str, Any] = {
        "model": request.model or model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.parameters),
                },
            }
            for t in request.tools
        ]
    if request.max_output_tokens is not None:
        body["max_completion_tokens"] = request.max_output_tokens
    return json_post(
        provider,
        base_url.rstrip("/") + "/chat/completions",
        body,
        api_key=api_key,
        key_header=("authorization", f"Bearer {api_key}"),
    )


class OpenAIChatProvider(HTTPProvider):
    """Streams replies from a Chat Completions endpoint."""

    provider = PROVIDER
    default_base_url = DEFAULT_BASE_URL
    key_variable = "OPENAI_API_KEY"

    def build(self, request: ChatRequest) -> UpstreamCall:
        return build_call(request, model=self.model, base_url=self.base_url, api_key=self._api_key)

    def parser(self, secrets: tuple[str, ...]) -> OpenAIChatParser:
        return OpenAIChatParser(PROVIDER, secrets)
