"""One reply filter per channel: the guard, then the restorer.

The guard screens the model's tokenized text; what it releases goes through the restorer, which
puts the original values back. Both are chunk-invariant, so their composition is too: the
restorer's output for any chunking of its input is the same, and the guard's total output is
the same for any chunking of the reply. What the pair holds back is the restorer's `pending`
followed by the guard's.

Any failure inside the chain poisons the filter: it raises `FilterFailedError` (or the guard's
`ReplyBlockedError` in block mode) and refuses every later call, so no raw text can follow.
"""

from __future__ import annotations

from collections.abc import Callable

from holdback.errors import FilterFailedError, HoldbackError
from holdback.stream.guard import Guard
from holdback.stream.restorer import Restorer

__all__ = ["ReplyFilter"]


class ReplyFilter:
    """guard -> restorer, for one channel (or one tool call's arguments)."""

    def __init__(self, guard: Guard | None, restorer: Restorer) -> None:
        self.guard = guard
        self.restorer = restorer
        self._failed = False
        self._screened: list[str] = []

    def record(self, screened: str) -> None:
        """Add text the guard released outside `feed()` (a blocked reply's safe prefix)."""
        self._screened.append(screened)

    @property
    def screened(self) -> str:
        """Everything the guard has released so far: the tokenized text that may be stored."""
        return "".join(self._screened)

    @property
    def pending(self) -> str:
        held = self.restorer.pending
        return held + self.guard.pending if self.guard is not None else held

    def feed(self, chunk: str) -> str:
        return self._safely(lambda: self.restorer.feed(self._screen(chunk)))

    def flush(self) -> str:
        def finish() -> str:
            screened = self.guard.flush() if self.guard is not None else ""
            self._screened.append(screened)
            return self.restorer.feed(screened) + self.restorer.flush()

        return self._safely(finish)

    def _screen(self, chunk: str) -> str:
        screened = self.guard.feed(chunk) if self.guard is not None else chunk
        self._screened.append(screened)
        return screened

    def _safely(self, step: Callable[[], str]) -> str:
        if self._failed:
            raise FilterFailedError("the reply filter failed earlier; the reply cannot go on")
        try:
            return step()
        except HoldbackError:
            self._failed = True
            raise
        except Exception as exc:
            self._failed = True
            raise FilterFailedError(
                f"the reply filter failed ({type(exc).__name__}); the reply stops here"
            ) from None
