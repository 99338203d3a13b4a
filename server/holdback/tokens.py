"""The token codec: the one place that knows what a vault token looks like.

A token is `<KIND_N>`: KIND matches `[A-Z][A-Z0-9_]*` and N is a positive integer written
without leading zeros (`<EMAIL_1>`, `<CREDIT_CARD_12>`). The part between the brackets is the
token's *id* (`EMAIL_1`). Everything else in holdback that needs to make, parse or recognise a
token goes through this module, so the syntax changes in one place.

Models do not always write a token exactly as they were given it. The forms the restorer
accepts for an id are described here too, as data (`OPENERS`, `ESCAPED_UNDERSCORE`), and the
restorer and its brute-force reference both read them from here:

- the exact token `<EMAIL_1>`, and its HTML-escaped spelling `&lt;EMAIL_1&gt;`;
- the bare id `EMAIL_1`, only where it stands on word boundaries;
- any of the above with markdown-escaped underscores (`EMAIL\\_1`), and in any letter case.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from holdback.errors import InvalidTokenError

KIND_RE = re.compile(r"[A-Z][A-Z0-9_]*\Z")
ID_RE = re.compile(r"(?P<kind>[A-Z][A-Z0-9_]*)_(?P<n>[1-9][0-9]*)\Z")
TOKEN_RE = re.compile(r"<(?P<kind>[A-Z][A-Z0-9_]*)_(?P<n>[1-9][0-9]*)>")

# Accepted spellings around an id: (opener, closer). An empty opener is the bare form, whose
# "closer" is a word boundary rather than a string.
OPENERS: tuple[tuple[str, str], ...] = (("<", ">"), ("&lt;", "&gt;"), ("", ""))
ESCAPED_UNDERSCORE = "\\_"

ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def ascii_upper(text: str) -> str:
    """Upper-case ASCII letters only: `ſ` and the Kelvin sign must never pass for `S` and `K`."""
    return text.translate(_ASCII_UPPER)


def is_word_char(ch: str) -> bool:
    """A word character, as Python's `\\w` defines it; bare ids need a non-word neighbour."""
    return ch == "_" or ch.isalnum()


def kind_label(kind: str) -> str:
    """The KIND part for a detector kind or term-list name: `credit_card` -> `CREDIT_CARD`."""
    label = re.sub(r"[^A-Z0-9]+", "_", ascii_upper(kind)).strip("_")
    if label and label[0].isdigit():
        label = "K_" + label
    if not label or not KIND_RE.match(label):
        raise InvalidTokenError(f"cannot make a token kind out of {kind!r}")
    return label


def make_id(kind: str, n: int) -> str:
    """The id `KIND_N` for the n-th value of a kind (n counts from 1)."""
    if n < 1:
        raise InvalidTokenError(f"token numbers start at 1, not {n}")
    return f"{kind_label(kind)}_{n}"


def make_token(kind: str, n: int) -> str:
    """The token `<KIND_N>` for the n-th value of a kind."""
    return f"<{make_id(kind, n)}>"


def token_id(key: str) -> str:
    """The canonical id of a vault key, which may be given as `<KIND_N>` or as `KIND_N`."""
    inner = key[1:-1] if key.startswith("<") and key.endswith(">") else key
    if not ID_RE.match(inner):
        raise InvalidTokenError(f"{key!r} is not a token of the form <KIND_N>")
    return inner


def parse_id(ident: str) -> tuple[str, int]:
    """Split a canonical id into its KIND and its number."""
    m = ID_RE.match(ident)
    if not m:
        raise InvalidTokenError(f"{ident!r} is not a token id of the form KIND_N")
    return m.group("kind"), int(m.group("n"))


def find_tokens(text: str) -> Iterable[re.Match[str]]:
    """Every exact `<KIND_N>` token in a text, valid or not for any vault."""
    return TOKEN_RE.finditer(text)


class TokenIndex:
    """What a restorer needs to know about a vault, built once: ids, values and id prefixes.

    Lookups are by canonical upper-case id and cost O(1) whatever the vault's size. The index
    is a snapshot: a vault that changes afterwards needs a new index (the server builds one per
    reply, after the user's message has been pseudonymized and before the model is called).
    """

    __slots__ = ("max_form_len", "prefixes", "values")

    def __init__(self, vault: Mapping[str, str]) -> None:
        self.values: dict[str, str] = {}
        self.prefixes: set[str] = {""}
        longest = 0
        for key, value in vault.items():
            ident = token_id(key)
            self.values[ident] = value
            for i in range(1, len(ident) + 1):
                self.prefixes.add(ident[:i])
            longest = max(longest, len(ident) + ident.count("_"))
        # `&lt;` + id with every underscore escaped + `&gt;`.
        self.max_form_len = longest + 8 if self.values else 0

    def __len__(self) -> int:
        return len(self.values)


