"""Regular expressions from a rules file, refused if they could backtrack catastrophically.

The rules it keeps:
- a pattern is read before it is compiled, and refused when its shape lets a backtracking
  engine take exponential time: repetition of something that itself repeats a variable number
  of times (`(a+)+`, `(\\w*\\s?)*`, `(a{1,3})+`), repetition of an alternation (`(a|ab)+`),
  a quantifier on a quantifier, backreferences (`\\1`, `(?P=n)`, `\\g<n>`, `\\k<n>`) and
  conditionals (`(?(1)...)`). Each refusal names the reason and the position;
- a pattern is at most `MAX_PATTERN` characters, and a counted repeat at most
  `MAX_REPEAT` (what a compiled pattern may grow to stays small);
- what passes is compiled with the `regex` module, case-insensitively, and every search is
  given a time limit (`search(..., timeout=...)`): polynomial shapes the check lets through
  (`\\d+\\d+x`) are bounded in time too, and running out is a failure, never a pass.

The check is conservative: it refuses some safe patterns (`(cat|dog)+`) so that it never
accepts an exponential one. Rewrite those without the repeated group (`(cat|dog)`, or a
character class).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import regex

from holdback.errors import ConfigurationError

MAX_PATTERN = 500
MAX_REPEAT = 1000
_COUNTED = re.compile(r"\{(\d*)(,?)(\d*)\}")
_UNBOUNDED = -1
# The groups a pattern may open: plain, non-capturing, named, lookaround, atomic, and inline
# flags but verbose (`x`: a space would hide a nested quantifier from this check). Not
# `(?P=n)`, `(?(1)`, `(?R)`, `(?1)`, `(?&n)`, `(?|`, `(?V1)`.
_GROUP = re.compile(r"\((?!\?)|\(\?(?::|=|!|<=|<!|>|P?<\w+>|[aimsu-]+:|[aimsu-]+\))")


class UnsafePatternError(ConfigurationError):
    """A pattern could take super-linear time (or does not compile)."""


@dataclass(slots=True)
class _Group:
    repeats: bool = False  # holds a part repeated a variable number of times
    alternates: bool = False  # holds a `|`


def _quantifier(pattern: str, i: int) -> tuple[int, int, int] | None:
    """(min, max, end) of a quantifier at `i`, or None if none starts there."""
    ch = pattern[i]
    if ch == "*":
        return 0, _UNBOUNDED, i + 1
    if ch == "+":
        return 1, _UNBOUNDED, i + 1
    if ch == "?":
        return 0, 1, i + 1
    if ch == "{":
        m = _COUNTED.match(pattern, i)
        if m is None or (not m.group(1) and not m.group(3)):
            return None  # a literal brace
        low = int(m.group(1) or 0)
        upper = int(m.group(3)) if m.group(3) else _UNBOUNDED
        high = upper if m.group(2) else low  # `{n}` is exactly n
        return low, high, m.end()
    return None


def _class_end(pattern: str, i: int) -> int:
    """The index after a character class that opens at `i`."""
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    if j >= len(pattern):
        raise UnsafePatternError(f"a character class opened at {i} is never closed")
    return j + 1


def _escape_end(pattern: str, i: int) -> int:
    """The index after an escape at `i`; refuses backreferences."""
    if i + 1 >= len(pattern):
        raise UnsafePatternError("the pattern ends with a lone backslash")
    ch = pattern[i + 1]
    if ch in "123456789" or ch in "gk":
        raise UnsafePatternError(f"backreferences are not allowed (at {i})")
    if ch in "pPN" and i + 2 < len(pattern) and pattern[i + 2] == "{":
        close = pattern.find("}", i + 3)
        if close < 0:
            raise UnsafePatternError(f"an escape at {i} is never closed")
        return close + 1
    return i + 2


def check_shape(pattern: str) -> None:
    """Raise `UnsafePatternError` if `pattern` has a shape that could backtrack without bound."""
    if len(pattern) > MAX_PATTERN:
        raise UnsafePatternError(f"a pattern is at most {MAX_PATTERN} characters")
    stack: list[_Group] = [_Group()]
    last: _Group | None = None  # the group just closed, if the atom before `i` is one
    atom = False  # an atom stands before `i` (a quantifier may follow)
    quantified = False  # the atom before `i` already has a quantifier
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        quantifier = _quantifier(pattern, i) if atom or quantified else None
        if ch == "{" and quantifier is None:
            raise UnsafePatternError(f"write a literal brace as \\{{ (at {i})")
        if quantifier is not None:
            low, high, end = quantifier
            if quantified:
                raise UnsafePatternError(f"a quantifier may not follow a quantifier (at {i})")
            if max(low, high) > MAX_REPEAT:
                raise UnsafePatternError(f"a counted repeat is at most {MAX_REPEAT} (at {i})")
            if high != _UNBOUNDED and low > high:
                raise UnsafePatternError(f"a counted repeat's minimum exceeds its maximum (at {i})")
            repeating = high == _UNBOUNDED or high > 1
            if repeating and last is not None and last.repeats:
                raise UnsafePatternError(f"nested repetition could backtrack (at {i})")
            if repeating and last is not None and last.alternates:
                raise UnsafePatternError(f"a repeated alternation could backtrack (at {i})")
            if low != high:
                stack[-1].repeats = True
            i = end
            if i < len(pattern) and pattern[i] in "?+":  # lazy or possessive
                i += 1
            atom, quantified, last = False, True, None
            continue
        atom, quantified, last = True, False, None
        if ch == "\\":
            i = _escape_end(pattern, i)
        elif ch == "[":
            i = _class_end(pattern, i)
        elif ch == "(":
            if pattern.startswith("(?#", i):
                close = pattern.find(")", i)
                i = len(pattern) if close < 0 else close + 1
                atom = False
                continue
            opening = _GROUP.match(pattern, i)
            if opening is None:
                raise UnsafePatternError(
                    f"this kind of group is not allowed (at {i}): only (...), (?:...), "
                    "(?P<name>...), lookarounds, (?>...) and inline flags other than x"
                )
            i = opening.end()
            atom = False
            if not pattern.endswith(")", 0, i):  # `(?i)` sets flags and holds nothing
                stack.append(_Group())
        elif ch == ")":
            if len(stack) == 1:
                raise UnsafePatternError(f"a ) at {i} closes no group")
            last = stack.pop()
            stack[-1].repeats |= last.repeats
            stack[-1].alternates |= last.alternates
            i += 1
        elif ch == "|":
            stack[-1].alternates = True
            atom = False
            i += 1
        else:
            atom = ch not in "^$"
            i += 1
    if len(stack) != 1:
        raise UnsafePatternError("a group is never closed")


def compile_bounded(pattern: str) -> regex.Pattern[str]:
    """The pattern, compiled case-insensitively, once its shape passed `check_shape`."""
    check_shape(pattern)
    try:
        return regex.compile(pattern, regex.IGNORECASE | regex.V0)
    except regex.error as exc:
        raise UnsafePatternError(f"it does not compile ({exc})") from None
