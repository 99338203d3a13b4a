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
    "unknown_type": "unknown frame type; expected user_message, edit, regenerate, continue, "
    "cancel, watch or resume",
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
    "upstream_too_large": "the model provider's reply exceeded this server's size limits",
    "blocked": "the reply was stopped: it contained text that may not be shown",
    "filter_failed": "the reply was stopped: a safety filter failed",
    # Policy moderation (`holdback.moderation`, docs/moderation.md).
    "moderation_blocked": "the reply was stopped: the policy check did not allow it",
    "moderation_failed": "the reply was stopped: the policy check failed or did not answer "
    "in time, so nothing unchecked was shown",
    "storage_failed": "the database could not store this; nothing was lost that was accepted",
    "vault_full": "this conversation holds as many protected values as this server allows; "
    "the message was not accepted: start a new conversation",
    "internal": "the server failed; what was sent so far is kept",
    # The bounds of docs/limits.md: what a client that passes one is told.
    "too_many_frames": "too many frames on this connection; it is closed",
    "session_ended": "the session has ended (signed out or revoked); sign in again",
    "body_too_large": "the request body is larger than this route accepts",
    "body_timeout": "the request body did not arrive in time",
    "login_throttled": "too many failed sign-ins; wait before trying again",
    "login_busy": "the server is checking too many sign-ins; try again in a moment",
    "forbidden": "only an admin may do this",
    "message_not_found": "no such message in a conversation you may continue",
    "not_editable": "that message cannot be used so: edit a message you wrote, regenerate a "
    "reply, continue a reply cut off by its length limit",
    "not_resumable": "that reply can no longer be resumed here; read it back over HTTP",
    "unknown_model": "no such model on this server; GET /api/models lists them",
    "too_many_watchers": "too many connections watch this conversation, or this connection "
    "watches too many; close one first",
    # Documents (`app/uploads.py`, `app/extract.py`; bounds in docs/limits.md).
    "bad_upload": "send multipart/form-data with exactly one file, in the field 'file'",
    "upload_too_large": "the file is larger than this server accepts",
    "upload_too_long": "the file holds more text than this server accepts (characters or pages)",
    "unsupported_type": "this type of file cannot be attached; attach text, Markdown, CSV, "
    "JSON, source code, PDF or DOCX",
    "unreadable_file": "the file could not be read: it is not UTF-8 text, or it is damaged",
    "encrypted_file": "the file is encrypted (password-protected); attach an unprotected copy",
    "empty_file": "no text was found in the file (a scanned PDF holds only images)",
    "too_many_uploads": "too many files are waiting to be sent; send or remove some first",
    "upload_busy": "the server is reading too many files; try again in a moment",
    "unknown_attachment": "an attached file is unknown or has expired; attach it again",
    "too_many_attachments": "too many files are attached to this message",
    "attachments_too_long": "the attached files hold more text than one message may carry",
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


class UpstreamError(HoldbackError):
    """The model provider failed in a way holdback names (`holdback.providers`).

    Raised inside the providers only: the upstream pump turns each into one `StreamError`
    event with this `code`, so a provider never raises for an upstream fault. `retryable`: the
    same request may work later. Messages are holdback's own sentences: they never quote the
    bytes the upstream sent, a header, a URL's credentials or query, or request text.
    """

    code = "upstream_error"
    retryable: ClassVar[bool] = False


class UpstreamUnreachableError(UpstreamError):
    """No connection could be made: refused, unresolvable, TLS or proxy failure."""

    code = "upstream_unreachable"
    retryable = True


class UpstreamConnectTimeoutError(UpstreamUnreachableError):
    """No connection was made within the connect timeout."""


class UpstreamClientClosedError(UpstreamUnreachableError):
    """A request was made through an upstream client after it was closed."""

    retryable = False


class UpstreamTimeoutError(UpstreamError):
    """The upstream sent nothing for longer than the stall timeout."""

    code = "upstream_timeout"
    retryable = True


class UpstreamHeadTimeoutError(UpstreamTimeoutError):
    """No final response head within the head timeout; interim (1xx) heads do not extend it."""


class UpstreamReplyTimeoutError(UpstreamTimeoutError):
    """The reply ran past its total time limit, however steadily it was streaming."""


class UpstreamDisconnectedError(UpstreamError):
    """The connection closed or was reset before the response ended."""

    code = "upstream_protocol"
    retryable = True


class UpstreamTruncatedBodyError(UpstreamDisconnectedError):
    """The connection ended inside a body its framing (chunks, Content-Length) said goes on."""


class UpstreamFramingError(UpstreamError):
    """The response is not valid HTTP/1.1; retrying the same upstream is not expected to help."""

    code = "upstream_protocol"


class MalformedStatusLineError(UpstreamFramingError):
    """The response does not open with an HTTP/1.x status line."""


class MalformedHeaderError(UpstreamFramingError):
    """A response header line is malformed, or the headers' framing is ambiguous."""


class BadChunkError(UpstreamFramingError):
    """A chunk size line is malformed, or chunk data is longer than its size line says."""


class UnsupportedFramingError(UpstreamFramingError):
    """A transfer coding other than chunked, or a protocol switch nobody asked for."""


class BadContentEncodingError(UpstreamFramingError):
    """A compressed body that does not decode, or a content coding holdback does not read."""


class UpstreamTooLargeError(UpstreamError):
    """Part of the upstream's reply exceeded one of holdback's size limits."""

    code = "upstream_too_large"


class UpstreamHeadTooLargeError(UpstreamTooLargeError):
    """The response head (status line and headers) exceeds the head limits."""


class SSELineTooLongError(UpstreamTooLargeError):
    """An event-stream line exceeds the line limit, in characters."""


class SSEEventTooLargeError(UpstreamTooLargeError):
    """An event-stream event's data exceeds the event limit, in characters."""


class UpstreamReplyTooLargeError(UpstreamTooLargeError):
    """A reply's text and tool-call arguments exceed the reply limit, in characters."""


class UpstreamInflatedTooLargeError(UpstreamTooLargeError):
    """A compressed body inflated past the inflation limit, in bytes."""


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
