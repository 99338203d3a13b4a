"""Sentence windows: one channel's screened, tokenized text cut where a sentence or clause
ends, or at a bound.

The rules:
- A window ends just after a terminator (`TERMINATORS`: `.`, `!`, `?`, `;`, `:`, `…` and
  their full-width forms) that whitespace follows (the whitespace goes with it), or just
  after a newline.
- A window that reaches `bound` characters without such an end is cut at its last
  whitespace, else at the bound; never inside a token (`tokens.TOKEN_RE`): a token that
  would straddle the cut goes whole to the next window.
- Windows are fixed by the text, never by where chunks end: every cut is decided from the
  text up to it and at most one character after it (a terminator waits for the character
  that follows). `feed` then `flush` gives the same windows for every split of the text.
"""

from __future__ import annotations

from holdback.tokens import TOKEN_RE

TERMINATORS = frozenset(".!?;:…。！？；：")
DEFAULT_BOUND = 400
_LONGEST_TOKEN = 64  # a token is far shorter: a cut this far from a `<` cannot split one


class Windows:
    def __init__(self, bound: int = DEFAULT_BOUND) -> None:
        if bound < 2 * _LONGEST_TOKEN:
            raise ValueError(f"a window bound is at least {2 * _LONGEST_TOKEN} characters")
        self.bound = bound
        self._text = ""

    @property
    def pending(self) -> str:
        """The text of the window still open."""
        return self._text

    @property
    def tentative(self) -> str | None:
        """The open window's text if it ends with a terminator: the window it will be (but
        for its trailing whitespace) if whitespace comes next, so it can be asked about
        before that is known."""
        text = self._text
        return text if text and text[-1] in TERMINATORS else None

    def feed(self, text: str) -> list[str]:
        """The windows `text` completes, in order."""
        self._text += text
        out: list[str] = []
        while True:
            cut = self._cut(self._text)
            if cut is None:
                return out
            out.append(self._text[:cut])
            self._text = self._text[cut:]

    def flush(self) -> str:
        """The last window: whatever is left ("" if nothing)."""
        rest, self._text = self._text, ""
        return rest

    def _cut(self, text: str) -> int | None:
        limit = min(len(text) - 1, self.bound)  # a terminator needs the character after it
        for i in range(limit):
            c = text[i]
            if c == "\n":
                return i + 1
            if c in TERMINATORS and text[i + 1].isspace():
                return i + 2
        if len(text) <= self.bound + _LONGEST_TOKEN:
            return None  # no end yet, and a bound cut needs the text past it (a token)
        return _bounded(text[: self.bound + _LONGEST_TOKEN], self.bound)


def _bounded(text: str, bound: int) -> int:
    """Where a window of `bound` characters with no sentence end is cut: after its last
    whitespace, else at the bound; a token straddling the cut goes whole to the next one."""
    head = text[:bound]
    space = max(head.rfind(" "), head.rfind("\t"))
    cut = space + 1 if space > 0 else bound
    for m in TOKEN_RE.finditer(text):
        if m.start() < cut < m.end():
            return m.start() if m.start() > 0 else m.end()
        if m.start() >= cut:
            break
    return cut
