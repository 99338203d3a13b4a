"""`holdback serve`, `holdback demo`, `holdback user ...` and `holdback token ...`.

Each reads the same flags and `HOLDBACK_*` variables as the server, so they find the same
database and vault key. Passwords come from standard input (one line) or a prompt, never from
the command line, and are stored as argon2id hashes. A token's text is printed once, by
`token create`, on stdout alone; nothing else ever prints it (`token list` shows ids).

`serve` does everything that could stop it from starting before uvicorn runs (it binds its
socket and builds its runtime): a failure is one line on stderr, `holdback: error: ...`, and
exit status 1 (docs/storage.md), with nothing logged before it and no traceback unless
`--debug` (`startup.py`). Taking a credential away (`user disable`, `token revoke`) works from any
process: every running server sees it at the next request, the next WebSocket frame, or
within `HOLDBACK_WS_RECHECK` seconds on a silent socket, which then ends (`session_ended`).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import uvicorn
import uvicorn.logging

from holdback.app import startup, team_commands
from holdback.app.application import build_runtime, create_app
from holdback.app.auth import hash_password
from holdback.app.http_server import uvicorn_config
from holdback.app.runtime import Runtime
from holdback.app.settings import Settings, resolve
from holdback.errors import ConfigurationError, HoldbackError
from holdback.providers.logmask import install_url_masking
from holdback.store.crypto import load_vault_key
from holdback.store.engine import parse_database_url
from holdback.store.locations import ensure_data_dir, resolve_data_dir, resolve_database_url
from holdback.store.records import ApiToken, User
from holdback.store.repository import Store

T = TypeVar("T")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="run the holdback server",
        description="Run the holdback server. Every flag is also a HOLDBACK_* variable (named "
        "in its help); a flag beats its variable, a variable beats the default. Further "
        "bounds are set only by variables: docs/limits.md.",
    )
    _server_flags(serve)
    serve.set_defaults(handler=run_serve)

    demo = subparsers.add_parser(
        "demo",
        help="run the server and print the leak demonstration's URL",
        description="Run the server as serve does (the same flags and variables) and print the "
        "URL of the leak demonstration, /demo.",
    )
    _server_flags(demo)
    demo.add_argument("--open", action="store_true", help="also open it in a browser")
    demo.add_argument(
        "--verify",
        action="store_true",
        help="instead of serving, run every scenario headless and print the leaks per pipeline; "
        "exit status 1 if holdback's side leaked anything (docs/demo.md)",
    )
    demo.set_defaults(handler=run_demo)

    user = subparsers.add_parser("user", help="manage users (for --auth password)")
    user_commands = user.add_subparsers(dest="user_command", metavar="COMMAND", required=True)
    add = user_commands.add_parser(
        "add", help="create a user; the password is read from stdin or a prompt"
    )
    add.add_argument("name")
    _store_flags(add)
    add.set_defaults(handler=run_user_add)
    disable = user_commands.add_parser(
        "disable",
        help="stop a user from signing in; their sessions end and their API tokens stop working",
    )
    disable.add_argument("name")
    _store_flags(disable)
    disable.set_defaults(handler=run_user_disable)
    enable = user_commands.add_parser(
        "enable", help="let a disabled user sign in again (their unrevoked tokens work again)"
    )
    enable.add_argument("name")
    _store_flags(enable)
    enable.set_defaults(handler=run_user_enable)
    team_commands.add_user_commands(user_commands)

    token = subparsers.add_parser("token", help="manage API tokens")
    token_commands = token.add_subparsers(dest="token_command", metavar="COMMAND", required=True)
    create = token_commands.add_parser("create", help="print a new API token for a user")
    create.add_argument("name", help="the user the token acts for")
    _store_flags(create)
    create.set_defaults(handler=run_token_create)
    listing = token_commands.add_parser(
        "list", help="list API tokens: id, user, name, created, status (never the token)"
    )
    listing.add_argument("--user", metavar="NAME", help="only this user's tokens")
    _store_flags(listing)
    listing.set_defaults(handler=run_token_list)
    revoke = token_commands.add_parser(
        "revoke", help="revoke an API token for good, by its id (see token list)"
    )
    revoke.add_argument("id", help="the token's id, as token list shows it")
    _store_flags(revoke)
    revoke.set_defaults(handler=run_token_revoke)


def _store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="the database: sqlite+aiosqlite:///path/to/file.db or "
        "postgresql+asyncpg://user:password@host:port/database (HOLDBACK_DATABASE_URL; "
        "default: holdback.db in the data directory)",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="the private directory (mode 0700) of the vault key and, by default, the "
        "database (HOLDBACK_DATA_DIR; default ~/.local/share/holdback)",
    )


def _server_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        help="the address to listen on (HOLDBACK_HOST; default 127.0.0.1); any address but "
        "this machine's own needs --auth password",
    )
    parser.add_argument(
        "--port",
        metavar="PORT",
        help="the port to listen on, 0 for any free one (HOLDBACK_PORT; default 8000)",
    )
    parser.add_argument(
        "--model",
        action="append",
        metavar="SPEC",
        help="a model to offer: demo (offline, no LLM), openai:MODEL, openai-responses:MODEL "
        "or anthropic:MODEL; give it once per model, the first is the default "
        "(HOLDBACK_MODELS, comma-separated, or HOLDBACK_MODEL for one; default demo). "
        "Keys and URLs: OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL",
    )
    _store_flags(parser)
    parser.add_argument(
        "--auth",
        metavar="{none,password}",
        help="how users sign in: none (one local user, this machine only) or password "
        "(accounts made with holdback user add) (HOLDBACK_AUTH; default none on 127.0.0.1, "
        "else password)",
    )
    parser.add_argument(
        "--sensitive-terms",
        nargs="+",
        metavar="FILE",
        help="term files, one term a line, to pseudonymize like detected values; a file's "
        "name is its kind (clients.txt: <CLIENTS_1>); saved to the store "
        "(HOLDBACK_SENSITIVE_TERMS, separated by commas)",
    )
    parser.add_argument(
        "--patterns",
        metavar="FILE",
        help="a TOML file of the team's identifier formats (label, regexes, context words, "
        "validator, examples), masked like detected values (HOLDBACK_PATTERNS; "
        "docs/detectors.md)",
    )
    parser.add_argument(
        "--people",
        metavar="FILE",
        help="a CSV file of the team's people (given names, family name, aliases), found in "
        "every form people write them, one token per person (HOLDBACK_PEOPLE; "
        "docs/detectors.md)",
    )
    parser.add_argument(
        "--forbidden-terms",
        nargs="+",
        metavar="FILE",
        help="term files, one term a line, never shown in a reply (HOLDBACK_FORBIDDEN_TERMS, "
        "separated by commas)",
    )
    parser.add_argument(
        "--guard-mode",
        metavar="{redact,block}",
        help="what becomes of a reply that would show a value holdback did not restore (one "
        "the model made up, or a forbidden term): redact replaces it, block stops the reply "
        "(HOLDBACK_GUARD_MODE; default redact)",
    )
    parser.add_argument(
        "--moderation",
        metavar="SPEC",
        help="policy moderation of reply text, sentence by sentence, failing closed: off, "
        "openai:MODEL (OpenAI's moderations API at OPENAI_BASE_URL), http:URL (a JSON "
        "webhook) or rules:FILE (an offline TOML rules file) (HOLDBACK_MODERATION; default "
        "off). HOLDBACK_MODERATION_TIMEOUT (seconds, default 3), HOLDBACK_MODERATION_WINDOW "
        "(characters, default 400): docs/moderation.md",
    )
    parser.add_argument(
        "--moderate-input",
        action="store_true",
        default=None,
        help="also moderate each user message before the model sees it; one not allowed is "
        "refused (HOLDBACK_MODERATE_INPUT=1)",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=None,
        help="a start-up error also prints its traceback, and holdback logs at DEBUG "
        "(HOLDBACK_DEBUG=1)",
    )


def settings_from(args: argparse.Namespace) -> Settings:
    try:
        return resolve(
            host=args.host,
            port=args.port,
            model=args.model,
            database_url=args.database_url,
            data_dir=args.data_dir,
            auth=args.auth,
            sensitive_terms=args.sensitive_terms,
            forbidden_terms=args.forbidden_terms,
            patterns=args.patterns,
            people=args.people,
            guard_mode=args.guard_mode,
            moderation=args.moderation,
            moderate_input=args.moderate_input,
            debug=args.debug,
        )
    except HoldbackError:
        if args.debug or os.environ.get("HOLDBACK_DEBUG", "").strip() in ("1", "true", "yes"):
            traceback.print_exc()
        raise


class _HeldRecords(logging.Handler):
    """Log records made while the server checks that it can start, held back.

    Before logging is configured nothing may reach stderr but the one-line error: alembic's
    INFO lines, or a warning from the store, would otherwise come first. Once the checks pass
    the records are handed to the configured handlers, so nothing is lost."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []
        self._root = logging.getLogger()
        self._level = self._root.level

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> _HeldRecords:
        self._root.addHandler(self)
        self._root.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc: object) -> None:
        self._root.removeHandler(self)
        self._root.setLevel(self._level)

    def replay(self) -> None:
        for record in self.records:
            logging.getLogger(record.name).handle(record)
        self.records.clear()


