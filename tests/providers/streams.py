"""Helpers for provider tests: run a provider, replay bytes through a parser, spell events.

The rule it keeps: expectations are written out as event lists (`content("Hi", "!")`,
`args(call_id, '{"a"', ": 1}")`), and replays go through the same `SSEDecoder` + parser pair
the HTTP pump uses, so a sans-I/O replay and a loopback replay must agree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from holdback.providers.base import ChatRequest, Provider
from holdback.providers.events import (
    Event,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    is_terminal,
)
from holdback.providers.http import StreamParser
from holdback.providers.sse import SSEDecoder

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "providers"


def capture(name: str) -> bytes:
    """The bytes of a capture, e.g. `openai_chat/openai_python_plain_content.sse`."""
    return (FIXTURES / name).read_bytes()


async def collect(provider: Provider, request: ChatRequest) -> list[Event]:
    """Every event of one reply; checks that exactly one terminal event ends it."""
    events = [event async for event in provider.stream(request)]
    assert events, "a provider stream must end with a terminal event"
    assert is_terminal(events[-1]), events[-1]
    assert not any(is_terminal(e) for e in events[:-1]), events
    return events


def replay(new_parser: Callable[[], StreamParser], chunks: Iterable[bytes]) -> list[Event]:
    """Feed byte chunks through a decoder and a parser, as the HTTP pump does."""
    decoder = SSEDecoder()
    parser = new_parser()
    out: list[Event] = []
    for chunk in chunks:
        for sse in decoder.feed(chunk):
            out += parser.feed(sse)
            if parser.done:
                return out
    for sse in decoder.flush():
        out += parser.feed(sse)
        if parser.done:
            return out
    return out + parser.finish()


def content(*pieces: str) -> list[Event]:
    return [TextDelta("content", p) for p in pieces]


def reasoning(*pieces: str) -> list[Event]:
    return [TextDelta("reasoning", p) for p in pieces]


def start(call_id: str, name: str, index: int) -> list[Event]:
    return [ToolCallStart(call_id, name, index)]


def args(call_id: str, *pieces: str) -> list[Event]:
    return [ToolCallDelta(call_id, p) for p in pieces]


def end(call_id: str) -> list[Event]:
    return [ToolCallEnd(call_id)]


def coalesce(events: Iterable[Event]) -> list[Event]:
    """Adjacent text deltas of one channel, and argument deltas of one call, merged."""
    out: list[Event] = []
    for e in events:
        last = out[-1] if out else None
        if isinstance(e, TextDelta) and isinstance(last, TextDelta) and last.channel == e.channel:
            out[-1] = TextDelta(e.channel, last.text + e.text)
        elif (
            isinstance(e, ToolCallDelta)
            and isinstance(last, ToolCallDelta)
            and last.call_id == e.call_id
        ):
            out[-1] = ToolCallDelta(e.call_id, last.arguments + e.arguments)
        else:
            out.append(e)
    return out


def text_of(events: Iterable[Event], channel: str = "content") -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta) and e.channel == channel)


def arguments_of(events: Iterable[Event], call_id: str) -> str:
    return "".join(
        e.arguments for e in events if isinstance(e, ToolCallDelta) and e.call_id == call_id
    )
