"""What `holdback serve` says as it starts: the one-line error, the warnings and the banner.

The rules:
- Every reason a server cannot start (a setting, the data directory, the database, a term
  file, a model, the address it listens on) is one line on stderr, `holdback: error: ...`,
  and exit status 1, with no traceback unless `--debug` / `HOLDBACK_DEBUG=1`. An error
  holdback did not expect is named by its type and place only (`errors.describe`), since its
  message could quote data; `--debug` prints it whole.
- The listening socket is bound before the application starts, so an address in use is such
  a line, and nothing says "ready" first.
- A model that needs an API key and has none is one warning line at start, naming the
  variable and never a value (`models_api.missing_keys`).
- The banner says where the server listens, its models (the default first), where its data
  lives (a database URL's password masked) and how users sign in.
"""

from __future__ import annotations

import errno
import socket
import sys
import traceback

from holdback.app.models_api import DEMO_LABEL, label, missing_keys
from holdback.app.settings import Settings
from holdback.errors import ConfigurationError, describe
from holdback.store.engine import parse_database_url
from holdback.store.locations import resolve_data_dir, resolve_database_url


class AddressUnavailableError(ConfigurationError):
    """The server cannot listen on its host and port (in use, not this machine's, privileged)."""


def fail(exc: BaseException, *, debug: bool) -> int:
    """Say why the server could not start, in one line (after the traceback, with `debug`)."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    if isinstance(exc, ConfigurationError) or type(exc).__module__.startswith("holdback"):
        reason = str(exc)
    else:
        reason = f"unexpected {describe(exc)}"
        if not debug:
            reason += " (run with --debug or HOLDBACK_DEBUG=1 to see the traceback)"
    print(f"holdback: error: {reason}", file=sys.stderr, flush=True)
    return 1


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bind_error(exc: OSError, host: str, port: int) -> AddressUnavailableError:
    where = _address(host, port)
    if isinstance(exc, socket.gaierror):
        return AddressUnavailableError(
            f"cannot listen on {where}: {host!r} is not an address of this machine "
            "(--host / HOLDBACK_HOST)"
        )
    if exc.errno == errno.EADDRINUSE:
        return AddressUnavailableError(
            f"cannot listen on {where}: the port is already in use (is another holdback "
            "running?); stop it or choose another port with --port / HOLDBACK_PORT"
        )
    if exc.errno == errno.EACCES:
        return AddressUnavailableError(
            f"cannot listen on {where}: permission denied (ports below 1024 need privileges); "
            "choose another with --port / HOLDBACK_PORT"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return AddressUnavailableError(
            f"cannot listen on {where}: that address is not this machine's (--host / HOLDBACK_HOST)"
        )
    reason = exc.strerror or type(exc).__name__
    return AddressUnavailableError(f"cannot listen on {where}: {reason}")


def bind(settings: Settings) -> list[socket.socket]:
    """The listening sockets for the server's host and port, as asyncio would make them (every
    address the host names, IPv6 sockets IPv6-only, addresses reusable at once)."""
    host, port = settings.host.strip("[]"), settings.port
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise _bind_error(exc, host, port) from None
    addresses = list(dict.fromkeys((info[0], info[4]) for info in infos))
    if port == 0:
        addresses = addresses[:1]  # one free port; a second address would get another
    sockets: list[socket.socket] = []
    try:
        for family, address in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.set_inheritable(True)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise _bind_error(exc, host, port) from None
    return sockets


def key_warnings(settings: Settings) -> list[str]:
    """`holdback: warning: ...` lines for models whose API key is not set."""
    return [f"holdback: warning: {w}" for w in missing_keys(settings.models, settings.env)]


def data_location(settings: Settings) -> str:
    """Where the data lives: the data directory (the vault key's, and by default the
    database's) and the database, a URL's password and query masked."""
    env = dict(settings.env)
    data_dir = resolve_data_dir(settings.data_dir, env).absolute()
    target = parse_database_url(resolve_database_url(settings.database_url, env, data_dir))
    if target.is_sqlite:
        database = f"the SQLite file {target.sqlite_path}"
    else:
        url = target.url.set(query={}) if target.url.query else target.url
        database = url.render_as_string(hide_password=True) + ("?***" if target.url.query else "")
    if env.get("HOLDBACK_VAULT_KEY", "").strip():
        database += ", the vault key from HOLDBACK_VAULT_KEY"
    return f"{data_dir} (database: {database})"


def _auth(settings: Settings) -> str:
    if settings.auth == "password":
        return "password (users sign in; add one with: holdback user add NAME)"
    return "none (no sign-in: only this machine can connect)"


def _models(settings: Settings) -> str:
    """`demo (offline, no LLM)`, or `openai:a (the default), demo (offline, no LLM), ...`."""
    shown = []
    for n, spec in enumerate(settings.models):
        notes = ["offline, no LLM"] if label(spec, settings.env) == DEMO_LABEL else []
        if n == 0 and len(settings.models) > 1:
            notes.append("the default")
        shown.append(f"{spec} ({'; '.join(notes)})" if notes else spec)
    return ", ".join(shown)


def banner(settings: Settings, url: str, suffix: str = "") -> str:
    """What the server prints once it listens: its details, then the line with its URL."""
    lines = [
        f"  {'models:' if len(settings.models) > 1 else 'model: '} {_models(settings)}",
        f"  data:   {data_location(settings)}",
        f"  auth:   {_auth(settings)}",
        f"holdback is serving on {url}/{suffix}",
    ]
    return "\n".join(lines)


def listening_url(settings: Settings, sockets: list[socket.socket]) -> str:
    """`http://host:port`, the port the first socket got (for --port 0)."""
    port = sockets[0].getsockname()[1] if sockets else settings.port
    host = settings.host.strip("[]")
    return f"http://{_address(host, port)}"
