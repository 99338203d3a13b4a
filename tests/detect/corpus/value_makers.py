"""Makers of valid personal and financial values (emails, phones, cards, IBANs, SSNs, terms),
in the formats people print them, with evasion variants; also the evasions themselves.

Every maker returns a `Fragment`: the text to splice into a sentence and the gold spans in
it, relative to the fragment. A fragment may carry more than the value (`mailto:` before an
email, an extension after a phone number) and then its span covers the value alone, as the
span conventions say. Evasions are applied *inside* a value, never at
its ends, so the span still starts and ends on a character of the value itself.

Values are random but drawn from a caller's `random.Random`, so a fixed seed gives a fixed
corpus. Makers build values by their rule (Luhn digit, mod-97 check digits, SSA ranges); the
generator still runs `gold_checks.check_span` on every label it writes.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

import phonenumbers
from gold_checks import GAP_SPACES, INVISIBLE, iban_check_digits, luhn_ok

ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "-_"
EVASIONS_NUMERIC = ("invisible", "gap", "newline", "fullwidth")


@dataclass(frozen=True)
class Fragment:
    """Text for a placeholder, with gold spans `(start, end, kind)` relative to `text`."""

    text: str
    spans: tuple[tuple[int, int, str], ...]
    evaded: bool = False


def whole(text: str, kind: str, evaded: bool = False) -> Fragment:
    return Fragment(text, ((0, len(text), kind),), evaded)


def wrapped(before: str, value: str, after: str, kind: str, evaded: bool = False) -> Fragment:
    start = len(before)
    return Fragment(before + value + after, ((start, start + len(value), kind),), evaded)


def digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


# ---- evasions -----------------------------------------------------------------------------


def insert_invisible(rng: random.Random, value: str) -> str:
    """Hide one or two zero-width characters or soft hyphens inside the value, by a letter or
    digit (between two of them where the value has such a pair)."""
    out = value
    for _ in range(rng.choice((1, 1, 2))):
        slots = [i for i in range(1, len(out)) if out[i - 1].isalnum() and out[i].isalnum()]
        slots = slots or [i for i in range(1, len(out)) if out[i - 1].isalnum() or out[i].isalnum()]
        i = rng.choice(slots)
        out = out[:i] + rng.choice(INVISIBLE) + out[i:]
    return out


def gap_spaces(rng: random.Random, value: str) -> str:
    """Turn the spaces between digit groups into no-break, thin or narrow no-break spaces."""
    gap = rng.choice(GAP_SPACES)
    if rng.random() < 0.5:
        return value.replace(" ", gap)
    i = rng.choice([k for k, c in enumerate(value) if c == " "])
    return value[:i] + gap + value[i + 1 :]


def line_break(rng: random.Random, value: str) -> str:
    """Break the value across two lines at one of its group separators."""
    i = rng.choice([k for k, c in enumerate(value) if c == " "])
    return value[:i] + "\n" + value[i + 1 :]


def to_fullwidth(rng: random.Random, value: str, extra: str = "") -> str:
    """Fullwidth forms for ASCII letters and digits (and `extra`), all of it or a stretch."""
    if rng.random() < 0.6:
        lo, hi = 0, len(value)
    else:
        lo = rng.randrange(0, len(value) - 1)
        hi = rng.randrange(lo + 1, len(value) + 1)

    def fw(c: str) -> str:
        return chr(ord(c) + 0xFEE0) if (c.isascii() and c.isalnum()) or c in extra else c

    return value[:lo] + "".join(fw(c) for c in value[lo:hi]) + value[hi:]


def evade_grouped(rng: random.Random, value: str, how: str) -> str:
    """Apply a numeric evasion to a value printed with space-separated groups."""
    if how == "invisible":
        return insert_invisible(rng, value)
    if how == "gap":
        return gap_spaces(rng, value)
    if how == "newline":
        return line_break(rng, value)
    return to_fullwidth(rng, value)


# ---- email --------------------------------------------------------------------------------

_FIRST = (
    "sarah", "james", "li", "amir", "olga", "tom", "priya", "diego", "mei", "noah", "fatima",
    "lukas", "chloe", "ravi", "ingrid", "kwame", "yuki", "elena", "omar", "ada",
)  # fmt: skip
_LAST = (
    "chen", "okafor", "novak", "patel", "lindqvist", "moreau", "tanaka", "silva", "kowalski",
    "haddad", "brennan", "fischer", "ito", "mendes", "quinn", "varga",
)  # fmt: skip
_ROLES = (
    "billing", "support", "hr", "payroll", "security", "ops", "no-reply", "accounts", "legal",
    "privacy", "careers", "dev+alerts", "team.lead", "info",
)  # fmt: skip
_DOMAINS = (
    "northwind", "contoso", "fabrikam", "tailspin-toys", "wingtip", "litware", "proseware",
    "adatum", "fourthcoffee", "woodgrove", "lucerne-pub", "margie-travel", "treyresearch",
    "coho-vineyard", "blueyonder", "alpineski", "wideworld", "graphic-d", "relecloud",
    "southridge", "gmail", "outlook", "proton", "fastmail", "yahoo",
)  # fmt: skip
_TLDS = (
    "com", "com", "com", "io", "org", "net", "co.uk", "de", "fr", "dev", "ai", "app", "com.au",
    "ca", "nl", "ch", "info", "tech", "eu", "co",
)  # fmt: skip


def email_address(rng: random.Random) -> str:
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    local = rng.choice(
        (
            f"{first}.{last}", f"{first[0]}{last}", f"{first}_{last}", f"{first}",
            f"{first}+{rng.choice(('news', 'work', 'test', 'q3'))}", f"{first}.{last}{rng.randint(1, 99)}",
            rng.choice(_ROLES), f"{last}.{first[0]}",
        )
    )  # fmt: skip
    domain = rng.choice(_DOMAINS)
    if rng.random() < 0.15:
        domain = rng.choice(("mail", "eu", "corp", "us", "intra")) + "." + domain
    address = f"{local}@{domain}.{rng.choice(_TLDS)}"
    if rng.random() < 0.1:
        address = address[0].upper() + address[1:]
    if rng.random() < 0.05:
        address = address.upper()
    return address


def make_email(rng: random.Random, variant: str, evade: float) -> Fragment:
    address = email_address(rng)
    evaded = rng.random() < evade
    if evaded:
        how = rng.choice(("invisible", "fullwidth_at", "fullwidth_dot", "fullwidth"))
        if how == "invisible":
            address = insert_invisible(rng, address)
        elif how == "fullwidth_at":
            address = address.replace("@", "\uff20")
        elif how == "fullwidth_dot":
            local, domain = address.split("@")
            address = local + "@" + domain.replace(".", "\uff0e")
        else:
            address = to_fullwidth(rng, address, extra="@.")
    if variant == "plain":
        return whole(address, "email", evaded)
    before, after = rng.choice(
        (("", ""),) * 8 + (("mailto:", ""), ("<", ">"), ('"', '"'), ("(", ")"))
    )
    return wrapped(before, address, after, "email", evaded)


# ---- phone --------------------------------------------------------------------------------

_US_AREAS = (
    201, 202, 206, 212, 213, 214, 215, 303, 305, 310, 312, 313, 404, 408, 415, 425, 469, 480,
    503, 512, 520, 602, 612, 617, 619, 646, 650, 702, 713, 718, 720, 773, 786, 801, 808, 818,
    857, 907, 917, 919, 925, 949, 971, 978,
)  # fmt: skip
_INTL_REGIONS = (
    "GB", "DE", "FR", "JP", "AU", "IN", "ES", "IT", "NL", "SE", "CH", "BR", "MX", "SG", "IE",
    "BE", "PL", "NZ", "ZA", "AT", "DK", "NO", "PT", "KR", "AR",
)  # fmt: skip


def _us_number(rng: random.Random) -> tuple[str, str, str]:
    while True:
        area = str(rng.choice(_US_AREAS))
        exchange = str(rng.randint(2, 9)) + digits(rng, 2)
        line = digits(rng, 4)
        if exchange[1:] == "11":
            continue
        number = phonenumbers.parse(f"+1{area}{exchange}{line}")
        if phonenumbers.is_valid_number(number):
            return area, exchange, line


def _intl_number(rng: random.Random) -> phonenumbers.PhoneNumber:
    types = (phonenumbers.PhoneNumberType.FIXED_LINE, phonenumbers.PhoneNumberType.MOBILE)
    while True:
        region = rng.choice(_INTL_REGIONS)
        example = phonenumbers.example_number_for_type(region, rng.choice(types))
        if example is None:
            continue
        national = str(example.national_number)
        national = national[:-4] + digits(rng, 4)
        number = phonenumbers.parse(f"+{example.country_code}{national}")
        if phonenumbers.is_valid_number(number):
            return number


def phone_number(rng: random.Random, variant: str, spaced: bool) -> str:
    """A valid phone number; `spaced` forces digit groups separated by single spaces."""
    us = variant == "us" or (variant != "intl" and rng.random() < 0.6)
    if us:
        a, e, n = _us_number(rng)
        if spaced:
            return rng.choice((f"{a} {e} {n}", f"+1 {a} {e} {n}", f"({a}) {e} {n}"))
        return rng.choice(
            (
                f"({a}) {e}-{n}", f"({a}) {e}-{n}", f"{a}-{e}-{n}", f"{a}-{e}-{n}",
                f"{a}.{e}.{n}", f"+1 {a} {e} {n}", f"+1-{a}-{e}-{n}", f"+1 ({a}) {e}-{n}",
                f"+1{a}{e}{n}", f"{a} {e} {n}", f"+1 {a}-{e}-{n}", f"+1.{a}.{e}.{n}",
            )
        )  # fmt: skip
    number = _intl_number(rng)
    text = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.INTERNATIONAL)
    if spaced:
        return text.replace("-", " ")
    if rng.random() < 0.15:
        return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
    return text


def make_phone(rng: random.Random, variant: str, evade: float) -> Fragment:
    how = rng.choice(EVASIONS_NUMERIC) if rng.random() < evade else None
    text = phone_number(rng, variant, spaced=how in ("gap", "newline"))
    if how is not None:
        text = evade_grouped(rng, text, how)
    after = ""
    if variant != "plain" and how is None and rng.random() < 0.08:
        after = rng.choice((" ext. ", " x", " ext ", " extension ")) + str(rng.randint(2, 4999))
    return wrapped("", text, after, "phone", how is not None)


# ---- payment card -------------------------------------------------------------------------

_BRANDS: tuple[tuple[int, tuple[str, ...], tuple[int, ...]], ...] = (
    (30, ("4",), (16, 16, 16, 16, 13, 19)),
    (22, tuple(str(p) for p in (*range(51, 56), *range(2221, 2721, 37))), (16,)),
    (12, ("34", "37"), (15,)),
    (9, ("6011", "65", "644", "645", "649"), (16, 16, 19)),
    (8, tuple(str(p) for p in range(3528, 3590, 7)), (16,)),
    (7, ("36", "38", "300", "305"), (14,)),
    (8, ("62",), (16, 16, 19)),
)


def card_digits(rng: random.Random) -> str:
    weights = [b[0] for b in _BRANDS]
    _, prefixes, lengths = rng.choices(_BRANDS, weights=weights)[0]
    body = rng.choice(prefixes)
    length = rng.choice(lengths)
    body += digits(rng, length - 1 - len(body))
    for check in string.digits:
        if luhn_ok(body + check):
            return body + check
    raise AssertionError("some check digit always satisfies Luhn")


def group_card(digits: str, sep: str) -> str:
    """Print card digits as the networks do: 4-4-4-4(-3), Amex 4-6-5, Diners 4-6-4."""
    if len(digits) in (14, 15):
        sizes = [4, 6, len(digits) - 10]
    else:
        sizes = [4] * (len(digits) // 4) + ([len(digits) % 4] if len(digits) % 4 else [])
    groups: list[str] = []
    i = 0
    for size in sizes:
        groups.append(digits[i : i + size])
        i += size
    return sep.join(groups)


def make_card(rng: random.Random, variant: str, evade: float) -> Fragment:
    how = rng.choice(EVASIONS_NUMERIC) if rng.random() < evade else None
    digits = card_digits(rng)
    while len(digits) == 13 and how in ("gap", "newline"):
        digits = card_digits(rng)  # 13-digit Visa numbers are printed unbroken
    if how in ("gap", "newline") or (len(digits) != 13 and rng.random() < 0.45):
        text = group_card(digits, " ")
    elif len(digits) != 13 and rng.random() < 0.35:
        text = group_card(digits, "-")
    else:
        text = digits
    if how is not None:
        text = evade_grouped(rng, text, how)
    return whole(text, "credit_card", how is not None)


# ---- IBAN ---------------------------------------------------------------------------------

# BBAN structure per country: digits (n), upper-case letters (a), alphanumerics (c).
IBAN_BBAN = {
    "AD": "8n12c", "AE": "19n", "AL": "8n16c", "AT": "16n", "AZ": "4a20c", "BA": "16n",
    "BE": "12n", "BG": "4a6n8c", "BH": "4a14c", "BR": "23n1a1c", "CH": "5n12c", "CR": "18n",
    "CY": "8n16c", "CZ": "20n", "DE": "18n", "DK": "14n", "DO": "4c20n", "EE": "16n",
    "ES": "20n", "FI": "14n", "FO": "14n", "FR": "10n11c2n", "GB": "4a14n", "GE": "2a16n",
    "GI": "4a15c", "GL": "14n", "GR": "7n16c", "GT": "4c20c", "HR": "17n", "HU": "24n",
    "IE": "4a14n", "IL": "19n", "IS": "22n", "IT": "1a10n12c", "JO": "4a4n18c", "KW": "4a22c",
    "KZ": "3n13c", "LB": "4n20c", "LI": "5n12c", "LT": "16n", "LU": "3n13c", "LV": "4a13c",
    "MC": "10n11c2n", "MD": "2c18c", "ME": "18n", "MK": "3n10c2n", "MR": "23n", "MT": "4a5n18c",
    "MU": "4a19n3a", "NL": "4a10n", "NO": "11n", "PK": "4a16c", "PL": "24n", "PS": "4a21c",
    "PT": "21n", "QA": "4a21c", "RO": "4a16c", "RS": "18n", "SA": "2n18c", "SE": "20n",
    "SI": "15n", "SK": "20n", "SM": "1a10n12c", "TN": "20n", "TR": "5n1n16c", "UA": "6n19c",
    "VG": "4a16n", "XK": "16n",
}  # fmt: skip
_COMMON_IBAN = (
    "DE", "FR", "GB", "NL", "ES", "IT", "BE", "CH", "AT", "IE", "PL", "SE", "PT",
)  # fmt: skip


def bban(rng: random.Random, country: str) -> str:
    out: list[str] = []
    count = ""
    for ch in IBAN_BBAN[country]:
        if ch.isdigit():
            count += ch
            continue
        pool = {"n": string.digits, "a": string.ascii_uppercase}.get(
            ch, string.ascii_uppercase + string.digits * 2
        )
        out.extend(rng.choice(pool) for _ in range(int(count)))
        count = ""
    return "".join(out)


def iban_compact(rng: random.Random, country: str | None = None) -> str:
    if country is None:
        pool = _COMMON_IBAN if rng.random() < 0.5 else tuple(IBAN_BBAN)
        country = rng.choice(pool)
    b = bban(rng, country)
    return country + iban_check_digits(country, b) + b


def print_iban(compact: str) -> str:
    return " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))


def make_iban(rng: random.Random, variant: str, evade: float) -> Fragment:
    how = rng.choice(EVASIONS_NUMERIC) if rng.random() < evade else None
    compact = iban_compact(rng)
    printed = variant == "print" or (variant != "compact" and rng.random() < 0.55)
    text = print_iban(compact) if printed or how in ("gap", "newline") else compact
    if how is not None:
        text = evade_grouped(rng, text, how)
    return whole(text, "iban", how is not None)


# ---- US SSN -------------------------------------------------------------------------------


def ssn_parts(rng: random.Random) -> tuple[str, str, str]:
    area = rng.choice([a for a in range(1, 900) if a != 666])
    return f"{area:03d}", f"{rng.randint(1, 99):02d}", f"{rng.randint(1, 9999):04d}"


def make_ssn(rng: random.Random, variant: str, evade: float) -> Fragment:
    how = rng.choice(EVASIONS_NUMERIC) if rng.random() < evade else None
    a, g, s = ssn_parts(rng)
    sep = " " if how in ("gap", "newline") or rng.random() < 0.25 else "-"
    text = f"{a}{sep}{g}{sep}{s}"
    if how is not None:
        text = evade_grouped(rng, text, how) if sep == " " else insert_invisible(rng, text)
    return whole(text, "us_ssn", how is not None)


# ---- dictionary terms ---------------------------------------------------------------------


def make_term(rng: random.Random, kind: str, terms: list[str], evade: float) -> Fragment:
    term = rng.choice(terms)
    r = rng.random()
    if r < 0.1:
        term = term.lower()
    elif r < 0.18:
        term = term.upper()
    if rng.random() < evade:
        if rng.random() < 0.6:
            return whole(insert_invisible(rng, term), kind, True)
        return whole(to_fullwidth(rng, term), kind, True)
    return whole(term, kind)
