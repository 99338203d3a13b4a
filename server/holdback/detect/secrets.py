"""The built-in detectors of secrets, and of token spellings the model makes up.

Secrets: API keys of the common providers, PEM private keys, JWTs, and passwords in URLs. Token
spellings (`<EMAIL_7>` and its variants) are screened by the output guard, which redacts those
that are not the conversation's. Each is a `RegexDetector`: a pattern proposes, a check decides.
"""

from __future__ import annotations

from collections.abc import Iterable

import regex

from holdback.detect import validators as v
from holdback.detect.regex_detector import RegexDetector, whole
from holdback.tokens import kind_label

# -- secrets ---------------------------------------------------------------------------------


_AWS_PREFIXES = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA")


def _mixed(text: str) -> bool:
    """Free-form key bodies must mix letters and digits, so hyphenated prose is not a key.

    AWS key ids are exempt: their fixed shape is distinctive, and their base32 body may hold
    no digit at all.
    """
    if text.startswith(_AWS_PREFIXES):
        return True
    return any(c.isdigit() for c in text) and any(c.isalpha() for c in text)


_SECRET = (
    r"sk-ant-(?:api|admin|oat|sid)[0-9]{2}-[A-Za-z0-9_\-]{20,}"
    r"|sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{36,255}"
    r"|github_pat_[A-Za-z0-9_]{22,255}"
    r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}"
    r"|xox[abposre]-[A-Za-z0-9\-]{10,}"
    r"|xapp-[0-9]-[A-Za-z0-9\-]{10,}"
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|AIza[0-9A-Za-z_\-]{35}"
    r"|glpat-[A-Za-z0-9_\-]{20}"
    r"|npm_[A-Za-z0-9]{36}"
)

SECRET_KEYS = RegexDetector(
    "secret",
    regex.compile(rf"(?=[sgAxrn])(?<![\w\-])(?:{_SECRET})(?![\w\-])"),
    whole(_mixed),
    alphabet=r"[A-Za-z0-9_\-]",
    starts=r"(?<![\w\-])[sgAxrn]",
    needs=r"[\-_A]",
)

_PEM_HEAD = r"-----BEGIN[ A-Z0-9]*PRIVATE KEY-----"
_PEM_TAIL = r"-----END[ A-Z0-9]*PRIVATE KEY-----"
_B64 = r"[A-Za-z0-9+/=]"


def _pem_check(m: regex.Match[str]) -> tuple[int, int] | None:
    text = m.group()
    if text.startswith("-----BEGIN") or text.endswith("-----"):
        return m.span()
    # A run of key material cut off by the hold window: it must look like base64, not hex.
    body = text.replace(" ", "")
    ok = any(c.isupper() for c in body) and any(c.islower() for c in body)
    return m.span() if ok and any(c.isdigit() for c in body) else None


# A whole block; or, where the hold window cut a long block, its head and its tail apart, and
# a stretch of its body that fills a window.
PRIVATE_KEY = RegexDetector(
    "secret",
    regex.compile(
        rf"{_PEM_HEAD}(?:[ A-Za-z0-9+/=:,.\-]*?{_PEM_TAIL}|[ A-Za-z0-9+/=:,.\-]*\Z)"
        rf"|{_B64}(?<!{_B64}(?s:.)){_B64}{{39,}}(?: {_B64}{{8,}})* {_PEM_TAIL}"
        rf"|{_B64}(?<!{_B64}(?s:.)){_B64}{{63,}}(?: {_B64}{{8,}})* ?\Z"
    ),
    _pem_check,
    alphabet=r"[ A-Za-z0-9+/=:,.\-]",
    starts=rf"-(?=-|\Z)|(?<!{_B64}){_B64}{{40}}|(?<!{_B64}){_B64}{{1,39}}\Z",
    needs="-",
    word=_B64,
    short=40,  # a start at a base64 character begins a run of 40 of them, at least
)

JWT = RegexDetector(
    "jwt",
    regex.compile(
        r"(?<![\w\-.])eyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{8,}(?![\w\-])"
    ),
    whole(v.jwt_ok),
    alphabet=r"[A-Za-z0-9_\-.]",
    starts=r"(?<![\w\-.])e",
    needs="J",
)


def _url_password(m: regex.Match[str]) -> tuple[int, int] | None:
    return m.span("password")


URL_PASSWORD = RegexDetector(
    "secret",
    regex.compile(
        r"[A-Za-z](?<![\w+.\-](?s:.))[A-Za-z0-9+.\-]*://[^\s:/@]+:(?P<password>[^\s@/]+)@"
        r"[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?"
    ),
    _url_password,
    alphabet=r"[^\s]",
    starts=r"(?<![\w+.\-])[A-Za-z]",
    needs=":",
    word="[A-Za-z0-9]",
)


# -- tokens the model invents ---------------------------------------------------------------


def _token_check(m: regex.Match[str]) -> tuple[int, int] | None:
    return m.span()


def token_detector(kinds: Iterable[str]) -> RegexDetector:
    """Token spellings (`<EMAIL_7>`, `&lt;email\\_7&gt;`, a bare `EMAIL_7` of a known kind).

    The output guard redacts those that are not in the conversation's vault: a token the model
    made up must not reach the user as if it meant something, and token text never goes out.
    """
    sep = r"(?:_|\\_)"
    ident = rf"[A-Za-z][A-Za-z0-9]*(?:{sep}[A-Za-z0-9]+)*?{sep}[1-9][0-9]*"
    labels = sorted({kind_label(k) for k in kinds}, key=len, reverse=True)
    # Spelled out letter by letter: a case-insensitive group would also match `ſ`, `ı` and the
    # Kelvin sign, which the detector's alphabet (and so the guard's start tables) excludes.
    bare = "|".join(_ascii_caseless(label).replace("_", sep) for label in labels) or "(?!)"
    return RegexDetector(
        "token",
        regex.compile(
            rf"(?:<|&[lL][tT];){ident}(?:>|&[gG][tT];)"
            rf"|(?<![\w])(?:{bare}){sep}[1-9][0-9]*(?![\w])"
        ),
        _token_check,
        alphabet=r"[<>&;A-Za-z0-9_\\]",
        starts=r"[<&]|(?<![\w])[A-Za-z]",
        needs="_",
    )


def _ascii_caseless(label: str) -> str:
    """`EMAIL` -> `[Ee][Mm][Aa][Ii][Ll]`: either case of each ASCII letter, and nothing else."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isascii() and c.isalpha() else c for c in label)


def token_fragment_detector() -> RegexDetector:
    """The start of a token that the end of the reply cut off (`<EMAIL_`, `&lt;EMA`, `<`).

    A reply that breaks off mid-token (a cut stream, a cancel) must not end in token text.
    Whatever id it spells, a fragment is never one of the vault's tokens.
    """
    return RegexDetector(
        "token_fragment",
        regex.compile(r"(?:<|&[lL](?:[tT];?)?)[A-Za-z0-9_\\]*\Z"),
        _token_check,
        alphabet=r"[<&;A-Za-z0-9_\\]",
        starts=r"[<&]",
        needs=r"[^\s\S]",  # every match runs to the end of the text: none is ever decided early
    )
