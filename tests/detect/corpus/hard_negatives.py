"""Makers of look-alikes that are NOT sensitive values: the precision half of the corpus.

Each maker returns text that resembles a value of some kind but fails that kind's rule:
card-shaped numbers that fail Luhn, IBANs with a bad checksum or the wrong length for their
country, SSN-shaped numbers in ranges the SSA never issues, dotted quads out of range,
versions, dates, prices, hashes, placeholder API keys, near misses of dictionary terms.
They fill the negative examples and also sit next to real values in positive ones.

A maker never returns something that is a valid value by the corpus's own checks; the
generator's leak scan (`leak_scan.py`) rejects any sentence where one slips through.
"""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Callable

import phonenumbers
from gold_checks import IBAN_LENGTHS, iban_check_digits, luhn_ok
from value_makers import bban, group_card, iban_compact, print_iban

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")  # fmt: skip


def _d(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def version(rng: random.Random) -> str:
    a, b, c = rng.randint(0, 20), rng.randint(0, 40), rng.randint(0, 99)
    return rng.choice(
        (
            f"{a}.{b}.{c}", f"v{a}.{b}.{c}", f"{a}.{b}", "1.2.3", f"{a}.{b}.{c}.{rng.randint(1, 9)}.{c}",
            f"{a}.{b}.{rng.randint(1000, 30000)}.{rng.randint(1, 4000)}", f"{a}.{b}.{c}-rc.{rng.randint(1, 5)}",
            f"v{a}.{b}.{c}-beta.{rng.randint(1, 9)}", f"{a}.{b}.{c}+build.{rng.randint(100, 999)}",
            "1.2.3.4.5", f"{a}.{b}.{c}.post{rng.randint(1, 3)}",
        )
    )  # fmt: skip


def date(rng: random.Random) -> str:
    y, m, d = rng.randint(1998, 2031), rng.randint(1, 12), rng.randint(1, 28)
    name = _MONTHS[m - 1]
    return rng.choice(
        (
            f"{y}-{m:02d}-{d:02d}", f"{d:02d}/{m:02d}/{y}", f"{m}/{d}/{y}", f"{d:02d}.{m:02d}.{y}",
            f"{name} {d}, {y}", f"{d} {name[:3]} {y}", f"{y}/{m:02d}/{d:02d}", f"{y}{m:02d}{d:02d}",
            f"{y}-{m:02d}-{d:02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
            f"{d}.{m}.{y % 100:02d}", f"{name[:3]} {d:02d} {y}", f"{d}-{name[:3]}-{y}",
        )
    )  # fmt: skip


def time_of_day(rng: random.Random) -> str:
    h, m, s = rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)
    return rng.choice(
        (f"{h:02d}:{m:02d}", f"{h:02d}:{m:02d}:{s:02d}", f"{h % 12 or 12}:{m:02d} pm",
         f"{h:02d}:{m:02d}:{s:02d}.{rng.randint(0, 999):03d}", f"{h % 12 or 12}:{m:02d}am")
    )  # fmt: skip


def price(rng: random.Random) -> str:
    n = rng.randint(1, 250_000)
    return rng.choice(
        (f"${n:,}.{rng.randint(0, 99):02d}", f"€{n % 5000}.99", f"USD {n:,}", f"£{n / 1000:.1f}k",
         f"¥{n * 10:,}", f"${n % 100}.50", f"{n % 900 + 100},00 €", f"CHF {n:,}")
    )  # fmt: skip


def order_number(rng: random.Random) -> str:
    return rng.choice(
        (
            f"ORD-{rng.randint(2019, 2026)}-{_d(rng, 6)}", f"#{_d(rng, 6)}", f"INV-{_d(rng, 6)}",
            f"PO {_d(rng, 4)}-{_d(rng, 4)}", f"{_d(rng, 8)}", f"SO{_d(rng, 7)}",
            f"RMA-{_d(rng, 5)}", f"case {_d(rng, 7)}", f"ticket #{_d(rng, 5)}",
        )
    )  # fmt: skip


def bad_card(rng: random.Random) -> str:
    """A card-shaped number with a real brand prefix whose Luhn digit is wrong."""
    prefix = rng.choice(("4", "51", "53", "55", "2223", "37", "6011", "3530", "62", "36"))
    length = {"37": 15, "36": 14}.get(prefix, 16)
    body = prefix + _d(rng, length - len(prefix))
    while luhn_ok(body):
        body = body[:-1] + str((int(body[-1]) + 1) % 10)
    r = rng.random()
    if r < 0.4:
        return group_card(body, " ")
    if r < 0.6:
        return group_card(body, "-")
    return body


