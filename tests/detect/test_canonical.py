"""The canonical text: what it removes and folds, that it is stable, and that offsets map back.

Every evasion class is checked in both directions: a user's value is masked before the model
sees it, and the same value written by the model never reaches the wire.
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdback.detect import DetectorSet, normalize
from holdback.pseudonymize import Pseudonymizer, restore, restore_as_typed, spellings
from holdback.stream import Guard, forbidden_matcher, screen
from holdback.vault import Vault

EMAIL = "intruder.canary@injected-leak.example"
CARD = "4556 7375 8689 9855"
TERM = "Zyxwcanary Holdings"
DETECTORS = DetectorSet.from_config({"clients": [TERM]})


def _bold_digits(text: str) -> str:
    return "".join(chr(0x1D7CE + int(c)) if c.isdigit() else c for c in text)


EVASIONS = {
    "cgj_in_term": TERM.replace("Hold", "Ho\u034fld"),
    "variation_selector": EMAIL.replace("@", "@\ufe0f"),
    "tag_characters": EMAIL.replace("canary", "can\U000e0061ary"),
    "hangul_filler": CARD.replace(" ", "\u3164 "),
    "cyrillic_a": EMAIL.replace("a", "\u0430"),
    "greek_omicron": TERM.replace("o", "\u03bf"),
    "math_bold_digits": _bold_digits(CARD),
    "arabic_indic_digits": "".join(chr(0x0660 + int(c)) if c.isdigit() else c for c in CARD),
    "combining_marks": EMAIL.replace("r", "r\u0301"),
    "ligature": TERM.replace("Holdings", "Holdiﬁngs").replace("iﬁ", "i"),
    "two_spaces_in_term": TERM.replace(" ", "  "),
    "line_break_in_term": TERM.replace(" ", "\n"),
    "soft_hyphen_in_term": TERM.replace("Hold", "Hol\u00add"),
    "fullwidth": "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in EMAIL),
}


def test_ligatures_expand() -> None:
    assert normalize("ﬁnance").text == "finance"
    assert normalize("ﬁnance").span_to_original(0, 2) == (0, 1)


@pytest.mark.parametrize("name", sorted(EVASIONS))
def test_an_evasion_is_caught_in_both_directions(name: str) -> None:
    text = f"Note: {EVASIONS[name]} today."
    masked, found = Pseudonymizer(DETECTORS).pseudonymize(text, Vault())
    assert found, "the user's value must be masked before the model sees it"
    assert "today." in masked
    guard = Guard(DETECTORS, forbidden=forbidden_matcher(["nightjar"]))
    shown = screen(text, guard)
    assert "[redacted" in shown
    assert EVASIONS[name] not in shown


def test_a_forbidden_term_split_by_spaces_and_lines_is_redacted() -> None:
    guard = Guard(DETECTORS, forbidden=forbidden_matcher(["Project Nightjar"]))
    assert (
        screen("the project   NIGHTJAR and Project\n\nNightjar", guard)
        == "the [redacted] and [redacted]"
    )


def test_look_alikes_are_folded_for_detection_not_for_comparing_values() -> None:
    assert normalize("ännä@bücher.example").text == "anna@bucher.example"
    assert normalize("ännä", lookalikes=False).text == "ännä"


EXTRA = [
    "\u200b",
    "\u034f",
    "\ufe0f",
    "\u00ad",
    "\u0430",
    "\u0301",
    "ﬁ",
    "\U0001d7d2",
    "\u3164",
    "\uff21",
]
TEXT = st.text(alphabet=st.sampled_from([*"abc AZ09@.-\n\t", *EXTRA]), max_size=40)


@given(text=TEXT)
def test_canonical_text_is_idempotent(text: str) -> None:
    once = normalize(text).text
    assert normalize(once).text == once


@given(text=TEXT)
def test_every_canonical_character_maps_back_to_the_original_it_came_from(text: str) -> None:
    norm = normalize(text)
    for i, ch in enumerate(norm.text):
        start, end = norm.span_to_original(i, i + 1)
        original = text[start:end]
        assert len(original) == 1
        # The original character is the canonical one, or folds to a text that contains it.
        folded = normalize(original).text
        assert (
            ch in folded
            or (ch == " " and original.isspace())
            or unicodedata.category(original) == "Zs"
        )
    # Offsets never go backwards.
    origin = norm.origin or list(range(len(text)))
    assert origin == sorted(origin)


@pytest.mark.parametrize(
    "spelling",
    [
        "ann&#64;example.org",
        "ann&commat;example.org",
        "ann@example\\.org",
        "**ann**@example.org",
        "an`n`@example.org",
        "[ann](https://example.net/)@example.org",
    ],
)
def test_the_model_is_never_sent_a_value_it_would_read_through_markdown(spelling: str) -> None:
    vault = Vault()
    text = f"Write to {spelling} today."
    masked, found = Pseudonymizer(DETECTORS).pseudonymize(text, vault)
    assert [m.kind for m in found] == ["email"]
    assert "ann" not in masked
    assert "example.org" not in masked
    assert masked.endswith(" today.")
    # The message reads back exactly as typed.
    spans = [(m.start, m.end, m.token) for m in found]
    assert restore_as_typed(masked, spans, spellings(found, vault), vault.index()) == text
    assert restore(masked, vault) == text  # the value kept is the spelling typed
    # Every spelling is the same address, so it gets the same token.
    again, _ = Pseudonymizer(DETECTORS).pseudonymize("and ann@example.org too", vault)
    assert again == "and <EMAIL_1> too"


@pytest.mark.parametrize("text", [" EMAIL_1  415.555.2671 ", "call  415.555.2671  now"])
def test_collapsed_spacing_leaves_the_raw_detection_in_charge(text: str) -> None:
    vault = Vault()
    masked, found = Pseudonymizer(DETECTORS).pseudonymize(text, vault)
    assert [(m.kind, text[m.start : m.end]) for m in found] == [("phone", "415.555.2671")]
    spans = [(m.start, m.end, m.token) for m in found]
    assert restore_as_typed(masked, spans, spellings(found, vault), vault.index()) == text


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("4000\u22120566", "4000-0566"),  # minus sign
        ("536\u201122", "536-22"),  # non-breaking hyphen
        ("4000\u20140566", "4000-0566"),  # em dash
        ("ann@example\u3002org", "ann@example.org"),  # IDNA reads it as a dot
        ("12\u204434", "12/34"),
        ("Operation\rBluefinch", "Operation Bluefinch"),  # a lone carriage return breaks a line
        ("Operation\r\nBluefinch", "Operation Bluefinch"),  # before a line feed it is nothing
    ],
)
def test_separators_read_as_what_they_imitate(raw: str, canonical: str) -> None:
    norm = normalize(raw)
    assert norm.text == canonical
    # Each canonical character comes from the raw character at the same place, or after
    # a dropped carriage return.
    origin = norm.origin or list(range(len(raw)))
    assert len(origin) == len(canonical)
    assert all(raw[i] != "\r" or canonical[k] == " " for k, i in enumerate(origin))
