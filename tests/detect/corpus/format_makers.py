"""Makers of values in the formats of issue 14: separators people type, other scripts, keys
whose bodies hold no digit. They fill `formats.jsonl` (templates in `templates/formats/`).

- card numbers and SSNs with dots, slashes, en dashes, mixed separators or double spaces;
- IBANs printed in lower case;
- e-mail addresses with accented or Cyrillic letters, or a punycode (`xn--`) domain;
- phone numbers dialled with an international prefix (`0049 30 …`, `011 44 …`), and US
  numbers in the formats that set them apart from a digit group before them;
- API keys with a distinctive prefix and a body of letters only.

Same rules as `value_makers`: each maker returns a `Fragment` whose gold span is the value,
drawn from the caller's `random.Random`; the generator checks every label with `gold_checks`.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable

import phonenumbers
from value_makers import (
    Fragment,
    _intl_number,
    _us_number,
    card_digits,
    group_card,
    iban_compact,
    print_iban,
    ssn_parts,
    whole,
)

SEPARATORS = {
    "dots": ".",
    "slashes": "/",
    "endash": "\u2013",
    "double": "  ",
    "dashes": "-",
    "spaced": " ",
    "spaced_dash": " - ",
}
MIXED = (" ", "-", ".", "/", "\u2013")


def _groups_joined(groups: list[str], rng: random.Random, variant: str) -> str:
    if variant != "mixed":
        return SEPARATORS[variant].join(groups)
    while True:
        seps = [rng.choice(MIXED) for _ in groups[1:]]
        if len(set(seps)) > 1:
            break
    return groups[0] + "".join(s + g for s, g in zip(seps, groups[1:], strict=True))


def card(variant: str) -> Callable[[random.Random], Fragment]:
    def make(rng: random.Random) -> Fragment:
        digits = card_digits(rng)
        while len(digits) == 13:
            digits = card_digits(rng)
        if variant == "compact":
            return whole(digits, "credit_card")
        groups = group_card(digits, " ").split(" ")
        return whole(_groups_joined(groups, rng, variant), "credit_card")

    return make


def ssn(variant: str) -> Callable[[random.Random], Fragment]:
    def make(rng: random.Random) -> Fragment:
        return whole(_groups_joined(list(ssn_parts(rng)), rng, variant), "us_ssn")

    return make


def iban_lower(rng: random.Random) -> Fragment:
    compact = iban_compact(rng)
    text = print_iban(compact) if rng.random() < 0.6 else compact
    return whole(text.lower(), "iban")


_UNICODE_LOCAL = ("ännä", "jürgen", "zoë", "josé", "bjørn", "françois", "małgorzata", "søren",
                  "andrés.núñez", "chloé", "mühlenbeck", "iñigo")  # fmt: skip
_UNICODE_DOMAIN = ("bücher", "müller-bau", "café-paris", "bäckerei-süd", "ångström", "señor-té",
                   "zürich-reisen", "köln-büro")  # fmt: skip
_CYRILLIC = (("иван", "пример", "рф"), ("ольга", "почта", "рф"), ("дмитрий", "компания", "рус"),
             ("анна.петрова", "банк", "рф"), ("служба", "магазин", "бел"))  # fmt: skip


def email(variant: str) -> Callable[[random.Random], Fragment]:
    def make(rng: random.Random) -> Fragment:
        if variant == "cyrillic":
            local, domain, tld = rng.choice(_CYRILLIC)
            return whole(f"{local}@{domain}.{tld}", "email")
        local = rng.choice(_UNICODE_LOCAL)
        domain = rng.choice(_UNICODE_DOMAIN)
        tld = rng.choice(("example", "de", "fr", "com", "ch", "es"))
        if variant == "punycode":
            local = rng.choice(("user", "info", "kontakt", "bestellung", "hello"))
            domain = domain.encode("idna").decode("ascii")
        return whole(f"{local}@{domain}.{tld}", "email")

    return make


def phone_idd(rng: random.Random) -> Fragment:
    """`+49 30 123456` as dialled from abroad: `0049 30 123456`, `00 49 …`, `011 49 …`."""
    number = _intl_number(rng)
    text = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.INTERNATIONAL)
    prefix = rng.choice(("00", "00", "00 ", "011 "))
    return whole(prefix + text[1:].replace("-", " "), "phone")


def phone_formatted(rng: random.Random) -> Fragment:
    """A US number whose formatting sets it apart from a digit group before it."""
    a, e, n = _us_number(rng)
    return whole(rng.choice((f"{a}-{e}-{n}", f"{a}.{e}.{n}", f"({a}) {e}-{n}")), "phone")


def _letters(rng: random.Random, n: int, pool: str = string.ascii_letters) -> str:
    return "".join(rng.choice(pool) for _ in range(n))


def secret_nodigit(rng: random.Random) -> Fragment:
    """A key with a distinctive prefix whose body happens to hold no digit."""
    family = rng.choice(("github", "stripe", "aws", "openai", "google"))
    if family == "github":
        key = rng.choice(("ghp_", "gho_", "ghu_", "ghs_", "ghr_")) + _letters(rng, 36)
    elif family == "stripe":
        prefix = rng.choice(("sk_live_", "sk_test_", "rk_live_", "rk_test_"))
        key = prefix + _letters(rng, rng.choice((24, 32, 99)))
    elif family == "aws":
        key = "AKIA" + _letters(rng, 16, string.ascii_uppercase)
    elif family == "openai":
        body = _letters(rng, 1) + _letters(rng, 58, string.ascii_letters + "-_") + _letters(rng, 1)
        key = rng.choice(("sk-proj-", "sk-svcacct-")) + body
    else:
        key = "AIza" + _letters(rng, 34, string.ascii_letters + "-_") + _letters(rng, 1)
    return whole(key, "secret")


def secret_whsec(rng: random.Random) -> Fragment:
    return whole("whsec_" + _letters(rng, 32, string.ascii_letters + string.digits), "secret")


MAKERS: dict[tuple[str, str], Callable[[random.Random], Fragment]] = {
    **{("credit_card", v): card(v) for v in (*SEPARATORS, "mixed", "compact")},
    **{("us_ssn", v): ssn(v) for v in (*SEPARATORS, "mixed")},
    ("iban", "lower"): iban_lower,
    **{("email", v): email(v) for v in ("unicode", "punycode", "cyrillic")},
    ("phone", "idd"): phone_idd,
    ("phone", "formatted"): phone_formatted,
    ("secret", "nodigit"): secret_nodigit,
    ("secret", "whsec"): secret_whsec,
}
