"""What every provider is given and what it promises back.

The rule this module keeps: a provider takes a conversation of *tokenized* messages (the
pseudonymized text the model may see, never the originals) and returns an async stream of
`holdback.providers.events` values that ends with exactly one `End` or one `StreamError`.
A provider never raises for an upstream fault: refused connections, HTTP errors, cut or
stalled streams and in-stream errors all become a `StreamError` event. It raises only for a
request that cannot be sent at all (`InvalidRequestError`), before it talks to anyone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from holdback.errors import HoldbackError
from holdback.providers.events import Event

Role: TypeAlias = Literal["system", "user", "assistant"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant")


class InvalidRequestError(HoldbackError, ValueError):
    """A chat request is malformed (unknown role, no messages, bad tool); nothing was sent."""


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One turn of the conversation, as the model sees it (tokens, not values).

    `system` messages are extra instructions: adapters place them after holdback's own system
    prompt, which always comes first.
    """

    role: Role
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidRequestError(
                f"message role must be one of {', '.join(ROLES)}, not {self.role!r}"
            )
        if not isinstance(self.content, str):
            raise InvalidRequestError(
                f"message content must be a string, not {type(self.content).__name__}"
            )


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call; `parameters` is its JSON Schema."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "_-" for c in self.name):
            raise InvalidRequestError(
                "tool names must be non-empty and use only letters, digits, '_' and '-'"
            )


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A conversation to continue.

    `model` overrides the provider's configured model when it is not empty.
    `max_output_tokens` caps the reply where the upstream supports a cap.
    """

    messages: Sequence[ChatMessage]
    model: str = ""
    tools: Sequence[ToolSpec] = ()
    max_output_tokens: int | None = None

    def __post_init__(self) -> None:
        if not any(m.role != "system" for m in self.messages):
            raise InvalidRequestError("a chat request needs at least one user or assistant turn")
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            raise InvalidRequestError("max_output_tokens must be at least 1")
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise InvalidRequestError("tool names must be unique within a request")

    def turns(self) -> list[ChatMessage]:
        """The user and assistant turns, in order."""
        return [m for m in self.messages if m.role != "system"]

    def extra_instructions(self) -> list[str]:
        """The contents of the request's own system messages, in order."""
        return [m.content for m in self.messages if m.role == "system"]


@runtime_checkable
class Provider(Protocol):
    """A model behind a uniform event stream."""

    @property
    def name(self) -> str:
        """The provider spec this instance serves, e.g. `openai:gpt-4o`."""
        ...

    def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        """Stream the model's reply to `request`; always ends with one End or StreamError."""
        ...
