"""Issue 14's formats: how people really write values, found by the validators' judgement.

Separators (dots, slashes, en dashes, mixed, double spaces), lower-case IBANs, addresses in other
scripts and punycode, the phone regions of a deployment with the `00` / `011` prefixes and a
second number after a slash (or an area code set apart by one), log time stamps that are no
numbers, numbers after other digit groups, keys whose body holds no digit, and values next to
punctuation, markdown markers, labels and letters of other scripts. Loosened
boundaries must not raise false positives: the prose and look-alikes here stay unflagged, and
the corpus (`test_corpus.py`, `corpus/formats.jsonl`) measures both sides.

Also here: the optional entropy detector, measured on a corpus of real-looking code, and the
streaming declarations of the detectors this issue adds or changes, held to the same rules as
the built-in ones in `test_incremental.py`.
"""

from __future__ import annotations

import base64
import random
import string
from pathlib import Path

import phonenumbers
import pytest
import regex
from hypothesis import assume, given
from hypothesis import strategies as st

from holdback.detect import DetectorSet, Finding, detect
from holdback.detect import patterns as p
from holdback.detect import secrets as s
from holdback.detect import validators as v
from holdback.detect.incremental import StreamScanner
from holdback.detect.regex_detector import RegexDetector, glued
from holdback.detect.traits import for_detectors
from holdback.detect.values import normalize_value
from holdback.stream import Guard

from .partial_pii import texts

CODE_CORPUS = Path(__file__).resolve().parent / "code_corpus"
REGIONS = DetectorSet.from_config(phone_regions=("US", "GB", "DE"))
ENTROPY = DetectorSet.from_config(entropy_secrets=True)


def found(text: str, ds: DetectorSet | None = None) -> list[tuple[str, str]]:
    return [(f.kind, f.value) for f in (ds.detect(text) if ds else detect(text))]


# -- separators --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "card",
    [
        "4111.1111.1111.1111",
        "4111/1111/1111/1111",
        "4111\u20131111\u20131111\u20131111",
        "4111 1111-1111.1111",
        "4111  1111  1111  1111",
        "4111 - 1111 - 1111 - 1111",
        "3782.822463.10005",
        "4111-1111 1111/1111",
    ],
)
def test_card_numbers_with_any_separators(card: str) -> None:
    assert found(f"card {card} exp") == [("credit_card", card)]


@pytest.mark.parametrize(
    "ssn",
    ["219.09.9999", "219/09/9999", "219\u201309\u20139999", "219-09 9999", "219  09  9999"],
)
def test_ssns_with_any_separators(ssn: str) -> None:
    assert found(f"ssn {ssn} on file") == [("us_ssn", ssn)]


@pytest.mark.parametrize(
    "text",
    [
        "4111.1111.1111.1112 fails Luhn",
        "groups 41111.11111.11111.1 are not card groups",
        "version 4.1.1.1.1.1.1.1.1.1.1.1.1.1.1.1",
        "dates 2024/01/15 2024.01.16 and 2024\u201301\u201317",
        "ssn-shaped 000.12.3456 666/12/3456 912.12.3456",
        "pi is 3.4111111111111111 and e is 2.7182818284590452",
    ],
)
def test_loosened_separators_do_not_make_values_of_look_alikes(text: str) -> None:
    assert found(text) == []


def test_lower_case_ibans() -> None:
    assert found("iban gb82 west 1234 5698 7654 32.") == [("iban", "gb82 west 1234 5698 7654 32")]
    assert found("iban de89370400440532013000") == [("iban", "de89370400440532013000")]
    assert found("iban gb82 west 1234 5698 7654 33") == []  # check digits decide


# -- e-mail addresses --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "ännä@bücher.example",
        "user@xn--bcher-kva.example",
        "иван@пример.рф",
        "用户@例子.广告",
        "info@xn--mller-kva.xn--p1ai",
    ],
)
def test_internationalized_addresses(address: str) -> None:
    assert found(f"write to {address} today") == [("email", address)]


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("邮箱ann@example.org请回复", "ann@example.org"),
        ("メールann@example.orgまで", "ann@example.org"),
        ("_ann@example.org_", "ann@example.org"),
        ("**ann@example.org**", "ann@example.org"),
        ("`ann@example.org`", "ann@example.org"),
        ("~~ann@example.org~~", "ann@example.org"),
        ("mail -ann@example.org now", "ann@example.org"),
        ("Mail:ann@example.org", "ann@example.org"),
        ("ann@example.org-----BEGIN", "ann@example.org"),
        (".first..last@example.org", "last@example.org"),
    ],
)
def test_addresses_next_to_formatting(text: str, address: str) -> None:
    assert found(text) == [("email", address)]


