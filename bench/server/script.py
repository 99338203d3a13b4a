"""What every party of the benchmark agrees on, computed the same way in every process.

The rule it keeps: a reply is a pure function of its stream key and the tokens of the message
that asked for it. The upstream, the generator and the analysis all derive the same text, the
same chunks and the same fault plan from those two inputs, so nothing has to be smuggled through
the server under test, which only forwards text.

- A *stream key* is lowercase letters only (no detector takes it for a value) and travels in the
  user message as `ref <key>`.
- The reply mentions the message's tokens several times, in the model's exact `<KIND_N>` form,
  and is cut into chunks of 1-6 characters at random, so tokens are split across chunks the way
  a real model's are.
- A *plan* says whether a stream is disturbed, and how: the upstream answers 500 or cuts the
  stream, or the client cancels or disconnects. At most one disturbance per stream, so every
  outcome has one expected cause.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

KEY_RE: Final = re.compile(r"\bref ([a-z]{6,32})\b")
TOKEN_RE: Final = re.compile(r"<[A-Z][A-Z0-9_]*_[1-9][0-9]*>")
DEFAULT_TOKENS: Final = ("<EMAIL_1>", "<PHONE_1>")
# What a token looks like on the wire when restoring failed: a bracketed or escaped opener
# followed by a kind, or a bare id. The script's own words never match.
LEAK_RE: Final = re.compile(
    r"&lt;[A-Za-z0-9_\\]*(?:&gt;)?|<[A-Za-z][A-Za-z0-9_\\]*>?|\b[A-Z][A-Z0-9]*_[1-9][0-9]*\b|<\s*$"
)

_WORDS: Final = (
    "the",
    "plan",
    "looks",
    "good",
    "and",
    "we",
    "can",
    "move",
    "meeting",
    "to",
    "next",
    "week",
    "if",
    "that",
    "suits",
    "you",
    "please",
    "send",
    "signed",
    "form",
    "back",
    "when",
    "our",
    "team",
    "will",
    "review",
    "draft",
    "before",
    "friday",
    "thanks",
    "again",
    "for",
    "quick",
    "reply",
    "let",
    "me",
    "know",
    "what",
    "works",
    "best",
    "I",
    "keep",
    "posted",
    "on",
    "steps",
    "numbers",
    "in",
    "report",
    "still",
    "need",
    "a",
    "second",
    "look",
    "so",
    "should",
    "not",
    "rush",
    "release",
    "email",
    "phone",
    "notes",
    "summary",
    "agenda",
)
_MENTIONS: Final = (
    "I will write to {0} today.",
    "If {0} bounces, I will try {1} instead.",
    "Noted: {1} is the best number and {0} the best address.",
    "A copy goes to {0} as well.",
    "You can reach the desk on {1} after lunch.",
)
_ALPHABET: Final = "abcdefghijklmnopqrstuvwxyz"

PlanKind: TypeAlias = Literal[
    "normal", "upstream_500", "upstream_cut", "client_cancel", "client_disconnect"
]
DISTURBANCES: Final[tuple[PlanKind, ...]] = (
    "upstream_500",
    "upstream_cut",
    "client_cancel",
    "client_disconnect",
)


class ScriptError(ValueError):
    """A stream key or a script parameter is outside what the benchmark can encode."""


def letters(number: int, width: int) -> str:
    """`number` in base 26 with letters for digits, exactly `width` letters long."""
    if not 0 <= number < 26**width:
        raise ScriptError(f"{number} does not fit in {width} letters")
    out = []
    for _ in range(width):
        number, digit = divmod(number, 26)
        out.append(_ALPHABET[digit])
    return "".join(reversed(out))


def stream_key(run: int, conn: int, turn: int) -> str:
    """The key of one reply: run tag, connection and turn, as letters (`bk` + 8 letters)."""
    return "bk" + letters(run, 2) + letters(conn, 3) + letters(turn, 3)


def user_message(conn: int, key: str) -> str:
    """A user message with an e-mail address and a phone number, both unique to `conn`."""
    mailbox = "user." + letters(conn, 3)
    phone = f"+1 415 555 {100 + conn % 100:04d}"
    return f"Please write to {mailbox}@acme-mail.com or call {phone} about the plan, ref {key}."


def find_key(text: str) -> str | None:
    """The stream key a user message carries, if any."""
    m = KEY_RE.search(text)
    return m.group(1) if m else None


def find_tokens(text: str) -> tuple[str, ...]:
    """The distinct tokens of a message, in order of first appearance."""
    seen: dict[str, None] = {}
    for m in TOKEN_RE.finditer(text):
        seen.setdefault(m.group(0), None)
    return tuple(seen)


def reply_text(key: str, tokens: tuple[str, ...], target_chars: int) -> str:
    """The reply for a key: filler sentences with token mentions, about `target_chars` long."""
    if target_chars < 20:
        raise ScriptError("a reply needs at least 20 characters")
    first, second = (tokens + DEFAULT_TOKENS)[:2] if len(tokens) < 2 else tokens[:2]
    rng = random.Random(key)
    parts: list[str] = []
    size = 0
    since_mention = 0
    while size < target_chars:
        if since_mention >= 60:
            sentence = rng.choice(_MENTIONS).format(first, second)
            since_mention = 0
        else:
            words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 10))]
            sentence = " ".join(words).capitalize() + "."
            since_mention += len(sentence)
        parts.append(sentence)
        size += len(sentence) + 1
    return " ".join(parts)


def prose_text(key: str, tokens: tuple[str, ...], target_chars: int) -> str:
    """The reply for a key in sentences of a real reply's length (12 to 26 words, about 70
    to 160 characters), ending in `.` or `?` and nothing else (no `:` or `;`, so a sentence is
    one moderation window), every third one mentioning a token. Each sentence is drawn at
    random from the key, so no two replies share one (a moderator's cache never answers)."""
    if target_chars < 20:
        raise ScriptError("a reply needs at least 20 characters")
    mentions = (tokens + DEFAULT_TOKENS)[:2] if len(tokens) < 2 else tokens[:2]
    rng = random.Random("prose:" + key)
    parts: list[str] = []
    size = 0
    while size < target_chars:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(12, 26))]
        if len(parts) % 3 == 1:
            words.insert(rng.randint(2, len(words) - 1), rng.choice(mentions))
        end = "?" if rng.random() < 0.15 else "."
        sentence = " ".join(words) + end
        sentence = sentence[0].upper() + sentence[1:]  # tokens keep their case
        parts.append(sentence)
        size += len(sentence) + 1
    return " ".join(parts)


