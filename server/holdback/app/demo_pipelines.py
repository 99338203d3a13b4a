"""The pipelines the leak demonstration plays a scenario through: three naive, one real.

The rule it keeps: the holdback side is the real thing, not a model of it. Its frames come out
of `ReplyMachine` with the same `Guard` + `Restorer` chain `/ws` builds (`ChatService._filter`:
detectors, forbidden terms, the vault's values allowed, the guard's mode and window), so what
the demo shows is what a chat reply does. The naive sides are the designs people ship, each
given holdback's own detectors and the same forbidden terms, so what fails is where each
screens, not how well it matches:

- `per_chunk`: each chunk is screened, then its tokens are replaced, and it is sent;
- `after_stream`: chunks are restored and streamed as they come, and the whole response is
  screened once the stream has ended (a correcting `assistant_replace` frame follows);
- `tail_window`: a fixed 24-character tail is held back; the rest is screened and sent.

All three pass an upstream error's body on as the error's message, as a proxy that relays
errors does. The naive pipelines exist only here; nothing else can select them, and they never
touch a conversation or the store. Demo use only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final, Literal

from holdback.app.demo_scenarios import Scenario, Step
from holdback.detect import default_detectors, detect
from holdback.providers.events import (
    End,
    ErrorCode,
    Event,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from holdback.reply.machine import ReplyMachine
from holdback.stream import Guard, GuardMode, ReplyFilter, Restorer, forbidden_matcher
from holdback.stream.guard import DEFAULT_WINDOW
from holdback.stream.projection import ProjectionMode
from holdback.stream.restorer import json_escape

Pipeline = Literal["per_chunk", "after_stream", "tail_window", "holdback"]
NAIVE: Final[tuple[Pipeline, ...]] = ("per_chunk", "after_stream", "tail_window")
PIPELINES: Final[tuple[Pipeline, ...]] = (*NAIVE, "holdback")
TITLES: Final[dict[str, str]] = {
    "per_chunk": "Per-chunk replace",
    "after_stream": "Filter after streaming",
    "tail_window": "Fixed tail window (24)",
    "holdback": "holdback",
}
TAIL: Final = 24
WireFrame = dict[str, Any]
Steps = list[list[WireFrame]]  # the frames each scripted event produces, in order


def holdback_filter(
    scenario: Scenario,
    *,
    mode: GuardMode = "redact",
    window: int = DEFAULT_WINDOW,
    phone_region: str | None = None,
) -> Callable[[ProjectionMode, bool], ReplyFilter]:
    """The chain `ChatService._filter` builds, for the scenario's vault and terms."""

    def make(projection: ProjectionMode, json_values: bool) -> ReplyFilter:
        guard = Guard(
            default_detectors(),
            forbidden=forbidden_matcher(scenario.forbidden),
            vault=scenario.vault,
            mode=mode,
            window=window,
            phone_region=phone_region,
            projection=projection,
        )
        escape = json_escape if json_values else None
        return ReplyFilter(guard, Restorer(scenario.vault, escape=escape))

    return make


def _event(step: Step, calls: dict[str, int]) -> Event | None:
    if step.kind == "text":
        return TextDelta("content", step.text)
    if step.kind == "tool_start":
        calls[step.call_id] = len(calls)
        return ToolCallStart(step.call_id, step.name, calls[step.call_id])
    if step.kind == "tool_args":
        return ToolCallDelta(step.call_id, step.text)
    if step.kind == "tool_end":
        return ToolCallEnd(step.call_id)
    if step.kind == "end":
        return End(step.name or "stop", None)
    if step.kind == "error":
        code: ErrorCode = "upstream_error"
        # The body itself, so the demo shows the machine never copies upstream text.
        return StreamError(code, step.text, False)
    return None  # cut: the stream ends without a word


def run_holdback(scenario: Scenario, message_id: str = "demo-holdback", **guard: Any) -> Steps:
    machine = ReplyMachine("demo", message_id, holdback_filter(scenario, **guard))
    out: Steps = [[machine.start().wire()]]
    calls: dict[str, int] = {}
    for step in scenario.steps:
        event = _event(step, calls)
        frames = machine.receive(event) if event is not None else machine.interrupt(None)
        out.append([f.wire() for f in frames])
    out[-1].extend(f.wire() for f in machine.done(stored=True))
    return out


class _Naive:
    """What the naive designs share: holdback's detectors and the terms, and plain replace."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self._forbidden = [
            re.compile(re.escape(term), re.IGNORECASE) for term in scenario.forbidden
        ]

    def screen(self, text: str) -> str:
        spans = [(f.start, f.end, f"[redacted {f.kind}]") for f in detect(text)]
        for pattern in self._forbidden:
            spans += [(m.start(), m.end(), "[redacted]") for m in pattern.finditer(text)]
        out, at = [], 0
        for start, end, label in sorted(spans):
            if start >= at:
                out += [text[at:start], label]
                at = end
        return "".join([*out, text[at:]])

    def restore(self, text: str) -> str:
        for token, value in self.scenario.vault.items():
            text = text.replace(token, value)
        return text


def run_naive(scenario: Scenario, pipeline: Pipeline, message_id: str = "demo-naive") -> Steps:
    naive = _Naive(scenario)
    base = {"conversation_id": "demo", "message_id": message_id}
    out: Steps = [[{"type": "assistant_start", **base}]]
    held = ""  # tail_window: the characters held back
    whole: list[str] = []  # after_stream: the response so far

    def delta(text: str, channel: str = "content", **extra: str) -> list[WireFrame]:
        frame = {"type": "assistant_delta", **base, "channel": channel, "text": text, **extra}
        return [frame] if text else []

    def done(reason: str, status: str) -> WireFrame:
        return {"type": "assistant_done", **base, "finish_reason": reason, "status": status}

    for step in scenario.steps:
        frames: list[WireFrame] = []
        if step.kind == "text":
            if pipeline == "per_chunk":
                frames += delta(naive.restore(naive.screen(step.text)))
            elif pipeline == "after_stream":
                whole.append(step.text)
                frames += delta(naive.restore(step.text))
            else:
                buffer = naive.screen(held + step.text)
                cut = max(len(buffer) - TAIL, 0)
                held = buffer[cut:]
                frames += delta(naive.restore(buffer[:cut]))
        elif step.kind == "tool_args":
            args = naive.restore(step.text)
            if pipeline != "after_stream":
                args = naive.restore(naive.screen(step.text))
            frames += delta(args, "tool_call", call_id=step.call_id, name="send_email")
        elif step.kind in ("end", "error", "cut"):
            if pipeline == "tail_window":
                frames += delta(naive.restore(naive.screen(held)))
            if pipeline == "after_stream" and step.kind == "end":
                screened = naive.restore(naive.screen("".join(whole)))
                frames.append({"type": "assistant_replace", **base, "text": screened})
            if step.kind == "error":
                frames.append({"type": "error", **base, "code": step.name, "message": step.text})
                frames.append(done("error", "incomplete"))
            elif step.kind == "cut":
                frames.append(done("other", "incomplete"))
            else:
                frames.append(done(step.name or "stop", "complete"))
        out.append(frames)
    return out


def run(scenario: Scenario, pipeline: Pipeline, **guard: Any) -> Steps:
    if pipeline == "holdback":
        return run_holdback(scenario, **guard)
    return run_naive(scenario, pipeline, f"demo-{pipeline}")
