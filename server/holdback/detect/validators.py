"""Checksums and structural rules that turn a pattern match into a finding.

A regular expression only proposes; a value becomes a finding when it passes the rule its kind
defines: Luhn for cards, ISO 13616 mod-97 and the country's length for IBANs, the SSA's
allocation rules for US social security numbers, `ipaddress` for IP addresses and the
`phonenumbers` library for phone numbers. Each validator is a pure function of the text, and
costs a bounded amount of work: none looks at more than one value's worth of text.

`phonenumbers` is the judge of every phone number; `phone_possible` only saves it the numbers
its own metadata already rules out (a national number of a length no number of the region has),
and is a necessary condition of `phone_ok`, never a looser one (tests hold it to that).
"""

from __future__ import annotations

import base64
import binascii
import functools
import ipaddress
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import phonenumbers
from phonenumbers import PhoneMetadata

# ISO 13616 IBAN lengths by country (SWIFT IBAN registry).
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22,
    "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32,
    "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24, "SC": 31,
    "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28, "TL": 23,
    "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip

CARD_LENGTHS = range(13, 20)

# Between two digit groups of a card number or an SSN: a dot, slash, hyphen or en dash with a
# space on either side or none, or one or two spaces. Any mix of them may appear in one number.
NUMBER_SEPARATOR = r"(?: ?[\-./\u2013] ?| {1,2})"
_GROUPED = re.compile(rf"[0-9]+(?:{NUMBER_SEPARATOR}[0-9]+)*")
_GROUPS = re.compile(r"[0-9]+")
_SEPARATORS = re.compile(r"[^0-9]+")


_NOT_DIGITS = re.compile(r"[^0-9]+")


def digits_of(text: str) -> str:
    return _NOT_DIGITS.sub("", text)


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


_DOUBLED = [0, 2, 4, 6, 8, 1, 3, 5, 7, 9]


class LuhnSums:
    """Luhn checks of every slice of one digit string, each in O(1) after an O(n) pass: a run
    of digit groups holds O(n) candidate card numbers, and each is checked in constant time.

    A slice ending at `end` counts its digits at positions of the parity of `end - 1` as they
    are and the others doubled, so two prefix sums answer every slice: `sums[0]` weighs even
    positions plain and odd ones doubled, `sums[1]` the other way round."""

    __slots__ = ("sums",)

    def __init__(self, digits: str) -> None:
        values = [ord(c) - 48 for c in digits]
        doubles = [_DOUBLED[d] for d in values]
        even_plain, odd_plain = values[:], doubles[:]
        even_plain[1::2] = doubles[1::2]
        odd_plain[1::2] = values[1::2]
        self.sums = (
            list(itertools.accumulate(even_plain, initial=0)),
            list(itertools.accumulate(odd_plain, initial=0)),
        )

    def ok(self, start: int, end: int) -> bool:
        """Whether digits[start:end] passes Luhn: the last digit and every second one before it
        count as they are, the others doubled."""
        sums = self.sums[(end - 1) & 1]
        return (sums[end] - sums[start]) % 10 == 0


# No issuer prefix begins with these digits.
NO_ISSUER_FIRST = frozenset("0179")


def card_brand_ok(digits: str) -> bool:
    """A real issuer prefix: Visa, Mastercard, Amex, Discover, JCB, Diners, UnionPay, Maestro."""
    n = len(digits)
    if digits[0] == "4":
        return n in (13, 16, 19)
    if digits[0] in NO_ISSUER_FIRST:
        return False
    two, four, six = int(digits[:2]), int(digits[:4]), int(digits[:6])
    if 51 <= two <= 55 or 222100 <= six <= 272099:
        return n == 16
    if two in (34, 37):
        return n == 15
    if four == 6011 or two == 65 or 644 <= int(digits[:3]) <= 649 or 622126 <= six <= 622925:
        return n in (16, 19)
    if 3528 <= four <= 3589:
        return 16 <= n <= 19
    if two in (36, 38, 39) or 300 <= int(digits[:3]) <= 305:
        return 14 <= n <= 19
    if two == 62 or two == 81:
        return 16 <= n <= 19
    if two in (50, 56, 57, 58) or digits[0] == "6":
        return 12 <= n <= 19
    return False


