"""A brute-force reference restorer: simple, obviously correct, and slow.

At every position it tries every spelling of every vault id (each opener, every choice of
escaped underscores) and keeps the longest that fits; bare spellings also need non-word
characters (or the text's ends) on both sides. The fast restorer must agree with it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from holdback.tokens import ESCAPED_UNDERSCORE, OPENERS, ascii_upper, is_word_char, token_id

Form = tuple[str, str, bool]  # (upper-case spelling, id, is bare)


def spellings(ident: str) -> list[str]:
    """Every way of writing an id with some underscores markdown-escaped."""
    parts = ident.split("_")
    out = []
    for seps in itertools.product(["_", ESCAPED_UNDERSCORE], repeat=len(parts) - 1):
        out.append(parts[0] + "".join(s + p for s, p in zip(seps, parts[1:], strict=True)))
    return out


def all_forms(vault: Mapping[str, str]) -> list[Form]:
    forms = []
    for key in vault:
        ident = token_id(key)
        for spelled in spellings(ident):
            for opener, closer in OPENERS:
                forms.append((ascii_upper(opener + spelled + closer), ident, opener == ""))
    return forms


def reference_restore(text: str, vault: Mapping[str, str]) -> str:
    values = {token_id(k): v for k, v in vault.items()}
    forms = all_forms(vault)
    out = []
    i = 0
    while i < len(text):
        best: tuple[int, str] | None = None
        for form, ident, bare in forms:
            end = i + len(form)
            if ascii_upper(text[i:end]) != form:
                continue
            if bare and (
                (i > 0 and is_word_char(text[i - 1]))
                or (end < len(text) and is_word_char(text[end]))
            ):
                continue
            if best is None or len(form) > best[0]:
                best = (len(form), ident)
        if best is None:
            out.append(text[i])
            i += 1
        else:
            out.append(values[best[1]])
            i += best[0]
    return "".join(out)


def could_become_form(text: str, start: int, forms: list[Form]) -> bool:
    """Whether text[start:] (the end of the input so far) could still become a form.

    Either it is a proper prefix of some spelling, or it is a complete bare spelling at the
    very end, whose word boundary the next character decides.
    """
    tail = ascii_upper(text[start:])
    before_is_word = start > 0 and is_word_char(text[start - 1])
    for form, _, bare in forms:
        if bare and before_is_word:
            continue
        if len(tail) < len(form) and form.startswith(tail):
            return True
        if bare and tail == form:
            return True
    return False


def expected_pending(text: str, forms: list[Form]) -> str:
    """The longest tail of `text` that could still become a form: what must be held."""
    for start in range(len(text)):
        if could_become_form(text, start, forms):
            return text[start:]
    return ""
