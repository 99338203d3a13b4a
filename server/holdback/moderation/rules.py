"""`rules:<file>`: an offline moderator from a TOML file of categories, for air-gapped teams,
tests and the demo.

The rules it keeps:
- the file holds one table, `categories`; each category is named by its key (a short name,
  `CATEGORY_RE`) and has `action` (`block` or `withhold`), `phrases` (a list of strings)
  and/or `patterns` (a list of regular expressions), and optionally `whole_words` (default
  true). Anything else is refused when the file is loaded, with the file, the category and
  the reason named: a missing or unreadable file, bad TOML, an unknown key, a bad action, a
  phrase that normalizes to nothing, an unsafe or broken pattern (`safe_regex`);
- phrases are matched on the canonical text of `holdback.detect.normalize` (invisible
  characters dropped, look-alike letters, diacritics and compatibility forms folded), case-
  folded, with runs of spaces as one space: the same reading the guard and the term lists
  use (`detect.dictionary.TermMatcher`, one Aho-Corasick automaton per category). With
  `whole_words` a phrase matches only as whole words (`kill` is not in `skill`);
- patterns are searched in the same canonical text, case-insensitively, each search with a
  time limit, and all of one check's searches within `PATTERN_BUDGET` seconds: running out
  is a failure (`ModerationFailedError`), never a pass;
- the verdict: `block` if any blocking category matches (the first such in the file), else
  `withhold` if any withholding category matches (the first such), else `allow`. The
  channel and the conversation do not change it.
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import regex

from holdback.detect.dictionary import TermMatcher, normalize_term
from holdback.detect.normalize import fold_case, normalize
from holdback.errors import ConfigurationError
from holdback.moderation.base import CATEGORY_RE, Channel, ModerationFailedError, Verdict
from holdback.moderation.safe_regex import UnsafePatternError, compile_bounded

MAX_FILE_BYTES = 4 * 1024 * 1024
PATTERN_BUDGET = 0.05  # seconds all of one check's pattern searches may take
_CATEGORY_KEYS = frozenset({"action", "phrases", "patterns", "whole_words"})
_RULE_ACTIONS = ("block", "withhold")


class RulesFileError(ConfigurationError):
    """A rules file cannot be used: missing, unreadable, not TOML, or not in the format."""


@dataclass(frozen=True, slots=True)
class Category:
    name: str
    action: Literal["block", "withhold"]
    phrases: TermMatcher | None
    patterns: tuple[regex.Pattern[str], ...]


def _strings(value: object, where: str, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RulesFileError(f"{where}: {key} must be a list of strings")
    return list(value)


def _category(name: str, table: object, where: str) -> Category:
    where = f"{where}, category {name!r}"
    if not isinstance(table, dict):
        raise RulesFileError(f"{where}: a category is a table ([categories.{name}])")
    unknown = sorted(set(table) - _CATEGORY_KEYS)
    if unknown:
        known = ", ".join(sorted(_CATEGORY_KEYS))
        raise RulesFileError(f"{where}: unknown key {unknown[0]!r} (a category has {known})")
    action = table.get("action")
    if action not in _RULE_ACTIONS:
        raise RulesFileError(f"{where}: action must be block or withhold")
    whole_words = table.get("whole_words", True)
    if not isinstance(whole_words, bool):
        raise RulesFileError(f"{where}: whole_words must be true or false")
    phrases = _strings(table.get("phrases", []), where, "phrases")
    for number, phrase in enumerate(phrases, 1):
        if not normalize_term(phrase):
            raise RulesFileError(f"{where}: phrase {number} is empty once normalized")
    patterns: list[regex.Pattern[str]] = []
    for number, source in enumerate(_strings(table.get("patterns", []), where, "patterns"), 1):
        try:
            patterns.append(compile_bounded(source))
        except UnsafePatternError as exc:
            raise RulesFileError(f"{where}: pattern {number} is refused: {exc}") from None
    if not phrases and not patterns:
        raise RulesFileError(f"{where}: give phrases, patterns or both")
    matcher = TermMatcher(name, phrases, whole_words=whole_words) if phrases else None
    return Category(name, action, matcher, tuple(patterns))


def parse_rules(data: dict[str, Any], where: str = "the rules") -> tuple[Category, ...]:
    """The categories of a parsed rules file, in file order."""
    unknown = sorted(set(data) - {"categories"})
    if unknown:
        raise RulesFileError(f"{where}: unknown key {unknown[0]!r} (the file has [categories.*])")
    tables = data.get("categories")
    if not isinstance(tables, dict) or not tables:
        raise RulesFileError(f"{where}: no categories; add a [categories.<name>] table")
    categories: list[Category] = []
    for name, table in tables.items():
        if not CATEGORY_RE.match(name):
            raise RulesFileError(
                f"{where}: a category's name is a letter or digit, then up to 63 of letters, "
                "digits, _ . / -"
            )
        categories.append(_category(name, table, where))
    return tuple(categories)


def load_rules(path: Path) -> tuple[Category, ...]:
    """The categories of the rules file at `path`; a `RulesFileError` naming what is wrong."""
    where = f"rules file {path}"
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise RulesFileError(f"{where} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise RulesFileError(f"{where} does not exist") from None
    except IsADirectoryError:
        raise RulesFileError(f"{where} is a directory, not a file") from None
    except OSError as exc:
        raise RulesFileError(f"{where} cannot be read ({exc.strerror or 'error'})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise RulesFileError(f"{where} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise RulesFileError(f"{where} is not valid TOML ({exc})") from None
    return parse_rules(data, where)


class RulesModerator:
    """A moderator that needs no network: the categories of a rules file."""

    def __init__(self, categories: Sequence[Category], *, source: str = "rules") -> None:
        self.categories = tuple(categories)
        self._source = source

    @classmethod
    def from_file(cls, path: str | Path) -> RulesModerator:
        path = Path(path).expanduser()
        return cls(load_rules(path), source=path.name)

    @property
    def name(self) -> str:
        return f"rules:{self._source}"

    async def check(self, text: str, channel: Channel, conversation_id: str) -> Verdict:
        return self.verdict(text)

    def verdict(self, text: str) -> Verdict:
        """The verdict for one window of text."""
        canonical = normalize(text).text
        folded = fold_case(canonical)
        deadline = time.monotonic() + PATTERN_BUDGET
        withheld: str | None = None
        for category in self.categories:
            if category.action == "withhold" and withheld is not None:
                continue  # a later block still matters; another withhold does not
            if self._matches(category, canonical, folded, deadline):
                if category.action == "block":
                    return Verdict("block", category.name)
                withheld = category.name
        return Verdict("withhold", withheld) if withheld is not None else Verdict("allow")

    @staticmethod
    def _matches(category: Category, canonical: str, folded: str, deadline: float) -> bool:
        matcher = category.phrases
        if matcher is not None and matcher.found(canonical, folded, 0, len(folded)):
            return True
        for pattern in category.patterns:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ModerationFailedError("the rules' patterns ran past their time limit")
            try:
                if pattern.search(canonical, timeout=left) is not None:
                    return True
            except TimeoutError:
                raise ModerationFailedError(
                    "the rules' patterns ran past their time limit"
                ) from None
        return False

    async def aclose(self) -> None:
        return None
