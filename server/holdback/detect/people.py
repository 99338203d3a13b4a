"""A team's people (`--people FILE`): each person found in the forms people write, as one value.

The rules it keeps:
- a person is given names (the first is the one used for the person's key), a family name
  and aliases (a one-word alias is another given name, `Sally`; a longer one is matched as it
  is written). The forms found: the full name (`Sarah Connor`, `Sarah Jane Connor`), the family
  name after a title (`Ms Connor`, `Dr. Connor`, `Herr Connor`), an initial and the family name
  (`S. Connor`, `S Connor`), `Connor, Sarah`, and the family name alone; the possessive and any
  case follow, because matching is on whole words of the canonical, case-folded text (the
  detection issue's `normalize`: `SARAH CONNOR'S`, `Sárah Cönnor`);
- a family name that is also a common English word (`Baker`, `Young`: `COMMON_WORDS`, a small
  list shipped here; no maintained word list is installed) is found only with a title, an
  initial or a given name;
- every form of one person has one key, the person's canonical key (`canonical`): the vault
  keys values by it, so `Sarah Connor`, `Ms Connor` and `CONNOR, SARAH` get one `<PERSON_n>`,
  and the vault keeps the form first written as the value (the spellings of a message keep
  the others). A form two people share (`Ms Connor` with two Connors listed) is keyed by
  itself: it gets a token of its own rather than the wrong person's;
- it is a term list (Aho-Corasick), so the stream contract and its cost are the term lists'.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from holdback.detect.dictionary import TermMatcher, normalize_term
from holdback.errors import ConfigurationError

PERSON = "person"
MAX_PEOPLE = 200_000

# English, German, French, Spanish, Italian and Dutch courtesy and professional titles.
TITLES = (
    "mr", "mrs", "ms", "miss", "mx", "dr", "prof", "professor", "sir", "dame", "lady", "lord",
    "rev", "fr", "herr", "frau", "mme", "mlle", "sr", "sra", "srta", "sig", "dott", "mevr", "dhr",
)  # fmt: skip
# Titles also written with a full stop (`Dr. Connor`).
DOTTED = frozenset({"mr", "mrs", "ms", "mx", "dr", "prof", "rev", "fr", "sr", "sra", "sig"})

# English words that are also family names: alone they are the word, so they are found only
# with a title, an initial or a given name. A small list, chosen from common surnames.
COMMON_WORDS = frozenset(
    """
    abbot archer ash bacon baker bank banks barber bell berry best bird bishop black bond
    bone booth bow bowman brand brewer bridge brook brooks brown bull bush butcher butler
    cain cannon card carpenter carter cash chance chase child church clay clark cook cooke
    cooper cotton cross crow dale dancer day dean drake duke dyer east english fair faith
    farmer field fields finch fish fisher fletcher ford forest fowler fox free friend frost
    gardener gates gay gill glass glover gold good grace grant gray green grey guy hall hand
    hardy hart hawk hay heath hill holly hood hope horn house hunt hunter ivy jewel joy judge
    keen king knight lake lamb land lane law lee little long lord love low major march mark
    marsh marshall mason may mayor meadows mill miller mills monk moon moore moss nash new
    noble north oak page palmer park parker parks parson pike piper poole pope porter potter
    power price prince pringle rain reed rice rich rivers rock rose rush sage salmon savage
    sawyer scott sharp shepherd short silver singer slater small smart smith snow south
    sparrow spencer spring stone strong summer summers swan sweet tanner taylor thatcher
    tower townsend trout tucker turner underwood vale wall walker ward ware warren waters
    weaver webb well wells west white wild will wise wolf wood woods worth wren wright young
    """.split()  # noqa: SIM905
)


class PeopleFileError(ConfigurationError):
    """A people file cannot be used: it names the line, never a name."""


@dataclass(frozen=True, slots=True)
class Person:
    given: tuple[str, ...]  # given names as written; the first is the one for the key
    family: str
    aliases: tuple[str, ...] = ()

    def __repr__(self) -> str:  # never show a name
        return "Person(...)"

    @property
    def key(self) -> str:
        """The person's canonical key: the first given name and the family name, folded."""
        return normalize_term(f"{self.given[0]} {self.family}" if self.given else self.family)

    def forms(self, common: frozenset[str] = COMMON_WORDS) -> set[str]:
        """Every form of the person that is matched, folded (`normalize_term`)."""
        family = normalize_term(self.family)
        if not family:
            return set()
        givens: list[str] = []
        forms: set[str] = set()
        for name in (*self.given, *self.aliases):
            n = normalize_term(name)
            if not n:
                continue
            if " " in n and name in self.aliases:
                forms.add(n)  # an alias of several words is matched as written
            else:
                givens.append(n)
        # `Sarah Jane` as given names: `Sarah Connor`, `Jane Connor`, `Sarah Jane Connor`.
        words = [w for g in givens for w in g.split()]
        full = normalize_term(" ".join(self.given))
        for g in {*givens, *words, *([full] if full else [])}:
            forms.update({f"{g} {family}", f"{family}, {g}", f"{family},{g}"})
        for initial in {w[0] for w in words if w[0].isalnum()}:
            forms.update({f"{initial} {family}", f"{initial}. {family}", f"{initial}.{family}"})
        for title in TITLES:
            forms.add(f"{title} {family}")
            if title in DOTTED:
                forms.add(f"{title}. {family}")
        if family not in common:
            forms.add(family)
        return forms


