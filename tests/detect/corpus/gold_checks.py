"""Independent validators for the corpus's gold labels: a labelled span must be a real value.

These checks are written for the corpus alone and share no code with `holdback.detect`, so a
bug in a detector cannot also bless the labels that measure it. Every gold span in the
corpus passes `check_span`; the generator refuses to write one that does not.

Evasion is undone before validation by `fold`: zero-width characters and soft hyphens go,
fullwidth forms become ASCII, and the no-break, thin and narrow no-break spaces and line
breaks that may sit between digit groups become plain spaces. The value's *format* is then
checked as strictly as the span conventions describe it, and its checksum or registry rule.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
from collections.abc import Mapping, Set

import phonenumbers

ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff"
SOFT_HYPHEN = "\u00ad"
INVISIBLE = ZERO_WIDTH + SOFT_HYPHEN
GAP_SPACES = "\u00a0\u2009\u202f"
PHONE_REGION = "US"

_FOLD: dict[int, str | int | None] = {ord(c): None for c in INVISIBLE}
_FOLD.update({ord(c): " " for c in GAP_SPACES + "\n"})
_FOLD.update({cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F)})

# ISO 13616 registry: total IBAN length per country (country code and check digits included).
IBAN_LENGTHS: Mapping[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BR": 29, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27,
    "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30,
    "KZ": 20, "LB": 28, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29,
    "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SE": 24, "SI": 19, "SK": 24, "SM": 27,
    "TN": 24, "TR": 26, "UA": 29, "VG": 24, "XK": 20,
}  # fmt: skip

_EMAIL = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9._%+-]*[A-Za-z0-9])?"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,24}\Z"
)
_PHONE_SHAPE = re.compile(r"(?:\+\d|\(\d|\d)[\d ().-]*\d\Z")
# Between digit groups of a card number or an SSN: a dot, slash, hyphen or en dash with a space
# on either side or none, or one or two spaces; mixed in one number or not.
_GROUP_SEP = r"(?: ?[-./\u2013] ?| {1,2})"
_CARD_SHAPES = (
    re.compile(r"\d{13,19}\Z"),
    re.compile(r"\d{4}(?P<sep>[ -])\d{4}(?P=sep)\d{4}(?P=sep)\d{1,4}(?:(?P=sep)\d{1,3})?\Z"),
    re.compile(r"\d{4}(?P<sep>[ -])\d{6}(?P=sep)\d{4,5}\Z"),
    re.compile(
        rf"\d{{4}}(?:{_GROUP_SEP}\d{{4}}){{2}}{_GROUP_SEP}\d{{1,4}}(?:{_GROUP_SEP}\d{{1,3}})?\Z"
    ),
    re.compile(rf"\d{{4}}{_GROUP_SEP}\d{{6}}{_GROUP_SEP}\d{{4,5}}\Z"),
)
_IBAN_COMPACT = re.compile(r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}\Z")
_IBAN_PRINTED = re.compile(r"[A-Z]{2}\d{2}(?: [A-Z0-9]{4})+(?: [A-Z0-9]{1,3})?\Z")
_SSN = re.compile(r"(?P<area>\d{3})(?P<sep>[- ])(?P<group>\d{2})(?P=sep)(?P<serial>\d{4})\Z")
_SSN_GROUPED = re.compile(
    rf"(?P<area>\d{{3}}){_GROUP_SEP}(?P<group>\d{{2}}){_GROUP_SEP}(?P<serial>\d{{4}})\Z"
)
# Internationalized addresses: letters of any script, a punycode (`xn--`) label or TLD.
_EMAIL_UNICODE = re.compile(
    r"[^\W_](?:[\w.%+-]*[^\W_])?@(?:[^\W_](?:[\w-]*[^\W_])?\.)+(?:[^\W\d_]{2,24}|xn--[a-z0-9-]+)\Z"
)
_B64URL = r"[A-Za-z0-9_-]"
_SECRET_SHAPES = tuple(
    re.compile(p + r"\Z")
    for p in (
        r"sk-[A-Za-z0-9]{48}",  # OpenAI, legacy user keys
        r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,200}",  # OpenAI project/service keys
        r"sk-ant-(?:api03|admin01)-[A-Za-z0-9_-]{80,110}",  # Anthropic
        r"gh[pousr]_[A-Za-z0-9]{36}",  # GitHub classic tokens
        r"github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}",  # GitHub fine-grained tokens
        r"(?:AKIA|ASIA)[A-Z2-7]{16}",  # AWS access key ids
        r"xox[bpars]-[0-9]{10,13}-[0-9]{10,13}(?:-[0-9]{10,13})?-[A-Za-z0-9]{24,32}",  # Slack
        r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{24,99}",  # Stripe secret and restricted keys
        r"AIza[A-Za-z0-9_-]{35}",  # Google API keys
        r"whsec_[A-Za-z0-9]{24,99}",  # Stripe webhook signing secrets
    )
)
_PEM = re.compile(
    r"-----BEGIN (?P<label>(?:RSA |EC |DSA |OPENSSH |ENCRYPTED )?PRIVATE KEY)-----\n"
    r"(?:[A-Za-z0-9+/=]{1,76}\n)+"
    r"-----END (?P=label)-----\Z"
)
_URL_USERINFO_BEFORE = re.compile(r"[a-z][a-z0-9+.-]*://[A-Za-z0-9._~%!$&'*+,;=-]+:\Z")
_URL_PASSWORD = re.compile(r"[A-Za-z0-9._~%!$&'*+,;=-]+\Z")
_WORD = re.compile(r"\w")


def fold(text: str) -> str:
    """Undo the evasions the corpus uses; the result is what a value "really" says."""
    return text.translate(_FOLD)


def has_evasion(value: str) -> bool:
    """Whether a value carries one of the evasions `fold` undoes."""
    if value.startswith("-----BEGIN"):
        value = value.replace("\n", "")  # a PEM block is made of lines
    return any(c in INVISIBLE or c in GAP_SPACES or c == "\n" or "\uff01" <= c <= "\uff5e"
               for c in value)  # fmt: skip


def luhn_ok(digits: str) -> bool:
    """The Luhn (mod 10) check over a string of ASCII digits."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def card_brand(digits: str) -> str | None:
    """The card network a number belongs to, by issuer prefix and length; None if none."""
    n = len(digits)
    p2, p3, p4 = int(digits[:2]), int(digits[:3]), int(digits[:4])
    if digits[0] == "4" and n in (13, 16, 19):
        return "visa"
    if (51 <= p2 <= 55 or 2221 <= p4 <= 2720) and n == 16:
        return "mastercard"
    if p2 in (34, 37) and n == 15:
        return "amex"
    if (p4 == 6011 or p2 == 65 or 644 <= p3 <= 649) and 16 <= n <= 19:
        return "discover"
    if 3528 <= p4 <= 3589 and 16 <= n <= 19:
        return "jcb"
    if (p2 in (36, 38) or 300 <= p3 <= 305) and 14 <= n <= 19:
        return "diners"
    if p2 == 62 and 16 <= n <= 19:
        return "unionpay"
    return None