def test_no_addresses_in_look_alikes() -> None:
    for text in ("icon@2x.png", "user@localhost", "lodash@4.17.21", "@here and @channel", "a@b"):
        assert found(text) == [], text


# -- phone numbers -----------------------------------------------------------------------------


def test_national_numbers_of_every_listed_region() -> None:
    assert found("London 020 7946 0958", REGIONS) == [("phone", "020 7946 0958")]
    assert found("Berlin 030 1234 5678", REGIONS) == [("phone", "030 1234 5678")]
    assert found("US (415) 555-2671", REGIONS) == [("phone", "(415) 555-2671")]
    assert found("London 020 7946 0958") == []  # not listed: only the US by default
    # Only as that region writes its numbers: with its trunk prefix.
    assert found("mobile 7911 123456", REGIONS) == []
    assert found("mobile 07911 123456", REGIONS) == [("phone", "07911 123456")]


@pytest.mark.parametrize(
    "number",
    ["0049 30 1234 5678", "011 44 20 7946 0958", "00 33 6 12 34 56 78", "0044 7911 123456"],
)
def test_international_prefixes_whatever_the_region(number: str) -> None:
    assert found(f"dial {number} now") == [("phone", number)]
    assert found(f"dial {number} now", REGIONS) == [("phone", number)]


def test_an_international_prefix_must_read_as_a_number() -> None:
    # The tail of a mistyped IBAN is no Brazilian number, though its digits would be one.
    assert found("IBAN IE23 RVQS 0055 8677 8080 90") == []


def test_a_second_number_after_a_slash() -> None:
    assert found("+49 30 1234 5678 / 5679") == [("phone", "+49 30 1234 5678"), ("phone", "5679")]
    assert found("call 415-555-2671/2672") == [("phone", "415-555-2671"), ("phone", "2672")]
    assert found("dates 12/25 and 2024/2025") == []


def guarded(text: str, ds: DetectorSet) -> str:
    """What the streaming guard shows of `text` fed one character at a time."""
    guard = Guard(ds)
    return "".join(guard.feed(c) for c in text) + guard.flush()


def redacted(text: str, values: list[str]) -> str:
    """`text` with each of `values`, left to right, as the guard redacts a phone number."""
    out, at = [], 0
    for value in values:
        start = text.index(value, at)
        out += [text[at:start], "[redacted phone]"]
        at = start + len(value)
    return "".join(out) + text[at:]


@pytest.mark.parametrize(
    ("number", "values"),
    [
        # an area code set apart by a slash, as German numbers are written
        ("030/1234 5678", ["030/1234 5678"]),
        ("030 / 1234 5678", ["030 / 1234 5678"]),
        ("030/12345678", ["030/12345678"]),
        ("0151 / 123 456 78", ["0151 / 123 456 78"]),
        ("Tel. 089/12345-678", ["089/12345-678"]),
        # a second whole number after a slash, glued or spaced on one side
        ("020 7946 0958/020 7946 0959", ["020 7946 0958", "020 7946 0959"]),
        ("030 1234 5678/030 1234 5679", ["030 1234 5678", "030 1234 5679"]),
        ("020 7946 0958 /020 7946 0959", ["020 7946 0958", "020 7946 0959"]),
        ("020 7946 0958/ 020 7946 0959", ["020 7946 0958", "020 7946 0959"]),
        ("030/1234 5678/030/1234 5679", ["030/1234 5678", "030/1234 5679"]),
        ("415-555-2671/415-555-2672", ["415-555-2671", "415-555-2672"]),
        # or its last digits: each is a value (the number with them in place of its own)
        ("+49 30 1234 5678/5679/5680", ["+49 30 1234 5678", "5679", "5680"]),
        ("030/1234 5678 / 79", ["030/1234 5678", "79"]),
        ("020 7946 0958 / 59", ["020 7946 0958", "59"]),
    ],
)
def test_numbers_around_a_slash(number: str, values: list[str]) -> None:
    text = f"Please call {number} today."
    assert found(text, REGIONS) == [("phone", v) for v in values]
    assert guarded(text, REGIONS) == redacted(text, values)