def long_reference(rng: random.Random) -> str:
    """Tracking and account references of 13-19 digits that fail Luhn."""
    while True:
        digits = rng.choice("123456789") + _d(rng, rng.randint(12, 18))
        if not luhn_ok(digits):
            break
    return rng.choice((digits, f"1Z{rng.choice(string.ascii_uppercase)}{_d(rng, 2)}E{_d(rng, 11)}"))


def isbn(rng: random.Random) -> str:
    body = rng.choice(("978", "979")) + _d(rng, 9)
    check = (10 - sum(int(c) * (3 if i % 2 else 1) for i, c in enumerate(body)) % 10) % 10
    d = body + str(check)
    return rng.choice((f"{d[:3]}-{d[3]}-{d[4:6]}-{d[6:12]}-{d[12]}", f"ISBN {d}", d))


def nine_digits(rng: random.Random) -> str:
    return rng.choice("123456789") + _d(rng, 8)


def bad_iban(rng: random.Random) -> str:
    """An IBAN with a wrong checksum, the wrong length for its country, or no such country."""
    how = rng.random()
    if how < 0.45:
        good = iban_compact(rng)
        wrong = f"{(int(good[2:4]) + rng.randint(1, 96)) % 97 + 2:02d}"
        compact = good[:2] + wrong + good[4:]
        if wrong == good[2:4]:
            compact = good[:2] + f"{int(wrong) % 97 + 1:02d}" + good[4:]
    elif how < 0.85:
        country = rng.choice(list(IBAN_LENGTHS))
        b = bban(rng, country)
        b = b[:-1] if rng.random() < 0.5 else b + rng.choice(string.digits)
        compact = country + iban_check_digits(country, b) + b
    else:
        country = rng.choice(("XY", "QQ", "ZZ", "AA"))
        b = _d(rng, 18)
        compact = country + iban_check_digits(country, b) + b
    return print_iban(compact) if rng.random() < 0.5 else compact


def bad_ssn(rng: random.Random) -> str:
    area, group, serial = f"{rng.randint(1, 899):03d}", f"{rng.randint(1, 99):02d}", _d(rng, 4)
    if serial == "0000":
        serial = "0001"
    broken = rng.choice(("000", "666", "9xx", "00", "0000"))
    if broken == "9xx":
        area = str(rng.randint(900, 999))
    elif broken in ("000", "666"):
        area = broken
    elif broken == "00":
        group = "00"
    else:
        serial = "0000"
    sep = rng.choice("-- ")
    return f"{area}{sep}{group}{sep}{serial}"


def bad_phone(rng: random.Random) -> str:
    """Phone-shaped strings that no numbering plan accepts, with the US as default region."""
    while True:
        a = rng.choice(("0", "1")) + _d(rng, 2)
        e, n = _d(rng, 3), _d(rng, 4)
        text = rng.choice(
            (f"({a}) {e}-{n}", f"{a}-{e}-{n}", f"555-{_d(rng, 4)}", f"{e}-{n}",
             f"+1 {a} {e} {n}", "(123) 456-7890", "000-000-0000", f"{a}.{e}.{n}")
        )  # fmt: skip
        number = phonenumbers.parse(text, "US")
        if not phonenumbers.is_valid_number(number):
            return text


def bad_ip(rng: random.Random) -> str:
    o = rng.randint
    return rng.choice(
        (
            "999.1.1.1", f"{o(256, 999)}.{o(0, 255)}.{o(0, 255)}.{o(0, 255)}", "1.2.3",
            f"{o(0, 255)}.{o(0, 255)}.{o(256, 999)}.{o(0, 255)}", "1.2.3.4.5", "localhost",
            f"{o(1, 255)}.{o(0, 255)}.{o(0, 255)}", f"10.0.0.{o(256, 400)}", "300.168.1.1",
        )
    )  # fmt: skip


def oid(rng: random.Random) -> str:
    return rng.choice(
        ("1.3.6.1.4.1.311.21.7", "2.5.4.3", "1.2.840.113549.1.1.11", "1.3.6.1.5.5.7.3.1",
         f"1.3.6.1.4.1.{rng.randint(1000, 60000)}.{rng.randint(1, 9)}.{rng.randint(1, 9)}",
         "2.16.840.1.101.3.4.2.1", "0.9.2342.19200300.100.1.25")
    )  # fmt: skip


