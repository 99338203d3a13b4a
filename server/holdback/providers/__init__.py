"""Model providers: streaming adapters that turn any upstream into one small event union.

A provider takes a conversation of tokenized messages (`ChatRequest`) and yields `Event`s:
text deltas on the `content` or `reasoning` channel, tool-call start/delta/end, and exactly one
terminal `End` or `StreamError`. No SDK or wire type leaves an adapter. Build one with
`make_provider("demo" | "openai:<model>" | "openai-responses:<model>" | "anthropic:<model>")`;
every reply is bounded by the `UpstreamLimits` in its `StreamSettings`.
"""

from holdback.providers.base import (
    ChatMessage,
    ChatRequest,
    InvalidRequestError,
    Provider,
    ToolSpec,
)
from holdback.providers.events import (
    End,
    Event,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    is_terminal,
)
from holdback.providers.http import RetryPolicy, StreamSettings
from holdback.providers.limits import UpstreamLimits
from holdback.providers.prompt import SYSTEM_PROMPT, system_text
from holdback.providers.registry import (
    InvalidBaseURLError,
    InvalidProviderSpecError,
    ProviderSpec,
    make_provider,
    parse_spec,
)

__all__ = [
    "SYSTEM_PROMPT",
    "ChatMessage",
    "ChatRequest",
    "End",
    "Event",
    "InvalidBaseURLError",
    "InvalidProviderSpecError",
    "InvalidRequestError",
    "Provider",
    "ProviderSpec",
    "RetryPolicy",
    "StreamError",
    "StreamSettings",
    "TextDelta",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolSpec",
    "UpstreamLimits",
    "Usage",
    "is_terminal",
    "make_provider",
    "parse_spec",
    "system_text",
]