@pytest.mark.parametrize(
    "text",
    [
        "dates 12/25/2024 and 01/02/2024, open 24/7, 1/2 cup",
        "batch 07/08 2024 0930",  # one digit after the trunk prefix is no area code
        "ref 12/030/1234 5678",  # a group glued to a slash after digits continues them
        "ref 5/030 1234 5678",
    ],
)
def test_slashes_between_digit_groups_that_are_no_number(text: str) -> None:
    assert found(text, REGIONS) == []
    assert guarded(text, REGIONS) == text


@pytest.mark.parametrize(
    "text",
    [
        "[2024-06-11 09:14:05,118] WARNING worker-3: retrying job 58213 in 2.5s",
        "2023-11-02 14:05 deploy finished",
        "at 2024-01-15 08:00 sharp",
        "2024/06/11 09:14:05 started",
        "20240611 09:14 started",
        "11.06.2024 09:14 Beginn",
        "12/25/2024 09:30 check-in",
    ],
)
def test_log_time_stamps_are_no_phone_numbers(text: str) -> None:
    for ds in (None, REGIONS, DetectorSet.from_config(phone_regions=("DE",))):
        assert found(text, ds) == [], ds
    assert guarded(text, REGIONS) == text


@pytest.mark.parametrize(
    "text",
    ["Ruf 030/1234 5678 /030/1234 5679+49 an", "Call 415-555-2671/2672:; today"],
)
def test_a_value_after_a_glued_slash_streams_as_it_reads(text: str) -> None:
    whole = Guard(REGIONS)
    assert guarded(text, REGIONS) == whole.feed(text) + whole.flush()


def test_a_number_beside_a_time_stamp_is_still_one() -> None:
    text = "2024-06-11 09:14 call 020 7946 0958 / 2024-06-11 10:30"
    assert found(text, REGIONS) == [("phone", "020 7946 0958")]
    assert guarded(text, REGIONS) == redacted(text, ["020 7946 0958"])


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("Ref 2024 415-555-2671", "415-555-2671"),
        ("order 4711 (415) 555-2671", "(415) 555-2671"),
        ("2. 415-555-2671", "415-555-2671"),
        ("1. 415.555.2671", "415.555.2671"),
        ("id 12 34 415.555.2671", "415.555.2671"),
        ("Tel.+49 30 1234 5678", "+49 30 1234 5678"),
        ("Tel.415-555-2671", "415-555-2671"),
        ("电话+86 10 6552 9988", "+86 10 6552 9988"),
        ("_415-555-2671_", "415-555-2671"),
    ],
)
def test_numbers_next_to_other_digit_groups_and_labels(text: str, number: str) -> None:
    assert found(text) == [("phone", number)]


def test_digit_groups_that_are_no_number_stay_so() -> None:
    assert found("order 3659 086030 6428") == []
    assert found("2024 415 555 2671") == []  # space-only: its extent is not its own
    assert found("2024-415-555-2671") == []  # one run of one format: no number in it


def test_one_number_is_one_value_whatever_its_spelling() -> None:
    forms = ["+49 30 1234 5678", "0049 30 1234 5678", "+49 (0)30 1234 5678", "00 49 30 12345678"]
    assert {normalize_value("phone", f, phone_region="US") for f in forms} == {"+493012345678"}
    us = ["(415) 555-2671", "+1 415 555 2671", "415.555.2671", "011 1 415 555 2671"]
    assert {normalize_value("phone", f, phone_region="US") for f in us} == {"+14155552671"}
    # A national number of another region is read in the default region first, always.
    assert normalize_value("phone", "030 1234 5678", phone_region="DE") == "+493012345678"
    assert (
        normalize_value("phone", "030 1234 5678", phone_region="US", phone_regions=("DE",))
        == "+493012345678"
    )


