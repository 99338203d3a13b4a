"""The `holdback` command line: one entry point, one subcommand per job.

Every handler returns an exit code. Errors that holdback raises on purpose (`HoldbackError`)
are printed as one clear line on stderr, with no traceback, and exit with status 2; nothing
the user typed as a sensitive value is ever echoed. (`serve`, `db` and `vault` say why they
could not run themselves, as `holdback: error: ...`, and exit with 1: docs/storage.md.)

Before anything else runs, every log record is made with its URLs masked
(`holdback.providers.logmask`): no log line of any command, ours or a library's, carries a
URL's credentials or query.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from holdback import __version__
from holdback.errors import HoldbackError
from holdback.providers.logmask import install_url_masking

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="holdback",
        description="Self-hosted LLM chat that never shows the model, or the wire, "
        "what it must not see.",
    )
    parser.add_argument("--version", action="version", version=f"holdback {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _registrars():
        register(subparsers)
    return parser


def _registrars() -> list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]]:
    """The modules that contribute subcommands."""
    from holdback.app import commands as app_commands
    from holdback.app import detector_commands, team_commands
    from holdback.store import commands as store_commands

    return [
        app_commands.register,
        team_commands.register,
        detector_commands.register,
        store_commands.register,
    ]


def main(argv: Sequence[str] | None = None) -> int:
    install_url_masking()
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return handler(args)
    except HoldbackError as exc:
        print(f"holdback: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
