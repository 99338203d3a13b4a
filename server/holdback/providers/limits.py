"""`UpstreamLimits`: the bounds on what one upstream reply may cost, each with a default.

The rule it keeps: nothing an upstream sends grows without a bound. A line and an event of
the event stream, a whole reply (its text and tool-call arguments), the reply's total time,
the wait for a final response head (interim `1xx` heads do not extend it), the response head
itself, and what a compressed body inflates to are each capped, and going past a cap ends the
reply with a named error (`holdback.errors`). Each limit is inclusive: a value of exactly the
limit is accepted, one more is refused.

Callers pass one `UpstreamLimits` in `StreamSettings(limits=...)`; the defaults are chosen for
the largest replies today's models give (a Responses API `response.completed` event repeats the
whole reply in one line, so the line and event limits sit above the reply limit).
"""

from __future__ import annotations

from dataclasses import dataclass

from holdback.errors import ConfigurationError


class InvalidUpstreamLimitError(ConfigurationError):
    """An upstream limit is not a positive number."""


@dataclass(frozen=True, slots=True)
class UpstreamLimits:
    """Bounds on one upstream reply. Sizes in characters unless named bytes; times in seconds."""

    max_line_chars: int = 2_000_000  # one event-stream line, without its line end
    max_event_chars: int = 2_000_000  # one event's data, its lines joined by LF
    max_reply_chars: int = 1_000_000  # text deltas plus tool-call arguments of one reply
    reply_timeout: float = 600.0  # from the first request to the terminal event, retries included
    head_timeout: float = 60.0  # from sending a request to its final response head
    max_header_bytes: int = 8190  # the status line; each header's name and value together
    max_headers: int = 128  # header lines in a response head
    max_inflated_bytes: int = 64 * 1024 * 1024  # a compressed body, inflated (none is asked for)

    def __post_init__(self) -> None:
        for name in (
            "max_line_chars",
            "max_event_chars",
            "max_reply_chars",
            "max_header_bytes",
            "max_headers",
            "max_inflated_bytes",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidUpstreamLimitError(f"upstream limit {name} must be a positive integer")
        for name in ("reply_timeout", "head_timeout"):
            if not getattr(self, name) > 0:
                raise InvalidUpstreamLimitError(f"upstream limit {name} must be positive seconds")
