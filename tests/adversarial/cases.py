"""The adversarial corpus (issue #13): every case, by category, with the vocabulary to run them.

The rule it keeps: the corpus is data only, importable by any suite (in-process server tests,
real-server and browser tests), and it is stable: case names are unique, every category has
cases, and a case's upstream bytes depend on nothing but the case, the chunking and its seed.

    from tests.adversarial.cases import CASES, CATEGORIES, CHUNKINGS, render, write_terms
    wire = render(case.script, "random", case.seed)   # status, content_type, chunks

A server under test must be started with the term files `write_terms(dir)` makes
(`--sensitive-terms clients.txt --forbidden-terms internal.txt`); each case runs in a fresh
conversation, so the user's values get the tokens `TERM_TOKEN` and `EMAIL_TOKEN`.
"""

from __future__ import annotations

from tests.adversarial import cases_encoding, cases_fields, cases_tokens, cases_window
from tests.adversarial.corpus import (
    ALT_EMAIL,
    CHUNKINGS,
    EMAIL_TOKEN,
    FORBIDDEN_FILE,
    FORBIDDEN_HOST,
    FORBIDDEN_WORD,
    INJ_CARD,
    INJ_EMAIL,
    INJ_PHONE,
    OK,
    SENSITIVE_FILE,
    TERM_TOKEN,
    USER_CARD,
    USER_EMAIL,
    USER_TERM,
    USER_TEXT,
    Case,
    Chunking,
    Content,
    ErrorEvent,
    Finish,
    HttpError,
    Reasoning,
    Step,
    ToolCall,
    Wire,
    case_seed,
    check_unique,
    render,
    render_sse,
    split_text,
    write_terms,
)

__all__ = [
    "ALT_EMAIL",
    "CASES",
    "CATEGORIES",
    "CHUNKINGS",
    "EMAIL_TOKEN",
    "FORBIDDEN_FILE",
    "FORBIDDEN_HOST",
    "FORBIDDEN_WORD",
    "INJ_CARD",
    "INJ_EMAIL",
    "INJ_PHONE",
    "OK",
    "SENSITIVE_FILE",
    "TERM_TOKEN",
    "USER_CARD",
    "USER_EMAIL",
    "USER_TERM",
    "USER_TEXT",
    "Case",
    "Chunking",
    "Content",
    "ErrorEvent",
    "Finish",
    "HttpError",
    "Reasoning",
    "Step",
    "ToolCall",
    "Wire",
    "by_category",
    "case_seed",
    "render",
    "render_sse",
    "split_text",
    "write_terms",
]

CATEGORIES: tuple[str, ...] = (
    "fields",
    "json_escapes",
    "markdown_entities",
    "glued",
    "window",
    "invisible_lookalike",
    "neighbours",
    "reasoning",
    "tool_names",
    "invented_tokens",
    "url_restore",
    "forbidden_terms",
)

CASES: list[Case] = [
    *cases_fields.CASES,
    *cases_encoding.CASES,
    *cases_tokens.CASES,
    *cases_window.CASES,
]

check_unique(CASES)
_unknown = {c.category for c in CASES} - set(CATEGORIES)
_empty = set(CATEGORIES) - {c.category for c in CASES}
if _unknown or _empty:
    raise ValueError(f"categories out of step: unknown {_unknown}, empty {_empty}")


def by_category(category: str) -> list[Case]:
    """The cases of one category, in corpus order."""
    return [c for c in CASES if c.category == category]