def _network_grouping(sizes: list[int]) -> bool:
    """How the networks print their numbers: fours (the last group shorter), or 4-6-4/4-6-5."""
    if sizes[:2] == [4, 6] and len(sizes) == 3:
        return sizes[2] in (4, 5)
    return all(n == 4 for n in sizes[:-1]) and 1 <= sizes[-1] <= 4


def credit_card_ok(text: str) -> bool:
    """13 to 19 digits that pass Luhn and carry an issuer's prefix: unbroken, in groups of 2 to
    6 digits with one kind of separator (`NUMBER_SEPARATOR`), or with mixed separators in the
    networks' own grouping (`4111 1111-1111.1111`; a mix of separators between groups of other
    sizes joins numbers that have nothing to do with each other)."""
    digits = digits_of(text)
    if len(digits) not in CARD_LENGTHS or not luhn_ok(digits) or not card_brand_ok(digits):
        return False
    if len(digits) != len(text):
        if _GROUPED.fullmatch(text) is None:
            return False
        sizes = [len(g) for g in _GROUPS.findall(text)]
        return card_grouping_ok(sizes, set(_SEPARATORS.findall(text)), digits)
    return len(set(digits)) > 1


def card_grouping_ok(sizes: list[int], separators: set[str], digits: str) -> bool:
    """The rest of `credit_card_ok` for 13 to 19 digits that pass Luhn and carry an issuer's
    prefix, written in groups of `sizes` digits with `separators` between them (a caller that
    has the groups already asks this alone)."""
    if any(not 2 <= n <= 6 for n in sizes):
        return False
    if len(separators) > 1 and not _network_grouping(sizes):
        return False
    return len(set(digits)) > 1


def iban_ok(text: str) -> bool:
    compact = text.replace(" ", "").upper()
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not compact[2:4].isdigit():
        return False
    if not compact.isalnum() or not compact.isascii():
        return False
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(c, 36)) for c in rearranged)
    return int(number) % 97 == 1


def us_ssn_ok(text: str) -> bool:
    digits = digits_of(text)
    if len(digits) != 9:
        return False
    area, group, serial = int(digits[:3]), int(digits[3:5]), int(digits[5:])
    # Numbers the SSA never issues. (The advertising specimens, 123-45-6789 and 078-05-1120,
    # are in the issued ranges and are treated as what they look like.)
    return not (area == 0 or area == 666 or area >= 900 or group == 0 or serial == 0)


