"""Pattern sets and people lists changed elsewhere (the command line, another server) are picked
up by a running server's watcher; stored ones merge with the files' into one detector set (one
person matcher for every list); compiled detectors are reused while nothing changed; the JSON
forms are written as TOML and CSV that read back as sent."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdback.app import team_detectors, term_reload
from holdback.app.settings import resolve
from holdback.app.team_forms import patterns_toml
from holdback.app.term_reload import TermLists, detectors_for
from holdback.detect import DetectorSet, TermMatcher
from holdback.detect.people import PeopleMatcher
from holdback.store import Store, VaultKey
from holdback.store.team_detectors import TeamDetector
from tests.app.conftest import Accounts
from tests.app.support import make_settings, running_app, store_op
from tests.store.conftest import sqlite_url

PATTERNS = "[[pattern]]\nlabel = 'ticket'\nregex = ['TKT-\\d{6}']\nmatch = ['TKT-000123']\n"
PEOPLE_A = "Henrietta,Quillfeather,\n"
PEOPLE_B = "Bartholomew,Quillfeather,\n"


def stored(source: str, name: str, text: str) -> TeamDetector:
    from datetime import UTC, datetime

    return TeamDetector(source, name, text, datetime.now(UTC))  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_change_made_elsewhere_is_used_within_the_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(term_reload, "POLL_SECONDS", 0.05)
    settings = resolve(env={})
    store = await Store.open(sqlite_url(tmp_path / "h.db"), vault_key=VaultKey.generate())
    used: list[tuple[DetectorSet, TermMatcher | None]] = []
    try:
        version = await term_reload.sources_version(store)
        terms = TermLists(settings, store, lambda d, f: used.append((d, f)), version=version)
        await store.save_team_detector("patterns", "tickets", PATTERNS)
        await store.save_team_detector("people", "clients", PEOPLE_A)
        terms.start()
        with anyio.fail_after(10):
            await terms.until_reloads(1)
        found = used[-1][0].detect("Henrietta Quillfeather has TKT-004711")
        assert [f.kind for f in found] == ["person", "ticket"]
        # A stored entry that no longer loads (written past the loaders): the reload fails,
        # is logged by type and never by content, and the detectors in use stay.
        await store.save_team_detector("patterns", "tickets", "[[pattern]]\nlabel='x'\n")
        await anyio.sleep(0.3)
        assert [f.kind for f in used[-1][0].detect("TKT-004711")] == ["ticket"]
        assert "could not reload" in caplog.text
        assert "TKT" not in caplog.text
        await store.delete_team_detector("patterns", "tickets")
        with anyio.fail_after(10):
            await terms.until_reloads(terms.reloads + 1)
        assert [f.kind for f in used[-1][0].detect("TKT-004711 for Ms Quillfeather")] == ["person"]
        await terms.stop()
    finally:
        await store.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_every_list_and_the_file_are_one_person_matcher(tmp_path: Path) -> None:
    people = tmp_path / "people.csv"
    people.write_text("Sarah,Connor,\n", encoding="utf-8")
    settings = resolve(env={}, people=str(people))
    lists = [stored("people", "a", PEOPLE_A), stored("people", "b", PEOPLE_B)]
    detectors, _ = detectors_for(settings, [], lists)
    matchers = [d for d in detectors.detectors if isinstance(d, PeopleMatcher)]
    assert len(matchers) == 1
    values = [f.value for f in detectors.detect("Sarah Connor, Henrietta Quillfeather")]
    assert values == ["Sarah Connor", "Henrietta Quillfeather"]
    # `Ms Quillfeather` is two listed people's: keyed by itself, never as the wrong one.
    assert detectors.normalize("person", "Ms Quillfeather") != detectors.normalize(
        "person", "Henrietta Quillfeather"
    )
    assert detectors.normalize("person", "H. Quillfeather") == detectors.normalize(
        "person", "Henrietta Quillfeather"
    )
    # Nothing changed: the same compiled detectors; a changed list: a new matcher.
    again, _ = detectors_for(settings, [], lists)
    assert [d for d in again.detectors if isinstance(d, PeopleMatcher)] == matchers
    changed, _ = detectors_for(settings, [], [stored("people", "a", PEOPLE_A)])
    assert [d for d in changed.detectors if isinstance(d, PeopleMatcher)] != matchers


def test_a_stored_set_is_compiled_once_per_text() -> None:
    entry = stored("patterns", "tickets", PATTERNS)
    first = team_detectors.team_detectors(None, None, [entry])
    assert team_detectors.team_detectors(None, None, [entry]) == first
    other = stored("patterns", "tickets", PATTERNS.replace("TKT", "TIK"))
    assert team_detectors.team_detectors(None, None, [other]) != first


def test_a_stored_entry_is_refused_by_the_files_loader(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    bad = PATTERNS.replace("'TKT-000123'", "'TKT-0123'")
    with pytest.raises(team_detectors.PatternFileError) as caught:
        team_detectors.check_definition("patterns", "tickets", bad)
    assert (
        str(caught.value)
        == "pattern set 'tickets': entry 1 (ticket): example match[1] is not found"
    )
    with pytest.raises(team_detectors.PeopleFileError) as people:
        team_detectors.check_definition("people", "clients", "Henrietta\n")
    assert "Henrietta" not in str(people.value)
    assert "line 1" in str(people.value)


TOML_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
FIELD = st.one_of(TOML_TEXT, st.integers(-5, 100), st.lists(TOML_TEXT, max_size=3))


@given(st.lists(st.dictionaries(st.sampled_from(["label", "regex", "match"]), FIELD), max_size=3))
def test_json_entries_are_written_as_toml_that_reads_back_as_sent(
    entries: list[dict[str, object]],
) -> None:
    text = patterns_toml(entries, "x")
    assert tomllib.loads(text) == ({"pattern": entries} if entries else {})


def test_a_stored_set_that_no_longer_loads_refuses_the_start(
    tmp_path: Path, accounts: Accounts
) -> None:
    # Written past the loaders, as a holdback that checked less might have left it.
    broken = PATTERNS.replace("'TKT-000123'", "'TKT-0123'")
    store_op(accounts.data_dir, lambda s: s.save_team_detector("patterns", "tickets", broken))
    settings = make_settings(tmp_path, auth="password", data_dir=str(accounts.data_dir))
    with pytest.raises(team_detectors.PatternFileError) as caught, running_app(settings):
        pass
    assert str(caught.value) == (
        "pattern set 'tickets': entry 1 (ticket): example match[1] is not found"
    )