def chunk_sizes(key: str, length: int, low: int = 1, high: int = 6) -> list[int]:
    """Chunk lengths, `low`..`high` characters each, that add up to exactly `length`."""
    if not 1 <= low <= high:
        raise ScriptError("chunk sizes need 1 <= low <= high")
    rng = random.Random("chunks:" + key)
    sizes: list[int] = []
    left = length
    while left > 0:
        size = min(rng.randint(low, high), left)
        sizes.append(size)
        left -= size
    return sizes


def split(text: str, sizes: list[int]) -> list[str]:
    """`text` cut at the given chunk sizes."""
    out = []
    at = 0
    for size in sizes:
        out.append(text[at : at + size])
        at += size
    if at != len(text):
        raise ScriptError("chunk sizes do not add up to the text's length")
    return out


@dataclass(frozen=True, slots=True)
class Plan:
    """How one stream is disturbed: `at` is the chunk (upstream) or frame (client) count."""

    kind: PlanKind
    at: int = 0


def plan_for(seed: int | None, key: str, rate: float = 0.04) -> Plan:
    """The disturbance of a stream: none without a seed, else each kind with chance `rate`."""
    if seed is None:
        return Plan("normal")
    rng = random.Random(f"{seed}:{key}")
    draw = rng.random()
    for i, kind in enumerate(DISTURBANCES):
        if draw < rate * (i + 1):
            return Plan(kind, rng.randint(3, 40))
    return Plan("normal")


def restore_offsets(text: str, values: dict[str, str]) -> tuple[str, list[int]]:
    """The restored text, and for every model-text offset its offset in the restored text.

    An offset inside a token maps to the restored offset of the token's start: the part of a
    chunk that can be shown before the token is complete.
    """
    restored: list[str] = []
    mapping: list[int] = []
    out_len = 0
    at = 0
    for m in TOKEN_RE.finditer(text):
        value = values.get(m.group(0))
        if value is None:
            continue
        plain = text[at : m.start()]
        for _ in range(len(plain)):
            mapping.append(out_len)
            out_len += 1
        restored.append(plain)
        mapping.extend([out_len] * (m.end() - m.start()))
        restored.append(value)
        out_len += len(value)
        at = m.end()
    tail = text[at:]
    for _ in range(len(tail) + 1):
        mapping.append(out_len)
        out_len += 1
    restored.append(tail)
    return "".join(restored), mapping
