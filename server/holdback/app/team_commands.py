"""`holdback user|group|policy|audit …`: a team's users, groups, reveal policies and audit trail.

The rules:
- Every command acts on the store `serve` uses (`--data-dir`, `--database-url`, or their
  variables), and only on an existing one: a data directory, database or vault key that does
  not exist, or a database with no holdback schema, is refused with one line naming it;
  nothing is created (`holdback serve` or `holdback db upgrade` makes a store).
- Every change is recorded as an admin event (the actor is the command line), by name: a
  user, a group or a kind, never a password, a token or a value.
- Output is for people: one line on stderr says what changed, or that nothing had to; lists
  are aligned tables on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import getpass
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from holdback.app.auth import hash_password
from holdback.app.terms import kind_of, read_terms
from holdback.errors import ConfigurationError
from holdback.reveal import LEVELS
from holdback.store.crypto import VaultKey, load_vault_key
from holdback.store.engine import parse_database_url
from holdback.store.locations import resolve_data_dir, resolve_database_url
from holdback.store.repository import Store

T = TypeVar("T")
Handler = Callable[[argparse.Namespace], int]
CLI_ACTOR = None  # admin events from the command line name no user


def store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", help="database URL (HOLDBACK_DATABASE_URL)")
    parser.add_argument("--data-dir", help="data directory (HOLDBACK_DATA_DIR)")


def existing_store(args: argparse.Namespace) -> tuple[str, VaultKey]:
    """The database URL and vault key `serve` would use, which must exist already."""
    env = dict(os.environ)
    data_dir = resolve_data_dir(args.data_dir, env)
    if not data_dir.is_dir():
        raise ConfigurationError(
            f"there is no holdback data directory at {data_dir}; run holdback serve (or "
            "holdback db upgrade) there first, or name another with --data-dir"
        )
    url = resolve_database_url(args.database_url, env, data_dir)
    target = parse_database_url(url)
    if target.is_sqlite and not Path(target.sqlite_path).is_file():
        raise ConfigurationError(
            f"there is no holdback database at {target.sqlite_path}; run holdback serve (or "
            "holdback db upgrade) first, or name another with --database-url"
        )
    return url, load_vault_key(data_dir, env, create=False)


async def open_existing_store(url: str, key: VaultKey) -> Store:
    """Open a store without migrating it: one with no holdback schema is refused."""
    return await Store.open(url, vault_key=key, migrate=False)


def with_store(args: argparse.Namespace, work: Callable[[Store], Awaitable[T]]) -> T:
    url, key = existing_store(args)

    async def run() -> T:
        store = await open_existing_store(url, key)
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(run())


def read_password() -> str:
    """A new password: a line of stdin, or typed twice at a prompt; 8 characters at least."""
    if not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            raise ConfigurationError("the two passwords differ")
    if len(password) < 8:
        raise ConfigurationError("the password must have at least 8 characters")
    return password


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        print("  ".join([*cells, row[-1]]).rstrip())


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment is not None else "-"


def _command(
    commands: argparse._SubParsersAction[Any], name: str, help_text: str, handler: Handler
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(name, help=help_text)
    store_flags(parser)
    parser.set_defaults(handler=handler)
    return parser


# A command that makes one change records it only if it changed something, and says which it
# was. By admin action: (the target recorded, the line when it changed, the line when it was
# so already), filled with the command's arguments and words; a policy's scope as people read
# it (`scope_name`) and as the admin trail names it (`stored`).
# fmt: off
_CHANGES: dict[str, tuple[str, str, str]] = {
    "group.member.add": ("{group} {user}", "{user} joined group {group}",
                         "{user} was already in group {group}"),
    "group.member.remove": ("{group} {user}", "{user} left group {group}",
                            "{user} was not in group {group}"),
    "policy.set": ("{stored} {kind} {level}", "{kind} is now shown at {level} to {scope_name}",
                   "{kind} is already shown at {level} to {scope_name}"),
    "policy.clear": ("{stored} {kind}", "{scope_name} no longer sets {kind}",
                     "{scope_name} did not set {kind}"),
    "policy.never_restore": ("{kind}", "{kind} is now never restored, to anyone",
                             "{kind} was already never restored, to anyone"),
    "policy.allow_restore": ("{kind}", "{kind} may be restored again",
                             "{kind} was not never-restored"),
    "terms.delete": ("{name}", "term list {name} deleted", "term list {name} did not exist"),
}
# fmt: on


def _change(
    args: argparse.Namespace,
    action: str,
    change: Callable[[Store], Awaitable[bool]],
    **words: str,
) -> int:
    """Make one change; record it only if it changed something, and say which it was."""
    target, done, already = _CHANGES[action]
    fields = {**vars(args), **words}

    async def work(store: Store) -> bool:
        changed = await change(store)
        if changed:
            await store.record_admin(CLI_ACTOR, action, target.format(**fields))
        return changed

    changed = with_store(args, work)
    _say((done if changed else already).format(**fields))
    return 0


# -- users --------------------------------------------------------------------------------


def add_user_commands(commands: argparse._SubParsersAction[Any]) -> None:
    """`user list`, `user role`, `user delete` (beside `user add|disable|enable`)."""
    _command(commands, "list", "list users: name, role, state, created", run_user_list)
    passwd = _command(
        commands,
        "passwd",
        "set a user's password (stdin or a prompt); their sessions end",
        run_user_passwd,
    )
    passwd.add_argument("name")
    role = _command(commands, "role", "make a user an admin or a member", run_user_role)
    role.add_argument("name")
    role.add_argument("role", choices=("admin", "member"))
    delete = _command(
        commands,
        "delete",
        "delete a user; their conversations go to an admin (--give-to) or are shredded",
        run_user_delete,
    )
    delete.add_argument("name")
    fate = delete.add_mutually_exclusive_group(required=True)
    fate.add_argument("--give-to", metavar="ADMIN", help="the admin who gets the conversations")
    fate.add_argument(
        "--shred",
        action="store_true",
        help="delete the conversations with their vaults (the values are gone for good)",
    )


def run_user_list(args: argparse.Namespace) -> int:
    users = with_store(args, lambda store: store.list_users())
    rows = [("NAME", "ROLE", "STATE", "CREATED")]
    rows += [
        (u.name, u.role, "disabled" if u.disabled else "active", _when(u.created_at)) for u in users
    ]
    _table(rows)
    return 0


def run_user_passwd(args: argparse.Namespace) -> int:
    password_hash = hash_password(read_password())

    async def work(store: Store) -> None:
        await store.set_password(args.name, password_hash)
        await store.record_admin(CLI_ACTOR, "user.password", args.name)

    with_store(args, work)
    _say(f"the password of {args.name} is set; their sessions have ended")
    return 0


def run_user_role(args: argparse.Namespace) -> int:
    async def work(store: Store) -> bool:
        _, changed = await store.set_role(args.name, args.role)
        if changed:
            await store.record_admin(CLI_ACTOR, "user.role", f"{args.name} {args.role}")
        return changed

    changed = with_store(args, work)
    _say(f"user {args.name} {'is now' if changed else 'was already'} {args.role}")
    return 0


def run_user_delete(args: argparse.Namespace) -> int:
    async def work(store: Store) -> int:
        owned = await store.delete_user(args.name, conversations_to=args.give_to)
        fate = f"given to {args.give_to}" if args.give_to else "shredded"
        await store.record_admin(CLI_ACTOR, "user.delete", f"{args.name} ({fate})")
        return owned

    owned = with_store(args, work)
    fate = f"went to {args.give_to}" if args.give_to else "were deleted with their vaults"
    _say(f"user {args.name} deleted; their {owned} conversation(s) {fate}")
    return 0


# -- groups -------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    group = subparsers.add_parser("group", help="manage groups (reveal policies are per group)")
    groups = group.add_subparsers(dest="group_command", metavar="COMMAND", required=True)
    add = _command(groups, "add", "create a group", run_group_add)
    add.add_argument("name")
    rename = _command(groups, "rename", "rename a group", run_group_rename)
    rename.add_argument("old")
    rename.add_argument("new")
    delete = _command(
        groups, "delete", "delete a group (its levels and shares go)", run_group_delete
    )
    delete.add_argument("name")
    _command(groups, "list", "list groups and their members", run_group_list)
    member = groups.add_parser("member", help="add or remove a group's members")
    members = member.add_subparsers(dest="member_command", metavar="COMMAND", required=True)
    for name, handler in (("add", run_member_add), ("remove", run_member_remove)):
        parser = _command(members, name, f"{name} a member", handler)
        parser.add_argument("group")
        parser.add_argument("user")

    policy = subparsers.add_parser("policy", help="how values are shown to viewers (reveal levels)")
    policies = policy.add_subparsers(dest="policy_command", metavar="COMMAND", required=True)
    for name, handler, help_text in (
        ("set", run_policy_set, "set a kind's level for a group (or --default)"),
        ("clear", run_policy_clear, "remove a kind's level for a group (or --default)"),
    ):
        parser = _command(policies, name, help_text, handler)
        parser.add_argument(
            "--default", action="store_true", help="the organisation default, not a group"
        )
        parser.add_argument(
            "scope", nargs="+", metavar="[GROUP] KIND" + (" LEVEL" * (name == "set"))
        )
    never = _command(
        policies, "never-restore", "show a kind's values plain to nobody", run_never_restore
    )
    never.add_argument("kind")
    allow = _command(policies, "allow-restore", "undo never-restore for a kind", run_allow_restore)
    allow.add_argument("kind")
    _command(policies, "list", "list the levels set and the never-restored kinds", run_policy_list)

    terms = subparsers.add_parser(
        "terms", help="the team's term lists (running servers use a change within seconds)"
    )
    term_commands = terms.add_subparsers(dest="terms_command", metavar="COMMAND", required=True)
    _command(term_commands, "list", "list term lists: name, kind, purpose, terms", run_terms_list)
    put = _command(
        term_commands, "set", "create or replace a list from a file (one term per line)",
        run_terms_set,
    )  # fmt: skip
    put.add_argument("name")
    put.add_argument("file", type=Path)
    put.add_argument("--kind", help="the values' kind (default: the file's name)")
    put.add_argument("--purpose", choices=("sensitive", "forbidden"), default="sensitive")
    remove = _command(term_commands, "delete", "delete a term list", run_terms_delete)
    remove.add_argument("name")

    audit = _command(
        subparsers, "audit", "print the audit trail (reveals and admin actions)", run_audit
    )
    audit.add_argument("--user", metavar="NAME", help="only reveals to this user")
    audit.add_argument("--conversation", metavar="ID", help="only this conversation")
    audit.add_argument("--since", metavar="TIME", help="ISO time, e.g. 2026-12-01T09:00")
    audit.add_argument("--until", metavar="TIME", help="ISO time")
    audit.add_argument("--csv", action="store_true", help="CSV on stdout")
    audit.add_argument("--limit", type=int, default=1000)


def run_group_add(args: argparse.Namespace) -> int:
    async def work(store: Store) -> None:
        await store.create_group(args.name)
        await store.record_admin(CLI_ACTOR, "group.create", args.name)

    with_store(args, work)
    _say(f"group {args.name} created")
    return 0


def run_group_rename(args: argparse.Namespace) -> int:
    async def work(store: Store) -> None:
        await store.rename_group(args.old, args.new)
        await store.record_admin(CLI_ACTOR, "group.rename", f"{args.old} -> {args.new}")

    with_store(args, work)
    _say(f"group {args.old} is now {args.new}")
    return 0


def run_group_delete(args: argparse.Namespace) -> int:
    async def work(store: Store) -> None:
        await store.delete_group(args.name)
        await store.record_admin(CLI_ACTOR, "group.delete", args.name)

    with_store(args, work)
    _say(f"group {args.name} deleted")
    return 0


def run_group_list(args: argparse.Namespace) -> int:
    groups = with_store(args, lambda store: store.list_groups())
    rows = [("GROUP", "MEMBERS")]
    rows += [(g.name, ", ".join(g.members) or "-") for g in groups]
    _table(rows)
    return 0


def run_member_add(args: argparse.Namespace) -> int:
    return _change(args, "group.member.add", lambda s: s.add_member(args.group, args.user))


def run_member_remove(args: argparse.Namespace) -> int:
    return _change(args, "group.member.remove", lambda s: s.remove_member(args.group, args.user))


# -- policies -----------------------------------------------------------------------------


def _scope(args: argparse.Namespace, words: int) -> tuple[str | None, list[str]]:
    """(group or None for --default, the remaining words), checked for their number."""
    parts: list[str] = list(args.scope)
    wanted = words if args.default else words + 1
    if len(parts) != wanted:
        shape = " ".join(["KIND", "LEVEL"][:words])
        raise ConfigurationError(f"expected GROUP {shape}, or --default {shape}")
    if args.default:
        return None, parts
    return parts[0], parts[1:]


def _scope_words(group: str | None) -> dict[str, str]:
    """A scope as a person reads it, and as the admin trail names it."""
    scope = "the organisation default" if group is None else f"group {group}"
    return {"scope_name": scope, "stored": group or "(default)"}


def run_policy_set(args: argparse.Namespace) -> int:
    group, (kind, level) = _scope(args, 2)
    if level not in LEVELS:
        raise ConfigurationError(f"a level is one of {', '.join(LEVELS)}, not {level!r}")
    words = {"kind": kind, "level": level, **_scope_words(group)}
    return _change(args, "policy.set", lambda s: s.set_level(group, kind, level), **words)


def run_policy_clear(args: argparse.Namespace) -> int:
    group, (kind,) = _scope(args, 1)
    words = {"kind": kind, **_scope_words(group)}
    return _change(args, "policy.clear", lambda s: s.clear_level(group, kind), **words)


def run_never_restore(args: argparse.Namespace) -> int:
    return _change(args, "policy.never_restore", lambda s: s.never_restore(args.kind))


def run_allow_restore(args: argparse.Namespace) -> int:
    return _change(args, "policy.allow_restore", lambda s: s.allow_restore(args.kind))


def run_policy_list(args: argparse.Namespace) -> int:
    async def work(store: Store) -> tuple[list[Any], frozenset[str]]:
        return await store.list_levels(), (await store.reveal_rules()).never_restore

    levels, never = with_store(args, work)
    rows = [("SCOPE", "KIND", "LEVEL")]
    rows += [(s.group or "(default)", s.kind, s.level) for s in levels]
    rows += [("(everyone)", kind, "never restored") for kind in sorted(never)]
    _table(rows)
    return 0


# -- term lists ---------------------------------------------------------------------------


def run_terms_list(args: argparse.Namespace) -> int:
    lists = with_store(args, lambda store: store.load_term_lists())
    rows = [("NAME", "KIND", "PURPOSE", "TERMS", "UPDATED")]
    rows += [(t.name, t.kind, t.purpose, str(len(t.terms)), _when(t.updated_at)) for t in lists]
    _table(rows)
    return 0


def run_terms_set(args: argparse.Namespace) -> int:
    terms = read_terms(args.file)
    kind = args.kind or kind_of(args.file)

    async def work(store: Store) -> None:
        await store.save_term_list(args.name, kind, args.purpose, terms)
        await store.record_admin(CLI_ACTOR, "terms.set", args.name)

    with_store(args, work)
    _say(f"term list {args.name} ({args.purpose}, kind {kind}) holds {len(terms)} term(s)")
    return 0


def run_terms_delete(args: argparse.Namespace) -> int:
    return _change(args, "terms.delete", lambda s: s.delete_term_list(args.name))


# -- audit --------------------------------------------------------------------------------


def _moment(text: str | None, flag: str) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigurationError(f"{flag} must be an ISO time such as 2026-12-01T09:00") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def csv_cell(text: str) -> str:
    """A cell a spreadsheet shows as text: one that could start a formula is quoted."""
    if text == "-":
        return ""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


AUDIT_COLUMNS = ("time", "event", "who", "conversation", "message", "token", "kind", "level")


def run_audit(args: argparse.Namespace) -> int:
    since, until = _moment(args.since, "--since"), _moment(args.until, "--until")

    async def work(store: Store) -> list[tuple[str, ...]]:
        names = {u.id: u.name for u in await store.list_users()}
        viewer = None
        if args.user is not None:
            viewer = next((i for i, n in names.items() if n == args.user), None)
            if viewer is None:
                raise ConfigurationError(f"no user named {args.user!r}")
        reveals = await store.list_reveal_events(
            viewer_id=viewer, conversation_id=args.conversation, since=since, until=until,
            limit=args.limit,
        )  # fmt: skip
        rows: list[tuple[datetime, tuple[str, ...]]] = [
            (e.created_at, (_when(e.created_at), "reveal", names.get(e.viewer_id or "", "-"),
                            e.conversation_id or "-", e.message_id or "-", e.token, e.kind,
                            e.level))
            for e in reveals
        ]  # fmt: skip
        if args.user is None and args.conversation is None:
            admin = await store.list_admin_events(since=since, until=until, limit=args.limit)
            rows += [
                (e.created_at, (_when(e.created_at), e.action,
                                names.get(e.actor_id or "", "(command line)"), "-", "-", "-",
                                "-", e.target))
                for e in admin
            ]  # fmt: skip
        rows.sort(key=lambda row: row[0], reverse=True)
        return [row for _, row in rows[: args.limit]]

    rows = with_store(args, work)
    if args.csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(AUDIT_COLUMNS)
        writer.writerows([csv_cell(cell) for cell in row] for row in rows)
    else:
        _table([tuple(c.upper() for c in AUDIT_COLUMNS), *rows])
    return 0
