"""The built-in detectors of personal data: emails, card, bank and phone numbers, addresses.

Each is a `RegexDetector` (`holdback.detect.regex_detector`): a pattern that proposes maximal
runs, and a validator that decides. Secrets and token spellings are in `holdback.detect.secrets`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import regex

from holdback.detect import validators as v
from holdback.detect.regex_detector import Check, RegexDetector, glued, longest_group_prefix, whole
from holdback.detect.secrets import JWT, PRIVATE_KEY, SECRET_KEYS, URL_PASSWORD

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
    needs="@",
    word="[A-Za-z0-9]",
)

# -- numbers ---------------------------------------------------------------------------------

CREDIT_CARD = RegexDetector(
    "credit_card",
    regex.compile(r"[0-9](?<![0-9_\-.,/](?s:.))[0-9]*+(?:[ \-./] ?[0-9]++)*+"),
    longest_group_prefix(v.credit_card_ok, " -./"),
    alphabet=r"[0-9 \-./]",
    starts=r"(?<![0-9_\-.,/])[0-9]",
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
    needs="[0-9]",
)

US_SSN = RegexDetector(
    "us_ssn",
    regex.compile(
        r"[0-9](?<![0-9A-Za-z_\-.](?s:.))[0-9]{2}(?P<ssn_sep>[\- ])[0-9]{2}(?P=ssn_sep)[0-9]{4}"
        r"(?![0-9A-Za-z_\-])"
    ),
    whole(v.us_ssn_ok),
    alphabet=r"[0-9 \-]",
    starts=r"(?<![0-9A-Za-z_\-.])[0-9]",
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
        if glued(m):
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
            r"(?=[+(]|(?<![0-9][ .\-])[0-9])(?<![0-9A-Za-z_+\-.@/])"
            r"(?:\+[0-9]{1,3}[ .\-]?)?(?:\([0-9]{1,5}\)[ .\-]?)?"
            r"[0-9]++(?:[ .\-] ?[0-9]++)*+"
        ),
        _phones(_phone_ok(region)),
        alphabet=r"[0-9 ().+\-]",
        starts=r"(?<![0-9A-Za-z_+\-.@/])[+(0-9]",
        lookback=64,
        gate="[0-9+(]",
    )


# -- network ---------------------------------------------------------------------------------


def _ipv4_ok(text: str) -> bool:
    return text.count(".") == 3 and v.ip_ok(text)


IPV4 = RegexDetector(
    "ip_address",
    regex.compile(r"[0-9](?<![\w.](?s:.))[0-9]{0,2}(?:\.[0-9]{1,3})+(?![\w])"),
    whole(_ipv4_ok),
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
    needs=":",
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