def test_phone_possible_never_rules_out_a_number_phonenumbers_accepts() -> None:
    """The metadata pre-check is a necessary condition of phonenumbers' own verdict."""
    rng = random.Random(14)
    regions = sorted(phonenumbers.SUPPORTED_REGIONS)
    for _ in range(4000):
        region = rng.choice(regions)
        example = phonenumbers.example_number(region)
        if example is not None and rng.random() < 0.5:
            digits = str(example.national_number)
            digits = digits[:-3] + "".join(rng.choice(string.digits) for _ in range(3))
        else:
            digits = "".join(rng.choice(string.digits) for _ in range(rng.randint(4, 16)))
        if rng.random() < 0.3:
            code = str(phonenumbers.country_code_for_region(region))
            digits = rng.choice(["0", "1", "00", "8", code]) + digits
        groups = [digits[i : i + rng.randint(1, 4)] for i in range(0, len(digits), 4)]
        text = rng.choice([" ", "-", "."]).join(g for g in groups if g)
        if rng.random() < 0.3:  # an international number: its country's rules, not the region's
            code = phonenumbers.country_code_for_region(rng.choice(regions))
            text = rng.choice((f"+{code} ", f"+{code} (0) ", f"+{rng.randint(1, 999)} ")) + text
        try:
            valid = phonenumbers.is_valid_number(phonenumbers.parse(text, region))
        except phonenumbers.NumberParseException:
            valid = False
        assert v.phone_possible(text, region) or not valid, (text, region)


# -- secrets -----------------------------------------------------------------------------------

KEYS_WITHOUT_DIGITS = [
    "ghp_" + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ",
    "gho_" + "QwErTyUiOpAsDfGhJkLzXcVbNmQwErTyUiOp",
    "github_pat_" + "AbCdEfGhIjKlMnOpQrStUv_WxYzAbCdEfGhIjKlMnOpQr",
    "sk_live_" + "AbCdEfGhIjKlMnOpQrStUvWx",
    "rk_test_" + "ZyXwVuTsRqPoNmLkJiHgFeDc",
    "whsec_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEf",
    "sk-proj-" + "AbCdEfGhIjKlMnOpQrStUvWxYz-AbCdEfGhIjKlMnOpQrSt_Uv",
    "sk-ant-api03-" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGhIj",
    "sk-" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGhIjKlMnOpQrStUv",
    "AKIA" + "ABCDEFGHIJKLMNOP",
    "AIza" + "SyAbCdEfGhIjKlMnOpQrStUvWxYz-_AbCdE",
    "xoxb-123456789012-abcdefABCDEF",
]


@pytest.mark.parametrize("key", KEYS_WITHOUT_DIGITS)
def test_distinctive_prefixes_need_no_digit(key: str) -> None:
    assert found(f"key {key} here") == [("secret", key)]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            "密钥sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCd",
            "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCd",
        ),
        (
            "key -ghp_abcdefghijklmnopqrstuvwxyz0123456789 now",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        ),
        ("x_ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
        ("`sk_live_4eC39HqLyjWDarjtT1zdp7dc`", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
        ("TOKEN=AKIAIOSFODNN7EXAMPLE;", "AKIAIOSFODNN7EXAMPLE"),
    ],
)
def test_keys_next_to_formatting(text: str, key: str) -> None:
    assert found(text) == [("secret", key)]


@pytest.mark.parametrize(
    "text",
    [
        "pip install scikit-learn; import sklearn; sk-learn is the old name",
        "task_live_stream and desk_test_harness_for_everyone",
        "sk_live_stream_processor_config and rk_test_cases_for_refunds",
        "placeholders ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx and sk_test_XXXXXXXXXXXXXXXXXXXXXXXX",
        "xoxo-hugs-and-kisses-from-everyone-on-the-team",
        "sk-this-is-a-very-long-hyphenated-phrase-about-skiing",
        "the AKIA prefix and the AIza prefix, and ghp_ or whsec_ alone",
    ],
)
def test_prose_is_not_a_key(text: str) -> None:
    assert found(text) == []


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("地址192.168.1.20端口", "ip_address", "192.168.1.20"),
        ("_10.0.0.1_", "ip_address", "10.0.0.1"),
        ("主机2001:db8::1", "ip_address", "2001:db8::1"),
        (
            "令牌eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl",
            "jwt",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl",
        ),
        ("链接postgres://app:s3cr3t!@db.internal/x", "secret", "s3cr3t!"),
        ("卡号4000056655665556", "credit_card", "4000056655665556"),
        ("No.4000 0566 5566 5556", "credit_card", "4000 0566 5566 5556"),
        ("#4000056655665556", "credit_card", "4000056655665556"),
        ("card -4556737586899855 now", "credit_card", "4556737586899855"),
        ("ssn -219-09-9999 now", "us_ssn", "219-09-9999"),
        ("No.219-09-9999", "us_ssn", "219-09-9999"),
    ],
)
def test_other_values_next_to_other_scripts_labels_and_markers(
    text: str, kind: str, value: str
) -> None:
    assert found(text) == [(kind, value)]


