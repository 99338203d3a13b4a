"""Precision and recall of a team's detectors on their corpus (`team_corpus.py`): the figures
docs/detectors.md and the README give, held as floors here."""

from __future__ import annotations

from holdback.detect import DetectorSet
from holdback.detect.people import PeopleMatcher, parse_people
from holdback.detect.team_patterns import parse_patterns

from .team_corpus import CORPUS, PATTERNS_TOML, PEOPLE_CSV, unmarked

TEAM_KINDS = {"person", "account", "matter", "policy", "employee"}


def figures() -> tuple[int, int, int, int]:
    """(sentences, true positives, false positives, false negatives), exact spans and kinds."""
    import tomllib

    detectors = DetectorSet.from_config(
        extra=[
            *parse_patterns(tomllib.loads(PATTERNS_TOML)).detectors(),
            PeopleMatcher(parse_people(PEOPLE_CSV)),
        ]
    )
    tp = fp = fn = 0
    for sentence in CORPUS:
        text, expected = unmarked(sentence)
        found = {(f.start, f.end, f.kind) for f in detectors.detect(text) if f.kind in TEAM_KINDS}
        tp += len(found & expected)
        fp += len(found - expected)
        fn += len(expected - found)
    return len(CORPUS), tp, fp, fn


def test_precision_and_recall() -> None:
    sentences, tp, fp, fn = figures()
    assert sentences >= 200
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    print(f"{sentences} sentences, tp {tp}, fp {fp}, fn {fn}: P {precision:.3f} R {recall:.3f}")
    assert precision >= 0.97
    assert recall >= 0.98