def mac(rng: random.Random) -> str:
    octets = [f"{rng.randrange(256):02x}" for _ in range(6)]
    text = rng.choice((":".join(octets), "-".join(octets).upper(),
                       ".".join("".join(octets[i : i + 2]) for i in (0, 2, 4))))  # fmt: skip
    return text


def hex_hash(rng: random.Random) -> str:
    n = rng.choice((7, 8, 12, 32, 40, 40, 64))
    text = "".join(rng.choice("0123456789abcdef") for _ in range(n))
    return text if rng.random() < 0.8 else "sha256:" + text


def uuid_text(rng: random.Random) -> str:
    text = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return text.upper() if rng.random() < 0.15 else text


def fake_secret(rng: random.Random) -> str:
    return rng.choice(
        (
            "sk-learn", "scikit-learn", "sk_test_xxx", "AKIA", "xoxo", "ghp_", "AIza", "sk-...",
            "sk_live_...", "ghp_XXXXXXXX", "YOUR_API_KEY", "sk-ant-...", "xoxb-your-token",
            "<your-api-key>", "sk_test_REPLACE_ME", "github_pat_...", "AKIA...", "sk-<redacted>",
            "${OPENAI_API_KEY}", "rk_live_xxx", "ghp_****", "sk-proj-XXXX", "$STRIPE_KEY",
        )
    )  # fmt: skip


def fake_jwt(rng: random.Random) -> str:
    def b64(n: int) -> str:
        return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))

    return rng.choice(
        (
            "eyJ", "header.payload.signature", f"{b64(20)}.{b64(30)}.{b64(43)}", "com.example.app",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ", f"QUJD{b64(8)}.REVG{b64(12)}.{b64(20)}",
            "jwt.io", "a.b.c", "report.final.v2.pdf", "dGhpcyBpcyBub3QgYSB0b2tlbg==",
            "org.apache.commons.lang3", "eyJ...", "Bearer <token>",
        )
    )  # fmt: skip


def not_email(rng: random.Random) -> str:
    return rng.choice(
        (
            "@here", "@channel", f"@{rng.choice(('sarah', 'devops', 'tom_k', 'ana'))}", "@media",
            "@dataclass", "lodash@4.17.21", "react@18.2.0", "user@", "@example.com", "foo@bar",
            "@app.route", "name@domain", "@import", "support (at) the usual address",
            "@types/node", "email@", "a@b",
        )
    )  # fmt: skip


def bic(rng: random.Random) -> str:
    letters = "".join(rng.choice(string.ascii_uppercase) for _ in range(4))
    tail = rng.choice(("", "XXX", "500", "FFX"))
    return (
        letters
        + rng.choice(("DE", "FR", "GB", "NL", "IT", "CH"))
        + rng.choice(("FF", "2L", "22", "MM"))
        + tail
    )


def integer(rng: random.Random) -> str:
    return str(
        rng.choice((rng.randint(2, 99), rng.randint(100, 9999), rng.randint(10_000, 99_999)))
    )


def percent(rng: random.Random) -> str:
    return f"{rng.randint(0, 100)}.{rng.randint(0, 9)}%"


def near_term(rng: random.Random, terms: list[str]) -> str:
    """A near miss of a dictionary term: glued into a longer word, cut short, or misspelt."""
    term = rng.choice(terms)
    words = term.split(" ")
    how = rng.random()
    if how < 0.4:
        return " ".join([*words[:-1], words[-1] + rng.choice(("ville", "s", "ish", "ton", "er"))])
    if how < 0.6:
        return " ".join([rng.choice(("Neo", "Pre", "Un", "Mega")) + words[0].lower(), *words[1:]])
    if how < 0.8 and len(words) > 1:
        return rng.choice(words)
    i = rng.randrange(1, len(term) - 1)
    if term[i].isalpha():
        return term[:i] + term[i + 1 :]
    return term + "o"


MAKERS: dict[str, Callable[[random.Random], str]] = {
    "version": version,
    "date": date,
    "time": time_of_day,
    "price": price,
    "order": order_number,
    "bad_card": bad_card,
    "long_ref": long_reference,
    "isbn": isbn,
    "digits9": nine_digits,
    "bad_iban": bad_iban,
    "bad_ssn": bad_ssn,
    "bad_phone": bad_phone,
    "bad_ip": bad_ip,
    "oid": oid,
    "mac": mac,
    "hash": hex_hash,
    "uuid": uuid_text,
    "fake_secret": fake_secret,
    "fake_jwt": fake_jwt,
    "not_email": not_email,
    "bic": bic,
    "int": integer,
    "percent": percent,
}
