"""`demo`: a deterministic local model that needs no network and no weights.

The rule it keeps: the same conversation always gets the same reply, streamed the same way,
and the reply behaves like a real model's in every way the pipeline must cope with:

- it answers in plain language from the last user message, and refers back to the vault
  tokens it was given, verbatim (`I'll draft the email to <EMAIL_1>.`), as the system prompt
  asks real models to do; with no tokens it says so;
- a short reasoning part comes first, on the `reasoning` channel;
- when the user asks for a tool (`tool`, `look up`, `search`, `find`, `send`), it calls one:
  a tool of the request whose name the message mentions, else the request's first tool, else
  its own `send_email` (for an email with an `<EMAIL_n>` token to send to) or `lookup`. The
  JSON arguments carry the tokens;
- every text and argument is streamed in chunks of 1 to 6 characters drawn from a generator
  seeded by the conversation, so tokens are routinely split across chunks; `chunk_delay`
  paces the chunks (0 sends them as fast as the consumer takes them);
- usage counts are whitespace-separated words, the demo's notion of a token;
- every reply opens with `INTRO`, a line that says it is holdback's offline demo and that no
  LLM is connected, so a canned reply is never mistaken for a broken model.

`DemoModel` composes the whole reply without I/O; `DemoProvider` only paces it.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import anyio

from holdback.errors import ConfigurationError
from holdback.providers.base import ChatRequest, ToolSpec
from holdback.providers.events import (
    Channel,
    End,
    Event,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from holdback.providers.prompt import system_text
from holdback.tokens import find_tokens, parse_id, token_id

NAME = "demo"
MIN_CHUNK = 1
MAX_CHUNK = 6

_WANTS_TOOL = re.compile(r"\b(tools?|look\s*up|lookup|search|find|send)\b", re.IGNORECASE)
_EMAIL = re.compile(r"\b(e-?mails?|mail|write to|reply to)\b", re.IGNORECASE)
_SUMMARY = re.compile(r"\bsummar", re.IGNORECASE)
_SEND = re.compile(r"\bsend\b", re.IGNORECASE)
INTRO = (
    "_holdback's offline demo model: no LLM is connected, so this is a canned reply "
    "built from your message._"
)
_CLOSINGS = (
    "Tell me if you want anything changed.",
    "Anything else I can help with?",
    "Happy to adjust it if you need.",
    "Let me know how you'd like to go on.",
)


class InvalidDemoSettingError(ConfigurationError):
    """A demo provider setting (chunk pace) is out of range."""


@dataclass(frozen=True, slots=True)
class _ToolPlan:
    name: str
    arguments: str


def _unique_tokens(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for match in find_tokens(text):
        seen.setdefault(match.group(0), None)
    return list(seen)


def _kind(token: str) -> str:
    return parse_id(token_id(token))[0]


def _join(tokens: Sequence[str]) -> str:
    if len(tokens) == 1:
        return tokens[0]
    return ", ".join(tokens[:-1]) + " and " + tokens[-1]


def _words(text: str) -> int:
    return len(text.split())


class DemoModel:
    """Composes the demo reply to a request: the full event list, chunked, no I/O."""

    def reply(self, request: ChatRequest) -> list[Event]:
        """Every event of the reply, in order, ending with `End`."""
        turns = request.turns()
        users = [m.content for m in turns if m.role == "user"]
        message = users[-1] if users else ""
        tokens = _unique_tokens(message)
        earlier = [t for m in turns[:-1] for t in _unique_tokens(m.content) if t not in tokens]
        rng = random.Random(self._seed(request))

        wants_email = bool(_EMAIL.search(message))
        tool = self._tool_plan(request.tools, message, tokens, wants_email)
        reasoning = self._reasoning(message, tokens, wants_email, tool)
        earlier = list(dict.fromkeys(earlier))
        closing = rng.choice(_CLOSINGS)
        content = self._content(message, tokens, earlier, len(users), tool, closing)

        events: list[Event] = []
        self._chunk_text("reasoning", reasoning, rng, events)
        self._chunk_text("content", content, rng, events)
        if tool is not None:
            call_id = (
                "call_demo_"
                + hashlib.sha256((tool.name + tool.arguments).encode()).hexdigest()[:16]
            )
            events.append(ToolCallStart(call_id, tool.name, 0))
            for piece in self._chunks(tool.arguments, rng):
                events.append(ToolCallDelta(call_id, piece))
            events.append(ToolCallEnd(call_id))
        prompt_words = _words(system_text(request.extra_instructions())) + sum(
            _words(m.content) for m in turns
        )
        output_words = _words(reasoning) + _words(content) + (_words(tool.arguments) if tool else 0)
        events.append(End("tool_calls" if tool else "stop", Usage(prompt_words, output_words)))
        return events

    @staticmethod
    def _seed(request: ChatRequest) -> int:
        digest = hashlib.sha256()
        for m in request.messages:
            digest.update(m.role.encode() + b"\x1f" + m.content.encode() + b"\x1e")
        return int.from_bytes(digest.digest()[:8], "big")

    @staticmethod
    def _tool_plan(
        tools: Sequence[ToolSpec], message: str, tokens: list[str], wants_email: bool
    ) -> _ToolPlan | None:
        if not _WANTS_TOOL.search(message):
            return None
        query = " ".join(message.split())[:160]
        if tools:
            lowered = message.lower()
            named = [t for t in tools if t.name.lower() in lowered]
            chosen = (named or list(tools))[0]
            args: dict[str, object] = {"query": query, "mentions": tokens}
            return _ToolPlan(chosen.name, json.dumps(args, ensure_ascii=False))
        emails = [t for t in tokens if _kind(t) == "EMAIL"]
        if wants_email and emails and _SEND.search(message):
            others = [t for t in tokens if t != emails[0]]
            body = "Hello, following up on our conversation"
            body += f" about {_join(others)}." if others else "."
            args = {"to": emails[0], "subject": "Follow-up", "body": body}
            return _ToolPlan("send_email", json.dumps(args, ensure_ascii=False))
        args = {"query": query, "mentions": tokens}
        return _ToolPlan("lookup", json.dumps(args, ensure_ascii=False))

    @staticmethod
    def _reasoning(
        message: str, tokens: list[str], wants_email: bool, tool: _ToolPlan | None
    ) -> str:
        task = "wants an email drafted" if wants_email else "sent a message"
        parts = [f"The user {task}; it has {_words(message)} words."]
        if tokens:
            parts.append(f"It mentions {_join(tokens)}; I must reuse these placeholders verbatim.")
        else:
            parts.append("It contains no placeholders.")
        if tool is not None:
            parts.append(f"They asked for a tool, so I will call {tool.name}.")
        return " ".join(parts)

    @staticmethod
    def _content(
        message: str,
        tokens: list[str],
        earlier: list[str],
        turn: int,
        tool: _ToolPlan | None,
        closing: str,
    ) -> str:
        by_kind = {_kind(t): t for t in reversed(tokens)}
        draft = ""
        if _EMAIL.search(message):
            fallback = tokens[0] if tokens else "them"
            recipient = by_kind.get("EMAIL") or by_kind.get("PERSON") or fallback
            opening = f"I'll draft the email to {recipient}."
            draft = (
                f"Hi {by_kind.get('PERSON', 'there')},\n\nThanks for your message. I'm following "
                "up on what we discussed and will send the details shortly.\n\nBest regards"
            )
        elif _SUMMARY.search(message):
            opening = f"Here is a short summary: your message has {_words(message)} words."
        elif message.rstrip().endswith("?"):
            opening = "Good question. Here is what I can tell from your message."
        elif not message.strip():
            opening = "Your message was empty, so there is nothing for me to work with yet."
        else:
            opening = f"Thanks, I read your message ({_words(message)} words)."
        parts = [opening]
        if tokens:
            it = "it" if len(tokens) == 1 else "them"
            parts.append(f"You mentioned {_join(tokens)}, and I'll keep {it} exactly as written.")
        else:
            parts.append("Your message has no masked values.")
        if earlier:
            parts.append(f"Earlier you also mentioned {_join(earlier)}.")
        if turn > 1:
            parts.append(f"This is message {turn} of our conversation.")
        if tool is not None:
            parts.append(f"I'm calling the {tool.name} tool now.")
        if draft:
            return INTRO + "\n\n" + " ".join(parts) + "\n\n" + draft + "\n\n" + closing
        return INTRO + "\n\n" + " ".join([*parts, closing])

    @staticmethod
    def _chunks(text: str, rng: random.Random) -> list[str]:
        pieces: list[str] = []
        i = 0
        while i < len(text):
            n = rng.randint(MIN_CHUNK, MAX_CHUNK)
            pieces.append(text[i : i + n])
            i += n
        return pieces

    def _chunk_text(
        self, channel: Channel, text: str, rng: random.Random, events: list[Event]
    ) -> None:
        events.extend(TextDelta(channel, piece) for piece in self._chunks(text, rng))


class DemoProvider:
    """Streams the demo model's reply, one chunk every `chunk_delay` seconds."""

    def __init__(self, *, chunk_delay: float = 0.02) -> None:
        if not chunk_delay >= 0:  # also refuses NaN
            raise InvalidDemoSettingError(
                f"demo chunk_delay must be zero or more seconds, not {chunk_delay!r}"
            )
        self.chunk_delay = chunk_delay
        self._model = DemoModel()

    @property
    def name(self) -> str:
        return NAME

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        for i, event in enumerate(self._model.reply(request)):
            if i and self.chunk_delay:
                await anyio.sleep(self.chunk_delay)
            yield event