# -- the entropy detector ----------------------------------------------------------------------


def _random_keys(rng: random.Random) -> list[str]:
    alnum = string.ascii_letters + string.digits
    keys = ["".join(rng.choice(alnum) for _ in range(n)) for n in (32, 40, 64) for _ in range(100)]
    keys += [base64.b64encode(rng.randbytes(n)).decode() for n in (32, 48) for _ in range(100)]
    keys += [
        base64.urlsafe_b64encode(rng.randbytes(n)).decode().rstrip("=")
        for n in (32, 48)
        for _ in range(100)
    ]
    return keys


def test_entropy_detector_is_off_by_default() -> None:
    key = "q7Xc2LmZ9vTb4NwR8sKd1YfH6jPg3AeU"
    assert found(f"token {key}") == []
    assert found(f"token {key}", ENTROPY) == [("secret", key)]


def test_entropy_detector_finds_random_keys() -> None:
    keys = _random_keys(random.Random(14))
    hits = sum(found(f"key: {k} ok", ENTROPY) == [("secret", k)] for k in keys)
    assert hits / len(keys) >= 0.95


def test_entropy_detector_false_positives_on_code() -> None:
    """The code corpus (Python, TypeScript, minified JavaScript, logs, lockfiles with their
    hashes, UUIDs, base64 images and fonts in HTML and markdown, Kubernetes and Terraform) holds
    no secret: the detector flags none of its long runs."""
    detector = s.entropy_detector()
    runs = flagged = size = 0
    blob = regex.compile(r"[A-Za-z0-9+/_\-]{32,}")
    for path in sorted(CODE_CORPUS.iterdir()):
        text = path.read_text(encoding="utf-8")
        size += len(text)
        runs += len(blob.findall(text))
        flagged += len(detector.candidates(text, 0, len(text), partial=False).findings)
    assert size > 80_000
    assert runs > 400
    assert flagged == 0, f"{flagged} of {runs} runs in {size} characters"


def test_entropy_detector_leaves_digests_encodings_and_public_keys() -> None:
    blob = base64.b64encode(random.Random(1).randbytes(32)).decode()
    for text in (
        f'"integrity": "sha512-{blob}"',
        f"golang.org/x/net v0.1.0 h1:{blob}",
        f'<img src="data:image/png;base64,{blob}">',
        f"-----BEGIN PUBLIC KEY-----\n{blob}\n-----END PUBLIC KEY-----",
        f"ssh-ed25519 {blob} deploy@ci",
        "alphabet ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/ for base64",
        "uuid 123e4567-e89b-12d3-a456-426614174000 sha 9fceb02d0ae598e95dc970b74767f19372d61af8",
    ):
        assert found(text, ENTROPY) == [], text


# -- exact equivalents of what the fast paths replace ------------------------------------------


def _card_reference(m: regex.Match[str]) -> list[tuple[int, int]] | None:
    """Every start, its longest stretch of whole groups that passes: checked one by one."""
    text = m.string
    groups = [g.span() for g in regex.finditer(r"[0-9]+", text[: m.end()], pos=m.start())]
    if glued(m):
        groups.pop()
    out = []
    for i, (start, _) in enumerate(groups):
        if not p._card_begins(text, start):
            continue
        for j in range(len(groups), i, -1):
            candidate = text[start : groups[j - 1][1]]
            if len(v.digits_of(candidate)) <= 19 and v.credit_card_ok(candidate):
                out.append((start, groups[j - 1][1]))
                break
    return out or None