def iban_mod97_ok(compact: str) -> bool:
    """ISO 7064 mod 97-10 over an IBAN without spaces: the rearranged number is 1 mod 97."""
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def iban_check_digits(country: str, bban: str) -> str:
    """The two check digits that make `country + ?? + bban` pass mod 97."""
    number = "".join(str(int(c, 36)) for c in bban + country + "00")
    return f"{98 - int(number) % 97:02d}"


def ssn_ok(area: str, group: str, serial: str) -> bool:
    """SSA rules: no area 000, 666 or 900-999; no group 00; no serial 0000."""
    a = int(area)
    return a != 0 and a != 666 and a < 900 and group != "00" and serial != "0000"


def _b64url_json(part: str) -> object:
    padded = part + "=" * (-len(part) % 4)
    return json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))


def _check_email(v: str) -> str | None:
    if not (_EMAIL.match(v) or _EMAIL_UNICODE.match(v)) or ".." in v:
        return "not an email address"
    return None


def _check_phone(v: str) -> str | None:
    if not _PHONE_SHAPE.match(v):
        return "not shaped like a phone number"
    for prefix in ("011", "00"):  # dialled from abroad: `0049 30 …` is `+49 30 …`
        if v.startswith(prefix):
            v = "+" + v[len(prefix) :].lstrip()
            break
    try:
        number = phonenumbers.parse(v, PHONE_REGION)
    except phonenumbers.NumberParseException:
        return "phonenumbers cannot parse it"
    if not phonenumbers.is_valid_number(number):
        return "phonenumbers says it is not a valid number"
    return None


