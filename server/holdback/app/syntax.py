"""The token syntax for the browser: `GET /syntax.js`, an ES module generated from `tokens.py`.

The rule it keeps: the browser has no copy of its own of what a token or a guard label looks
like. The regular expressions the UI uses to mark tokens (`<EMAIL_1>`) and redactions
(`[redacted email]`, `[email]` in a URL) are translated here, at import time, from the Python
patterns that define them (`holdback.tokens` for tokens, `holdback.stream.guard` for the
guard's redaction labels, `holdback.stream.restorer` for the kind labels of tokens in URLs),
so changing the syntax in Python changes the page too.

The translation (`js_source`) is deliberately narrow: it knows the constructs these patterns use
and refuses anything whose meaning differs between Python's `re` and JavaScript (`\\w`, `.`,
`$`, case-insensitive Unicode matching, inline flags, ...), so it can never produce a JavaScript
pattern that quietly matches something else.

The module is public (like every static asset: it holds no data), served as `text/javascript`
with an ETag and `Cache-Control: no-cache`, so a browser revalidates it on every load and a
server with a new syntax is never paired with a stale copy.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from holdback import tokens
from holdback.stream.guard import REDACTION_LABEL_RE
from holdback.stream.restorer import URL_LABEL_RE

# The guard's redaction labels and the restorer's URL labels, from the modules that write them.
REDACTION_LABEL_RE: Final = REDACTION_LABEL_RE
URL_LABEL_RE: Final = URL_LABEL_RE

_SAFE_ESCAPES = frozenset("nrtfv")
_GROUP_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACES_RE = re.compile(r"\{\d+(?:,\d*)?\}")


class UntranslatablePatternError(ValueError):
    """A Python pattern uses a construct whose JavaScript spelling would mean something else."""


def js_flags(pattern: re.Pattern[str]) -> str:
    """JavaScript flags for a pattern's flags; only flags with the same meaning are accepted."""
    flags = pattern.flags & ~re.UNICODE  # str patterns always carry re.UNICODE
    if flags & re.IGNORECASE and not flags & re.ASCII:
        # Python folds `ſ` to `s` and the Kelvin sign to `k`; JavaScript (without `u`) does not.
        raise UntranslatablePatternError("case-insensitive Unicode matching differs in JS")
    out = ""
    known = re.IGNORECASE | re.ASCII | re.DOTALL | re.MULTILINE
    if flags & ~known:
        raise UntranslatablePatternError(f"flags {flags & ~known:#x} have no JS equivalent")
    if flags & re.IGNORECASE:
        out += "i"
    if flags & re.MULTILINE:
        out += "m"
    if flags & re.DOTALL:
        out += "s"
    return out


def _literal(ch: str, *, in_class: bool = False) -> str:
    """A literal character: printable ASCII as itself, anything else as `\\u` escapes."""
    if " " <= ch <= "~":
        return ch
    if in_class and ord(ch) > 0xFFFF:
        # Without the `u` flag JS sees two code units, and a class would hold them apart.
        raise UntranslatablePatternError("a character outside the BMP inside a class")
    data = ch.encode("utf-16-be")
    return "".join(f"\\u{data[k] << 8 | data[k + 1]:04x}" for k in range(0, len(data), 2))


def _escape(ch: str, *, in_class: bool) -> str:
    """The JavaScript spelling of the Python escape `\\<ch>`."""
    if ch == "Z" and not in_class:
        return "$"  # JS `$` without the `m` flag is the end of the input, as Python's `\\Z`
    if ch in _SAFE_ESCAPES or ("!" <= ch <= "~" and not ch.isalnum()):
        return "\\" + ch  # an ASCII punctuation escape is a literal in both languages
    raise UntranslatablePatternError(f"the escape \\{ch} has no equivalent JS spelling here")


def js_source(pattern: re.Pattern[str]) -> str:
    """The JavaScript source of a Python pattern, or `UntranslatablePatternError`.

    Accepted: literals, classes and ranges, ASCII punctuation escapes, groups (`(?:`, `(?P<name>`
    as `(?<name>`, `(?P=name)` as `\\k<name>`, look-ahead and look-behind), the quantifiers
    `* + ? {m} {m,} {m,n}` (greedy or lazy), alternation, `^` at the start, and `\\Z` as `$`.
    """
    src = pattern.pattern
    if pattern.flags & re.VERBOSE:
        raise UntranslatablePatternError("verbose patterns are not translated")
    js_flags(pattern)
    out: list[str] = []
    i, n = 0, len(src)
    quantified = False  # the previous item was a quantifier
    while i < n:
        ch = src[i]
        was_quantified, quantified = quantified, False
        if ch == "\\":
            if i + 1 >= n:
                raise UntranslatablePatternError("a trailing backslash")
            out.append(_escape(src[i + 1], in_class=False))
            i += 2
        elif ch == "[":
            i = _class(src, i, out)
        elif ch == "(":
            i = _group_open(src, i, out)
        elif ch in "*+?{":
            if was_quantified and ch != "?":
                # `a*+` is possessive in Python 3.11 and a syntax error in JS; `{` is worse.
                raise UntranslatablePatternError(f"a possessive or doubled quantifier at {i}")
            if ch == "{":
                m = _BRACES_RE.match(src, i)
                if m is None:
                    # Python reads `{,n}` as 0..n and a stray `{` as a literal; JS does not.
                    raise UntranslatablePatternError(f"an unsupported brace at {i}")
                out.append(m.group(0))
                i = m.end()
            else:
                out.append(ch)
                i += 1
            quantified = not (was_quantified and ch == "?")  # `*?` is lazy, then done
        elif ch == "^":
            if i != 0 or pattern.flags & re.MULTILINE:
                raise UntranslatablePatternError("`^` is only translated at the very start")
            out.append("^")
            i += 1
        elif ch == "$":
            raise UntranslatablePatternError("Python's `$` also matches before a final newline")
        elif ch == ".":
            if not pattern.flags & re.DOTALL:
                raise UntranslatablePatternError("`.` excludes other line ends in JS")
            out.append(".")
            i += 1
        elif ch in "|)}]":
            out.append(ch)
            i += 1
        else:
            out.append(_literal(ch))
            i += 1
    return "".join(out)


