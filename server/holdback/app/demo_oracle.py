"""The leak demonstration's judge: what in a run's raw frames the viewer must not have seen.

The rule it keeps: the oracle shares no code with what it judges. It imports nothing from
holdback (no detectors, no guard, no projection), only the standard library, and it knows the
scenario only as two lists: the `secrets` the viewer must never see and the vault's `tokens`.
`web/leaks.js` is a second, separate implementation of the same definition for the page, and
docs/demo.md states it so a downloaded run can be judged a third way.

A **leak** is a secret found, whole, in what a frame shows the viewer: the reply text of a
stream (each channel, and each tool call, joined across its frames up to and including this
one) or any other string of the frame (an error's message, a correction). It is looked for in
successive decoded forms: verbatim; JSON escapes decoded; HTML entities decoded; markdown
escapes and emphasis taken out; then case, white space and invisible characters ignored. Each
secret counts once per run, at the first frame that shows it, with the form that revealed it.

**Corruption** is a piece of a vault token (`<EMAIL_1>` whole, or `<EMA`, `IL_1>`) in a
frame's text: a display bug, never a leak, and counted separately.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

_JSON_ESCAPE = re.compile(r'\\(u[0-9a-fA-F]{4}|["\\/bfnrt])')
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_MD_MARKS = re.compile(r"[*_`~]")
_INVISIBLE = re.compile(r"[\s\u00ad\u200b-\u200f\u2060\ufeff]+")
_FRAGMENT = re.compile(r"<?[A-Z][A-Z0-9]*_[0-9]+>|<[A-Z][A-Z0-9_]*")


def _json_unescape(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        esc = m.group(1)
        return chr(int(esc[1:], 16)) if esc[0] == "u" else _SIMPLE[esc]

    return _JSON_ESCAPE.sub(one, text)


def _markdown(text: str) -> str:
    return _MD_MARKS.sub("", _MD_ESCAPE.sub(r"\1", text))


def _normalized(text: str) -> str:
    return _INVISIBLE.sub("", text).casefold()


def views(text: str) -> list[tuple[str, str]]:
    """The forms a viewer could read `text` in, each decoding more than the one before."""
    decoded_json = _json_unescape(text)
    entities = html.unescape(decoded_json)
    markdown = _markdown(entities)
    return [
        ("verbatim", text),
        ("json escape", decoded_json),
        ("html entity", entities),
        ("markdown", markdown),
        ("normalized", _normalized(markdown)),
    ]


def _secret_form(secret: str, form: str) -> str:
    if form == "markdown":
        return _markdown(secret)
    if form == "normalized":
        return _normalized(_markdown(secret))
    return secret


@dataclass(frozen=True, slots=True)
class Finding:
    frame: int  # 1-based, in the order the frames were received
    offset: int  # in the frame's string where the finding begins (0: it began earlier)
    field: str  # `text` of a stream, or the frame member that held it
    form: str  # for a leak: the decoded form that revealed it; for corruption: verbatim
    text: str  # the secret, or the token fragment


@dataclass(slots=True)
class Verdict:
    leaks: list[Finding]
    corruption: list[Finding]

    def wire(self) -> dict[str, Any]:
        return {
            "leaks": [asdict(f) for f in self.leaks],
            "corruption": [asdict(f) for f in self.corruption],
        }


def _find(text: str, secret: str, before: str) -> tuple[str, int] | None:
    for (form, view), (_, prior) in zip(views(text), views(before), strict=True):
        at = view.find(_secret_form(secret, form))
        if at != -1:
            return form, max(at - len(prior), 0)
    return None


def _strings(value: Any, path: str = "") -> Iterable[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")


def judge(raw_frames: Iterable[str], secrets: Iterable[str], tokens: Iterable[str]) -> Verdict:
    """Leaks and corruption in a run's frames, each given as the text that was received."""
    secrets, tokens = list(secrets), [t for t in tokens if len(t) >= 2]
    verdict = Verdict([], [])
    seen: set[str] = set()
    streams: dict[str, str] = {}
    for number, raw in enumerate(raw_frames, start=1):
        try:
            frame = json.loads(raw)
        except ValueError:
            frame = raw
        places: list[tuple[str, str, str]] = []  # (field, text to search, text before it)
        for path, value in _strings(frame):
            if (
                isinstance(frame, dict)
                and path == "text"
                and frame.get("type") == "assistant_delta"
            ):
                key = f"{frame.get('channel')}:{frame.get('call_id') or ''}"
                before = streams.get(key, "")
                streams[key] = before + value
                places.append(("text", streams[key], before))
            else:
                places.append((path, value, ""))
            for m in _FRAGMENT.finditer(value):
                if len(m.group()) >= 2 and any(m.group() in t or t in m.group() for t in tokens):
                    verdict.corruption.append(
                        Finding(number, m.start(), path, "verbatim", m.group())
                    )
        for secret in secrets:
            if secret in seen:
                continue
            for path, text, before in places:
                found = _find(text, secret, before)
                if found is not None:
                    seen.add(secret)
                    verdict.leaks.append(Finding(number, found[1], path, found[0], secret))
                    break
    return verdict
