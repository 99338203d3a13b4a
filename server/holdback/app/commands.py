"""`holdback serve`, `holdback demo`, `holdback user add` and `holdback token create`.

Each reads the same flags and `HOLDBACK_*` variables as the server, so they find the same
database and vault key. Passwords come from standard input (one line) or a prompt, never from
the command line, and are stored as argon2id hashes.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import getpass
import logging
import os
import re
import sys
from typing import Any

import uvicorn

from holdback.app.application import create_app
from holdback.app.auth import hash_password
from holdback.app.http_server import uvicorn_config
from holdback.app.settings import Settings, resolve
from holdback.errors import ConfigurationError
from holdback.store.crypto import load_vault_key
from holdback.store.locations import ensure_data_dir, resolve_data_dir, resolve_database_url
from holdback.store.repository import Store


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    serve = subparsers.add_parser("serve", help="run the holdback server")
    _server_flags(serve)
    serve.set_defaults(handler=run_serve)

    demo = subparsers.add_parser(
        "demo", help="run the server and print the leak demonstration's URL"
    )
    _server_flags(demo)
    demo.add_argument("--open", action="store_true", help="also open it in a browser")
    demo.set_defaults(handler=run_demo)

    user = subparsers.add_parser("user", help="manage users (for --auth password)")
    user_commands = user.add_subparsers(dest="user_command", metavar="COMMAND", required=True)
    add = user_commands.add_parser(
        "add", help="create a user; the password is read from stdin or a prompt"
    )
    add.add_argument("name")
    _store_flags(add)
    add.set_defaults(handler=run_user_add)

    token = subparsers.add_parser("token", help="manage API tokens")
    token_commands = token.add_subparsers(dest="token_command", metavar="COMMAND", required=True)
    create = token_commands.add_parser("create", help="print a new API token for a user")
    create.add_argument("name", help="the user the token acts for")
    _store_flags(create)
    create.set_defaults(handler=run_token_create)


def _store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", help="database URL (HOLDBACK_DATABASE_URL)")
    parser.add_argument("--data-dir", help="data directory (HOLDBACK_DATA_DIR)")


def _server_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to bind (HOLDBACK_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (HOLDBACK_PORT, default 8000)")
    parser.add_argument(
        "--model",
        help="demo | openai:MODEL | openai-responses:MODEL | anthropic:MODEL (HOLDBACK_MODEL)",
    )
    _store_flags(parser)
    parser.add_argument("--auth", choices=["none", "password"], help="HOLDBACK_AUTH")
    parser.add_argument(
        "--sensitive-terms", nargs="+", metavar="FILE", help="HOLDBACK_SENSITIVE_TERMS"
    )
    parser.add_argument(
        "--forbidden-terms", nargs="+", metavar="FILE", help="HOLDBACK_FORBIDDEN_TERMS"
    )
    parser.add_argument("--guard-mode", choices=["redact", "block"], help="HOLDBACK_GUARD_MODE")


def settings_from(args: argparse.Namespace) -> Settings:
    return resolve(
        host=args.host,
        port=args.port,
        model=args.model,
        database_url=args.database_url,
        data_dir=args.data_dir,
        auth=args.auth,
        sensitive_terms=args.sensitive_terms,
        forbidden_terms=args.forbidden_terms,
        guard_mode=args.guard_mode,
    )


# A URL's userinfo (user:password@) and its query (?key=...), in any logged text.
_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/?#]*@)?([^\s?#]*)(\?[^\s#]*)?")


def mask_urls(text: str) -> str:
    """`text` with every URL's credentials and query replaced by `***`."""

    def mask(match: re.Match[str]) -> str:
        scheme, userinfo, rest, query = match.groups()
        return scheme + ("***@" if userinfo else "") + rest + ("?***" if query else "")

    return _URL.sub(mask, text)


class MaskUrls(logging.Filter):
    """Log records, ours or a library's (httpx logs every request's URL), with URLs masked:
    a base URL may carry a key in its userinfo or query, and a log must never hold it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and "://" in record.msg:
            record.msg = mask_urls(record.msg)
        if isinstance(record.args, tuple) and any("://" in str(a) for a in record.args):
            record.args = tuple(mask_urls(str(a)) if "://" in str(a) else a for a in record.args)
        return True


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(MaskUrls())


def _uvicorn_logging() -> dict[str, Any]:
    """uvicorn's own log configuration, with URLs masked on its handlers too."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config.setdefault("filters", {})["mask_urls"] = {"()": MaskUrls}
    for handler in config["handlers"].values():
        handler.setdefault("filters", []).append("mask_urls")
    return config


def serve(settings: Settings, *, banner: str = "") -> int:
    _configure_logging()
    app = create_app(settings)
    config = uvicorn_config(app, settings, log_level="info", log_config=_uvicorn_logging())
    server = uvicorn.Server(config)

    async def main() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn has no event)
            await asyncio.sleep(0.05)
        if server.started:
            host = settings.host if ":" not in settings.host else f"[{settings.host}]"
            port = (
                server.servers[0].sockets[0].getsockname()[1] if server.servers else settings.port
            )
            print(f"holdback is serving on http://{host}:{port}/{banner}", flush=True)
        await task

    asyncio.run(main())
    return 0 if server.started else 1


def run_serve(args: argparse.Namespace) -> int:
    return serve(settings_from(args))


def run_demo(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.open:
        import threading
        import webbrowser

        url = f"http://{settings.host}:{settings.port}/demo"
        threading.Timer(1.5, lambda: webbrowser.open(url)).start()
    return serve(settings, banner="demo  (the leak demonstration)")


async def _open_store(args: argparse.Namespace) -> Store:
    env = dict(os.environ)
    data_dir = ensure_data_dir(resolve_data_dir(args.data_dir, env))
    url = resolve_database_url(args.database_url, env, data_dir)
    return await Store.open(url, vault_key=load_vault_key(data_dir, env))


def _read_password() -> str:
    if not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            raise ConfigurationError("the two passwords differ")
    if len(password) < 8:
        raise ConfigurationError("the password must have at least 8 characters")
    return password


def run_user_add(args: argparse.Namespace) -> int:
    password_hash = hash_password(_read_password())

    async def work() -> None:
        store = await _open_store(args)
        try:
            await store.create_user(args.name, password_hash)
        finally:
            await store.close()

    asyncio.run(work())
    print(f"user {args.name} created", file=sys.stderr)
    return 0


def run_token_create(args: argparse.Namespace) -> int:
    async def work() -> str:
        store = await _open_store(args)
        try:
            user = await store.get_user_by_name(args.name)
            if user is None:
                raise ConfigurationError(
                    f"no user named {args.name!r}; create it with holdback user add"
                )
            return await store.create_api_token(user.id, "cli")
        finally:
            await store.close()

    print(asyncio.run(work()))
    return 0
