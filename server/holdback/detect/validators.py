"""Checksums and structural rules that turn a pattern match into a finding.

A regular expression only proposes; a value becomes a finding when it passes the rule its kind
defines: Luhn for cards, ISO 13616 mod-97 and the country's length for IBANs, the SSA's
allocation rules for US social security numbers, `ipaddress` for IP addresses and the
`phonenumbers` library for phone numbers. Each validator is a pure function of the text.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json

import phonenumbers

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


def digits_of(text: str) -> str:
    return "".join(c for c in text if "0" <= c <= "9")


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def card_brand_ok(digits: str) -> bool:
    """A real issuer prefix: Visa, Mastercard, Amex, Discover, JCB, Diners, UnionPay, Maestro."""
    n = len(digits)
    two, four, six = int(digits[:2]), int(digits[:4]), int(digits[:6])
    if digits[0] == "4":
        return n in (13, 16, 19)
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


def credit_card_ok(text: str) -> bool:
    digits = digits_of(text)
    if len(digits) not in CARD_LENGTHS or not luhn_ok(digits) or not card_brand_ok(digits):
        return False
    # Separators, if any, are all the same and split the number into groups of 2 to 6.
    separators = set(text.replace("- ", "-").replace(" -", "-")) - set("0123456789")
    if len(separators) > 1:
        return False
    if separators:
        groups = text.split(separators.pop())
        if any(not 2 <= len(g) <= 6 for g in groups):
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
    if area == 0 or area == 666 or area >= 900 or group == 0 or serial == 0:
        return False
    return digits not in ("123456789", "078051120")  # advertising specimens


def ip_ok(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def phone_ok(text: str, region: str) -> bool:
    try:
        number = phonenumbers.parse(text, region)
    except phonenumbers.NumberParseException:
        return False
    return bool(phonenumbers.is_valid_number(number))


def phone_normalized(text: str, region: str) -> str:
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
