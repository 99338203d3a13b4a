"""A team's own detectors: from files (`--patterns FILE` TOML, `--people FILE` CSV) and from the
database (pattern sets and people lists an admin keeps in the console, `store/team_detectors.py`).

The rules:
- One loader per source, for files and stored entries alike: a pattern set is read by
  `parse_patterns` (bounded regexes, examples checked), a people list by `parse_people`. A stored
  entry is checked by them before it is saved (`check_definition`), so what cannot be used is
  refused at save time with the loader's reason and nothing is stored; a file that cannot be
  used refuses the start (`settings.resolve` loads it). Errors name the file or the stored
  entry, the entry or line, and the reason, never a value from it.
- Compiled once: a file is read again only when its size or modification time changed, a stored
  entry only when its text did (keyed by a digest kept in memory), so every reload of the term
  lists (`term_reload.detectors_for`) reuses the same detectors, and the stream scanner's
  tables built for them.
- Every listed person, from the file and every stored list, is in one `PeopleMatcher`: every
  form of a person gets one canonical key, and a form two listed people share (in one list or
  two) is keyed by itself, never as the wrong person.
"""

from __future__ import annotations

import csv
import hashlib
import threading
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from holdback.detect.base import Detector
from holdback.detect.people import (
    PeopleFileError,
    PeopleMatcher,
    Person,
    load_people,
    parse_people,
)
from holdback.detect.team_patterns import (
    PatternFileError,
    PatternSet,
    load_patterns,
    parse_patterns,
)
from holdback.store.team_detectors import TeamDetector, TeamSource, what

_lock = threading.Lock()
_files: dict[tuple[str, str], tuple[tuple[int, int], object]] = {}
_stored: dict[tuple[str, str], tuple[bytes, object]] = {}
_merged: list[tuple[tuple[object, ...], PeopleMatcher]] = []  # the last people merged


@dataclass(frozen=True, slots=True)
class Summary:
    """What a checked definition holds, as the console lists it (no value of it)."""

    labels: tuple[str, ...] = ()  # a pattern set's token kinds
    people: int = 0  # a people list's people

    @property
    def entries(self) -> int:
        return len(self.labels)


def _stamp(path: Path) -> tuple[int, int]:
    try:
        info = path.stat()
    except OSError:
        return (-1, -1)  # the load reports why it cannot be read
    return (info.st_size, info.st_mtime_ns)


def _from_file(what_: str, path: Path) -> object:
    key = (what_, str(path))
    stamp = _stamp(path)
    with _lock:
        known = _files.get(key)
        if known is not None and known[0] == stamp and stamp[0] >= 0:
            return known[1]
    loaded: object = load_patterns(path) if what_ == "patterns" else load_people(path)
    with _lock:
        _files[key] = (stamp, loaded)
    return loaded


def patterns_of(path: Path) -> PatternSet:
    loaded = _from_file("patterns", path)
    assert isinstance(loaded, PatternSet)
    return loaded


_split: dict[int, tuple[PatternSet, list[Detector]]] = {}


def _detectors_of(patterns: PatternSet) -> list[Detector]:
    """`patterns.detectors()`, made once per compiled set."""
    with _lock:
        known = _split.get(id(patterns))
        if known is not None and known[0] is patterns:
            return known[1]
    made = patterns.detectors()
    with _lock:
        live = {id(v[1]) for v in (*_files.values(), *_stored.values())}
        for key in [k for k in _split if k not in live]:
            del _split[key]
        _split[id(patterns)] = (patterns, made)
    return made


def people_in(path: Path) -> list[Person]:
    loaded = _from_file("people", path)
    assert isinstance(loaded, list)
    return loaded


def parse_pattern_text(text: str, name: str) -> PatternSet:
    """A stored pattern set's TOML, read as a patterns file is."""
    where = f"{what('patterns')} {name!r}"
    try:
        data = tomllib.loads(text.lstrip("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        raise PatternFileError(f"{where} is not TOML ({exc})") from None
    return parse_patterns(data, where)


def parse_people_text(text: str, name: str) -> list[Person]:
    """A stored people list's CSV, read as a people file is."""
    where = f"{what('people')} {name!r}"
    try:
        return parse_people(text.lstrip("\ufeff"), where)
    except csv.Error:
        raise PeopleFileError(f"{where} is not CSV") from None


def _compiled(source: str, name: str, text: str) -> object:
    key = (source, name)
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    with _lock:
        known = _stored.get(key)
        if known is not None and known[0] == digest:
            return known[1]
    loaded: object = (
        parse_pattern_text(text, name) if source == "patterns" else parse_people_text(text, name)
    )
    with _lock:
        _stored[key] = (digest, loaded)
    return loaded


def check_definition(source: TeamSource, name: str, text: str) -> Summary:
    """Load a definition as it would be used; raise the loader's error if it cannot be."""
    loaded = _compiled(source, name, text)
    if isinstance(loaded, PatternSet):
        return Summary(labels=loaded.kinds)
    assert isinstance(loaded, list)
    return Summary(people=len(loaded))


def stored_people(name: str, text: str) -> list[Person]:
    """A stored people list's people (compiled once per text)."""
    loaded = _compiled("people", name, text)
    assert isinstance(loaded, list)
    return loaded


def people_of(path: Path | None, stored: Sequence[TeamDetector] = ()) -> PeopleMatcher | None:
    """One matcher for the people of the file and of every stored list; None if there are none.
    Built again only when one of them changed."""
    groups: list[list[Person]] = []
    key: list[object] = []
    if path is not None:
        groups.append(people_in(path))
        key.append((str(path), _stamp(path)))
    for entry in stored:
        if entry.source == "people":
            groups.append(stored_people(entry.name, entry.text))
            key.append((entry.name, _stored[("people", entry.name)][0]))
    if not groups:
        return None
    with _lock:
        if _merged and _merged[0][0] == tuple(key):
            return _merged[0][1]
    matcher = PeopleMatcher(person for group in groups for person in group)
    with _lock:
        _merged[:] = [(tuple(key), matcher)]
    return matcher


def _forget(stored: Sequence[TeamDetector]) -> None:
    """Drop the compiled entries no longer stored (a deleted set, an old name)."""
    present = {(entry.source, entry.name) for entry in stored}
    with _lock:
        for key in [k for k in _stored if k not in present]:
            del _stored[key]


def team_detectors(
    patterns: Path | None, people: Path | None, stored: Sequence[TeamDetector] = ()
) -> list[Detector]:
    """The detectors of the configured files (none for a file not given) and of the stored
    pattern sets and people lists."""
    out: list[Detector] = []
    if patterns is not None:
        out.extend(_detectors_of(patterns_of(patterns)))
    for entry in stored:
        if entry.source == "patterns":
            loaded = _compiled("patterns", entry.name, entry.text)
            assert isinstance(loaded, PatternSet)
            out.extend(_detectors_of(loaded))
    matcher = people_of(people, stored)
    if matcher is not None:
        out.append(matcher)
    _forget(stored)
    return out
