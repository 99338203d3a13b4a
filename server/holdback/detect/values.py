"""When two findings are the same value: normalization of values per kind.

Within a conversation the same value always gets the same token, so values are compared after
normalization: emails case-insensitively, cards and SSNs by their digits, phone numbers in
E.164, IBANs without spaces, IP addresses in their compressed form, dictionary terms folded.
"""

from __future__ import annotations

import ipaddress
import re

from holdback.detect.dictionary import normalize_term
from holdback.detect.normalize import normalize
from holdback.detect.validators import digits_of, phone_normalized

_TOKEN_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]*_[1-9][0-9]*")


def normalize_value(kind: str, value: str, *, phone_region: str = "US") -> str:
    if kind == "literal":
        return value
    if kind == "token":
        ident = _TOKEN_ID.search(value.replace("\\_", "_"))
        return ident.group().upper() if ident else value
    text = normalize(value, lookalikes=False).text  # `ännä` and `anna` are different values
    if kind == "email":
        return text.strip().lower()
    if kind in ("credit_card", "us_ssn"):
        return digits_of(text)
    if kind == "phone":
        return phone_normalized(text, phone_region)
    if kind == "iban":
        return text.replace(" ", "").upper()
    if kind == "ip_address":
        try:
            return ipaddress.ip_address(text.strip()).compressed
        except ValueError:
            return text.strip().lower()
    if kind in ("secret", "jwt"):
        return text.replace(" ", "")
    return normalize_term(text)
