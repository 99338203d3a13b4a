"""The built-in detectors of secrets, and of token spellings the model makes up.

Secrets: API keys of the common providers, PEM private keys, JWTs, passwords in URLs, and (off
by default) long random-looking strings. Token spellings (`<EMAIL_7>` and its variants) are
screened by the output guard, which redacts those that are not the conversation's. Each is a
`RegexDetector`: a pattern proposes, a check decides.

The rule for keys: a distinctive prefix (`ghp_`, `sk_live_`, `AKIA`, ...) followed by a body
of the issuer's length is a key whatever the body holds; only the generic `sk-` prefix, which
prose shares (`sk-learn`), needs a body that mixes letters and digits. Every pattern is linear:
each run of key characters is matched once.
"""

from __future__ import annotations

import base64
import itertools
import math
from collections.abc import Iterable, Iterator

import regex

from holdback.detect import validators as v
from holdback.detect.regex_detector import RegexDetector, whole
from holdback.tokens import ID_SEPARATOR, SPELLED_TOKEN_ID, kind_label

# -- secrets ---------------------------------------------------------------------------------


# Prefixes no prose shares, each with its issuer's body (and so its minimum length). A body is
# the whole run of its characters (possessive) and at most 200 or 255 long, so a start costs a
# bounded match, even in a long run of key characters (`sk-sk-sk-…`).
_DISTINCTIVE = (
    r"sk-ant-(?:api|admin|oat|sid)[0-9]{2}-[A-Za-z0-9_\-]{32,200}+"  # Anthropic
    r"|sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{32,200}+"  # OpenAI project, service, admin
    r"|sk-[A-Za-z0-9]{32,200}+(?![_\-])"  # OpenAI (legacy user keys), DeepSeek
    r"|gh[pousr]_[A-Za-z0-9]{36,255}+"  # GitHub
    r"|github_pat_[A-Za-z0-9_]{22,255}+"
    r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}"  # AWS
    r"|xox[abposre]-[0-9]{1,20}+-[A-Za-z0-9\-]{8,200}+"  # Slack: a team or user id comes first
    r"|xapp-[0-9]-[A-Za-z0-9\-]{10,200}+"
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{24,200}+"  # Stripe
    r"|whsec_[A-Za-z0-9]{24,200}+"
    r"|AIza[0-9A-Za-z_\-]{35}"  # Google
    r"|glpat-[A-Za-z0-9_\-]{20}"  # GitLab
    r"|npm_[A-Za-z0-9]{36}"
)
# `sk-` and a hyphenated body: a key only if the body mixes letters and digits.
_GENERIC = r"sk-[A-Za-z0-9_\-]{20,200}+"
_DISTINCT_BODY = regex.compile(rf"(?:{_DISTINCTIVE})\Z")
# A key never follows a letter or digit, nor runs into one or into a dash; a dash or an
# underscore before it (`-sk-proj-…`, `x_ghp_…`) and a letter of another script (`密钥sk-…`)
# set it apart.
_KEY_BEFORE = r"A-Za-z0-9"
_KEY_AFTER = r"A-Za-z0-9\-"


def _key_ok(text: str) -> bool:
    """A distinctive key, or a generic `sk-` one whose body mixes letters and digits; never a
    placeholder made of one or two characters (`ghp_xxxxxxxx…`)."""
    if len(set(text[4:])) < 6:
        return False
    if _DISTINCT_BODY.match(text):
        return True
    return any(c.isdigit() for c in text) and any(c.isalpha() for c in text[3:])


SECRET_KEYS = RegexDetector(
    "secret",
    regex.compile(
        rf"(?=[sgAxrnw])(?<![{_KEY_BEFORE}])(?:{_DISTINCTIVE}|{_GENERIC})(?![{_KEY_AFTER}])"
    ),
    whole(_key_ok),
    alphabet=r"[A-Za-z0-9_\-]",
    starts=rf"(?<![{_KEY_BEFORE}])[sgAxrnw]",
    needs=r"[\-_A]",
)

_PEM_HEAD = r"-----BEGIN[ A-Z0-9]*PRIVATE KEY-----"
_PEM_TAIL = r"-----END[ A-Z0-9]*PRIVATE KEY-----"
_B64 = r"[A-Za-z0-9+/=]"


def _looks_base64(body: str) -> bool:
    """Key material is base64 (both cases and digits), not hex or words."""
    return (
        any(c.isupper() for c in body)
        and any(c.islower() for c in body)
        and any(c.isdigit() for c in body)
    )


_BLOCK_START = regex.compile(rf"(?<!{_B64}){_B64}")


