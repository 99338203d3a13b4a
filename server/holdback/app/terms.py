"""Term files: UTF-8, one term per line, `#` starts a comment; the file's stem names the kind.

`clients.txt` gives the kind `clients`, whose tokens are `<CLIENTS_1>`, `<CLIENTS_2>`, ...
A file that cannot be read, is not UTF-8, or whose name makes no token kind is refused with a
message that names the file and the line, never a term.
"""

from __future__ import annotations

from pathlib import Path

from holdback.errors import ConfigurationError, InvalidTokenError
from holdback.tokens import kind_label


class TermFileError(ConfigurationError):
    """A term file cannot be used."""


def read_terms(path: Path) -> list[str]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TermFileError(
            f"cannot read term file {path}: {exc.strerror or type(exc).__name__}"
        ) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad_line = raw[: exc.start].count(b"\n") + 1
        raise TermFileError(f"term file {path} is not UTF-8 (line {bad_line})") from None
    terms = []
    for line in text.splitlines():
        term = line.split("#", 1)[0].strip()
        if term:
            terms.append(term)
    return terms


def kind_of(path: Path) -> str:
    kind = path.stem.strip().lower()
    try:
        kind_label(kind)
    except InvalidTokenError:
        raise TermFileError(
            f"term file {path}: its name makes no token kind; use letters and digits"
        ) from None
    return kind
