"""A team's pattern detectors: load-time refusals with their reasons, examples checked at load,
validators and context words, and the stream contract (streamed screening equals one-shot
screening for every split)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from holdback.detect import DetectorSet
from holdback.detect.team_patterns import (
    PatternFileError,
    compile_regex,
    load_patterns,
    mod11_ok,
    mod97_ok,
    parse_patterns,
)
from holdback.moderation.safe_regex import UnsafePatternError
from holdback.pseudonymize import Pseudonymizer, Vault
from holdback.stream import Guard

DOC = {
    "pattern": [
        {
            "label": "account",
            "regex": [r"ACC-\d{4}-\d{5}"],
            "match": ["ACC-2024-00817", "see acc-2024-00817."],
            "no_match": ["ACC-2024-0081", "XACC-2024-00817", "ACC-2024-008171"],
        },
        {
            "label": "matter",
            "regex": [r"MAT/\d{5}", r"M\d{6}"],
            "context": ["matter", "file no"],
            "context_window": 30,
            "match": ["matter MAT/88213", "M123456 is the matter"],
            "no_match": ["MAT/88213 alone", "M123456"],
        },
        {
            "label": "policy",
            "regex": [r"\d{9}[\dX]"],
            "validator": "mod11",
            "match": ["0306406152"],
            "no_match": ["0306406153"],
        },
        {"label": "ref", "regex": [r"RF\d{2}[A-Z0-9]{1,21}"], "validator": "mod97"},
        {"label": "member", "regex": r"\d{4} \d{4} \d{4} \d{4}", "validator": "luhn"},
    ]
}
PATTERNS = parse_patterns(DOC)
DETECTORS = DetectorSet.from_config(extra=PATTERNS.detectors())
# The entries as one detector asked on every scan: what the scanner's own detectors must equal.
AS_ONE = DetectorSet.from_config(extra=[PATTERNS])


def kinds(text: str) -> list[tuple[str, str]]:
    return [(f.kind, f.value) for f in DETECTORS.detect(text)]


def test_found_in_their_formats_any_case_apart_from_words() -> None:
    assert kinds("Account ACC-2024-00817, and acc-2024-00818.") == [
        ("account", "ACC-2024-00817"),
        ("account", "acc-2024-00818"),
    ]
    assert kinds("XACC-2024-00817 and ACC-2024-008171") == []


def test_context_words_before_or_after_within_the_window() -> None:
    assert kinds("matter MAT/88213") == [("matter", "MAT/88213")]
    assert kinds("MAT/88213 is our file no. 3") == [("matter", "MAT/88213")]
    assert kinds("MAT/88213" + " padding" * 5 + " matter") == []
    assert kinds("MAT/88213 alone") == []


def test_validators() -> None:
    assert mod11_ok("0306406152")
    assert not mod11_ok("0306406153")
    assert mod11_ok("080442957X")
    assert mod97_ok("RF18539007547034")
    assert not mod97_ok("RF18539007547035")
    assert kinds("ref RF18539007547034") == [("ref", "RF18539007547034")]
    assert kinds("ref RF18539007547035") == []
    assert kinds("member 4111 1111 1111 1111") != []
    assert [k for k, _ in kinds("member 4111 1111 1111 1112")] != ["member"]


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (r"(\d+)+", "nested repetition could backtrack"),
        (r"(a|ab)+", "a repeated alternation could backtrack"),
        (r"ACC-\d+", "no length bound"),
        (r"ACC-\d{2,}", "no length bound"),
        (r".*ACC", "no length bound"),
        (r"\d{1,200}", "at most 128"),
        (r"x?", "empty text"),
        (r"(?<=acct )\d{6}", "lookbehinds are not allowed"),
        (r"(\d)\1", "backreferences are not allowed"),
        (r"[abc", "never closed"),
    ],
)
def test_bad_regexes_are_refused_with_the_reason(source: str, reason: str) -> None:
    with pytest.raises(UnsafePatternError, match=reason):
        compile_regex(source)
    doc = {"pattern": [{"label": "acct", "regex": [r"A\d{3}", source]}]}
    with pytest.raises(PatternFileError, match=r"entry 1 \(acct\): regex 2 is refused: "):
        parse_patterns(doc)


def test_a_failing_example_refuses_the_file_naming_entry_and_example() -> None:
    canary = "ACC-9999-0000"
    doc = {"pattern": [{"label": "account", "regex": r"ACC-\d{4}-\d{5}", "match": ["x", canary]}]}
    with pytest.raises(PatternFileError, match=r"entry 1 \(account\): example match\[1\]") as e:
        parse_patterns(doc)
    assert canary not in str(e.value)
    doc = {"pattern": [{"label": "account", "regex": r"ACC-\d{4}", "no_match": ["ACC-1234"]}]}
    with pytest.raises(PatternFileError, match=r"example no_match\[1\] is found"):
        parse_patterns(doc)


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"regex": r"A\d{3}"}, "a label is required"),
        ({"label": "email", "regex": r"A\d{3}"}, "is a built-in kind"),
        ({"label": "a b", "regex": r"A\d{3}"}, "makes no token kind"),
        ({"label": "acct"}, "at least one regex"),
        ({"label": "acct", "regex": r"A\d{3}", "validator": "crc"}, "validator must be one of"),
        ({"label": "acct", "regex": r"A\d{3}", "context_window": 500}, "context_window"),
        ({"label": "acct", "regex": r"A\d{3}", "colour": "red"}, "unknown field"),
    ],
)
def test_bad_entries_are_refused(entry: dict[str, object], reason: str) -> None:
    with pytest.raises(PatternFileError, match=reason):
        parse_patterns({"pattern": [entry]})


def test_a_file_is_read_and_refused_by_name(tmp_path: Path) -> None:
    good = tmp_path / "patterns.toml"
    good.write_text("[[pattern]]\nlabel = \"case\"\nregex = ['CASE-\\d{6}']\n", encoding="utf-8")
    assert load_patterns(good).kinds == ("case",)
    bad = tmp_path / "bad.toml"
    bad.write_text("[[pattern]\n", encoding="utf-8")
    with pytest.raises(PatternFileError, match="is not TOML"):
        load_patterns(bad)


def test_user_text_is_masked_one_token_per_value() -> None:
    masked, _ = Pseudonymizer(DETECTORS).pseudonymize(
        "ACC-2024-00817 then acc-2024-00817 and ACC-2024-00818", Vault()
    )
    assert masked == "<ACCOUNT_1> then <ACCOUNT_1> and <ACCOUNT_2>"


def test_the_guard_catches_an_identifier_the_model_was_never_given() -> None:
    guard = Guard(DETECTORS)
    out = guard.feed("Your account is ACC-20") + guard.feed("24-00817.") + guard.flush()
    assert "00817" not in out
    assert "[redacted account]" in out


PIECES = [
    "ACC-2024-00817", "acc-2024-0081", "XACC-2024-00817", "matter", "MAT/88213", "M123456",
    "file no", "0306406152", "RF18539007547034", "4111 1111 1111 1111", " ", " ", ", ", ".",
    "\n", "padding words", "ACC-", "MAT/", "the",
]  # fmt: skip


@st.composite
def split_text(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = "".join(draw(st.lists(st.sampled_from(PIECES), max_size=14)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    pieces, last = [], 0
    for c in cuts:
        pieces.append(text[last:c])
        last = c
    pieces.append(text[last:])
    return text, pieces


def screened(
    chunks: list[str], detectors: DetectorSet = DETECTORS
) -> tuple[str, list[tuple[str, int]]]:
    guard = Guard(detectors)
    out = "".join(guard.feed(c) for c in chunks) + guard.flush()
    return out, sorted(guard.redacted.items())


@settings(max_examples=300, deadline=None)
@given(split_text())
def test_streamed_equals_one_shot_for_random_splits(case: tuple[str, list[str]]) -> None:
    text, pieces = case
    assert screened(pieces) == screened([text])
    assert screened(list(text)) == screened([text])
    assert screened(pieces) == screened(pieces, AS_ONE)


@given(split_text())
def test_scan_of_prefixes_agrees_with_the_whole(case: tuple[str, list[str]]) -> None:
    """A finding decided in a partial scan is a finding of the whole text."""
    text, _ = case
    whole = set(DETECTORS.scan(text).findings)
    for cut in range(len(text) + 1):
        part = DETECTORS.scan(text[:cut], final=False)
        assert {f for f in part.findings if f.end <= part.hold} <= whole
