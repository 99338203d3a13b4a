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
