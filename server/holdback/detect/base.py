"""What a detector is, and the streaming contract every detector keeps.

A detector looks at *normalized* text (see `normalize`) and proposes findings. Its decisions are
made per start position: whether a finding starts at position `s`, and where it ends, depends
only on a little context before `s` and on the text from `s` on. That is what lets the output
guard screen a stream in pieces and still agree, for every split, with screening it whole.

`candidates(text, pos, endpos, partial=...)` reports, for start positions in `pos..endpos`:

- the findings it has *decided*: validated, and unable to change whatever text follows;
- `hold`: the first start position whose outcome is still open because the text ends at
  `endpos` (a partial match that reaches the end, or a complete one that touches it and could
  grow). Without `partial`, the text really ends at `endpos` and nothing is open.

A detector that cannot say what is still open (a statistical NER model, say) can keep the
contract by holding from the start of the last sentence it has seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Finding:
    """A sensitive value at `start..end` (end exclusive) of the text that was searched."""

    start: int
    end: int
    kind: str
    value: str

    def __len__(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Candidates:
    findings: list[Finding]
    hold: int


class Detector(Protocol):
    """The extension point for new kinds of finding (an NER person-name detector, say)."""

    @property
    def kinds(self) -> tuple[str, ...]: ...

    def candidates(self, text: str, pos: int, endpos: int, *, partial: bool) -> Candidates: ...
