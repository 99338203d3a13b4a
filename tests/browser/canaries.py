"""The canary data of the browser tests: values the wire may carry, and values it never may.

The rule it keeps: every value here is made up, and each is one that holdback's detectors
(or the term files the test server loads) recognise, so a value that reaches the model or the
wire is a real failure of the product, not of the data. The user's own values cover every
detector kind; the *injected* values are ones the fake model invents on its own, which the
viewer may never see; the forbidden terms may never be shown to anyone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Term files the test server loads: the file's stem names the dictionary kind.
SENSITIVE_TERM_FILES: Mapping[str, tuple[str, ...]] = {
    "client": ("Acme Holdings", "Globex Corporation"),
    "project": ("Nightjar", "Bluebird"),
}
FORBIDDEN_TERMS: tuple[str, ...] = ("db01.corp.internal", "Operation Halyard")

# The user's own values, one (or more) per detector kind. The viewer may see these.
USER_VALUES: Mapping[str, str] = {
    "email": "sarah.connor@cyberdyne.example",
    "phone": "+1 (415) 555-2671",
    "credit_card": "4111 1111 1111 1111",
    "us_ssn": "156-12-9847",
    "iban": "DE89 3704 0044 0532 0130 00",
    "ip_address": "203.0.113.77",
    "secret": "AKIAQWERTYUIOPASDFGH",
    "jwt": (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"
        ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    ),
    "client": "Acme Holdings",
    "project": "Nightjar",
}

# One user message carrying every kind, each value in a context its detector needs.
EVERY_KIND_TEXT = (
    f"Email {USER_VALUES['email']}, phone {USER_VALUES['phone']}, "
    f"card {USER_VALUES['credit_card']}, SSN {USER_VALUES['us_ssn']}, "
    f"IBAN {USER_VALUES['iban']}, server {USER_VALUES['ip_address']}, "
    f"key {USER_VALUES['secret']}, jwt {USER_VALUES['jwt']} "
    f"client {USER_VALUES['client']} project {USER_VALUES['project']}."
)

# Values the fake model makes up. None of them is in any vault, so the viewer may not see them.
INJECTED_VALUES: Mapping[str, str] = {
    "email": "mallory@evil-corp.example",
    "phone": "+1 212 555 0147",
    "credit_card": "5555 5555 5555 4444",
    "us_ssn": "150-61-7757",
    "ip_address": "198.51.100.23",
    "secret": "ghp_R4nd0mT0kenValue1234567890abcdefABCD",
    "client": "Globex Corporation",
    "project": "Bluebird",
}

# What the fake model says when asked to inject: invented values and forbidden terms, plus a
# reference to the user's own value (`{token}`), which must come back restored.
INJECTION_TEMPLATE = (
    "Noted {token}. I will also copy {email} and call {phone}; charge card {card} "
    "(SSN {ssn}). The backup sits on {ip}, token {secret}, host db01.corp.internal, "
    "for {client} under OPERATION HALYARD and project {project}."
)


def injection_text(token: str) -> str:
    v = INJECTED_VALUES
    return INJECTION_TEMPLATE.format(
        token=token,
        email=v["email"],
        phone=v["phone"],
        card=v["credit_card"],
        ssn=v["us_ssn"],
        ip=v["ip_address"],
        secret=v["secret"],
        client=v["client"],
        project=v["project"],
    )


# Tokens the fake model invents (never assigned in any test conversation).
INVENTED_TOKENS: tuple[str, ...] = ("<EMAIL_7>", "<PHONE_9>", "<CLIENT_4>")

# Model output that would run script if it were ever inserted as HTML.
XSS_PAYLOADS: tuple[str, ...] = (
    '<img src=x onerror="window.__xss=1">',
    "<script>window.__xss=2</script>",
    "[x](javascript:window.__xss=3)",
    '<svg onload="window.__xss=4"></svg>',
    '<a href="javascript:window.__xss=5">y</a>',
)

_DIGITS = re.compile(r"\D+")


def digits(value: str) -> str:
    return _DIGITS.sub("", value)


def digit_forms(value: str) -> set[str]:
    """A mostly-numeric value (phone, card, SSN) as bare digits, with and without the +1."""
    d = digits(value)
    if len(d) < 9 or len(d) < len(value) - 8:
        return set()
    return {d, d[-10:]} if len(d) == 11 and d.startswith("1") else {d}


def spellings(value: str) -> set[str]:
    """The forms in which a value would still be recognisable: as written, and digits only."""
    return {value} | digit_forms(value)
