"""`holdback user|group|policy|audit`: the contract commands, on the store `serve` uses, and
refused on a data directory or database that holds no holdback store."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from tests.app.support import add_user, run_cli

pytestmark = pytest.mark.slow


def cli(data: Path, *argv: str) -> tuple[int, str, str]:
    return run_cli([*argv, "--data-dir", str(data)])


def ok(data: Path, *argv: str) -> tuple[str, str]:
    status, out, err = cli(data, *argv)
    assert status == 0, err
    return out, err


@pytest.mark.parametrize(
    "argv",
    [
        ["group", "add", "support"],
        ["group", "member", "add", "support", "bob"],
        ["policy", "set", "--default", "email", "masked"],
        ["policy", "never-restore", "us_ssn"],
        ["user", "role", "bob", "admin"],
        ["user", "disable", "bob"],
        ["user", "list"],
        ["audit"],
    ],
)
def test_no_store_is_created_by_a_management_command(tmp_path: Path, argv: list[str]) -> None:
    data = tmp_path / "nothing-here"
    status, out, err = cli(data, *argv)
    assert status == 2
    assert "there is no holdback data directory" in err
    assert out == ""
    assert not data.exists()
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    status, _, err = cli(empty, *argv)
    assert status == 2
    assert "there is no holdback database" in err
    assert list(empty.iterdir()) == []


def test_the_contract_commands(tmp_path: Path) -> None:
    data = tmp_path / "data"
    add_user(data, "ada", "ada's long password")  # creates the store: the first user, an admin
    add_user(data, "bob", "bob's long password")
    users, _ = ok(data, "user", "list")
    assert [line.split()[:2] for line in users.splitlines()[1:]] == [
        ["ada", "admin"],
        ["bob", "member"],
    ]
    _, said = ok(data, "group", "add", "support")
    assert "group support created" in said
    _, said = ok(data, "group", "member", "add", "support", "bob")
    assert "bob joined group support" in said
    _, said = ok(data, "group", "member", "add", "support", "bob")
    assert "already" in said
    ok(data, "policy", "set", "support", "email", "plain")
    ok(data, "policy", "set", "--default", "email", "masked")
    ok(data, "policy", "set", "--default", "clients", "label")
    _, said = ok(data, "policy", "never-restore", "us_ssn")
    assert "never restored" in said
    listed, _ = ok(data, "policy", "list")
    rows = [line.split() for line in listed.splitlines()[1:]]
    assert ["(default)", "email", "masked"] in rows
    assert ["support", "email", "plain"] in rows
    assert ["(everyone)", "us_ssn", "never", "restored"] in rows
    groups, _ = ok(data, "group", "list")
    assert "support  bob" in groups
    _, said = ok(data, "user", "role", "bob", "admin")
    assert "bob is now admin" in said
    _, said = ok(data, "user", "disable", "bob")
    assert "disabled" in said
    _, said = ok(data, "group", "member", "remove", "support", "bob")
    assert "bob left group support" in said
    audit, _ = ok(data, "audit", "--csv")
    events = list(csv.reader(io.StringIO(audit)))
    assert events[0] == ["time", "event", "who", "conversation", "message", "token", "kind",
                         "level"]  # fmt: skip
    actions = [row[1] for row in events[1:]]
    for action in ("group.create", "group.member.add", "policy.set", "policy.never_restore",
                   "user.role", "group.member.remove"):  # fmt: skip
        assert action in actions
    assert "ada's long password" not in audit


def test_bad_arguments_are_one_clear_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    add_user(data, "ada", "ada's long password")
    status, _, err = cli(data, "policy", "set", "--default", "email", "partial")
    assert status == 2
    assert "plain, masked, label" in err
    status, _, err = cli(data, "policy", "set", "email", "masked")  # no group, no --default
    assert status == 2
    assert "--default" in err
    status, _, err = cli(data, "group", "member", "add", "nosuch", "ada")
    assert status == 2
    assert "nosuch" in err
    status, _, err = cli(data, "user", "role", "ada", "member")  # the last admin
    assert status == 2
    assert "Traceback" not in err


def test_user_passwd_sets_a_new_password(tmp_path: Path) -> None:
    data = tmp_path / "data"
    add_user(data, "ada", "ada's long password")
    status, _, err = run_cli(["user", "passwd", "ada", "--data-dir", str(data)], "a new password\n")
    assert status == 0, err
    assert "a new password" not in err
    status, _, err = run_cli(["user", "passwd", "ada", "--data-dir", str(data)], "short\n")
    assert status == 2
    assert "at least 8 characters" in err
    audit, _ = ok(data, "audit", "--csv")
    assert "user.password" in audit
    assert "a new password" not in audit
    status, _, err = run_cli(
        ["user", "passwd", "nobody", "--data-dir", str(data)], "long enough!\n"
    )
    assert status == 2
    assert "nobody" in err


def test_terms_set_list_delete(tmp_path: Path) -> None:
    data = tmp_path / "data"
    add_user(data, "ada", "ada's long password")
    clients = tmp_path / "clients.txt"
    clients.write_text("Globex Nightjar\n# a comment\nInitech\n", "utf-8")
    _, said = ok(data, "terms", "set", "clients", str(clients))
    assert "holds 2 term(s)" in said
    assert "Globex" not in said
    listed, _ = ok(data, "terms", "list")
    assert listed.splitlines()[1].split()[:4] == ["clients", "clients", "sensitive", "2"]
    assert "Globex" not in listed
    audit, _ = ok(data, "audit", "--csv")
    assert "terms.set" in audit
    assert "Globex" not in audit
    _, said = ok(data, "terms", "delete", "clients")
    assert "deleted" in said
    _, said = ok(data, "terms", "delete", "clients")
    assert "did not exist" in said