# -- Spellings of ids in arbitrary text ----------------------------------------------------
#
# User text can hold a token spelling before the token exists (`EMAIL_1`, `email\_1`,
# `<Clients_2>`). What the restorer would take for a form of an id, if that id were in the
# vault, is found here from the same pieces it reads (`ID_CHARS`, `ESCAPED_UNDERSCORE`,
# `OPENERS`), and an id is valid only if `ID_RE` says so. Letters are matched as ASCII only
# (no `re.IGNORECASE`: under it `ſ` and the Kelvin sign would pass for `s` and `k`).

_LETTERS = "".join(sorted(c for c in ID_CHARS if c.isalpha()))
# One id as it may be spelled: a letter, then id characters and escaped underscores.
SPELLED_ID = f"[{_LETTERS}](?:[{''.join(sorted(ID_CHARS))}]|{re.escape(ESCAPED_UNDERSCORE)})*"


def _caseless(text: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in text)


# A bracketed spelling, `<EMAIL_1>` or `&lt;email\_1&gt;`: one group per opener, the spelled id.
TYPED_TOKEN_RE = re.compile(
    "|".join(f"{_caseless(o)}({SPELLED_ID}){_caseless(c)}" for o, c in OPENERS if o)
)
# The longest run that a bare spelling can start with: a letter after a non-word character (or
# at the start). Which of its prefixes stand on a word boundary is decided by `bare_ids()`.
BARE_ID_RE = re.compile(rf"(?<!\w){SPELLED_ID}")


def spelled_id(spelled: str) -> str | None:
    """The canonical id a spelling stands for (`email\\_1` -> `EMAIL_1`), or None if invalid."""
    ident = ascii_upper(spelled.replace(ESCAPED_UNDERSCORE, "_"))
    return ident if ID_RE.match(ident) else None


def find_typed_tokens(text: str) -> Iterable[tuple[int, int, str]]:
    """Every bracketed spelling of a valid id in a text: (start, end, canonical id)."""
    for m in TYPED_TOKEN_RE.finditer(text):
        ident = spelled_id(next(g for g in m.groups() if g is not None))
        if ident is not None:
            yield m.start(), m.end(), ident


_NUMBERED = re.compile(r"_[1-9]")
_SEP = rf"(?:_|{re.escape(ESCAPED_UNDERSCORE)})"
# A spelled id that ends in its number (`EMAIL_7`, `email\_7`), as a pattern for detectors that
# look for token spellings in a reply; `ID_RE` still decides which are valid ids.
SPELLED_TOKEN_ID = rf"[A-Za-z][A-Za-z0-9]*(?:{_SEP}[A-Za-z0-9]+)*?{_SEP}[1-9][0-9]*"
ID_SEPARATOR = _SEP


def token_spelling_id(spelling: str) -> str | None:
    r"""The canonical id a token spelling stands for (`&lt;email\_7&gt;` -> `EMAIL_7`)."""
    for _, _, ident in find_typed_tokens(spelling):
        return ident
    return spelled_id(spelling.strip())


def bare_ids(text: str) -> set[str]:
    """Every id of which a text holds a bare spelling on word boundaries, canonical.

    These are exactly the ids the restorer could replace in the text's bare spellings, for
    some vault: a run of id characters that starts after a non-word character, ending before
    a non-word character (an escaped underscore's `\\` is one) or at the end of the text.
    Bracketed spellings are included, since their inner id is bare on both sides.
    """
    found: set[str] = set()
    if not _NUMBERED.search(text):
        return found  # an id ends in `_N`: without one, no spelling can be an id
    for m in BARE_ID_RE.finditer(text):
        run = m.group()
        if not _NUMBERED.search(run):
            continue
        ends = [i for i in range(len(run)) if run.startswith(ESCAPED_UNDERSCORE, i)]
        if m.end() == len(text) or not is_word_char(text[m.end()]):
            ends.append(len(run))
        for end in ends:
            ident = spelled_id(run[:end])
            if ident is not None:
                found.add(ident)
    return found
