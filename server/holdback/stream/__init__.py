"""Sans-I/O stream filters for model replies: the hold-back restorer and the output guard.

Every filter here has the same shape: `feed(chunk) -> str` returns the text that is safe to
emit now, `flush() -> str` ends the stream, and `pending` is the text held back. None of them
does I/O, and for every split of the input into chunks the concatenated output is the same.
"""

from holdback.stream.filters import ReplyFilter
from holdback.stream.guard import (
    Guard,
    GuardFailedError,
    GuardMode,
    ReplyBlockedError,
    forbidden_matcher,
    screen,
)
from holdback.stream.restorer import Restorer, find_forms, restore

__all__ = [
    "Guard",
    "GuardFailedError",
    "GuardMode",
    "ReplyBlockedError",
    "ReplyFilter",
    "Restorer",
    "find_forms",
    "forbidden_matcher",
    "restore",
    "screen",
]