def _pem_check(m: regex.Match[str]) -> tuple[int, int] | None:
    """A block from BEGIN to END (or to the end of the text); else key material the hold
    window cut off: a stretch of base64 lines before an END line, or one running to the end
    of the text from its first line of 64 characters at least, if it looks like base64."""
    text = m.group()
    if text.startswith("-----BEGIN") or text.endswith("-----"):
        return m.span()
    for line in _BLOCK_START.finditer(m.string, m.start(), m.end()):
        start = line.start()
        if m.string.find(" ", start, start + 64) == -1 and m.end() - start >= 64:
            body = m.string[start : m.end()].replace(" ", "")
            if not _looks_base64(body) or _encodes_public_pem(body):
                return None
            return (start, m.end())
    return None


def _encodes_public_pem(body: str) -> bool:
    """Whether base64 text encodes a PEM block that is not a private key (a Kubernetes
    `caBundle`: a certificate, base64 again). `LS0tLS1CRUdJTi…` that encodes a private key
    is key material like any other."""
    try:
        head = base64.b64decode(body[:96], validate=True)
    except ValueError:
        return False
    line = head.split(b"\n", 1)[0]
    return line.startswith(b"-----BEGIN ") and b"PRIVATE" not in line and b"-----" in line[11:]


_PEM_BODY = r"[ A-Za-z0-9+/=:,.\-]"
# Base64 lines: a line of 40 characters or more, then lines of 8 or more, one space apart.
_LINES = rf"{_B64}(?<!{_B64}(?s:.)){_B64}{{39,}}+(?: {_B64}{{8,}}+)*+"
_LINES_RUN = regex.compile(_LINES)
_BODY_RUN = regex.compile(rf"{_PEM_BODY}*+")
_TAIL_AFTER = regex.compile(rf" {_PEM_TAIL}| ?\Z")
_HEAD_AT = regex.compile(_PEM_HEAD)


class _KeyMaterial(RegexDetector):
    """The private-key detector, matched once per run of key material.

    Its matches are the pattern's own, but tried only where one can begin: at a BEGIN line
    (not again inside the body of the block it begins, nor after a BEGIN line with no END
    line in its run: no later one in that run has one either), and at the first line of each
    run of base64 lines followed by an END line or by the end of the text (every line of the
    run ends where the run does). A text of many lines, or many BEGIN lines, costs one pass.
    """

    __slots__ = ()

    def matches(self, text: str, first: int, endpos: int) -> Iterator[regex.Match[str]]:
        match = self.pattern.match
        covered = first
        head = text.find("-----BEGIN", first, endpos)
        lines = _LINES_RUN.search(text, first, endpos)
        while head != -1 or lines is not None:
            if lines is None or (head != -1 and head < lines.start()):
                at, head_next = head, text.find("-----BEGIN", head + 1, endpos)
                if at >= covered:
                    m = match(text, at, endpos)
                    if m is not None:
                        covered = m.end()
                        yield m
                    elif (h := _HEAD_AT.match(text, at, endpos)) is not None:
                        run = _BODY_RUN.match(text, h.end(), endpos)
                        covered = run.end() if run is not None else h.end()
                head = head_next
                continue
            at = lines.start()
            if at >= covered and _TAIL_AFTER.match(text, lines.end(), endpos) is not None:
                m = match(text, at, endpos)
                if m is not None:
                    covered = m.end()
                    yield m
            lines = _LINES_RUN.search(text, lines.end(), endpos)


# A whole block (or a block the text cuts off), from its BEGIN line; or, where the hold window
# cut a long block, a run of its base64 lines before its END line or the end of the text.
PRIVATE_KEY = _KeyMaterial(
    "secret",
    regex.compile(
        rf"{_PEM_HEAD}(?:{_PEM_BODY}*?{_PEM_TAIL}|{_PEM_BODY}*+\Z)"
        rf"|{_LINES}(?: {_PEM_TAIL}| ?\Z)"
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
        r"(?<![A-Za-z0-9\-.])eyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{8,}"
        r"(?![A-Za-z0-9\-])"
    ),
    whole(v.jwt_ok),
    alphabet=r"[A-Za-z0-9_\-.]",
    starts=r"(?<![A-Za-z0-9\-.])e",
    needs="J",
)


def _url_password(m: regex.Match[str]) -> tuple[int, int] | None:
    return m.span("password")


URL_PASSWORD = RegexDetector(
    "secret",
    regex.compile(
        r"[A-Za-z](?<![A-Za-z0-9_+.\-](?s:.))[A-Za-z0-9+.\-]*://[^\s:/@]+:(?P<password>[^\s@/]+)@"
        r"[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?"
    ),
    _url_password,
    alphabet=r"[^\s]",
    starts=r"(?<![A-Za-z0-9_+.\-])[A-Za-z]",
    needs=":",
    word="[A-Za-z0-9]",
)


