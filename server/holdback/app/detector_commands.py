"""`holdback patterns|people list|import|export|delete`: a team's pattern sets and people lists
in the store, from the command line.

The rules (those of `team_commands`):
- Every command acts on the store `serve` uses, and only on an existing one; running servers
  use a change within seconds (`term_reload`).
- An imported file is judged by the loader the server uses for `--patterns` and `--people`
  files before it is stored (`team_detectors.check_definition`): one that cannot be used is
  refused with one line naming the entry or line and the reason, never a value, and nothing is
  stored. What is stored is the file's text, sealed.
- Every change is recorded as an admin event by the set's or list's name, never its content.
  `export` writes the text as it was imported (to stdout, or to a new file readable only by its
  owner): it is the team's own data, asked for by name.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from holdback.app.team_commands import CLI_ACTOR, _command, _say, _table, _when, with_store
from holdback.app.team_detectors import check_definition
from holdback.errors import ConfigurationError
from holdback.store.repository import Store
from holdback.store.team_detectors import TeamSource, what

HELP: dict[TeamSource, str] = {
    "patterns": "the team's pattern sets: its own identifier formats (TOML, docs/detectors.md)",
    "people": "the team's people lists: the people it works with (CSV, docs/detectors.md)",
}


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    for source in ("patterns", "people"):
        noun = what(source)
        parser = subparsers.add_parser(
            source, help=f"{HELP[source]}; running servers use a change within seconds"
        )
        commands = parser.add_subparsers(dest=f"{source}_command", metavar="COMMAND", required=True)
        listing = _command(commands, "list", f"list the {noun}s", run_list)
        importing = _command(
            commands, "import", f"create or replace a {noun} from a file", run_import
        )
        importing.add_argument("file", type=Path)
        importing.add_argument("--name", help="its name (default: the file's name, no suffix)")
        export = _command(commands, "export", f"print a {noun} as its file holds it", run_export)
        export.add_argument("name")
        export.add_argument("--output", type=Path, help="write it to this new file instead")
        delete = _command(commands, "delete", f"delete a {noun}", run_delete)
        delete.add_argument("name")
        for command in (listing, importing, export, delete):
            command.set_defaults(source=source)


def run_list(args: argparse.Namespace) -> int:
    source: TeamSource = args.source
    entries = with_store(args, lambda store: store.load_team_detectors(source))
    rows: list[tuple[str, ...]] = [
        ("NAME", "ENTRIES", "LABELS", "UPDATED")
        if source == "patterns"
        else ("NAME", "PEOPLE", "UPDATED")
    ]
    for entry in entries:
        try:
            summary = check_definition(source, entry.name, entry.text)
        except ConfigurationError as exc:
            print(f"holdback: {exc}", file=sys.stderr)
            counts: tuple[str, ...] = ("unusable", "-") if source == "patterns" else ("unusable",)
        else:
            counts = (
                (str(summary.entries), ", ".join(summary.labels))
                if source == "patterns"
                else (str(summary.people),)
            )
        rows.append((entry.name, *counts, _when(entry.updated_at)))
    _table(rows)
    return 0


def _read(path: Path, noun: str) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read {noun} file {path}: {exc.strerror or type(exc).__name__}"
        ) from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigurationError(f"{noun} file {path} is not UTF-8 (line {line})") from None


def run_import(args: argparse.Namespace) -> int:
    source: TeamSource = args.source
    noun = what(source)
    name = args.name or args.file.stem
    text = _read(args.file, noun)
    summary = check_definition(source, name, text)  # refused here, before the store is opened

    async def work(store: Store) -> None:
        await store.save_team_detector(source, name, text)
        await store.record_admin(CLI_ACTOR, f"{source}.set", name)

    with_store(args, work)
    holds = (
        f"{summary.entries} pattern(s): {', '.join(summary.labels)}"
        if source == "patterns"
        else f"{summary.people} people"
    )
    _say(f"{noun} {name} holds {holds}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    source: TeamSource = args.source
    noun = what(source)
    entry = with_store(args, lambda store: store.load_team_detector(source, args.name))
    if entry is None:
        raise ConfigurationError(f"there is no {noun} named {args.name!r}")
    if args.output is None:
        sys.stdout.write(entry.text)
        return 0
    try:
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot create {args.output}: {exc.strerror or type(exc).__name__}"
        ) from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(entry.text)
    _say(f"{noun} {args.name} written to {args.output}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    source: TeamSource = args.source
    noun = what(source)

    async def work(store: Store) -> bool:
        deleted = await store.delete_team_detector(source, args.name)
        if deleted:
            await store.record_admin(CLI_ACTOR, f"{source}.delete", args.name)
        return deleted

    deleted = with_store(args, work)
    _say(f"{noun} {args.name} {'deleted' if deleted else 'did not exist'}")
    return 0
