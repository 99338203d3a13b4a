"""The built-in detectors: a pattern proposes, a validator decides.

Every pattern consumes the *longest* run that could hold a value of its kind and starts only
where such a run can start (its look-behind rejects the middle of a word or number). The
validator then picks the value out of the run, or rejects it. Keeping runs maximal is what makes
the streaming contract of `holdback.detect.base` hold: a start whose run could still reach past
the end of the text (the pattern matches, or partially matches, all the way to the end) is
reported as open, never cut short and accepted.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable

import regex

from holdback.detect import validators as v
from holdback.detect.base import Candidates, Finding
from holdback.tokens import kind_label

# A check takes the match and returns the value's span, or None to reject it; a check for a run
# that may hold several values (phone numbers side by side) returns a list of spans.
Check = Callable[["regex.Match[str]"], "tuple[int, int] | list[tuple[int, int]] | None"]


class RegexDetector:
    """A pattern, a validator, and what the streaming contract needs to find open starts.

    `alphabet` is a character class holding every character a match can contain; `starts` is a
    cheap pattern that matches wherever a match could begin. A start is *open* when the whole
    text from it to the end is a prefix of some match (`fullmatch(..., partial=True)`): that can
    only happen inside the trailing run of alphabet characters, which is all that is searched.
    """

    __slots__ = ("_gate", "_starts", "_tail", "check", "kind", "lookback", "pattern")

    def __init__(
        self,
        kind: str,
        pattern: regex.Pattern[str],
        check: Check,
        *,
        alphabet: str,
        starts: str,
        lookback: int = 0,
        gate: str | None = None,
    ) -> None:
        self.kind = kind
        self.pattern = pattern
        self.check = check
        # A run that may hold several values is matched from its own start, up to `lookback`
        # characters before `pos`, so a scan resumed inside it still finds the values after.
        self.lookback = lookback
        self._tail = regex.compile(rf"(?r){alphabet}*")
        self._starts = regex.compile(starts)
        # A character that every match, and every open start, must contain: a text without
        # one is skipped at the cost of one quick search (most reply text has no digit).
        self._gate = re.compile(gate) if gate else None

    @property
    def kinds(self) -> tuple[str, ...]:
        return (self.kind,)

    def open_start(self, text: str, pos: int, endpos: int) -> int:
        """The first start whose match could still run past `endpos`; `endpos` if none."""
        tail = self._tail.search(text, pos, endpos)
        run_start = tail.start() if tail is not None and tail.end() == endpos else endpos
        fullmatch = self.pattern.fullmatch
        for m in self._starts.finditer(text, run_start, endpos):
            if fullmatch(text, m.start(), endpos, partial=True) is not None:
                return m.start()
        return endpos

    def candidates(self, text: str, pos: int, endpos: int, *, partial: bool) -> Candidates:
        if self._gate is not None and not self._gate.search(
            text, max(0, pos - self.lookback), endpos
        ):
            return Candidates([], endpos)
        hold = self.open_start(text, pos, endpos) if partial else endpos
        return Candidates(self.decided(text, pos, endpos, hold), hold)

    def decided(self, text: str, pos: int, endpos: int, hold: int) -> list[Finding]:
        """The findings that start in `pos..hold`, where no start is open."""
        findings: list[Finding] = []
        for m in self.pattern.finditer(text, max(0, pos - self.lookback), endpos, overlapped=True):
            if m.start() >= hold:
                break
            spans = self.check(m)
            if spans is None:
                continue
            for start, end in spans if isinstance(spans, list) else [spans]:
                if end > start and start >= pos:
                    findings.append(Finding(start, end, self.kind, text[start:end]))
        return findings


def _whole(check: Callable[[str], bool]) -> Check:
    cached = functools.lru_cache(maxsize=4096)(check)

    def run(m: regex.Match[str]) -> tuple[int, int] | None:
        return m.span() if cached(m.group()) else None

    return run


def _glued(m: regex.Match[str]) -> bool:
    """Whether the run's last group runs straight into a word (`0x`, `42@host`)."""
    after = m.string[m.end() : m.end() + 1]
    return bool(after) and (after.isalnum() or after in "_@")


def _longest_group_prefix(check: Callable[[str], bool], separators: str) -> Check:
    """Accept the run, or the longest prefix of it that ends at a group boundary and passes.

    A last group glued to the word after it belongs to that word, never to the value.
    """
    cached = functools.lru_cache(maxsize=4096)(check)

    def run(m: regex.Match[str]) -> tuple[int, int] | None:
        text = m.group()
        ends = [i for i, c in enumerate(text) if c in separators]
        if not _glued(m):
            ends.append(len(text))
        for end in reversed(ends):
            candidate = text[:end].rstrip(separators)
            if candidate and cached(candidate):
                return m.start(), m.start() + len(candidate)
        return None

    return run


