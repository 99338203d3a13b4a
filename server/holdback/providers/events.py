"""The events a provider yields: the only vocabulary that leaves a provider adapter.

The rule this module keeps: no SDK or wire type crosses the adapter boundary. Every adapter,
whatever its upstream speaks, turns a reply into a sequence of these frozen values, and every
stream ends with exactly one terminal event: `End` when the model finished, `StreamError`
when the upstream failed. Nothing follows the terminal event.

Text arrives as `TextDelta`s on a named channel (`content` is what the user reads, `reasoning`
is the model's thinking), so the pipeline can run a separate filter per channel. Tool calls
arrive as `ToolCallStart` (stable call id and name), any number of `ToolCallDelta`s carrying
fragments of the JSON arguments, and `ToolCallEnd`; calls may interleave, so every delta names
its call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

Channel: TypeAlias = Literal["content", "reasoning"]
CHANNELS: Final[tuple[Channel, ...]] = ("content", "reasoning")

ErrorCode: TypeAlias = Literal[
    "upstream_unreachable",
    "upstream_auth",
    "upstream_rate_limited",
    "upstream_error",
    "upstream_protocol",
    "upstream_timeout",
    "upstream_too_large",
]
ERROR_CODES: Final[tuple[ErrorCode, ...]] = (
    "upstream_unreachable",
    "upstream_auth",
    "upstream_rate_limited",
    "upstream_error",
    "upstream_protocol",
    "upstream_timeout",
    "upstream_too_large",
)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts the upstream reported for one reply."""

    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A fragment of reply text on one channel."""

    channel: Channel
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A tool call begins. `call_id` is stable for the whole call; `index` orders the calls."""

    call_id: str
    name: str
    index: int


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a tool call's JSON arguments, exactly as the model wrote it."""

    call_id: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    """A tool call's arguments are complete."""

    call_id: str


@dataclass(frozen=True, slots=True)
class End:
    """The model finished. `finish_reason` is the upstream's own word for why, unchanged."""

    finish_reason: str | None
    usage: Usage | None


@dataclass(frozen=True, slots=True)
class StreamError:
    """The upstream failed; the reply stops here.

    `message` names the provider, the HTTP status and the upstream's error type or code, and
    never carries request text, credentials or more than a short sanitized excerpt of what the
    upstream said. `retryable` tells the caller whether trying the same request later may work.
    """

    code: ErrorCode
    message: str
    retryable: bool


Event: TypeAlias = TextDelta | ToolCallStart | ToolCallDelta | ToolCallEnd | End | StreamError
TerminalEvent: TypeAlias = End | StreamError


def is_terminal(event: Event) -> bool:
    """Whether an event ends its stream."""
    return isinstance(event, End | StreamError)
