"""Scores a detector on the labelled corpus: precision and recall for every kind.

The matching rule. A predicted finding matches a gold span when their kinds are equal and
their spans are equal after trimming, at both ends, every character that is not alphanumeric
(`str.isalnum`). Over the same text, a prediction `415) 555-2671` matches the gold span
`(415) 555-2671`, and `<a@b.io>` matches `a@b.io`, but `555-2671` matches neither. Each gold
span is matched by at most one prediction and each prediction matches at most one gold span.

- A prediction that matches is a true positive (tp) of its kind.
- A prediction that matches nothing is a false positive (fp) of *its* kind: every prediction
  on `negatives.jsonl`, a prediction of a kind not labelled in that example, a prediction
  with the right kind but the wrong extent, and a second copy of the same finding.
- A gold span no prediction matches is a false negative (fn) of its kind.

precision = tp / (tp + fp), recall = tp / (tp + fn). A kind with no predictions has
precision 1.0 (it claimed nothing wrong); a kind with no gold spans has recall 1.0 (there was
nothing to find), so a detector that invents a kind the corpus does not label still shows
up, with its false positives, and fails the precision floor.

The corpus is every `*.jsonl` file in a directory, one example a line:
`{"text": ..., "spans": [{"start": int, "end": int, "kind": str}, ...]}` with an optional
`"aims"` (the kind a negative example is aimed at, or `prose` and `prose:<category>` for real
text aimed at none: code, logs, markdown, CJK, number look-alikes). Term lists are
`terms/<kind>.txt`. `compare.py` puts two revisions' tables side by side.

Run `python tests/detect/corpus/evaluate.py` to print the table for `holdback.detect`'s
`DetectorSet` with this corpus's term lists; `--show N` also lists N misses with their text
(the corpus is synthetic, so that text is safe to print).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypedDict

from holdback.errors import HoldbackError

CORPUS_DIR = Path(__file__).resolve().parent
FLOOR = 0.98
PHONE_REGION = "US"


class CorpusFormatError(HoldbackError):
    """A corpus file is not the JSONL the corpus promises (the message names file and line)."""


class InvalidFindingError(HoldbackError):
    """A detector returned a finding whose offsets do not fit the text it was given."""


class FindingLike(Protocol):
    """What the harness needs of a finding: `holdback.detect.Finding` has all of it."""

    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...

    @property
    def kind(self) -> str: ...


DetectFn = Callable[[str], Iterable[FindingLike]]


class KindScore(TypedDict):
    tp: int
    fp: int
    fn: int
    precision: float
    recall: float


@dataclass(frozen=True)
class GoldSpan:
    start: int
    end: int
    kind: str


@dataclass(frozen=True)
class Example:
    source: str  # "file.jsonl:line"
    text: str
    spans: tuple[GoldSpan, ...]
    aims: str | None = None


@dataclass(frozen=True)
class Miss:
    """One false positive or false negative, located but carrying no text."""

    source: str
    outcome: str  # "fp" or "fn"
    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class Report:
    results: dict[str, KindScore]
    misses: tuple[Miss, ...]


def trim(text: str, start: int, end: int) -> tuple[int, int]:
    """A span without the non-alphanumeric characters at either end (the matching rule)."""
    while start < end and not text[start].isalnum():
        start += 1
    while end > start and not text[end - 1].isalnum():
        end -= 1
    return start, end


def _parse_span(raw: object, text: str, where: str) -> GoldSpan:
    if not isinstance(raw, dict) or set(raw) != {"start", "end", "kind"}:
        raise CorpusFormatError(f"{where}: a span must have exactly start, end and kind")
    start, end, kind = raw["start"], raw["end"], raw["kind"]
    if type(start) is not int or type(end) is not int or not isinstance(kind, str) or not kind:
        raise CorpusFormatError(f"{where}: span start and end must be integers, kind a name")
    if not 0 <= start < end <= len(text):
        raise CorpusFormatError(f"{where}: span {start}:{end} does not fit the text")
    return GoldSpan(start, end, kind)


def _parse_line(line: str, where: str) -> Example:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CorpusFormatError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(record, dict) or not {"text", "spans"} <= set(record):
        raise CorpusFormatError(f"{where}: an example needs text and spans")
    if set(record) - {"text", "spans", "aims"}:
        raise CorpusFormatError(f"{where}: unknown fields in an example")
    text, spans, aims = record["text"], record["spans"], record.get("aims")
    if not isinstance(text, str) or not isinstance(spans, list):
        raise CorpusFormatError(f"{where}: text must be a string and spans a list")
    if aims is not None and not isinstance(aims, str):
        raise CorpusFormatError(f"{where}: aims must be a kind name")
    parsed = tuple(_parse_span(s, text, where) for s in spans)
    return Example(where, text, parsed, aims)


def load_examples(corpus_dir: Path) -> list[Example]:
    """Every example of every `*.jsonl` file in the directory, in file then line order."""
    paths = sorted(Path(corpus_dir).glob("*.jsonl"))
    if not paths:
        raise CorpusFormatError(f"no *.jsonl files in {corpus_dir}")
    examples = []
    for path in paths:
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    examples.append(_parse_line(line, f"{path.name}:{number}"))
    return examples


def load_terms(corpus_dir: Path) -> dict[str, list[str]]:
    """The term lists, `terms/<kind>.txt`, one term a line."""
    terms = {}
    for path in sorted((Path(corpus_dir) / "terms").glob("*.txt")):
        lines = path.read_text(encoding="utf-8").splitlines()
        terms[path.stem] = [t.strip() for t in lines if t.strip()]
    return terms


def _checked(findings: Iterable[FindingLike], text: str, where: str) -> list[tuple[int, int, str]]:
    out = []
    for f in findings:
        start, end, kind = f.start, f.end, f.kind
        if type(start) is not int or type(end) is not int or not isinstance(kind, str):
            raise InvalidFindingError(f"{where}: a finding has non-integer offsets or no kind")
        if not 0 <= start < end <= len(text):
            raise InvalidFindingError(
                f"{where}: a {kind} finding at {start}:{end} does not fit a text of {len(text)}"
            )
        out.append((start, end, kind))
    return out


def _ratio(num: int, den: int) -> float:
    return num / den if den else 1.0


def score(detect_fn: DetectFn, corpus_dir: Path) -> Report:
    """Run the detector over the corpus and count, per kind, what it got right and wrong."""
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    misses: list[Miss] = []
    for ex in load_examples(corpus_dir):
        unmatched = Counter((*trim(ex.text, g.start, g.end), g.kind) for g in ex.spans)
        for g in ex.spans:
            fn[g.kind] += 0  # every labelled kind gets a row
        for start, end, kind in _checked(detect_fn(ex.text), ex.text, ex.source):
            key = (*trim(ex.text, start, end), kind)
            if unmatched[key] > 0:
                unmatched[key] -= 1
                tp[kind] += 1
            else:
                fp[kind] += 1
                misses.append(Miss(ex.source, "fp", kind, start, end))
        for g in ex.spans:
            key = (*trim(ex.text, g.start, g.end), g.kind)
            if unmatched[key] > 0:
                unmatched[key] -= 1
                fn[g.kind] += 1
                misses.append(Miss(ex.source, "fn", g.kind, g.start, g.end))
    results: dict[str, KindScore] = {}
    for kind in sorted(set(tp) | set(fp) | set(fn)):
        results[kind] = {
            "tp": tp[kind],
            "fp": fp[kind],
            "fn": fn[kind],
            "precision": _ratio(tp[kind], tp[kind] + fp[kind]),
            "recall": _ratio(tp[kind], tp[kind] + fn[kind]),
        }
    return Report(results, tuple(misses))


def evaluate(detect_fn: DetectFn, corpus_dir: Path) -> dict[str, KindScore]:
    """Per kind: tp, fp, fn, precision and recall of `detect_fn` on the corpus."""
    return score(detect_fn, corpus_dir).results


def below_floor(results: dict[str, KindScore], floor: float = FLOOR) -> list[str]:
    """The kinds whose precision or recall is under the floor."""
    return [k for k, r in results.items() if r["precision"] < floor or r["recall"] < floor]


def format_table(results: dict[str, KindScore]) -> str:
    """A markdown table, one row per kind and a micro-averaged `all` row."""
    rows = [
        "| kind | gold | tp | fp | fn | precision | recall |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    total = Counter[str]()
    for kind, r in results.items():
        total.update({"tp": r["tp"], "fp": r["fp"], "fn": r["fn"]})
        rows.append(
            f"| {kind} | {r['tp'] + r['fn']} | {r['tp']} | {r['fp']} | {r['fn']} "
            f"| {r['precision']:.4f} | {r['recall']:.4f} |"
        )
    t_tp, t_fp, t_fn = total["tp"], total["fp"], total["fn"]
    rows.append(
        f"| all | {t_tp + t_fn} | {t_tp} | {t_fp} | {t_fn} "
        f"| {_ratio(t_tp, t_tp + t_fp):.4f} | {_ratio(t_tp, t_tp + t_fn):.4f} |"
    )
    return "\n".join(rows)


def format_misses(misses: Iterable[Miss], limit: int) -> str:
    """Where the first `limit` misses are: file, line, outcome, kind and offsets, no text."""
    lines = [f"{m.source} {m.outcome} {m.kind} [{m.start}:{m.end}]" for m in misses]
    return "\n".join(lines[:limit])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Precision and recall of holdback.detect.")
    parser.add_argument("--corpus", type=Path, default=CORPUS_DIR, help="corpus directory")
    parser.add_argument("--region", default=PHONE_REGION, help="default phone region")
    parser.add_argument("--show", type=int, default=0, metavar="N", help="list N misses")
    args = parser.parse_args(argv)

    from holdback.detect import DetectorSet

    detectors = DetectorSet.from_config(
        dictionaries=load_terms(args.corpus), phone_region=args.region
    )
    report = score(detectors.detect, args.corpus)
    print(format_table(report.results))
    if args.show:
        texts = {ex.source: ex.text for ex in load_examples(args.corpus)}
        for m in report.misses[: args.show]:
            value = texts[m.source][m.start : m.end]
            print(f"{m.source} {m.outcome} {m.kind} [{m.start}:{m.end}] {value!r}")
    failing = below_floor(report.results)
    if failing:
        print(f"below {FLOOR}: {', '.join(failing)}", file=sys.stderr)
    return 1 if failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