# -- email ---------------------------------------------------------------------------------

_FILE_EXTENSIONS = frozenset(
    [
        "png",
        "jpg",
        "jpeg",
        "gif",
        "svg",
        "webp",
        "ico",
        "bmp",
        "tif",
        "tiff",
        "heic",
        "pdf",
        "js",
        "ts",
        "css",
        "map",
        "json",
        "html",
    ]
)


def _email_ok(text: str) -> bool:
    local, _, domain = text.rpartition("@")
    if len(text) > 254 or len(local) > 64 or ".." in local or local.endswith("."):
        return False
    return domain.rsplit(".", 1)[-1].lower() not in _FILE_EXTENSIONS


# `scheme://user:password@host`: what follows the colon is a password, not an email's local part.
_USERINFO = regex.compile(r"://[^\s:/@]{1,64}:\Z")
_email_valid = functools.lru_cache(maxsize=4096)(_email_ok)


def _email_check(m: regex.Match[str]) -> tuple[int, int] | None:
    before = m.string[max(0, m.start() - 70) : m.start()]
    if _USERINFO.search(before) or not _email_valid(m.group()):
        return None
    return m.span()


EMAIL = RegexDetector(
    "email",
    regex.compile(
        r"[A-Za-z0-9](?<![A-Za-z0-9._%+\-@](?s:.))[A-Za-z0-9._%+\-]*@"
        r"[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*"
        r"\.[A-Za-z]{2,24}(?![A-Za-z0-9\-@])"
    ),
    _email_check,
    alphabet=r"[A-Za-z0-9._%+\-@]",
    starts=r"(?<![A-Za-z0-9._%+\-@])[A-Za-z0-9]",
)

# -- numbers ---------------------------------------------------------------------------------

CREDIT_CARD = RegexDetector(
    "credit_card",
    regex.compile(r"[0-9](?<![\w\-.,](?s:.))[0-9]*+(?:[ \-] ?[0-9]++)*+"),
    _longest_group_prefix(v.credit_card_ok, " -"),
    alphabet=r"[0-9 \-]",
    starts=r"(?<![\w\-.,])[0-9]",
    gate="[0-9]",
)


def _iban_check(m: regex.Match[str]) -> tuple[int, int] | None:
    text = m.group()
    length = v.IBAN_LENGTHS.get(text[:2])
    if length is None:
        return None
    seen = 0
    for i, ch in enumerate(text):
        if ch != " ":
            seen += 1
            if seen == length:
                after = text[i + 1 : i + 2]
                if after and after != " ":
                    return None  # the IBAN would end inside a group
                return (m.start(), m.start() + i + 1) if _iban_ok(text[: i + 1]) else None
    return None


_iban_ok = functools.lru_cache(maxsize=4096)(v.iban_ok)

IBAN = RegexDetector(
    "iban",
    regex.compile(r"[A-Z](?<![\w](?s:.))[A-Z][0-9]{2}(?: ?[A-Z0-9]){8,32}(?![A-Za-z0-9])"),
    _iban_check,
    alphabet=r"[A-Z0-9 ]",
    starts=r"(?<![\w])[A-Z]",
)

US_SSN = RegexDetector(
    "us_ssn",
    regex.compile(
        r"[0-9](?<![\w\-.](?s:.))[0-9]{2}(?P<ssn_sep>[\- ])[0-9]{2}(?P=ssn_sep)[0-9]{4}(?![\w\-])"
    ),
    _whole(v.us_ssn_ok),
    alphabet=r"[0-9 \-]",
    starts=r"(?<![\w\-.])[0-9]",
    gate="[0-9]",
)


def _phone_ok(region: str) -> Callable[[str], bool]:
    def ok(text: str) -> bool:
        digits = v.digits_of(text)
        if not 7 <= len(digits) <= 15:
            return False
        # A bare run of digits is an order number, not a phone number: require formatting.
        if not (text.startswith("+") or any(c in text for c in " ().-")):
            return False
        return v.phone_ok(text, region)

    return ok


def _self_delimited(number: str) -> bool:
    """Formatting (`+`, brackets, dashes, dots) marks where a number ends; bare spaces do not."""
    return any(c in number for c in "+()-.")


