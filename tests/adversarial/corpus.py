"""The vocabulary of the adversarial corpus: script steps, cases, canaries, and the wire they make.

The rule it keeps: a case is pure data (frozen dataclasses, no server code), and the bytes a
fake upstream sends for it are a function of the script, the chunking and the seed only, so
every run of a case, in any suite, sends exactly the same OpenAI Chat Completions stream.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# -- canaries ---------------------------------------------------------------------------------

# Values the model (or the upstream) produces on its own: none may reach a client frame.
INJ_EMAIL = "intruder.canary@injected-leak.example"
ALT_EMAIL = "ann@example.org"
INJ_CARD = "4556 7375 8689 9855"  # Luhn-valid
INJ_PHONE = "+1 650 253 0000"
FORBIDDEN_HOST = "db01.vaultcanary.internal"  # a forbidden-terms entry
FORBIDDEN_WORD = "Kestrelcanary"  # a forbidden-terms entry

# The user's own values: they become tokens; the database never holds them in clear.
USER_EMAIL = "ada.owner@lovelace-canary.example"
USER_TERM = "Zyxwcanary"  # a sensitive-terms entry (file clients.txt, kind `clients`)
USER_CARD = "5425 2334 3010 9903"  # Luhn-valid
USER_TEXT = f"Please draft a note to {USER_TERM}; my email is {USER_EMAIL}."
# The tokens the server assigns in a fresh conversation for USER_TEXT.
TERM_TOKEN = "<CLIENTS_1>"
EMAIL_TOKEN = "<EMAIL_1>"

OK = "Sure, here it is."  # benign text a redacting guard must let through (`must_show`)

SENSITIVE_FILE = "clients.txt"
FORBIDDEN_FILE = "internal.txt"


def write_terms(directory: Path) -> tuple[Path, Path]:
    """The term files the corpus expects: (`--sensitive-terms`, `--forbidden-terms`)."""
    directory.mkdir(parents=True, exist_ok=True)
    sensitive = directory / SENSITIVE_FILE
    sensitive.write_text(f"# clients\n{USER_TERM}\n", encoding="utf-8")
    forbidden = directory / FORBIDDEN_FILE
    forbidden.write_text(f"{FORBIDDEN_HOST}\n{FORBIDDEN_WORD}\n", encoding="utf-8")
    return sensitive, forbidden


# -- script steps -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Content:
    """Visible reply text (`delta.content`)."""

    text: str


@dataclass(frozen=True)
class Reasoning:
    """Reasoning text (`delta.reasoning_content`)."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """A tool call: its first fragment carries the upstream id and the name; the arguments
    (raw JSON text, as the model writes it) follow in deltas cut by the chunking."""

    upstream_id: str
    name: str
    arguments_text: str


@dataclass(frozen=True)
class ErrorEvent:
    """A mid-stream error: `data: <body_json_text>` (or `event: error` when `sse_event`)."""

    body_json_text: str
    sse_event: bool = False


@dataclass(frozen=True)
class HttpError:
    """The upstream answers with this status and body instead of a stream (a script's only step)."""

    status: int
    body_text: str
    content_type: str = "application/json"


@dataclass(frozen=True)
class Finish:
    """The choice's `finish_reason`, then `[DONE]`."""

    reason_text: str


Step = Content | Reasoning | ToolCall | ErrorEvent | HttpError | Finish
Chunking = Literal["one", "char", "random"]
CHUNKINGS: tuple[Chunking, ...] = ("one", "char", "random")


@dataclass(frozen=True)
class Case:
    """One attack. `forbidden`: strings no decoded view of any frame (nor the stored
    conversation) may contain. `must_show`: strings a redacting guard must let through.
    `url_forbidden`: values that must not appear inside any URL (they may appear elsewhere)."""

    name: str
    category: str
    script: tuple[Step, ...]
    forbidden: tuple[str, ...]
    user_text: str = "Hi there"
    must_show: tuple[str, ...] = ()
    url_forbidden: tuple[str, ...] = ()

    @property
    def upstream_ids(self) -> tuple[str, ...]:
        return tuple(s.upstream_id for s in self.script if isinstance(s, ToolCall))

    @property
    def seed(self) -> int:
        return case_seed(self.name)


def case_seed(name: str) -> int:
    """The seed of a case's random chunking: stable across runs and processes."""
    return zlib.crc32(name.encode("utf-8"))


# -- rendering --------------------------------------------------------------------------------


def split_text(text: str, chunking: Chunking, rng: random.Random) -> list[str]:
    """`text` cut as the chunking says: whole, per code point, or 1-7 code points at a time."""
    if not text:
        return []
    if chunking == "one":
        return [text]
    if chunking == "char":
        return list(text)
    pieces, i = [], 0
    while i < len(text):
        n = rng.randint(1, 7)
        pieces.append(text[i : i + n])
        i += n
    return pieces


def _event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode("utf-8") + b"\n\n"


def _chunk(delta: dict[str, object], finish_reason: str | None = None) -> bytes:
    return _event(
        {
            "id": "chatcmpl-adversarial",
            "object": "chat.completion.chunk",
            "model": "gpt-test",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
    )


def render_sse(script: Sequence[Step], chunking: Chunking = "one", seed: int = 0) -> list[bytes]:
    """The SSE events (one `bytes` each) of a streamed script.

    A script without `Finish` or `ErrorEvent` ends with `Finish("stop")`; `[DONE]` follows a
    finish. An `ErrorEvent` ends the stream (nothing after it is sent). `HttpError` steps are
    not part of a stream; see `render`.
    """
    rng = random.Random(seed)
    events: list[bytes] = [_chunk({"role": "assistant", "content": ""})]
    calls = 0
    for step in script:
        if isinstance(step, Content | Reasoning):
            key = "content" if isinstance(step, Content) else "reasoning_content"
            events += [_chunk({key: piece}) for piece in split_text(step.text, chunking, rng)]
        elif isinstance(step, ToolCall):
            head = {"index": calls, "id": step.upstream_id, "type": "function"}
            function = {"name": step.name, "arguments": ""}
            events.append(_chunk({"tool_calls": [{**head, "function": function}]}))
            for piece in split_text(step.arguments_text, chunking, rng):
                fragment = {"index": calls, "function": {"arguments": piece}}
                events.append(_chunk({"tool_calls": [fragment]}))
            calls += 1
        elif isinstance(step, ErrorEvent):
            line = b"event: error\n" if step.sse_event else b""
            events.append(line + b"data: " + step.body_json_text.encode("utf-8") + b"\n\n")
            return events
        elif isinstance(step, Finish):
            events.append(_chunk({}, step.reason_text))
            events.append(b"data: [DONE]\n\n")
            return events
        else:
            raise ValueError(f"{type(step).__name__} cannot be part of a stream")
    events.append(_chunk({}, "tool_calls" if calls else "stop"))
    events.append(b"data: [DONE]\n\n")
    return events


@dataclass(frozen=True)
class Wire:
    """What the fake upstream answers: a status, a content type and the body's chunks."""

    status: int
    content_type: str
    chunks: tuple[bytes, ...]


def render(script: Sequence[Step], chunking: Chunking = "one", seed: int = 0) -> Wire:
    """The whole upstream answer for a script: an HTTP error, or a 200 SSE stream."""
    errors = [s for s in script if isinstance(s, HttpError)]
    if errors:
        if len(script) != 1:
            raise ValueError("an HttpError must be a script's only step")
        error = errors[0]
        return Wire(error.status, error.content_type, (error.body_text.encode("utf-8"),))
    return Wire(200, "text/event-stream; charset=utf-8", tuple(render_sse(script, chunking, seed)))


# -- helpers for writing cases ----------------------------------------------------------------


def runs(text: str, length: int = 20) -> tuple[str, ...]:
    """Every `length`-character run of each line of `text` (key material: none may show)."""
    found: dict[str, None] = {}
    for line in text.splitlines():
        line = line.strip()
        for i in range(len(line) - length + 1):
            found[line[i : i + length]] = None
    return tuple(found)


def digits_of(value: str) -> str:
    return "".join(c for c in value if c.isdigit())


def check_unique(cases: Iterable[Case]) -> None:
    seen: set[str] = set()
    for case in cases:
        if case.name in seen:
            raise ValueError(f"duplicate case name {case.name!r}")
        seen.add(case.name)
