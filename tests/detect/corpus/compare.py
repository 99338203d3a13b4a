"""Precision and recall per kind of two revisions' detectors, side by side, on this corpus.

The rule it keeps: a before/after comparison measures both sides on the same corpus (this
checkout's), each with its own code. The earlier revision is checked out into a temporary git
worktree and its own `evaluate.py` runs in a fresh interpreter with `PYTHONPATH` pointing at
that tree's `server/` (this checkout's `evaluate.py` when the tree has none); the interpreter
is asked where `holdback` came from before any figure is trusted. The worktree is removed
afterwards, whatever happened.

    python tests/detect/corpus/compare.py --before <rev> [--after <rev>]

(`--after` measures a revision in a worktree too; without it, this checkout as it is) prints the corpus (files, gold values per kind, negative sentences per aim) and one markdown
table: TP, FP, FN, precision and recall per kind, before -> after.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import evaluate as ev

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
EVALUATOR = Path("tests/detect/corpus/evaluate.py")
COLUMNS = ("tp", "fp", "fn", "precision", "recall")


class CompareError(Exception):
    """A side could not be measured as asked (the message says which and why)."""


def _run(tree: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(tree / "server"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=tree, capture_output=True, text=True, check=False
    )


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip


def measure(tree: Path, corpus: Path) -> dict[str, dict[str, float]]:
    """The evaluator's table for the `holdback` package of `tree`, on `corpus`."""
    where = _run(tree, ["-c", "import holdback; print(holdback.__file__)"])
    origin = Path(where.stdout.strip() or "?").resolve()
    if where.returncode or not origin.is_relative_to((tree / "server").resolve()):
        raise CompareError(f"{tree}: holdback imported from {origin}, not from this tree")
    script = tree / EVALUATOR if (tree / EVALUATOR).exists() else HERE / "evaluate.py"
    out = _run(tree, [str(script), "--corpus", str(corpus)])
    if out.returncode not in (0, 1):  # 1 only reports a kind below the floor
        raise CompareError(f"{tree}: the evaluator failed:\n{out.stderr[-2000:]}")
    rows: dict[str, dict[str, float]] = {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[1].isdigit():
            kind, _gold, tp, fp, fn, precision, recall = cells
            rows[kind] = {"tp": int(tp), "fp": int(fp), "fn": int(fn),
                          "precision": float(precision), "recall": float(recall)}  # fmt: skip
    if "all" not in rows:
        raise CompareError(f"{tree}: no table in the evaluator's output")
    return rows


def describe(corpus: Path) -> str:
    """The corpus the figures were measured on: files, gold values, negatives by aim."""
    examples = ev.load_examples(corpus)
    files = Counter(ex.source.split(":")[0] for ex in examples)
    gold = Counter(g.kind for ex in examples for g in ex.spans)
    aims = Counter(ex.aims or "?" for ex in examples if not ex.spans)
    lines = ["files: " + ", ".join(f"{name} ({n})" for name, n in sorted(files.items()))]
    lines.append("gold values: " + ", ".join(f"{k} {n}" for k, n in sorted(gold.items())))
    lines.append(f"negative sentences: {sum(aims.values())}, by aim: "
                 + ", ".join(f"{a} {n}" for a, n in sorted(aims.items())))  # fmt: skip
    prose = {a: n for a, n in aims.items() if a.startswith("prose")}
    lines.append(f"of which prose: {sum(prose.values())} "
                 + "(" + ", ".join(f"{a} {n}" for a, n in sorted(prose.items())) + ")")  # fmt: skip
    return "\n".join(lines)


def measure_revision(revision: str, corpus: Path) -> dict[str, dict[str, float]]:
    """`measure` on a temporary worktree of `revision`, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="holdback-compare-") as tmp:
        tree = Path(tmp) / "tree"
        _git("worktree", "add", "--detach", str(tree), revision)
        try:
            return measure(tree, corpus)
        finally:
            _git("worktree", "remove", "--force", str(tree))


def _cell(before: dict[str, float], after: dict[str, float], column: str) -> str:
    if column in ("precision", "recall"):
        return f"{before[column]:.4f} → {after[column]:.4f}"
    return f"{int(before[column])} → {int(after[column])}"


def side_by_side(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> str:
    """One row per kind either side reports (a kind one side lacks counts as all zeros)."""
    empty = {"tp": 0, "fp": 0, "fn": 0, "precision": 1.0, "recall": 1.0}
    kinds = [*sorted((set(before) | set(after)) - {"all"}), "all"]
    rows = [
        "| kind | TP | FP | FN | precision | recall |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind in kinds:
        b, a = before.get(kind, empty), after.get(kind, empty)
        rows.append(f"| {kind} | " + " | ".join(_cell(b, a, c) for c in COLUMNS) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--before", required=True, help="the earlier revision (a commit or tag)")
    p.add_argument("--after", help="the later revision (default: this checkout as it is)")
    p.add_argument("--corpus", type=Path, default=HERE, help="corpus directory")
    args = p.parse_args(argv)
    corpus = args.corpus.resolve()
    before = measure_revision(args.before, corpus)
    if args.after:
        after = measure_revision(args.after, corpus)
        later = f"{args.after} ({_git('rev-parse', '--short', args.after)})"
    else:
        after = measure(ROOT, corpus)
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "server")
        later = f"this checkout (HEAD {head}{' with uncommitted changes in server/' * bool(dirty)})"
    print(describe(corpus))
    print(f"\nbefore = {args.before} ({_git('rev-parse', '--short', args.before)}), "
          f"after = {later}\n")  # fmt: skip
    print(side_by_side(before, after))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