# -- long random-looking strings (off by default) ------------------------------------------

_BLOB = r"A-Za-z0-9+/_\-"  # base64 and base64url; `=` only as padding at the end
ENTROPY_MIN_LENGTH = 32
ENTROPY_MAX_LENGTH = 512
ENTROPY_BITS = 4.2  # bits per character, at 32 characters (see `_entropy_ok`)
# Context that makes a blob a digest, an encoding or a public key, not a secret: subresource
# integrity and lockfile hashes (`sha512-…`, go.sum's `h1:…`), data URLs
# (`data:image/png;base64,…`), the body of a public key or certificate, an SSH public key.
_DIGEST_PREFIX = regex.compile(r"(?:sha(?:1|224|256|384|512)|md5)[-_]", regex.IGNORECASE)
_ENCODED_BEFORE = regex.compile(
    r"(?:;base64,|\bh1:|\bsha(?:1|256|384|512):|(?:PUBLIC KEY|CERTIFICATE)-----\s*"
    r"|\b(?:ssh-[a-z0-9]+|ecdsa-sha2-[a-z0-9]+) )\Z",
    regex.IGNORECASE,
)
_HEX = regex.compile(r"[0-9A-Fa-f\-]+")


def _entropy(text: str) -> float:
    counts: dict[str, int] = {}
    for c in text:
        counts[c] = counts.get(c, 0) + 1
    n = len(text)
    return -sum(k / n * math.log2(k / n) for k in counts.values())


def _alphabet(text: str) -> bool:
    """An alphabet written out (`ABC…xyz0123456789+/`, a shuffled one of 48 characters or more
    with no character twice): as varied as a key can be, and no key. Random strings repeat
    characters and seldom run in order."""
    if len(text) >= 48 and len(set(text)) == len(text):
        return True
    steps = sum(1 for a, b in itertools.pairwise(text) if ord(b) - ord(a) == 1)
    return steps * 2 >= len(text)


def _entropy_ok(text: str) -> bool:
    """A run of 32 to 512 key characters that mixes upper case, lower case and digits, is not
    hexadecimal (hashes, UUIDs) nor an alphabet, and whose characters are as varied as random
    ones: Shannon entropy of at least `ENTROPY_BITS` bits a character (a little more for longer
    runs, whose random strings show more of their alphabet; words, paths and identifiers fall
    short)."""
    n = len(text)
    if not ENTROPY_MIN_LENGTH <= n <= ENTROPY_MAX_LENGTH or _HEX.fullmatch(text):
        return False
    if _DIGEST_PREFIX.match(text) or _alphabet(text):
        return False
    if not (
        any(c.isupper() for c in text)
        and any(c.islower() for c in text)
        and any(c.isdigit() for c in text)
    ):
        return False
    need = ENTROPY_BITS + 0.5 * math.log2(min(n, 128) / ENTROPY_MIN_LENGTH)
    return _entropy(text) >= need


def _entropy_check(m: regex.Match[str]) -> tuple[int, int] | None:
    if _ENCODED_BEFORE.search(m.string, max(0, m.start() - 40), m.start()):
        return None
    return m.span() if _entropy_ok(m.group().rstrip("=")) else None


def entropy_detector() -> RegexDetector:
    """Long random-looking strings with no known prefix (`HOLDBACK_ENTROPY_SECRETS`): a key
    pasted without its name. Off by default, since code is full of long identifiers, hashes
    and encodings; its false-positive rate on code is measured by `tests/detect/code_corpus`."""
    return RegexDetector(
        "secret",
        regex.compile(
            rf"[{_BLOB}](?<![{_BLOB}=](?s:.))(?:(?<=[0-9])|(?=[{_BLOB}]*?[0-9]))"
            rf"[{_BLOB}]{{{ENTROPY_MIN_LENGTH - 1},}}+={{0,2}}+"
        ),
        _entropy_check,
        alphabet=rf"[{_BLOB}=]",
        starts=rf"[{_BLOB}](?<![{_BLOB}=](?s:.))",
        needs="[0-9]",
        word=rf"[{_BLOB}]",
        short=ENTROPY_MIN_LENGTH,
    )


# -- tokens the model invents ---------------------------------------------------------------


def _token_check(m: regex.Match[str]) -> tuple[int, int] | None:
    return m.span()


def token_detector(kinds: Iterable[str]) -> RegexDetector:
    """Token spellings (`<EMAIL_7>`, `&lt;email\\_7&gt;`, a bare `EMAIL_7` of a known kind).

    The output guard redacts those that are not in the conversation's vault: a token the model
    made up must not reach the user as if it meant something, and token text never goes out.
    """
    sep = ID_SEPARATOR
    ident = SPELLED_TOKEN_ID
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