def test_card_runs_are_split_as_group_by_group_checks_would() -> None:
    rng = random.Random(14)
    cards = ["4111 1111 1111 1111", "4111111111111111", "3782-822463-10005", "5555.5555.5555.4444"]
    seps = [" ", "-", ".", "/", "  ", " - ", "\u2013", "x", ""]
    for _ in range(3000):
        parts: list[str] = []
        for _ in range(rng.randint(1, 20)):
            digits = "".join(rng.choice(string.digits) for _ in range(rng.randint(1, 7)))
            parts += [rng.choice(cards) if rng.random() < 0.3 else digits, rng.choice(seps)]
        text = "".join(parts)
        for m in p.CREDIT_CARD.pattern.finditer(text):
            assert p._cards(m) == _card_reference(m), text


def _overlapped(d: RegexDetector, ds: DetectorSet, text: str) -> list[Finding]:
    out = []
    for m in d.pattern.finditer(text, overlapped=True):
        spans = d.check(m)
        for a, b in spans if isinstance(spans, list) else [spans] if spans else []:
            out.append(Finding(a, b, d.kind, text[a:b]))
    return ds.resolve(out)


@given(text=texts())
def test_anchored_detectors_find_what_the_pattern_finds_everywhere(text: str) -> None:
    """The email detector tries starts from each `@`, the key detector once per run of key
    material: after overlaps are resolved, the same findings as every start tried."""
    for d in (p.EMAIL, s.PRIVATE_KEY, p.IBAN):
        ds = DetectorSet([d])
        assert ds.resolve(d.decided(text, 0, len(text), len(text))) == _overlapped(d, ds, text)


def test_overlap_resolution_matches_the_pairwise_rule() -> None:
    ds = DetectorSet.from_config()
    rng = random.Random(14)
    kinds = ["phone", "email", "credit_card", "secret", "client"]
    for _ in range(3000):
        findings = []
        for _ in range(rng.randint(0, 12)):
            a = rng.randint(0, 40)
            findings.append(Finding(a, a + rng.randint(1, 12), rng.choice(kinds), "x"))
        ordered = sorted(findings, key=lambda f: (-(f.end - f.start), ds.rank(f.kind), f.start))
        chosen: list[Finding] = []
        for f in ordered:
            if all(f.end <= c.start or c.end <= f.start for c in chosen):
                chosen.append(f)
        assert ds.resolve(findings) == sorted(chosen, key=lambda f: f.start)


# -- the streaming contract, for the detectors this issue adds or changes ----------------------

FORMAT_VALUES = [
    "4111.1111.1111.1111",
    "4111\u20131111 1111/1111",
    "219.09.9999",
    "gb82 west 1234 5698 7654 32",
    "ännä@bücher.example",
    "邮箱ann@example.org",
    "020 7946 0958",
    "030 1234 5678",
    "0049 30 1234 5678",
    "+49 30 1234 5678 / 5679",
    "030/1234 5678",
    "020 7946 0958/020 7946 0959",
    "2024-06-11 09:14",
    "Ref 2024 415-555-2671",
    "Tel.+44 20 7946 0958",
    "ghp_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ",
    "q7Xc2LmZ9vTb4NwR8sKd1YfH6jPg3AeU",
    "ZGF0YTppbWFnZS9wbmc7YmFzZTY0LGlWQk9SdzBL==",
]
FILLER = st.text(alphabet=" .,;:-/@()+x9aZ_\u2013\n\u00a0", max_size=4)
EXTENDED = DetectorSet.from_config(
    {"client": ["Acme Holdings"]}, phone_regions=("US", "GB", "DE"), entropy_secrets=True
)
EXTENDED_PATTERNS = [d for d in EXTENDED.detectors if isinstance(d, RegexDetector)]


@st.composite
def format_texts(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.one_of(FILLER, st.sampled_from(FORMAT_VALUES)), max_size=8))
    return "".join(parts)


@given(text=st.one_of(format_texts(), texts()), data=st.data())
def test_decided_findings_of_a_prefix_never_change(text: str, data: st.DataObject) -> None:
    ds = EXTENDED
    whole = ds.scan(text).findings
    cut = data.draw(st.integers(0, len(text)))
    prefix = ds.scan(text[:cut], final=False)
    assert prefix.hold <= cut
    assert set(prefix.findings) == {f for f in whole if f.end <= prefix.hold}
    resumed = ds.scan(text, prefix.hold).findings
    assert {f for f in whole if f.start >= prefix.hold} == set(resumed)