def ip_ok(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


# -- phone numbers ---------------------------------------------------------------------------

# International call prefixes recognised whatever the region: `00` (most of the world) and
# `011` (the North American plan). A region's own prefix is recognised by phonenumbers too.
INTERNATIONAL_PREFIXES = ("011", "00")


@dataclass(frozen=True, slots=True)
class _Region:
    """What phonenumbers' metadata says about a region's national numbers."""

    country_code: str
    trunk: str  # the trunk prefix its national numbers are written with ("" if none is needed)
    lengths: frozenset[int]  # every length a valid national significant number has
    general: re.Pattern[str]  # every valid national significant number matches it (its type)
    strip: re.Pattern[str] | None  # what parsing strips as a national prefix
    international: re.Pattern[str]  # the region's own international call prefix
    exact: bool  # False: parsing may rewrite the number, so nothing is ruled out early


# The number types `phonenumbers.is_valid_number` accepts a number as (`_number_type_helper`).
_NUMBER_TYPES = (
    "premium_rate", "toll_free", "shared_cost", "voip", "personal_number", "pager", "uan",
    "voicemail", "fixed_line", "mobile",
)  # fmt: skip


@functools.lru_cache(maxsize=512)
def _region(region: str) -> _Region | None:
    md = PhoneMetadata.metadata_for_region(region)
    if md is None or md.general_desc is None or md.country_code is None:
        return None
    country_code = str(md.country_code)
    trunk = md.national_prefix or ""
    # A number read in one region is valid if it is valid in any region of its country code
    # (Jamaica's 441 numbers are Bermuda's), so what every valid number has is theirs together.
    # A valid number matches one of the descriptions of its region's number types (fixed
    # line, mobile, toll free, ...): their patterns together rule out the most.
    lengths: set[int] = set()
    patterns: list[str] = []
    exact = True
    for other in phonenumbers.region_codes_for_country_code(md.country_code):
        omd = PhoneMetadata.metadata_for_region(other)
        desc = omd.general_desc if omd is not None else None
        if omd is None or desc is None or not desc.possible_length:
            exact = False
            continue
        lengths.update(n for n in desc.possible_length if n > 0)
        for kind in _NUMBER_TYPES:
            typed = getattr(omd, kind, None)
            if typed is not None and typed.national_number_pattern:
                patterns.append(f"(?:{typed.national_number_pattern})")
    npp = md.national_prefix_for_parsing or md.national_prefix
    return _Region(
        country_code=country_code,
        # The North American plan's trunk prefix is its country code, and optional in writing.
        trunk="" if trunk == country_code else trunk,
        lengths=frozenset(lengths),
        general=re.compile("|".join(patterns) or "(?!)"),
        strip=re.compile(npp) if npp else None,
        international=re.compile(md.international_prefix or "(?!)"),
        exact=exact and bool(lengths) and not md.national_prefix_transform_rule,
    )


def phone_region_known(region: str) -> bool:
    return region in phonenumbers.SUPPORTED_REGIONS


def _readable(facts: _Region, digits: str, *, national: bool) -> bool:
    """Whether some reading of `digits` has the length and shape of the region's numbers: as
    written, without the country code (for a national number), without the trunk prefix once
    or twice (parsing may strip it after the country code, and again), or both."""
    readings = [digits]
    if national and digits.startswith(facts.country_code):
        readings.append(digits[len(facts.country_code) :])
    if facts.strip is not None:
        for reading in readings[:]:
            for _ in range(2):
                m = facts.strip.match(reading)
                if m is None or not m.end():
                    break
                reading = reading[m.end() :]
                readings.append(reading)
    return any(len(r) in facts.lengths and facts.general.fullmatch(r) for r in readings)


def phone_possible(text: str, region: str) -> bool:
    """False only when phonenumbers, parsing `text` in `region`, cannot find it valid: its
    national number, in every reading `_readable` tries, has a length or shape no number of its
    country has (after `+`, the country is the code that follows; else `region`, unless the
    number starts with the region's international prefix). A cheap necessary condition of
    `phone_ok`: only a number it lets through is parsed."""
    digits = digits_of(text)
    if text.lstrip().startswith("+"):
        for n in (1, 2, 3):  # country calling codes are prefix-free
            regions = phonenumbers.COUNTRY_CODE_TO_REGION_CODE.get(int(digits[:n] or "0"))
            if regions:
                facts = _region(regions[0])
                if facts is None or not facts.exact:
                    return True
                return _readable(facts, digits[n:], national=False)
        return False  # no country has this code
    facts = _region(region)
    if facts is None or not facts.exact or facts.international.match(digits):
        return True
    return _readable(facts, digits, national=True)


def phone_ok(text: str, region: str) -> bool:
    """Whether phonenumbers parses `text`, read in `region`, as a valid number."""
    if not phone_possible(text, region):
        return False
    try:
        number = phonenumbers.parse(text, region)
    except phonenumbers.NumberParseException:
        return False
    return bool(phonenumbers.is_valid_number(number))


def _international(text: str) -> str | None:
    """`0049 30 …` or `011 44 …` as `+49 30 …`, `+44 …`; None if not so prefixed."""
    body = text.lstrip()
    if body[:1] != "0":
        return None
    for prefix in INTERNATIONAL_PREFIXES:
        if digits_of(body[: len(prefix) + 3]).startswith(prefix):
            rest, taken = body, 0
            while taken < len(prefix):
                if rest[0].isdigit():
                    taken += 1
                rest = rest[1:]
            return "+" + rest.lstrip(" .-\u2013")
    return None


def _boundaries(text: str) -> set[int]:
    """After how many digits `text` breaks between two digit groups."""
    found: set[int] = set()
    count, gap = 0, False
    for c in text:
        if "0" <= c <= "9":
            if gap and count:
                found.add(count)
            count, gap = count + 1, False
        else:
            gap = True
    return found


def _grouped_as_dialled(international: str) -> bool:
    """`0049 30 1234 5678` is grouped as the number is (`+49 30 12345678`); `0055 8677 8080
    90`, the tail of a mistyped IBAN, is not (`+55 86 7780-8090`). A number written after an
    international prefix shares at least one break between digit groups of its national part
    with phonenumbers' own international format, unless it is written in one group."""
    number = phonenumbers.parse(international, None)
    canonical = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.INTERNATIONAL)
    code = len(str(number.country_code))
    written = {b - code for b in _boundaries(international) if b > code}
    if not written:
        return True
    return bool(written & {b - code for b in _boundaries(canonical) if b > code})


