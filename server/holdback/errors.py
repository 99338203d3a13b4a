"""The one exception root of holdback, and the one table of error codes a client can see.

Every error the package raises on purpose derives from `HoldbackError`, and is named for
what went wrong. Messages never carry an original (sensitive) value: they name kinds,
tokens, positions and causes, never the text that was protected.

Each error class carries its wire code (`code`); `WIRE_ERRORS` gives every code the fixed
message a client is shown for it. Exception messages themselves never reach a client: an error
frame or an HTTP error body is always a code and our own sentence for it, so nothing an
upstream or a library wrote can travel in one.
"""

from __future__ import annotations

from typing import ClassVar

# code -> the fixed message a client sees. The only place these sentences live.
WIRE_ERRORS: dict[str, str] = {
    "bad_frame": "the frame is not valid: send a JSON object as a text frame",
    "unknown_type": "unknown frame type; expected user_message or cancel",
    "missing_field": "the frame lacks a required field",
    "frame_too_large": "the frame is larger than this server accepts",
    "not_found": "no such conversation",
    "busy": "a reply is already streaming in this conversation",
    "rate_limited": "too many messages; wait a moment and try again",
    "upstream_unreachable": "the model provider could not be reached",
    "upstream_auth": "the model provider refused this server's credentials",
    "upstream_rate_limited": "the model provider is rate limiting this server; try again later",
    "upstream_error": "the model provider reported an error",
    "upstream_protocol": "the model provider sent a reply this server cannot read",
    "upstream_timeout": "the model provider took too long to answer",
    "blocked": "the reply was stopped: it contained text that may not be shown",
    "filter_failed": "the reply was stopped: a safety filter failed",
    "storage_failed": "the database could not store this; nothing was lost that was accepted",
    "internal": "the server failed; what was sent so far is kept",
    # The bounds of docs/limits.md: what a client that passes one is told.
    "too_many_frames": "too many frames on this connection; it is closed",
    "session_ended": "the session has ended (signed out or revoked); sign in again",
    "body_too_large": "the request body is larger than this route accepts",
    "body_timeout": "the request body did not arrive in time",
    "login_throttled": "too many failed sign-ins; wait before trying again",
    "login_busy": "the server is checking too many sign-ins; try again in a moment",
}


def wire_message(code: str) -> str:
    """The fixed message for a wire code (`internal`'s for a code this table lacks)."""
    return WIRE_ERRORS.get(code, WIRE_ERRORS["internal"])


class HoldbackError(Exception):
    """Root of every error holdback raises on purpose."""

    code: ClassVar[str] = "internal"


class ConfigurationError(HoldbackError):
    """A setting, flag or environment variable has a value holdback cannot use."""


class InvalidTokenError(HoldbackError, ValueError):
    """A string that was meant to be a vault token does not follow the token syntax."""


class StreamClosedError(HoldbackError):
    """A streaming filter was fed after `flush()` ended its stream."""

    code = "filter_failed"


class FilterFailedError(HoldbackError):
    """A stage of the reply filter chain failed; the reply must stop with no raw text after it."""

    code = "filter_failed"


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
