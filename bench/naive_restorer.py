"""The baseline the restorer is measured against: a naive rolling-buffer restorer.

On every step it compares each vault entry with the head of its buffer, replaces an entry that
matches, and holds while any entry starts with the buffered text. It knows only the exact
`<KIND_N>` spelling. Its cost per character grows with the vault; that is what it is here to show.
"""

from __future__ import annotations

from collections.abc import Mapping


class NaiveRestorer:
    def __init__(self, vault: Mapping[str, str]) -> None:
        self.vault = dict(vault)
        self.buffer = ""

    @property
    def pending(self) -> str:
        return self.buffer

    def feed(self, chunk: str) -> str:
        self.buffer += chunk
        out: list[str] = []
        while self.buffer:
            head = self.buffer
            matched: tuple[str, str] | None = None
            hold = False
            for token, value in self.vault.items():
                if head.startswith(token):
                    if matched is None or len(token) > len(matched[0]):
                        matched = (token, value)
                elif token.startswith(head):
                    hold = True
            if hold:
                break
            if matched is not None:
                out.append(matched[1])
                self.buffer = head[len(matched[0]) :]
            else:
                out.append(head[0])
                self.buffer = head[1:]
        return "".join(out)

    def flush(self) -> str:
        out: list[str] = []
        while self.buffer:
            head = self.buffer
            matched = max(
                ((t, v) for t, v in self.vault.items() if head.startswith(t)),
                key=lambda tv: len(tv[0]),
                default=None,
            )
            if matched is not None:
                out.append(matched[1])
                self.buffer = head[len(matched[0]) :]
            else:
                out.append(head[0])
                self.buffer = head[1:]
        return "".join(out)
