"""The labelled detection corpus, its evaluation harness, and the detectors measured on it.

Issue 3's floors: on this corpus every kind's precision and recall is at least 0.98, for the
`DetectorSet` built with the corpus's term lists and the US as default phone region. The
corpus itself is held to its own rules here too: every gold span is a valid value by the
corpus's independent validators, spans fit their text and never overlap, nothing
value-shaped is left unlabelled, the counts the issue asks for are there (issue 14: 300
hand-written sentences of real text among the negatives), and the files on disk are exactly
what the generator writes. On the negatives, no finding beyond the known ones listed here.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
BUILTIN_KINDS = ("email", "phone", "credit_card", "iban", "us_ssn", "ip_address", "secret", "jwt")
TERM_KINDS = ("client", "person", "project")
KINDS = BUILTIN_KINDS + TERM_KINDS
NUMBER_LIKE = ("phone", "credit_card", "iban", "us_ssn", "ip_address")
PROSE_CATEGORIES = ("cjk", "code", "log", "lookalike", "markdown")
# Findings the detectors still make on negative sentences, as (kind, first 24 characters),
# with how often; reported on issue 14 for the detectors to fix. None is left.
KNOWN_NEGATIVE_FINDINGS: Counter[tuple[str, str]] = Counter()


def _corpus_module(name: str) -> ModuleType:
    # The corpus tools are scripts that import each other by plain name, so their directory
    # goes on the path (tests/ is not a package).
    if str(CORPUS_DIR) not in sys.path:
        sys.path.insert(0, str(CORPUS_DIR))
    return importlib.import_module(name)


ev = _corpus_module("evaluate")
gold_checks = _corpus_module("gold_checks")
leak_scan = _corpus_module("leak_scan")


@dataclass(frozen=True)
class _Found:
    start: int
    end: int
    kind: str


@pytest.fixture(scope="module")
def examples() -> list[Any]:
    return list(ev.load_examples(CORPUS_DIR))


@pytest.fixture(scope="module")
def terms() -> dict[str, list[str]]:
    return dict(ev.load_terms(CORPUS_DIR))


# ---- the detectors against the floors ---------------------------------------------------


@pytest.fixture(scope="module")
def report(terms: dict[str, list[str]]) -> Any:
    from holdback.detect import DetectorSet

    detectors = DetectorSet.from_config(dictionaries=terms, phone_region="US")
    return ev.score(detectors.detect, CORPUS_DIR)


def _failure(report: Any, kind: str | None = None) -> str:
    misses = [m for m in report.misses if kind is None or m.kind == kind]
    table: str = ev.format_table(report.results)
    listed: str = ev.format_misses(misses, 25)
    return (
        "\n" + table
        + f"\nfirst misses ({len(misses)} in all; "
        "`python tests/detect/corpus/evaluate.py --show 50` prints their text):\n"
        + listed
    )  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_detector_set_meets_the_floors(report: Any, kind: str) -> None:
    score = report.results[kind]
    assert score["precision"] >= ev.FLOOR, _failure(report, kind)
    assert score["recall"] >= ev.FLOOR, _failure(report, kind)


def test_detector_set_reports_no_kind_the_corpus_does_not_label(report: Any) -> None:
    extra = sorted(set(report.results) - set(KINDS))
    assert not extra, f"kinds the corpus does not label: {extra}" + _failure(report)


def test_default_detect_meets_the_floors_for_builtin_kinds() -> None:
    from holdback.detect import detect

    result = ev.score(detect, CORPUS_DIR)
    assert not set(result.results) - set(KINDS), _failure(result)
    for kind in BUILTIN_KINDS:
        score = result.results[kind]
        assert score["precision"] >= ev.FLOOR, _failure(result, kind)
        assert score["recall"] >= ev.FLOOR, _failure(result, kind)
    for kind in TERM_KINDS:
        assert result.results[kind]["tp"] == 0, "the default set has no dictionaries"


# ---- the corpus keeps its own rules -----------------------------------------------------


def test_every_gold_span_is_a_valid_value(examples: list[Any], terms: dict[str, list[str]]) -> None:
    folded = {k: frozenset(t.casefold() for t in v) for k, v in terms.items()}
    bad = [
        f"{ex.source} {g.kind} [{g.start}:{g.end}]: {why}"
        for ex in examples
        for g in ex.spans
        if (why := gold_checks.check_span(g.kind, ex.text, g.start, g.end, folded)) is not None
    ]
    assert not bad, "\n".join(bad[:20])


def test_gold_spans_fit_their_text_and_never_overlap(examples: list[Any]) -> None:
    for ex in examples:
        spans = sorted((g.start, g.end) for g in ex.spans)
        for start, end in spans:
            assert 0 <= start < end <= len(ex.text), ex.source
        for (_, end), (start, _) in pairwise(spans):
            assert end <= start, f"{ex.source}: overlapping gold spans"


def test_nothing_value_shaped_is_left_unlabelled(
    examples: list[Any], terms: dict[str, list[str]]
) -> None:
    pattern = leak_scan.term_pattern(t for v in terms.values() for t in v)
    found = []
    for ex in examples:
        gold = [(g.start, g.end, g.kind) for g in ex.spans]
        found += [f"{ex.source}: {p}" for p in leak_scan.leaks(ex.text, gold, pattern, terms)]
    assert not found, "\n".join(found[:20])


def test_every_kind_has_enough_values_and_evasion_variants(examples: list[Any]) -> None:
    gold = Counter(g.kind for ex in examples for g in ex.spans)
    evaded = Counter(
        g.kind for ex in examples for g in ex.spans
        if gold_checks.has_evasion(ex.text[g.start : g.end])
    )  # fmt: skip
    for kind in KINDS:
        assert gold[kind] >= 300, kind
        assert (CORPUS_DIR / f"{kind}.jsonl").exists(), kind
    for kind in NUMBER_LIKE:
        assert evaded[kind] >= 0.08 * gold[kind], kind
    assert set(gold) == set(KINDS)


def test_every_evasion_is_represented(examples: list[Any]) -> None:
    chars = Counter(
        c for ex in examples for g in ex.spans for c in ex.text[g.start : g.end] if not c.isascii()
    )
    for c in "\u200b\u200c\u200d\u2060\ufeff\u00ad\u00a0\u2009\u202f\uff20\uff0e":
        assert chars[c] > 0, f"no gold value carries U+{ord(c):04X}"
    assert any("\uff10" <= c <= "\uff19" for c in chars), "no fullwidth digits"
    assert any("\uff21" <= c <= "\uff5a" for c in chars), "no fullwidth letters"
    broken = [ex for ex in examples for g in ex.spans if "\n" in ex.text[g.start : g.end]]
    assert len(broken) > 20, "too few values broken across lines"


def test_negatives_carry_no_spans_and_aim_at_every_kind(examples: list[Any]) -> None:
    negatives = [ex for ex in examples if ex.source.startswith("negatives.jsonl:")]
    assert len(negatives) >= 1500
    assert all(not ex.spans and ex.aims for ex in negatives)
    aims = Counter(ex.aims for ex in negatives)
    for kind in KINDS:
        assert aims[kind] >= 150, kind


def test_prose_negatives_are_hand_written_real_text(examples: list[Any]) -> None:
    """Issue 14: at least 300 sentences of real-looking text, every category present, each
    hand-written line used exactly once."""
    prose = Counter(ex.aims for ex in examples if (ex.aims or "").startswith("prose:"))
    assert sum(prose.values()) >= 300
    for category in PROSE_CATEGORIES:
        path = CORPUS_DIR / "templates" / "prose" / f"{category}.txt"
        lines = [line for line in path.read_text(encoding="utf-8").splitlines()
                 if line.strip() and not line.startswith("#")]  # fmt: skip
        assert prose[f"prose:{category}"] == len(lines) >= 50, category
    assert set(prose) == {f"prose:{c}" for c in PROSE_CATEGORIES}


def test_negatives_raise_no_false_positive_but_the_known_ones(
    examples: list[Any], terms: dict[str, list[str]]
) -> None:
    """A ratchet: no finding on a negative sentence beyond those listed (a fixed one may go
    from the list; a new one fails)."""
    from holdback.detect import DetectorSet

    detectors = DetectorSet.from_config(dictionaries=terms, phone_region="US")
    found: Counter[tuple[str, str]] = Counter(
        (f.kind, ex.text[f.start : f.end][:24])
        for ex in examples
        if ex.source.startswith("negatives.jsonl:")
        for f in detectors.detect(ex.text)
    )
    new = found - KNOWN_NEGATIVE_FINDINGS
    assert not new, f"new false positives on negatives.jsonl: {sorted(new.elements())}"


def test_texts_are_unique(examples: list[Any]) -> None:
    texts = Counter(ex.text for ex in examples)
    assert max(texts.values()) == 1


def test_each_kind_has_forty_templates() -> None:
    for kind in KINDS:
        path = CORPUS_DIR / "templates" / "positive" / f"{kind}.txt"
        lines = [line for line in path.read_text(encoding="utf-8").splitlines()
                 if line.strip() and not line.startswith("#")]  # fmt: skip
        assert len(lines) >= 40, kind


def test_term_lists_are_large_and_varied(terms: dict[str, list[str]]) -> None:
    assert set(terms) == set(TERM_KINDS)
    for kind, words in terms.items():
        assert len(words) >= 200, kind
        assert any(" " in t for t in words), kind
    every = [t for words in terms.values() for t in words]
    assert any("'" in t for t in every)
    assert any("-" in t for t in every)
    assert "Acme Holdings" in terms["client"]


@pytest.mark.slow
def test_files_on_disk_are_what_the_generator_writes() -> None:
    build_corpus = _corpus_module("build_corpus")
    files = build_corpus.build()
    for relative, body in files.items():
        on_disk = (CORPUS_DIR / relative).read_text(encoding="utf-8")
        assert on_disk == body, f"{relative} is stale: run tests/detect/corpus/build_corpus.py"


# ---- the harness counts by its documented rule ------------------------------------------


def _write(tmp_path: Path, name: str, records: list[dict[str, Any]]) -> None:
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (tmp_path / name).write_text(lines, encoding="utf-8")


def _fixed(answers: dict[str, list[tuple[int, int, str]]]) -> Any:
    def detect(text: str) -> list[_Found]:
        return [_Found(*a) for a in answers.get(text, [])]

    return detect


def test_spans_match_after_trimming_punctuation(tmp_path: Path) -> None:
    text = "Call (415) 555-2671."
    _write(
        tmp_path,
        "phone.jsonl",
        [{"text": text, "spans": [{"start": 5, "end": 19, "kind": "phone"}]}],
    )
    for start, end in ((6, 19), (5, 20), (4, 19)):
        result = ev.evaluate(_fixed({text: [(start, end, "phone")]}), tmp_path)
        assert result["phone"] == {"tp": 1, "fp": 0, "fn": 0, "precision": 1.0, "recall": 1.0}
    result = ev.evaluate(_fixed({text: [(11, 19, "phone")]}), tmp_path)
    assert result["phone"] == {"tp": 0, "fp": 1, "fn": 1, "precision": 0.0, "recall": 0.0}


def test_wrong_kind_duplicates_and_negatives_are_false_positives(tmp_path: Path) -> None:
    text = "mail a@b.io now"
    _write(
        tmp_path,
        "email.jsonl",
        [{"text": text, "spans": [{"start": 5, "end": 11, "kind": "email"}]}],
    )
    _write(
        tmp_path, "negatives.jsonl", [{"text": "version 1.2.3", "spans": [], "aims": "ip_address"}]
    )
    answers = {
        text: [(5, 11, "email"), (5, 11, "email"), (5, 11, "secret")],
        "version 1.2.3": [(8, 13, "ip_address")],
    }
    result = ev.evaluate(_fixed(answers), tmp_path)
    assert result["email"] == {"tp": 1, "fp": 1, "fn": 0, "precision": 0.5, "recall": 1.0}
    assert result["secret"] == {"tp": 0, "fp": 1, "fn": 0, "precision": 0.0, "recall": 1.0}
    assert result["ip_address"]["fp"] == 1
    assert ev.below_floor(result) == ["email", "ip_address", "secret"]
    table = ev.format_table(result)
    assert "| email | 1 | 1 | 1 | 0 | 0.5000 | 1.0000 |" in table
    assert table.splitlines()[-1] == "| all | 1 | 1 | 3 | 0 | 0.2500 | 1.0000 |"


def test_a_silent_detector_misses_everything(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "x.jsonl",
        [{"text": "ab cd", "spans": [{"start": 0, "end": 2, "kind": "person"}]}],
    )
    report = ev.score(_fixed({}), tmp_path)
    assert report.results == {
        "person": {"tp": 0, "fp": 0, "fn": 1, "precision": 1.0, "recall": 0.0}
    }
    assert report.misses == (ev.Miss("x.jsonl:1", "fn", "person", 0, 2),)


def test_an_oracle_scores_perfectly_on_the_real_corpus(examples: list[Any]) -> None:
    answers = {ex.text: [(g.start, g.end, g.kind) for g in ex.spans] for ex in examples}
    result = ev.evaluate(_fixed(answers), CORPUS_DIR)
    assert set(result) == set(KINDS)
    assert all(r["fp"] == 0 and r["fn"] == 0 for r in result.values())
    assert ev.below_floor(result) == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not JSON"),
        ('{"text": "abc"}', "needs text and spans"),
        ('{"text": "abc", "spans": [{"start": 2, "end": 9, "kind": "x"}]}', "does not fit"),
        ('{"text": "abc", "spans": [{"start": 0, "end": 1}]}', "exactly start, end and kind"),
        ('{"text": "abc", "spans": [], "label": 1}', "unknown fields"),
    ],
)
def test_malformed_corpus_lines_are_named(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "bad.jsonl").write_text('{"text": "ok", "spans": []}\n' + line + "\n")
    with pytest.raises(ev.CorpusFormatError, match=rf"bad\.jsonl:2: .*{message}"):
        ev.load_examples(tmp_path)


def test_an_empty_corpus_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ev.CorpusFormatError, match=r"no \*\.jsonl files"):
        ev.load_examples(tmp_path)


def test_findings_outside_the_text_are_refused(tmp_path: Path) -> None:
    _write(tmp_path, "x.jsonl", [{"text": "secret", "spans": []}])
    with pytest.raises(ev.InvalidFindingError, match=r"x\.jsonl:1: a secret finding at 3:99"):
        ev.evaluate(_fixed({"secret": [(3, 99, "secret")]}), tmp_path)
    with pytest.raises(ev.InvalidFindingError):
        ev.evaluate(_fixed({"secret": [(4, 4, "secret")]}), tmp_path)