class _AccessFormatter(uvicorn.logging.AccessFormatter):
    """uvicorn's access lines. A record whose URL was masked (`holdback.providers.logmask`
    folds its arguments into the masked message) is written as that message, not refused."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        if isinstance(record.args, tuple) and len(record.args) == 5:
            return super().formatMessage(record)
        return f"{record.levelname}:     {record.getMessage()}"


def _configure_logging(debug: bool) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if debug:
        logging.getLogger("holdback").setLevel(logging.DEBUG)


def _uvicorn_logging() -> dict[str, Any]:
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["formatters"]["access"]["()"] = _AccessFormatter
    return config


def serve(settings: Settings, *, banner: str = "") -> int:
    """Run the server until it is stopped. If it cannot start, say why in one line on stderr
    (`holdback: error: ...`, naming the file, setting or address at fault, never a value or a
    key) and return 1 (`startup.py`)."""
    install_url_masking()  # already done by the CLI; here for callers that skip it

    async def main() -> int:
        # Everything that can stop the server happens here, before uvicorn runs: the socket
        # is bound and the runtime (data directory, key, database, term files, models) built.
        with _HeldRecords() as held:
            try:
                sockets = startup.bind(settings)
            except HoldbackError as exc:
                return startup.fail(exc, debug=settings.debug)
            try:
                runtime = await build_runtime(settings)
            except Exception as exc:
                for sock in sockets:
                    sock.close()
                return startup.fail(exc, debug=settings.debug)
        for line in startup.key_warnings(settings):
            print(line, file=sys.stderr, flush=True)
        _configure_logging(settings.debug)
        held.replay()
        app = create_app(settings, runtime=runtime)
        try:
            config = uvicorn_config(app, settings, log_level="info", log_config=_uvicorn_logging())
            server = uvicorn.Server(config)
            task = asyncio.create_task(server.serve(sockets=sockets))
            while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn has no event)
                await asyncio.sleep(0.05)
            if server.started:
                url = startup.listening_url(settings, sockets)
                print(startup.banner(settings, url, banner), flush=True)
            await task
        except SystemExit:  # uvicorn's way to say its start-up failed (it logged why)
            return 1
        except Exception as exc:
            return startup.fail(exc, debug=settings.debug)
        finally:
            for sock in sockets:
                sock.close()
            if getattr(app.state, "runtime", None) is None:  # the lifespan never took it over
                await _close(runtime)
        return 0 if server.started else 1

    return asyncio.run(main())


async def _close(runtime: Runtime) -> None:
    try:
        if runtime.moderation is not None:
            await runtime.moderation.aclose()
        if runtime.http is not None:
            await runtime.http.aclose()
    finally:
        await runtime.store.close()


def run_serve(args: argparse.Namespace) -> int:
    return serve(settings_from(args))


def run_demo(args: argparse.Namespace) -> int:
    if args.verify:
        from holdback.app.demo import verify

        return verify(sys.stdout)
    settings = settings_from(args)
    if args.open:
        import threading
        import webbrowser

        url = f"http://{settings.host}:{settings.port}/demo"
        threading.Timer(1.5, lambda: webbrowser.open(url)).start()
    return serve(settings, banner="demo  (the leak demonstration)")


def _with_store(
    args: argparse.Namespace, work: Callable[[Store], Awaitable[T]], *, create: bool = False
) -> T:
    """Run `work(store)` on the store the flags name, and close it. Only `create` (the first
    `user add`, which makes a team's first admin) may make a new store, and it says so."""
    if create:
        opened = _new_or_existing(args)
    else:
        url, key = team_commands.existing_store(args)
        opened = team_commands.open_existing_store(url, key)

    async def run() -> T:
        store = await opened
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(run())


async def _new_or_existing(args: argparse.Namespace) -> Store:
    env = dict(os.environ)
    try:
        url, key = team_commands.existing_store(args)
    except ConfigurationError:
        data_dir = ensure_data_dir(resolve_data_dir(args.data_dir, env))
        url = resolve_database_url(args.database_url, env, data_dir)
        print(f"holdback: no store yet: creating {parse_database_url(url).describe()}",
              file=sys.stderr)  # fmt: skip
        return await Store.open(url, vault_key=load_vault_key(data_dir, env))
    return await Store.open(url, vault_key=key)


async def _user_named(store: Store, name: str) -> User:
    user = await store.get_user_by_name(name)
    if user is None:
        raise ConfigurationError(f"no user named {name!r}; create it with holdback user add")
    return user


def run_user_add(args: argparse.Namespace) -> int:
    password_hash = hash_password(team_commands.read_password())

    async def work(store: Store) -> None:
        await store.create_user(args.name, password_hash)
        await store.record_admin(team_commands.CLI_ACTOR, "user.add", args.name)

    _with_store(args, work, create=True)
    print(f"user {args.name} created", file=sys.stderr)
    return 0


# What `user disable` / `user enable` say: when the state changed, and when it already held.
_DISABLE_MESSAGES = {
    True: (
        "disabled: they cannot sign in, and their sessions and API tokens no longer work "
        "(open connections end at their next message, or within HOLDBACK_WS_RECHECK seconds)",
        "was already disabled",
    ),
    False: (
        "enabled: they can sign in again, and their API tokens that were not revoked work again",
        "was not disabled",
    ),
}


def _set_disabled(args: argparse.Namespace, disabled: bool) -> None:
    async def work(store: Store) -> bool:
        await _user_named(store, args.name)
        change = store.disable_user if disabled else store.enable_user
        _, changed = await change(args.name)
        if changed:
            action = "user.disable" if disabled else "user.enable"
            await store.record_admin(team_commands.CLI_ACTOR, action, args.name)
        return changed

    done, unchanged = _DISABLE_MESSAGES[disabled]
    print(f"user {args.name} {done if _with_store(args, work) else unchanged}", file=sys.stderr)


def run_user_disable(args: argparse.Namespace) -> int:
    _set_disabled(args, True)
    return 0


def run_user_enable(args: argparse.Namespace) -> int:
    _set_disabled(args, False)
    return 0


def run_token_create(args: argparse.Namespace) -> int:
    async def work(store: Store) -> tuple[str, ApiToken | None]:
        user = await _user_named(store, args.name)
        if user.disabled:
            raise ConfigurationError(
                f"user {args.name} is disabled; enable it first with holdback user enable"
            )
        token = await store.create_api_token(user.id, "cli")
        listed = await store.find_api_token(token)
        target = f"{args.name} {listed.id}" if listed is not None else args.name
        await store.record_admin(team_commands.CLI_ACTOR, "token.create", target)
        return token, listed

    token, listed = _with_store(args, work)
    print(token)
    if listed is not None:
        print(
            f"API token {listed.id} created for {args.name}; "
            f"revoke it with: holdback token revoke {listed.id}",
            file=sys.stderr,
        )
    return 0


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _status(token: ApiToken) -> str:
    if token.revoked_at is not None:
        return f"revoked {_when(token.revoked_at)}"
    return "user disabled" if token.user_disabled else "active"


def run_token_list(args: argparse.Namespace) -> int:
    async def work(store: Store) -> list[ApiToken]:
        user_id = (await _user_named(store, args.user)).id if args.user is not None else None
        return await store.list_api_tokens(user_id)

    tokens = _with_store(args, work)
    rows = [("ID", "USER", "NAME", "CREATED", "STATUS")]
    rows += [(t.id, t.user_name, t.name, _when(t.created_at), _status(t)) for t in tokens]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        print("  ".join([*cells, row[-1]]))
    return 0


def run_token_revoke(args: argparse.Namespace) -> int:
    async def work(store: Store) -> tuple[ApiToken, bool]:
        token, changed = await store.revoke_api_token(args.id)
        if changed:
            target = f"{token.user_name} {token.id}"
            await store.record_admin(team_commands.CLI_ACTOR, "token.revoke", target)
        return token, changed

    token, changed = _with_store(args, work)
    if changed:
        print(
            f"API token {token.id} of {token.user_name} revoked: it no longer works (open "
            "connections end at their next message, or within HOLDBACK_WS_RECHECK seconds)",
            file=sys.stderr,
        )
    else:
        print(f"API token {token.id} was already revoked", file=sys.stderr)
    return 0