class PeopleMatcher(TermMatcher):
    """The forms of every listed person, as a term list of kind `person`."""

    def __init__(self, people: Iterable[Person], *, common: frozenset[str] = COMMON_WORDS) -> None:
        keys: dict[str, str] = {}
        for person in people:
            key = person.key
            for form in person.forms(common):
                known = keys.get(form)
                # A form two people share is keyed by itself: never the wrong person's token.
                keys[form] = key if known is None or known == key else "~" + form
        self._keys = keys
        super().__init__(PERSON, keys)

    def canonical(self, value: str) -> str:
        """The key of the person a form names (every form of one person has the same)."""
        form = normalize_term(value)
        return self._keys.get(form, form)

    def _bounded(self, text: str, start: int, end: int) -> bool:
        # After an apostrophe is the rest of a word (`it's Connor` holds no `s Connor`).
        if start > 0 and text[start - 1] in "'\u2019":
            return False
        return super()._bounded(text, start, end)


def _split_names(cell: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in cell.replace(";", "|").split("|") if p.strip())


def parse_people(text: str, name: str = "people") -> list[Person]:
    """CSV rows `given names, family name[, aliases]` (aliases separated by `|` or `;`); a
    header row naming `given` and `family` is skipped, `#` starts a comment line."""
    people: list[Person] = []
    rows = csv.reader(io.StringIO(text))
    for line, row in enumerate(rows, 1):
        cells = [c.strip() for c in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if (
            line == 1
            and len(cells) >= 2
            and "given" in cells[0].lower()
            and "family" in cells[1].lower()
        ):
            continue
        if len(cells) < 2 or len(cells) > 3 or not cells[1]:
            raise PeopleFileError(
                f"{name}, line {line}: expected given names, family name and optional aliases"
            )
        given = tuple(cells[0].split())
        aliases = _split_names(cells[2]) if len(cells) == 3 else ()
        people.append(Person(given, cells[1], aliases))
        if len(people) > MAX_PEOPLE:
            raise PeopleFileError(f"{name}: at most {MAX_PEOPLE} people")
    return people


def load_people(path: Path) -> list[Person]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PeopleFileError(
            f"cannot read people file {path}: {exc.strerror or type(exc).__name__}"
        ) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad_line = raw[: exc.start].count(b"\n") + 1
        raise PeopleFileError(f"people file {path} is not UTF-8 (line {bad_line})") from None
    try:
        return parse_people(text, f"people file {path}")
    except csv.Error:
        raise PeopleFileError(f"people file {path} is not CSV") from None


def people_matcher(people: Sequence[Person]) -> PeopleMatcher:
    return PeopleMatcher(people)