def phone_number_ok(text: str, regions: Sequence[str]) -> bool:
    """A phone number as people write it, for a deployment whose regions are `regions` (the
    first is the default).

    International numbers (`+`, or the `00` / `011` prefixes, whatever the region) are judged
    as such. A national number is read in the default region as phonenumbers reads it, and in
    each other listed region only as that region writes its numbers: with its trunk prefix
    (`020 7946 0958` for GB, `030 1234 5678` for DE), so adding a region does not turn every
    long digit group into one of its numbers.
    """
    digits = digits_of(text)
    if text.lstrip().startswith("+"):
        return 7 <= len(digits) <= 15 and phone_ok(text, regions[0])
    international = _international(text)
    if (
        international is not None
        and 7 <= len(digits_of(international)) <= 15
        and phone_ok(international, regions[0])
        and _grouped_as_dialled(international)
    ):
        return True
    if not 7 <= len(digits) <= 15:
        return False
    if phone_ok(text, regions[0]):
        return True
    for region in regions[1:]:
        facts = _region(region)
        trunk = facts.trunk if facts is not None else ""
        if trunk and not digits.startswith(trunk):
            continue
        if phone_ok(text, region):
            return True
    return False


@functools.lru_cache(maxsize=4096)
def _phone_normalized(text: str, region: str, others: tuple[str, ...]) -> str:
    return _normalize_phone(text, region, others)


def phone_normalized(text: str, region: str, others: Sequence[str] = ()) -> str:
    """E.164 for a phone number (see `_normalize_phone`); a text is normalized once."""
    return _phone_normalized(text, region, tuple(others))


def _normalize_phone(text: str, region: str, others: Sequence[str]) -> str:
    """E.164 for a phone number, read in the default `region` first (then, if it is not a
    valid number there, in `others`, as `phone_number_ok` reads them), so one number always
    gets one form: `+1 415 555 2671`, `(415) 555-2671` and `011 1 415 555 2671` alike."""
    international = None if text.lstrip().startswith("+") else _international(text)
    readings = [(text, region)]
    if international is not None:
        readings.insert(0, (international, region))
    readings += [(text, r) for r in others if r != region]
    for reading, where in readings:
        try:
            number = phonenumbers.parse(reading, where)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_valid_number(number):
            return str(phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164))
    try:
        number = phonenumbers.parse(text, region)
    except phonenumbers.NumberParseException:
        return digits_of(text)
    return str(phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164))


def jwt_ok(text: str) -> bool:
    parts = text.split(".")
    if len(parts) != 3:
        return False
    try:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return False
    return isinstance(header, dict) and ("alg" in header or "typ" in header)
