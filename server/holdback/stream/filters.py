"""One reply filter per channel: the restorer, then the guard.

The rule it keeps: the guard screens exactly what the viewer will read. The restorer puts the
vault's values back and says which spans it restored; the guard screens the restored text
through the channel's decoded projection, exempting only those exact spans, and keeps two
outputs: what goes on the wire, and what may be stored (the same text with every restored or
vault value as its token). Both stages are chunk-invariant, so their composition is too. What
the pair holds back is the restorer's `pending` after the guard's.

Any failure inside the chain poisons the filter: it raises `FilterFailedError` (or the guard's
`ReplyBlockedError` in block mode) and refuses every later call, so no raw text can follow.
"""

from __future__ import annotations

from holdback.errors import FilterFailedError, HoldbackError
from holdback.stream.guard import Guard
from holdback.stream.restorer import Piece, Restorer

__all__ = ["ReplyFilter"]


class ReplyFilter:
    """restorer -> guard, for one channel (or one tool call's arguments)."""

    def __init__(self, guard: Guard | None, restorer: Restorer) -> None:
        self.guard = guard
        self.restorer = restorer
        if guard is not None:
            guard.after_restorer()
        self._failed = False
        self._stored: list[str] = []  # without a guard: the restorer's input, as it was
        self._taken = 0  # how many pieces of the stored text `take_stored` gave

    @property
    def screened(self) -> str:
        """Everything released so far as it may be stored: screened and tokenized."""
        return self.guard.stored if self.guard is not None else "".join(self._stored)

    def take_stored(self) -> str:
        """The stored text released since the last call (what `screened` gained)."""
        pieces = self.guard.stored_pieces if self.guard is not None else self._stored
        taken, self._taken = self._taken, len(pieces)
        return "".join(pieces[taken:])

    @property
    def pending(self) -> str:
        held = self.guard.pending if self.guard is not None else ""
        return held + self.restorer.pending

    def feed(self, chunk: str) -> str:
        self._check()
        try:
            return self._screen(self.restorer.feed_pieces(chunk))
        except Exception as exc:
            raise self._failure(exc) from None

    def flush(self) -> str:
        self._check()
        try:
            out = self._screen(self.restorer.flush_pieces())
            return out + (self.guard.flush() if self.guard is not None else "")
        except Exception as exc:
            raise self._failure(exc) from None

    def _screen(self, pieces: list[Piece]) -> str:
        if self.guard is not None:
            return self.guard.feed_pieces(pieces)
        self._stored.extend(text if ident is None else f"<{ident}>" for text, ident in pieces)
        return "".join(text for text, _ in pieces)

    def _check(self) -> None:
        if self._failed:
            raise FilterFailedError("the reply filter failed earlier; the reply cannot go on")

    def _failure(self, exc: Exception) -> Exception:
        """Poison the filter; what to raise: holdback's own error as it is, any other as a
        filter failure that names only its type (its message may quote the text)."""
        self._failed = True
        if isinstance(exc, HoldbackError):
            return exc
        return FilterFailedError(
            f"the reply filter failed ({type(exc).__name__}); the reply stops here"
        )
