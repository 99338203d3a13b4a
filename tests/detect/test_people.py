"""People lists: every form of a listed person is found, any case, through the canonical text;
every form of one person gets one token and the vault keeps the form first written; a family
name that is a common word needs a title, an initial or a given name; the stream contract."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from holdback.detect import DetectorSet
from holdback.detect.people import PeopleFileError, PeopleMatcher, load_people, parse_people
from holdback.pseudonymize import Pseudonymizer, Vault, spellings
from holdback.stream import Guard, restore

PEOPLE = parse_people(
    "given,family,aliases\n"
    "Sarah Jane,Connor,Sally\n"
    "Tom,Baker\n"
    "José,García\n"
    "Olivia,Young,Liv\n"
    "Ibrahim,Okafor\n"
)
DETECTORS = DetectorSet.from_config(extra=[PeopleMatcher(PEOPLE)])


def forms(given: str, family: str) -> list[str]:
    g = given.split()[0]
    return [
        f"{g} {family}",
        f"Ms {family}",
        f"Dr. {family}",
        f"Prof {family}",
        f"{g[0]}. {family}",
        f"{g[0]} {family}",
        f"{family}, {g}",
        f"{g} {family}'s".upper(),
        f"{g} {family}".lower(),
    ]


def person_tokens(text: str, vault: Vault) -> list[str]:
    _, spans = Pseudonymizer(DETECTORS).pseudonymize(text, vault)
    return [m.token for m in spans if m.kind == "person"]


@pytest.mark.parametrize(
    ("given", "family"),
    [("Sarah", "Connor"), ("Tom", "Baker"), ("Olivia", "Young"), ("Ibrahim", "Okafor")],
)
def test_every_form_of_a_person_has_one_token(given: str, family: str) -> None:
    vault = Vault()
    tokens = [person_tokens(f"Note for {form} today.", vault) for form in forms(given, family)]
    assert all(len(t) == 1 for t in tokens), tokens
    assert len({t[0] for t in tokens}) == 1


def test_possessive_diacritics_and_aliases() -> None:
    vault = Vault()
    text = (
        "SARAH CONNOR'S file, Sally Connor; Jane Connor; Sarah Jane Connor; jose garcia, Sr. García"
    )
    masked, _ = Pseudonymizer(DETECTORS).pseudonymize(text, vault)
    assert masked == (
        "<PERSON_1>'S file, <PERSON_1>; <PERSON_1>; <PERSON_1>; <PERSON_2>, <PERSON_2>"
    )


def test_a_common_word_family_name_needs_a_title_an_initial_or_a_given_name() -> None:
    found = [f.value for f in DETECTORS.detect("The baker was young. Ask Baker. Young people.")]
    assert found == []
    found = [f.value for f in DETECTORS.detect("Mr Baker met T. Baker and Olivia Young.")]
    assert found == ["Mr Baker", "T. Baker", "Olivia Young"]
    # A family name that is no common word is found alone.
    assert [f.value for f in DETECTORS.detect("Okafor called.")] == ["Okafor"]


def test_the_vault_keeps_the_first_form_and_the_message_its_spellings() -> None:
    vault = Vault()
    ps = Pseudonymizer(DETECTORS)
    text = "Ms Connor wrote; Sarah Connor agreed."
    masked, spans = ps.pseudonymize(text, vault)
    assert masked == "<PERSON_1> wrote; <PERSON_1> agreed."
    assert vault["<PERSON_1>"] == "Ms Connor"  # a reply restores the form first written
    assert restore("Thanks, <PERSON_1>.", vault.index()) == "Thanks, Ms Connor."
    assert spellings(spans, vault) == {1: "Sarah Connor"}


def test_a_form_two_people_share_is_not_either_persons_token() -> None:
    detectors = DetectorSet.from_config(
        extra=[PeopleMatcher(parse_people("Sarah,Connor\nJohn,Connor\n"))]
    )
    vault = Vault()
    masked, _ = Pseudonymizer(detectors).pseudonymize("Sarah Connor, John Connor, Ms Connor", vault)
    assert masked == "<PERSON_1>, <PERSON_2>, <PERSON_3>"


def test_not_inside_words_nor_after_an_apostrophe() -> None:
    assert DETECTORS.detect("Okaforian it's Okafor") == [
        f for f in DETECTORS.detect("Okaforian it's Okafor") if f.value == "Okafor"
    ]
    assert [f.value for f in DETECTORS.detect("it's Okafor")] == ["Okafor"]


def test_people_files(tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    path.write_text("# our clients\nSarah,Connor,\nTom,Baker,Tommy|T.B.\n", encoding="utf-8")
    assert len(load_people(path)) == 2
    path.write_text("Sarah,Connor,x,y\n", encoding="utf-8")
    with pytest.raises(PeopleFileError, match="line 1: expected") as e:
        load_people(path)
    assert "Connor" not in str(e.value)
    path.write_bytes(b"Sarah,Connor\n\xff\n")
    with pytest.raises(PeopleFileError, match="not UTF-8"):
        load_people(path)


def test_the_guard_catches_a_listed_person_the_model_was_never_given() -> None:
    guard = Guard(DETECTORS)
    out = guard.feed("Please call Dr. Oka") + guard.feed("for tomorrow.") + guard.flush()
    assert "Okafor" not in out
    assert "[redacted person]" in out


PIECES = [
    "Sarah Connor", "Ms Connor", "S. Connor", "Connor, Sarah", "CONNOR'S", "Tom Baker", "baker",
    "Mr Baker", "Young", "Olivia Young", "Okafor", "Dr. Okafor", "José García", "Sally",
    " ", " ", ", ", ".", "'s", "\n", "the", "Ms", "Dr.", "Conn", "it'",
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


def screened(chunks: list[str]) -> tuple[str, list[tuple[str, int]]]:
    guard = Guard(DETECTORS)
    out = "".join(guard.feed(c) for c in chunks) + guard.flush()
    return out, sorted(guard.redacted.items())


@settings(max_examples=300, deadline=None)
@given(split_text())
def test_streamed_equals_one_shot_for_random_splits(case: tuple[str, list[str]]) -> None:
    text, pieces = case
    assert screened(pieces) == screened([text])
    assert screened(list(text)) == screened([text])


@settings(max_examples=200, deadline=None)
@given(
    person=st.sampled_from([("Sarah", "Connor"), ("Tom", "Baker"), ("Olivia", "Young")]),
    picks=st.lists(st.integers(0, 8), min_size=1, max_size=6),
    glue=st.sampled_from([" and ", ", then ", "; ", " / "]),
)
def test_any_forms_in_one_message_share_one_token(
    person: tuple[str, str], picks: list[int], glue: str
) -> None:
    all_forms = forms(*person)
    text = "Re: " + glue.join(all_forms[i] for i in picks) + "."
    vault = Vault()
    tokens = person_tokens(text, vault)
    assert len(tokens) == len(picks)
    assert len(set(tokens)) == 1
    assert vault[tokens[0]] == all_forms[picks[0]].removesuffix("'S")
