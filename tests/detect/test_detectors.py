"""Built-in detectors: kinds, validation, evasion, overlaps, and the streaming contract."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdback.detect import DetectorSet, Finding, TermMatcher, detect
from holdback.detect.base import Candidates


def kinds_and_values(text: str) -> list[tuple[str, str]]:
    return [(f.kind, f.value) for f in detect(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail sarah@acme.com.", [("email", "sarah@acme.com")]),
        ("<first.last+tag@mail.example.co.uk>", [("email", "first.last+tag@mail.example.co.uk")]),
        ("mailto:bob@example.org", [("email", "bob@example.org")]),
        ("call +1 (415) 555-2671 now", [("phone", "+1 (415) 555-2671")]),
        (
            "call 415-555-2671, or +44 20 7946 0958",
            [("phone", "415-555-2671"), ("phone", "+44 20 7946 0958")],
        ),
        ("card 4111 1111 1111 1111 exp", [("credit_card", "4111 1111 1111 1111")]),
        ("amex 3782-822463-10005.", [("credit_card", "3782-822463-10005")]),
        ("card 5555555555554444", [("credit_card", "5555555555554444")]),
        ("iban DE89 3704 0044 0532 0130 00 ok", [("iban", "DE89 3704 0044 0532 0130 00")]),
        ("iban GB82WEST12345698765432.", [("iban", "GB82WEST12345698765432")]),
        ("ssn 219-09-9999.", [("us_ssn", "219-09-9999")]),
        ("ssn 219 09 9999", [("us_ssn", "219 09 9999")]),
        ("ip 192.168.1.20:8080", [("ip_address", "192.168.1.20")]),
        (
            "loopback 127.0.0.1 and doc 203.0.113.7",
            [("ip_address", "127.0.0.1"), ("ip_address", "203.0.113.7")],
        ),
        ("v6 2001:db8::1 and ::1.", [("ip_address", "2001:db8::1"), ("ip_address", "::1")]),
        ("mapped ::ffff:192.0.2.1", [("ip_address", "::ffff:192.0.2.1")]),
        ("key sk-proj-AbCdEfGhIjKlMnOpQrSt1234", [("secret", "sk-proj-AbCdEfGhIjKlMnOpQrSt1234")]),
        (
            "key sk-ant-api03-AbCdEfGhIjKlMnOpQrSt1234_x-y",
            [("secret", "sk-ant-api03-AbCdEfGhIjKlMnOpQrSt1234_x-y")],
        ),
        (
            "gh ghp_0123456789abcdefghijklmnopqrstuvwxyZ",
            [("secret", "ghp_0123456789abcdefghijklmnopqrstuvwxyZ")],
        ),
        ("aws AKIAIOSFODNN7EXAMPLE", [("secret", "AKIAIOSFODNN7EXAMPLE")]),
        ("slack xoxb-123456789012-abcdefABCDEF", [("secret", "xoxb-123456789012-abcdefABCDEF")]),
        (
            "stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc",
            [("secret", "sk_live_4eC39HqLyjWDarjtT1zdp7dc")],
        ),
        (
            "google AIzaSyA-1234567890abcdefghijklmnopqrstu",
            [("secret", "AIzaSyA-1234567890abcdefghijklmnopqrstu")],
        ),
        ("db postgres://app:s3cr3t!@db.internal/x", [("secret", "s3cr3t!")]),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl",
            [("jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl")],
        ),
    ],
)
def test_findings(text: str, expected: list[tuple[str, str]]) -> None:
    assert kinds_and_values(text) == expected


def test_a_pem_private_key_block_is_one_secret() -> None:
    pem = (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq9m3Ld0fMTb9Xq1f2PjzH8kN\n"
        "xQ2vW9pL0sT4uY7eR1cA3bZ6nM8kJ5hG2fD0sA9\n-----END RSA PRIVATE KEY-----"
    )
    assert kinds_and_values(f"here: {pem} done") == [("secret", pem)]


@pytest.mark.parametrize(
    "text",
    [
        "The meeting is on 2024-01-15 at 12:30, version 1.2.3, build 1.2.3.4.5.",
        "It costs $1,299.00 or 1 299,00 EUR; order 4111111111111112 failed Luhn.",
        "Run it on localhost, see 999.1.1.1 and 10.0.0.256.",
        "SSNs 000-12-3456, 666-12-3456, 912-12-3456, 123-00-4567, 123-45-0000 are invalid.",
        "IBAN DE89 3704 0044 0532 0130 01 has a bad checksum.",
        "Use sk-learn and scikit-learn; AKIA alone; xoxo; a UUID 123e4567-e89b-12d3-a456-426614174000.",
        "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 and sha256 e3b0c44298fc1c149afbf4c8996fb924",
        "Call me maybe, tracking 1Z999AA10123456784, order 123456789, ISBN 978-3-16-148410-0.",
        "C++ std::vector and a::b, time 10:30:00, MAC 00:1A:2B:3C:4D:5E.",
        "icon@2x.png and user@localhost",
    ],
)
def test_no_findings_in_near_misses(text: str) -> None:
    assert detect(text) == []


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("mail sa\u200brah@ac\u00adme.com", "email", "sa\u200brah@ac\u00adme.com"),
        (
            "card 4111\u00a01111\u20091111\u202f1111",
            "credit_card",
            "4111\u00a01111\u20091111\u202f1111",
        ),
        (
            "card ４１１１ １１１１ １１１１ １１１１",
            "credit_card",
            "４１１１ １１１１ １１１１ １１１１",
        ),
        ("mail ｓａｒａｈ＠ａｃｍｅ．ｃｏｍ", "email", "ｓａｒａｈ＠ａｃｍｅ．ｃｏｍ"),
        ("card 4111 1111\n1111 1111", "credit_card", "4111 1111\n1111 1111"),
        ("call 415-555-\r\n2671", "phone", "415-555-\r\n2671"),
        ("ssn 219\u200b-09-9999", "us_ssn", "219\u200b-09-9999"),
    ],
)
def test_evasion_is_seen_through_and_offsets_point_into_the_original(
    text: str, kind: str, value: str
) -> None:
    [finding] = detect(text)
    assert (finding.kind, finding.value) == (kind, value)
    assert text[finding.start : finding.end] == value


def test_overlaps_resolve_to_the_longest_then_the_most_specific() -> None:
    ds = DetectorSet.from_config()
    a = Finding(0, 10, "phone", "x" * 10)
    b = Finding(5, 20, "credit_card", "x" * 15)
    c = Finding(5, 20, "phone", "x" * 15)
    assert ds.resolve([a, b, c]) == [b]


def test_dictionary_terms_match_whole_words_case_insensitively() -> None:
    ds = DetectorSet.from_config({"client": ["Acme Holdings", "Globex", "O'Brien"]})
    text = "Ask ACME holdings, globex and o'brien; not Globexx or Acmeville."
    assert [(f.kind, f.value) for f in ds.detect(text)] == [
        ("client", "ACME holdings"),
        ("client", "globex"),
        ("client", "o'brien"),
    ]


def test_dictionary_terms_are_found_through_evasion() -> None:
    ds = DetectorSet.from_config({"project": ["Bluebird"]})
    [f] = ds.detect("the B\u200blue\u00adbird plan")
    assert f.value == "B\u200blue\u00adbird"


def test_dictionary_matching_uses_one_automaton_for_many_terms() -> None:
    terms = [f"term{i:06d}" for i in range(100_000)]
    matcher = TermMatcher("client", terms)
    assert len(matcher) == 100_000
    found = matcher.candidates("x term004242 y term099999", 0, 25, partial=False)
    assert [f.value for f in found.findings] == ["term004242", "term099999"]


# -- the streaming contract ----------------------------------------------------------------

SAMPLES = [
    "sarah@acme.com",
    "+1 (415) 555-2671",
    "415-555-2671",
    "4111 1111 1111 1111",
    "DE89 3704 0044 0532 0130 00",
    "219-09-9999",
    "192.168.1.20",
    "2001:db8::1",
    "sk-proj-AbCdEfGhIjKlMnOpQrSt1234",
    "AKIAIOSFODNN7EXAMPLE",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl",
    "postgres://app:s3cr3t@db.internal",
    "Acme Holdings",
    "1.2.3",
    "2024-01-15",
]
FILLER = st.text(alphabet=" .,;:-@()+x9aZ\n\u200b\u00a0", max_size=4)
DICTIONARY_SET = DetectorSet.from_config({"client": ["Acme Holdings", "Acme", "Globex"]})


@st.composite
def texts(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.one_of(FILLER, st.sampled_from(SAMPLES)), max_size=8))
    return "".join(parts)


@given(text=texts(), data=st.data())
def test_decided_findings_of_a_prefix_never_change(text: str, data: st.DataObject) -> None:
    """Findings decided on a prefix are findings of the whole; the rest is behind `hold`."""
    ds = DICTIONARY_SET
    whole = ds.scan(text).findings
    cut = data.draw(st.integers(0, len(text)))
    prefix = ds.scan(text[:cut], final=False)
    assert prefix.hold <= cut
    assert set(prefix.findings) == {f for f in whole if f.end <= prefix.hold}
    resumed = ds.scan(text, prefix.hold).findings
    assert {f for f in whole if f.start >= prefix.hold} == set(resumed)


class Exploding:
    kinds = ("boom",)

    def candidates(self, text: str, pos: int, endpos: int, *, partial: bool) -> Candidates:
        raise RuntimeError("detector bug")


def test_a_custom_detector_plugs_in_through_the_protocol() -> None:
    ds = DetectorSet([Exploding()])
    with pytest.raises(RuntimeError):
        ds.detect("anything")


def test_side_by_side_phone_numbers_never_take_the_space_between() -> None:
    text = "+1 (415) 555-2671  0 +1 (415) 555-2671 415-555-2672"
    assert [f.value for f in detect(text)] == [
        "+1 (415) 555-2671",
        "+1 (415) 555-2671",
        "415-555-2672",
    ]


def test_a_number_glued_to_a_word_after_it_does_not_hide_the_value_before() -> None:
    assert [f.value for f in detect("+1 (415) 555-2671 0@ x, 4111 1111 1111 1111 2x")] == [
        "+1 (415) 555-2671",
        "4111 1111 1111 1111",
    ]