def _phones(ok: Callable[[str], bool]) -> Check:
    """Split a run of digit groups into phone numbers side by side, or reject it whole.

    `415-555-2671 415-555-2672` is two numbers; `3659 086030 6428` (an order number) is none,
    even though its first two groups would pass for a US number on their own. A formatted
    number (`+1 (415) 555-2671`) ends where its formatting does, whatever digits follow; a card
    number or SSN may follow a phone number in the run, and is left to its own detector.
    """
    cached = functools.lru_cache(maxsize=4096)(ok)

    def other_value(text: str) -> bool:
        return v.credit_card_ok(text) or v.us_ssn_ok(text)

    def run(m: regex.Match[str]) -> list[tuple[int, int]] | None:
        text = m.group()
        cuts = [i for i, c in enumerate(text) if c == " "]
        if _glued(m):
            if not cuts:
                return None
            text = text[: cuts[-1]]  # the glued last group belongs to the word after it
            cuts = cuts[:-1]
        bounds = [0, *cuts, len(text)]
        # best[i]: a way to split text[bounds[i]:] into numbers (longest first number first).
        best: dict[int, list[tuple[int, int]] | None] = {len(bounds) - 1: []}
        for i in range(len(bounds) - 2, -1, -1):
            best[i] = None
            start = bounds[i] + (1 if i else 0)
            for j in range(len(bounds) - 1, i, -1):
                rest = best[j]
                segment = text[start : bounds[j]]
                if not segment or segment != segment.strip():
                    continue
                if cached(segment) and (rest is not None or _self_delimited(segment)):
                    best[i] = [(start, bounds[j]), *(rest or [])]
                    break
                if rest is not None and other_value(segment):
                    best[i] = rest  # a card or SSN beside a phone number: not ours to report
                    break
        found = best[0]
        if not found:
            return None
        return [(m.start() + a, m.start() + b) for a, b in found]

    return run


def make_phone(region: str = "US") -> RegexDetector:
    return RegexDetector(
        "phone",
        regex.compile(
            r"(?=[+(]|(?<![0-9][ .\-])[0-9])(?<![\w+\-.@/])"
            r"(?:\+[0-9]{1,3}[ .\-]?)?(?:\([0-9]{1,5}\)[ .\-]?)?"
            r"[0-9]++(?:[ .\-] ?[0-9]++)*+"
        ),
        _phones(_phone_ok(region)),
        alphabet=r"[0-9 ().+\-]",
        starts=r"(?<![\w+\-.@/])[+(0-9]",
        lookback=64,
        gate="[0-9+(]",
    )


# -- network ---------------------------------------------------------------------------------


def _ipv4_ok(text: str) -> bool:
    return text.count(".") == 3 and v.ip_ok(text)


IPV4 = RegexDetector(
    "ip_address",
    regex.compile(r"[0-9](?<![\w.](?s:.))[0-9]{0,2}(?:\.[0-9]{1,3})+(?![\w])"),
    _whole(_ipv4_ok),
    alphabet=r"[0-9.]",
    starts=r"(?<![\w.])[0-9]",
    gate="[0-9]",
)


def _ipv6_check(m: regex.Match[str]) -> tuple[int, int] | None:
    text = m.group()
    trimmed = text.rstrip(".")
    if trimmed.endswith(":") and not trimmed.endswith("::"):
        trimmed = trimmed[:-1]
    if trimmed.count(":") < 2 or not any(c.isdigit() for c in trimmed) or "." in trimmed[:2]:
        return None
    return (m.start(), m.start() + len(trimmed)) if _ipv6_ok(trimmed) else None


_ipv6_ok = functools.lru_cache(maxsize=4096)(v.ip_ok)

IPV6 = RegexDetector(
    "ip_address",
    regex.compile(
        r"(?=[0-9A-Fa-f:])(?<![\w:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\.[0-9]{1,3}){0,3}"
    ),
    _ipv6_check,
    alphabet=r"[0-9A-Fa-f:.]",
    starts=r"(?<![\w:.])[0-9A-Fa-f:]",
)

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
    _whole(_mixed),
    alphabet=r"[A-Za-z0-9_\-]",
    starts=r"(?<![\w\-])[sgAxrn]",
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
)

JWT = RegexDetector(
    "jwt",
    regex.compile(
        r"(?<![\w\-.])eyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{8,}(?![\w\-])"
    ),
    _whole(v.jwt_ok),
    alphabet=r"[A-Za-z0-9_\-.]",
    starts=r"(?<![\w\-.])e",
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
)


def builtin_detectors(phone_region: str = "US") -> list[RegexDetector]:
    return [
        SECRET_KEYS,
        PRIVATE_KEY,
        URL_PASSWORD,
        JWT,
        IBAN,
        CREDIT_CARD,
        US_SSN,
        EMAIL,
        IPV4,
        IPV6,
        make_phone(phone_region),
    ]


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
    bare = "|".join(label.replace("_", sep) for label in labels) or "(?!)"
    return RegexDetector(
        "token",
        regex.compile(
            rf"(?:<|&[lL][tT];){ident}(?:>|&[gG][tT];)"
            rf"|(?<![\w])(?i:{bare}){sep}[1-9][0-9]*(?![\w])"
        ),
        _token_check,
        alphabet=r"[<>&;A-Za-z0-9_\\]",
        starts=r"[<&]|(?<![\w])[A-Za-z]",
    )


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
    )
