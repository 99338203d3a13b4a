"""Rules patterns: shapes that could backtrack without bound are refused before they are
compiled, each refusal naming why; ordinary patterns pass; and what passes is searched with a
time limit."""

from __future__ import annotations

import pytest

from holdback.moderation.safe_regex import UnsafePatternError, check_shape, compile_bounded

SAFE = [
    r"\bicd-10\s+[a-z]\d{2}\b",
    r"(?i)project\s+nightingale",
    r"(?:cat|dog)",
    r"(?:cat|dog)?s",
    r"\d{3}-\d{2}-\d{4}",
    r"a{,3}",
    r"(?P<n>x)y?",
    r"(?<n>x)y",
    r"[{}()|+*]+",
    r"\{x\}",
    r"(?=ab)a+",
    r"(?<!x)y+",
    r"(?>a+)b",
    r"(a{2})*",
    r"(ab)+",
    r"\p{L}+ \N{EM DASH}",
    r"(?i:x)+",
    r"a+?b*+",
    r"(?#a comment (with parens)x",
]

UNSAFE = [
    (r"(a+)+", "nested repetition"),
    (r"(\w*\s?)*", "nested repetition"),
    (r"(a{1,3})+", "nested repetition"),
    (r"(?:x(?:y+))*", "nested repetition"),
    (r"(a|ab)+", "repeated alternation"),
    (r"((a|b)c)+", "repeated alternation"),
    (r"(a|b){2,}", "repeated alternation"),
    (r"\1", "backreferences"),
    (r"\g<1>", "backreferences"),
    (r"\k<n>", "backreferences"),
    (r"(?P=n)", "group is not allowed"),
    (r"(?(1)a|b)", "group is not allowed"),
    (r"(?R)", "group is not allowed"),
    (r"(?1)", "group is not allowed"),
    (r"(?&n)", "group is not allowed"),
    (r"(?|a)", "group is not allowed"),
    (r"(?V1)a", "group is not allowed"),
    (r"(?x)(a+) +", "group is not allowed"),
    (r"a{2}{3}", "quantifier may not follow"),
    (r"a**", "quantifier may not follow"),
    (r"{x}", "literal brace"),
    (r"x{e<=1}", "literal brace"),
    (r"a{1,5000}", "at most 1000"),
    (r"a{5000,}", "at most 1000"),
    (r"a{2,1}", "minimum exceeds"),
    (r"(((", "never closed"),
    (r"[abc", "never closed"),
    (r"a)", "closes no group"),
    ("\\", "lone backslash"),
    ("a" * 501, "at most 500"),
]


@pytest.mark.parametrize("pattern", SAFE)
def test_safe_patterns_pass(pattern: str) -> None:
    check_shape(pattern)
    compile_bounded(pattern)


@pytest.mark.parametrize(("pattern", "reason"), UNSAFE)
def test_unsafe_patterns_are_refused_by_reason(pattern: str, reason: str) -> None:
    with pytest.raises(UnsafePatternError, match=reason):
        compile_bounded(pattern)


def test_a_pattern_that_does_not_compile_is_refused() -> None:
    with pytest.raises(UnsafePatternError, match="does not compile"):
        compile_bounded(r"[z-a]")


def test_patterns_are_case_insensitive() -> None:
    assert compile_bounded(r"nightingale").search("Project NIGHTINGALE") is not None