@given(text=st.one_of(format_texts(), texts()), data=st.data())
def test_the_scanner_answers_as_detector_set_scan(text: str, data: st.DataObject) -> None:
    scanner = StreamScanner(EXTENDED)
    pos = end = 0
    while end < len(text):
        end = data.draw(st.integers(end + 1, len(text)))
        offset = max(0, pos - 80)
        window = text[offset:end]
        expected = EXTENDED.scan(window, pos - offset, final=False)
        assert scanner.scan(window, pos - offset, offset) == (expected.findings, expected.hold)
        pos = offset + data.draw(st.integers(pos - offset, expected.hold))


@given(text=st.one_of(format_texts(), texts(odd=False)))
def test_every_match_is_of_its_alphabet_and_has_what_it_needs(text: str) -> None:
    for d in EXTENDED_PATTERNS:
        for m in d.pattern.finditer(text, overlapped=True):
            assert regex.fullmatch(rf"{d.alphabet}*", m.group()), (d.kind, m)
            assert d.starts.match(text, m.start()) is not None, (d.kind, m)
            if d.needs is not None and (m.end() < len(text) or d.lookback):
                assert regex.search(d.needs, m.group()), (d.kind, m)
        if d.hint is not None:
            hinted = {h.start() for h in d.hint.finditer(text)}
            assert {m.start() for m in d.pattern.finditer(text, overlapped=True)} <= hinted


@given(text=st.one_of(format_texts(), texts()), data=st.data())
def test_tables_cover_every_open_start_and_every_match(text: str, data: st.DataObject) -> None:
    assume(text)
    end = data.draw(st.integers(1, len(text)))
    seen = text[:end]
    tables = for_detectors(list(EXTENDED.detectors))
    for j, d in enumerate(EXTENDED.detectors):
        if not isinstance(d, RegexDetector):
            continue
        begins = {m.start() for m in d.pattern.finditer(seen, overlapped=True)}
        begins |= {s for s in range(d.run_start(seen, 0, end), end) if d.is_open(seen, s, end)}
        for start in begins:
            at = 1 if start else 0
            for key in {seen[start - at : start + 1], seen[start - at : start + 2]}:
                assert tables.info(key, at)[0] >> j & 1, (d.kind, start, key)


@given(before=st.one_of(format_texts(), texts(odd=False)), data=st.data())
def test_entropy_starts_followed_by_word_characters_are_open(
    before: str, data: st.DataObject
) -> None:
    d = next(d for d in EXTENDED_PATTERNS if d.word == r"[A-Za-z0-9+/_\-]")
    word = string.ascii_letters + string.digits + "+/_-"
    run = data.draw(st.text(alphabet=word, min_size=1, max_size=80))
    text = before + run
    start = len(before)
    if d.starts.match(text, start) is not None:
        assert d.is_open(text, start, len(text))
    short = data.draw(st.text(alphabet=word, min_size=1, max_size=d.short - 1))
    closed = before + short + "!"
    for end in range(len(before) + len(short) + 1, len(closed) + 1):
        assert not d.is_open(closed, len(before), end)


def test_every_reader_of_values_uses_the_deployments_phone_regions() -> None:
    """A national number of the second region is one value to the pseudonymizer, the vault
    and the guard: the model may write it back in any form, and it shows, as the same token."""
    from holdback.pseudonymize import Pseudonymizer
    from holdback.stream import Guard
    from holdback.vault import Vault

    detectors = DetectorSet.from_config(phone_regions=("US", "GB"))
    vault = Vault()
    p = Pseudonymizer(detectors)
    masked, _ = p.pseudonymize("Call 020 7946 0958 today", vault)
    again, _ = p.pseudonymize("or +44 20 7946 0958 later", vault)
    assert masked == "Call <PHONE_1> today"
    assert again == "or <PHONE_1> later"
    guard = Guard(detectors, vault=vault)
    shown = guard.feed("Ring +44 20 7946 0958 now. ") + guard.flush()
    assert shown == "Ring +44 20 7946 0958 now. "
    assert guard.stored == "Ring <PHONE_1> now. "