def _group_open(src: str, i: int, out: list[str]) -> int:
    if src.startswith("(?P<", i):
        end = src.index(">", i)
        name = src[i + 4 : end]
        if not _GROUP_NAME_RE.fullmatch(name):
            raise UntranslatablePatternError(f"the group name {name!r}")
        out.append(f"(?<{name}>")
        return end + 1
    if src.startswith("(?P=", i):
        end = src.index(")", i)
        out.append(f"\\k<{src[i + 4 : end]}>")
        return end + 1
    for opener in ("(?:", "(?=", "(?!", "(?<=", "(?<!"):
        if src.startswith(opener, i):
            out.append(opener)
            return i + len(opener)
    if src.startswith("(?", i):
        raise UntranslatablePatternError(f"the group syntax at {i} has no JS equivalent")
    out.append("(")
    return i + 1


def _class(src: str, i: int, out: list[str]) -> int:
    """Copy the character class `[...]` that starts at `src[i]`; return the index after it."""
    j = i + 1
    parts = ["["]
    if src.startswith("^", j):
        parts.append("^")
        j += 1
    first = True
    while j < len(src):
        ch = src[j]
        if ch == "]" and not first:
            out.append("".join([*parts, "]"]))
            return j + 1
        if ch == "\\":
            if j + 1 >= len(src):
                break
            parts.append(_escape(src[j + 1], in_class=True))
            j += 2
        elif ch == "[":
            raise UntranslatablePatternError("a `[` inside a class (Python may read a set)")
        elif ch == "]":
            parts.append("\\]")  # a `]` first in a Python class is a literal
            j += 1
        else:
            parts.append(_literal(ch, in_class=True))
            j += 1
        first = False
    raise UntranslatablePatternError("an unterminated character class")


def _unanchored(pattern: re.Pattern[str]) -> str:
    """A whole-string pattern (`...\\Z`, used with `match`) as an embeddable source."""
    body = pattern.pattern.removesuffix("\\Z")
    if body == pattern.pattern or "|" in body or body.endswith("\\"):
        raise UntranslatablePatternError(f"{pattern.pattern!r} is not `<body>\\Z`")
    return js_source(re.compile(body, pattern.flags))


def module_text() -> str:
    """The text of `/syntax.js`."""
    exports = {
        "KIND_SOURCE": _unanchored(tokens.KIND_RE),
        "ID_SOURCE": _unanchored(tokens.ID_RE),
        "TOKEN_SOURCE": js_source(tokens.TOKEN_RE),
        "REDACTION_SOURCE": js_source(REDACTION_LABEL_RE),
        "URL_LABEL_SOURCE": js_source(URL_LABEL_RE),
    }
    lines = [
        "// The token syntax, generated by server/holdback/app/syntax.py from",
        "// server/holdback/tokens.py (tokens) and syntax.py's label patterns (guard labels).",
        "// Do not copy these patterns: import them.",
        "",
    ]
    for name, source in exports.items():
        lines.append(f"export const {name} = {json.dumps(source)};")
    lines += [
        "",
        "/** A fresh RegExp for a source above (a global RegExp keeps state: share none). */",
        "export function pattern(source, flags = 'g') {",
        "  return new RegExp(source, flags);",
        "}",
        "",
        "/** Whether `text` is exactly one token id (`EMAIL_1`). */",
        "export function isTokenId(text) {",
        "  return new RegExp(`^(?:${ID_SOURCE})$`).test(String(text));",
        "}",
        "",
        "/** Whether `text` is exactly one token (`<EMAIL_1>`). */",
        "export function isToken(text) {",
        "  return new RegExp(`^(?:${TOKEN_SOURCE})$`).test(String(text));",
        "}",
        "",
    ]
    return "\n".join(lines)


MODULE: Final = module_text()
ETAG: Final = '"' + hashlib.sha256(MODULE.encode()).hexdigest()[:32] + '"'
MEDIA_TYPE: Final = "text/javascript; charset=utf-8"


async def syntax_js(request: Request) -> Response:
    headers = {"ETag": ETAG, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    if ETAG in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    return Response(MODULE, media_type=MEDIA_TYPE, headers=headers)


route: Final = Route("/syntax.js", syntax_js, methods=["GET", "HEAD"])
