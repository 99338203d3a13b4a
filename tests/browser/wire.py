"""Wire capture and the leak rules every captured frame is held to.

The rule it keeps: what the browser received is judged exactly as it crossed the wire, frame
by frame *and* as the concatenation of all frames (a value or token split over two frames is
still a leak). Three things must never be there: token text, a forbidden term, and a value the
viewer may not see. The one exception is by design (docs/protocol.md): `message_accepted`
carries, in `masked[].token`, the tokens of the user's *own* values, to show the user what the
model saw instead. Those fields, and only those, are taken out before the token rule applies;
the same frame's other fields (and every `assistant_*` frame) are held to it in full.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from playwright.sync_api import Page, WebSocket

from holdback.tokens import token_id
from tests.browser.canaries import digit_forms, digits, spellings

Direction = Literal["sent", "received"]
# Token text (`<KIND_N>`, see holdback.tokens.TOKEN_RE) in any bracket spelling a page could
# show as one: `<ID>`, `&lt;ID&gt;`, `\u003cID\u003e`, with markdown-escaped underscores too.
ANY_TOKEN_RE = re.compile(
    r"(?:<|&lt;|\\u003c)[A-Z](?:[A-Z0-9]|\\?_)*\\?_[1-9][0-9]*(?:>|&gt;|\\u003e)", re.IGNORECASE
)


@dataclass(frozen=True)
class Frame:
    url: str
    direction: Direction
    payload: str

    def json(self) -> Any:
        return orjson.loads(self.payload)


@dataclass
class WireTap:
    """Every WebSocket frame a page sends and receives, in order, across reconnects."""

    frames: list[Frame] = field(default_factory=list)
    sockets: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> WireTap:
        page.on("websocket", lambda ws: self._watch(ws))
        return self

    def _watch(self, ws: WebSocket) -> None:
        url = ws.url
        self.sockets.append(url)
        ws.on("framereceived", lambda payload: self._add(url, "received", payload))
        ws.on("framesent", lambda payload: self._add(url, "sent", payload))

    def _add(self, url: str, direction: Direction, payload: str | bytes) -> None:
        text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
        self.frames.append(Frame(url, direction, text))

    def received(self, path: str = "/ws") -> list[Frame]:
        return [f for f in self.frames if f.direction == "received" and f.url.endswith(path)]

    def received_json(self, path: str = "/ws") -> list[dict[str, Any]]:
        return [f.json() for f in self.received(path)]

    def of_type(self, kind: str, path: str = "/ws") -> list[dict[str, Any]]:
        return [f for f in self.received_json(path) if f.get("type") == kind]

    def wait_for(
        self,
        page: Page,
        ready: Callable[[], bool],
        what: str,
        timeout: float = 15.0,
    ) -> None:
        """Poll until `ready()`; Playwright dispatches sync-API events only inside its calls."""
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            page.wait_for_timeout(25)

    def done_frame(self, page: Page, after: int = 0, timeout: float = 15.0) -> dict[str, Any]:
        """The `assistant_done` frame after the first `after` ones."""
        self.wait_for(
            page, lambda: len(self.of_type("assistant_done")) > after, "assistant_done", timeout
        )
        return self.of_type("assistant_done")[after]


STRUCTURAL = frozenset("<>_")


def leak_ranges(text: str, tokens: list[str]) -> list[tuple[int, int]]:
    """Maximal ranges of `text` covered by token fragments: the leak demonstration's *leak*
    (docs/ui.md), a whole token or a substring of one, >= 2 long, holding `<`, `>` or `_`."""
    covered: list[tuple[int, int]] = []
    longest = max((len(t) for t in tokens), default=0)
    for i in range(len(text)):
        for n in range(min(longest, len(text) - i), 1, -1):
            piece = text[i : i + n]
            if STRUCTURAL.intersection(piece) and any(piece in t for t in tokens):
                covered.append((i, i + n))
                break
    merged: list[tuple[int, int]] = []
    for start, end in sorted(covered):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def reply_texts(frames: Iterable[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """Concatenated `assistant_delta` text per (message id, channel), in arrival order."""
    texts: dict[tuple[str, str], str] = {}
    for frame in frames:
        if frame.get("type") == "assistant_delta":
            key = (str(frame.get("message_id")), str(frame.get("channel")))
            texts[key] = texts.get(key, "") + str(frame.get("text", ""))
    return texts


def strip_own_tokens(frame: dict[str, Any]) -> dict[str, Any]:
    """The frame without `message_accepted.masked[].token`, the one field allowed to hold one."""
    if frame.get("type") != "message_accepted" or not isinstance(frame.get("masked"), list):
        return frame
    masked = [{k: v for k, v in m.items() if k != "token"} for m in frame["masked"]]
    return {**frame, "masked": masked}


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


@dataclass(frozen=True)
class LeakRules:
    """What may not cross the wire to this viewer."""

    known_tokens: frozenset[str]  # every token assigned so far (their bare ids count too)
    forbidden_terms: tuple[str, ...]
    hidden_values: tuple[str, ...]  # values the viewer may not see

    def findings(self, text: str) -> list[str]:
        """What is wrong with one piece of wire text (described without the value itself)."""
        found: list[str] = []
        for m in ANY_TOKEN_RE.finditer(text):
            found.append(f"token text {m.group(0)}")
        for token in self.known_tokens:
            ident = token_id(token)
            escaped_underscores = re.escape(ident).replace("_", r"\\?_")
            pattern = rf"(?<![A-Za-z0-9]){escaped_underscores}(?![A-Za-z0-9])"
            if re.search(pattern, text, re.IGNORECASE):
                found.append(f"bare id {ident}")
        lowered = text.lower()
        for i, term in enumerate(self.forbidden_terms):
            if term.lower() in lowered:
                found.append(f"forbidden term #{i}")
        for i, value in enumerate(self.hidden_values):
            if any(form.lower() in lowered for form in spellings(value)):
                found.append(f"hidden value #{i}")
        return found

    def digit_findings(self, text: str) -> list[str]:
        """Hidden numbers however they are punctuated (for reply text, not whole frames)."""
        text_digits = digits(text)
        return [
            f"hidden number #{i}"
            for i, value in enumerate(self.hidden_values)
            if any(form in text_digits for form in digit_forms(value))
        ]


def wire_findings(tap: WireTap, rules: LeakRules) -> list[str]:
    """Every breach of `rules` in the received frames: each alone, and all of them joined."""
    problems: list[str] = []
    payloads: list[str] = []
    decoded: list[str] = []
    frames = []
    for n, frame in enumerate(tap.frames):
        if frame.direction != "received":
            continue
        data = frame.json()
        stripped = strip_own_tokens(data)
        raw = frame.payload if stripped is data else orjson.dumps(stripped).decode()
        text = "\n".join(_strings(stripped))
        frames.append(stripped)
        payloads.append(raw)
        decoded.append(text)
        for problem in rules.findings(raw) + rules.findings(text):
            problems.append(f"frame {n} ({data.get('type')}): {problem}")
    for problem in rules.findings("".join(payloads)) + rules.findings("".join(decoded)):
        problems.append(f"all frames joined: {problem}")
    for (message_id, channel), text in reply_texts(frames).items():
        for problem in rules.findings(text) + rules.digit_findings(text):
            problems.append(f"reply {message_id} {channel} joined: {problem}")
    return sorted(set(problems))