def _check_card(v: str) -> str | None:
    if not any(shape.match(v) for shape in _CARD_SHAPES):
        return "not grouped like a card number"
    digits = re.sub(r"\D", "", v)
    if not luhn_ok(digits):
        return "fails Luhn"
    if card_brand(digits) is None:
        return "no card brand has this prefix and length"
    return None


def _check_iban(v: str) -> str | None:
    v = v.upper()  # printed in either case (`gb82 west 1234 5698 7654 32`)
    if not (_IBAN_COMPACT.match(v) or _IBAN_PRINTED.match(v)):
        return "not shaped like an IBAN"
    compact = v.replace(" ", "")
    if IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return "wrong length for its country"
    if not iban_mod97_ok(compact):
        return "fails mod 97"
    return None


def _check_ssn(v: str) -> str | None:
    m = _SSN.match(v) or _SSN_GROUPED.match(v)
    if not m:
        return "not AAA-GG-SSSS or AAA GG SSSS"
    if not ssn_ok(m["area"], m["group"], m["serial"]):
        return "area, group or serial is never issued"
    return None


def _check_ip(v: str) -> str | None:
    if not re.fullmatch(r"[0-9A-Fa-f:.]+", v):
        return "not an IP address"
    try:
        ipaddress.ip_address(v)
    except ValueError:
        return "ipaddress rejects it"
    return None


def _check_jwt(v: str) -> str | None:
    parts = v.split(".")
    if len(parts) != 3 or not all(re.fullmatch(_B64URL + "+", p) for p in parts):
        return "not three base64url parts"
    if not (parts[0].startswith("eyJ") and parts[1].startswith("eyJ")):
        return "header or payload does not start eyJ"
    try:
        header, payload = _b64url_json(parts[0]), _b64url_json(parts[1])
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return "header or payload is not base64url JSON"
    if not isinstance(header, dict) or "alg" not in header or not isinstance(payload, dict):
        return "header or payload is not a JWT object"
    return None


def _check_secret(text: str, start: int, end: int, v: str) -> str | None:
    if any(shape.match(v) for shape in _SECRET_SHAPES) or _PEM.match(text[start:end]):
        return None
    before = text[max(0, start - 200) : start]
    if _URL_PASSWORD.match(v) and _URL_USERINFO_BEFORE.search(before) and text[end:][:1] == "@":
        return None
    return "no published key shape, PEM private key, or URL password"


def on_word_boundaries(text: str, start: int, end: int) -> bool:
    """Whether a span neither starts nor ends inside a word (`\\w`, as dictionaries match)."""
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    return not _WORD.match(before) and not _WORD.match(after)


def check_span(
    kind: str, text: str, start: int, end: int, terms: Mapping[str, Set[str]]
) -> str | None:
    """Why `text[start:end]` is not a valid value of `kind`, or None when it is.

    `terms` maps each dictionary kind to its terms, case-folded.
    """
    if not 0 <= start < end <= len(text):
        return "offsets out of range"
    raw = text[start:end]
    if raw != raw.strip() or (not raw[0].isalnum() and raw[0] not in "+(-:"):
        return "span starts or ends on padding"
    v = fold(raw)
    if kind == "email":
        return _check_email(v)
    if kind == "phone":
        return _check_phone(v)
    if kind == "credit_card":
        return _check_card(v)
    if kind == "iban":
        return _check_iban(v)
    if kind == "us_ssn":
        return _check_ssn(v)
    if kind == "ip_address":
        return _check_ip(v)
    if kind == "jwt":
        return _check_jwt(v)
    if kind == "secret":
        return _check_secret(text, start, end, v)
    if kind in terms:
        if v.casefold() not in terms[kind]:
            return f"not a term of the {kind} list"
        if not on_word_boundaries(text, start, end):
            return "term is not on word boundaries"
        return None
    return f"unknown kind {kind!r}"
