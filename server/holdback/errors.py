"""The one exception root of holdback.

Every error the package raises on purpose derives from `HoldbackError`, and is named for
what went wrong. Messages never carry an original (sensitive) value: they name kinds,
tokens, positions and causes, never the text that was protected.
"""

from __future__ import annotations


class HoldbackError(Exception):
    """Root of every error holdback raises on purpose."""


class ConfigurationError(HoldbackError):
    """A setting, flag or environment variable has a value holdback cannot use."""


class InvalidTokenError(HoldbackError, ValueError):
    """A string that was meant to be a vault token does not follow the token syntax."""


class StreamClosedError(HoldbackError):
    """A streaming filter was fed after `flush()` ended its stream."""


class FilterFailedError(HoldbackError):
    """A stage of the reply filter chain failed; the reply must stop with no raw text after it."""


def describe(exc: BaseException) -> str:
    """An exception as it may be logged: its type and where it was raised, never its message.

    Messages of third-party exceptions can quote the data they choked on (a driver quoting SQL
    parameters, a parser quoting its input); holdback's logs must never carry an original value,
    so unexpected errors are logged by type and location only.
    """
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f" at {tb.tb_frame.f_code.co_filename.rsplit('/', 2)[-1]}:{tb.tb_lineno}" if tb else ""
    return f"{type(exc).__module__}.{type(exc).__qualname__}{where}"
