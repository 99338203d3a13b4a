"""When two findings are the same value: normalization of values per kind.

Within a conversation the same value always gets the same token, so values are compared after
normalization: emails case-insensitively, cards and SSNs by their digits, phone numbers in
E.164, IBANs without spaces, IP addresses in their compressed form, dictionary terms folded.

A phone number is read in the deployment's default region, always that one, whichever region
the detector recognised it in: so `+49 30 1234 5678` and `0049 30 1234 5678` are one value, and
a national number is read the same way on every mention. Other regions (`phone_regions`) are
tried, in order, only for a number that is not valid in the default region.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from holdback.detect.dictionary import normalize_term
from holdback.detect.normalize import normalize
from holdback.detect.validators import digits_of, phone_normalized
from holdback.tokens import token_spelling_id


def normalize_value(
    kind: str, value: str, *, phone_region: str = "US", phone_regions: Sequence[str] = ()
) -> str:
    if kind == "literal":
        return value
    if kind == "token":
        return token_spelling_id(value) or value
    text = normalize(value, lookalikes=False).text  # `ännä` and `anna` are different values
    if kind == "email":
        return text.strip().lower()
    if kind in ("credit_card", "us_ssn"):
        return digits_of(text)
    if kind == "phone":
        return phone_normalized(text, phone_region, phone_regions)
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
