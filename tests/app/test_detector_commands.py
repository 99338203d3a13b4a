"""`holdback patterns|people list|import|export|delete`: on an existing store only; a file the
loaders refuse is refused with its reason and nothing stored; changes audited by name; export
gives back the text imported."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.app.support import add_user
from tests.app.test_team_commands import cli, ok

pytestmark = pytest.mark.slow

PATTERNS = """# matter numbers
[[pattern]]
label = "matter"
regex = ['MAT/\\d{5}']
match = ["MAT/88213"]
"""
PEOPLE = "given,family,aliases\nHenrietta,Quillfeather,Etta\nBartholomew,Quillfeather,\n"
VALUES = ("Henrietta", "Quillfeather", "Bartholomew", "88213")


@pytest.mark.parametrize("source", ["patterns", "people"])
def test_no_store_is_created(tmp_path: Path, source: str) -> None:
    data = tmp_path / "nothing-here"
    status, _, err = cli(data, source, "list")
    assert status == 2
    assert "there is no holdback data directory" in err
    assert not data.exists()


def test_import_list_export_delete(tmp_path: Path) -> None:
    data = tmp_path / "data"
    add_user(data, "ada", "ada's long password")
    patterns = tmp_path / "matters.toml"
    patterns.write_text(PATTERNS, encoding="utf-8")
    people = tmp_path / "clients.csv"
    people.write_text(PEOPLE, encoding="utf-8")

    _, said = ok(data, "patterns", "import", str(patterns))
    assert said.strip() == "pattern set matters holds 1 pattern(s): matter"
    _, said = ok(data, "people", "import", str(people), "--name", "team")
    assert said.strip() == "people list team holds 2 people"
    listed, _ = ok(data, "patterns", "list")
    assert listed.splitlines()[1].split()[:3] == ["matters", "1", "matter"]
    listed, _ = ok(data, "people", "list")
    assert listed.splitlines()[1].split()[:2] == ["team", "2"]
    assert not any(value in listed for value in VALUES)

    out, _ = ok(data, "patterns", "export", "matters")
    assert out == PATTERNS
    target = tmp_path / "out.csv"
    ok(data, "people", "export", "team", "--output", str(target))
    assert target.read_text(encoding="utf-8") == PEOPLE
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    status, _, err = cli(data, "people", "export", "team", "--output", str(target))
    assert status == 2
    assert "cannot create" in err  # never over a file that is there
    status, _, err = cli(data, "people", "export", "nobody")
    assert (status, err.strip()) == (2, "holdback: there is no people list named 'nobody'")

    audit, _ = ok(data, "audit")
    assert "patterns.set" in audit
    assert "people.set" in audit
    assert not any(value in audit for value in VALUES)

    _, said = ok(data, "people", "delete", "team")
    assert said.strip() == "people list team deleted"
    _, said = ok(data, "people", "delete", "team")
    assert said.strip() == "people list team did not exist"
    audit, _ = ok(data, "audit")
    assert audit.count("people.delete") == 1


@pytest.mark.parametrize(
    ("source", "text", "reason"),
    [
        ("patterns", PATTERNS.replace('"MAT/88213"', '"MAT/8821"'),
         "holdback: pattern set 'bad': entry 1 (matter): example match[1] is not found"),
        ("patterns", "[[pattern]]\nlabel = 'x'\nregex = ['(\\d+)+']\n",
         "holdback: pattern set 'bad': entry 1 (x): regex 1 is refused:"),
        ("people", "Henrietta Quillfeather\n",
         "holdback: people list 'bad', line 1: expected given names, family name"),
    ],
)  # fmt: skip
def test_a_file_the_loaders_refuse_is_not_stored(
    tmp_path: Path, source: str, text: str, reason: str
) -> None:
    data = tmp_path / "data"
    add_user(data, "ada", "ada's long password")
    bad = tmp_path / "bad.txt"
    bad.write_text(text, encoding="utf-8")
    status, _, err = cli(data, source, "import", str(bad))
    assert status == 2
    assert err.startswith(reason)
    assert not any(value in err for value in VALUES)
    listed, _ = ok(data, source, "list")
    assert len(listed.splitlines()) == 1  # the header alone
    bad.write_bytes(b"\xff\xfe")
    status, _, err = cli(data, source, "import", str(bad))
    assert status == 2
    assert "is not UTF-8 (line 1)" in err
