"""Texts that keep every detector busy: values of each kind, whole or cut off, amid prose.

Shared by the tests that hold the incremental scanner to `DetectorSet.scan` and the streaming
guard to its reference, and by the tests of what each detector declares about itself.
"""

from __future__ import annotations

from hypothesis import strategies as st

VALUES = [
    # email
    "sarah@acme.com",
    "Sarah.Connor+tag@mail.example.co.uk",
    "bob@evil-corp.com",
    "user@localhost",
    "icon@2x.png",
    "mailto:bob@example.org",
    # phone
    "+1 (415) 555-2671",
    "415-555-2671",
    "415.555.2671",
    "+44 20 7946 0958",
    "(415) 555 2671",
    "415-555-2671 415-555-2672",
    # credit card
    "4111 1111 1111 1111",
    "4111111111111111",
    "3782-822463-10005",
    "5555555555554444",
    # iban
    "DE89 3704 0044 0532 0130 00",
    "GB82WEST12345698765432",
    # ssn
    "219-09-9999",
    "219 09 9999",
    # ip
    "10.0.0.1",
    "192.168.1.20:8080",
    "2001:db8::1",
    "::1",
    "::ffff:192.0.2.1",
    # secrets
    "sk-proj-AbCdEfGhIjKlMnOpQrSt1234",
    "sk-ant-api03-AbCdEfGhIjKlMnOpQrSt1234_x-y",
    "ghp_0123456789abcdefghijklmnopqrstuvwxyZ",
    "github_pat_11ABCDEFG0123456789_abcdefghij",
    "AKIAIOSFODNN7EXAMPLE",
    "xoxb-123456789012-abcdefABCDEF",
    "xapp-1-A0123456789-abc",
    "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "AIzaSyA-1234567890abcdefghijklmnopqrstu",
    "glpat-abcdefghij1234567890",
    "npm_abcdefghijklmnopqrstuvwxyz0123456789",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl",
    "postgres://app:s3cr3t!@db.internal/x",
    "https://a:pw9@db.x",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "MIIEowIBAAKCAQEA7bq9m3Ld0fMTb9Xq1f2PjzH8kNxQ2vW9pL0sT4uY7eR1cA3bZ6nM8kJ5hG2fD0sA9",
    # tokens, whole and made up
    "<EMAIL_1>",
    "<email_7>",
    "&lt;EMAIL\\_2&gt;",
    "EMAIL_1",
    "PHONE_3",
    "Credit\\_Card_3",
    "<PERSON_12>",
    "&lt;",
    "<",
    # dictionary and forbidden terms
    "Acme Holdings",
    "GLOBEX",
    "db01.corp.internal",
    "Project Nightjar",
    "hunter2",
    # look-alikes
    "1.2.3",
    "2024-01-15",
    "12:30",
    "v1.2.3",
    "$1,299.00",
]

PROSE = [
    "Thanks",
    " for the",
    " details",
    "Send",
    " to ",
    " a ",
    "email",
    " sent",
    ". ",
    ", ",
    "; ",
    "\n\n",
    " - ",
    "(",
    ")",
    "x",
    "9",
    "e",
    "s",
    "A",
    "E",
    ":",
    "_",
    "-",
    "@",
    ".",
    "/",
    "&",
    ";",
    "=",
    "+",
]

ODD = [
    "\u200b",
    "\u00a0",
    "\u00ad",
    "\r",
    "\t",
    "４１１１",
    "ｓａｒａｈ＠ａｃｍｅ．ｃｏｍ",
    "\u03a3",
    "\u0130",
    "\u017f",  # ſ: case-folds to s
    "\u0131",  # ı: case-folds to i
    "\u212a",  # the Kelvin sign: case-folds to k
    "ſecret_1",
    "ıban_2",
    "\u212aey_3",
    "é",
    "\u2019",
    "\u2014",
    "日本",
]


@st.composite
def cut_value(draw: st.DrawFn) -> str:
    """A value, or the beginning of one: what a stream holds while the value arrives."""
    value = draw(st.sampled_from(VALUES))
    return value[: draw(st.integers(1, len(value)))]


PIECES = st.one_of(
    st.sampled_from(VALUES),
    cut_value(),
    st.sampled_from(PROSE),
    st.sampled_from(ODD),
    st.text(alphabet=" .,;:-_@()+<>&x9aZeEsA\n", max_size=4),
)


@st.composite
def texts(draw: st.DrawFn, *, odd: bool = True, max_pieces: int = 12) -> str:
    pieces = PIECES if odd else PIECES.filter(lambda p: p not in ODD)
    return "".join(draw(st.lists(pieces, max_size=max_pieces)))


@st.composite
def chunked(draw: st.DrawFn, text: str) -> list[str]:
    """`text` in pieces of 1 to 8 characters, as a stream brings it (or whole)."""
    sizes = draw(st.lists(st.integers(1, 8), min_size=1, max_size=40))
    out: list[str] = []
    i = k = 0
    while i < len(text):
        out.append(text[i : i + sizes[k % len(sizes)]])
        i += sizes[k % len(sizes)]
        k += 1
    return out
