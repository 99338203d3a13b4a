"""The leak scan: no sentence in the corpus may hold a value that is not labelled.

A corpus is only fair to a detector if it is *completely* labelled: a real card number left
unlabelled in a filler would turn a correct detection into a false positive. So every
sentence is scanned by broad, independent reference scanners for each kind (looser than any
detector needs to be), and each thing they find must be accounted for:

- it is a gold span of the same kind (equal after trimming non-alphanumerics at both ends);
- or it is a digit-based look-alike (phone, card, SSN, IP) lying wholly inside a gold span of
  another kind — a detector must resolve that overlap, which is part of what is measured;
- or it lies wholly inside a gold value that carries evasion characters (a scanner that does
  not undo evasion sees only a piece of it).

Anything else is a leak, and the generator rejects the sentence. Dictionary terms found inside
other values are leaks too: term lists and value makers are chosen so that never happens.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence

import phonenumbers
from gold_checks import IBAN_LENGTHS, has_evasion, iban_mod97_ok, luhn_ok, ssn_ok

Span = tuple[int, int, str]

DIGIT_KINDS = frozenset({"phone", "credit_card", "us_ssn", "ip_address"})

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_DIGIT_RUN = re.compile(r"(?<!\d)\d(?:[ -]?\d)*")
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){8,34}")
_SSN = re.compile(r"(?<![\d-])(\d{3})([- ])(\d{2})\2(\d{4})(?!\d)")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?!\d|\.\d)")
_IPV6 = re.compile(r"(?<![\w:.])[0-9A-Fa-f:]*:[0-9A-Fa-f:]*(?!\w|\.\w)")
_SECRET = re.compile(
    r"(?<![\w-])(?:sk-|sk_live_|sk_test_|rk_live_|rk_test_|gh[pousr]_|github_pat_|AKIA|ASIA"
    r"|xox[a-z]-|AIza)[A-Za-z0-9_-]{12,}"
)
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{6,}\.eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]+")
_PEM = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S)
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]+:([^\s/@]+)@")
_EXTENSION = re.compile(r"\s*(?:ext\.?|x|extension)\s*\d+\Z", re.I)


def trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """The span without its non-alphanumeric characters at either end (the matching rule)."""
    while start < end and not text[start].isalnum():
        start += 1
    while end > start and not text[end - 1].isalnum():
        end -= 1
    return start, end


def term_pattern(terms: Iterable[str]) -> re.Pattern[str]:
    """One pattern for every term: whole words, any letter case, longest term first."""
    alternatives = "|".join(re.escape(t) for t in sorted(set(terms), key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def _phones(text: str) -> Iterable[Span]:
    for m in phonenumbers.PhoneNumberMatcher(text, "US", leniency=phonenumbers.Leniency.VALID):
        raw = _EXTENSION.sub("", m.raw_string)
        yield m.start, m.start + len(raw), "phone"


def _cards(text: str) -> Iterable[Span]:
    # Any Luhn-valid run counts, brand or not: a detector may skip the brand check.
    for m in _DIGIT_RUN.finditer(text):
        digits = re.sub(r"\D", "", m.group())
        if 13 <= len(digits) <= 19 and luhn_ok(digits):
            yield m.start(), m.end(), "credit_card"


def _ibans(text: str) -> Iterable[Span]:
    for m in _IBAN.finditer(text):
        length = IBAN_LENGTHS.get(m.group()[:2])
        if length is None:
            continue
        count = 0
        for i in range(m.start(), m.end()):
            if text[i] != " ":
                count += 1
            if count == length:
                compact = text[m.start() : i + 1].replace(" ", "")
                if iban_mod97_ok(compact):
                    yield m.start(), i + 1, "iban"
                break


def _ssns(text: str) -> Iterable[Span]:
    for m in _SSN.finditer(text):
        if ssn_ok(m.group(1), m.group(3), m.group(4)):
            yield m.start(), m.end(), "us_ssn"


def _ips(text: str) -> Iterable[Span]:
    for m in _IPV4.finditer(text):
        try:
            ipaddress.IPv4Address(m.group())
        except ValueError:
            continue
        yield m.start(), m.end(), "ip_address"
    for m in _IPV6.finditer(text):
        candidate = m.group()
        for cut in (candidate, candidate.rstrip(":")):
            if cut.count(":") < 2:
                continue
            try:
                ipaddress.IPv6Address(cut)
            except ValueError:
                continue
            yield m.start(), m.start() + len(cut), "ip_address"
            break


def _secrets(text: str) -> Iterable[Span]:
    for m in _SECRET.finditer(text):
        yield m.start(), m.end(), "secret"
    for m in _PEM.finditer(text):
        yield m.start(), m.end(), "secret"
    for m in _URL_PASSWORD.finditer(text):
        yield m.start(1), m.end(1), "secret"
    for m in _JWT.finditer(text):
        yield m.start(), m.end(), "jwt"


def scan(text: str, terms: re.Pattern[str] | None) -> list[Span]:
    """Everything the reference scanners take for a value, on the raw text."""
    found: list[Span] = [(m.start(), m.end(), "email") for m in _EMAIL.finditer(text)]
    for scanner in (_phones, _cards, _ibans, _ssns, _ips, _secrets):
        found.extend(scanner(text))
    if terms is not None:
        found.extend((m.start(), m.end(), "term") for m in terms.finditer(text))
    return found


def leaks(
    text: str, gold: Sequence[Span], terms: re.Pattern[str] | None, term_kinds: Iterable[str]
) -> list[str]:
    """Descriptions of what the scanners found that the gold labels do not account for."""
    dictionary = frozenset(term_kinds)
    gold_keys = {(*trimmed(text, s, e), "term" if k in dictionary else k) for s, e, k in gold}
    problems = []
    for start, end, kind in scan(text, terms):
        if (*trimmed(text, start, end), kind) in gold_keys:
            continue
        inside = [(s, e, k) for s, e, k in gold if s <= start and end <= e]
        if any(has_evasion(text[s:e]) for s, e, _ in inside):
            continue
        if kind in DIGIT_KINDS and any(k != kind for _, _, k in inside):
            continue
        problems.append(f"unlabelled {kind} at {start}:{end}")
    return problems
