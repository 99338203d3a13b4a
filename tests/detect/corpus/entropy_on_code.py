"""The optional entropy detector's false positives on code: findings per file and per KiB.

The rule it keeps: the fixtures hold no secret, so every finding the entropy detector adds is
a false positive. Its share is what `DetectorSet.from_config(entropy_secrets=True)` finds
beyond what the default set finds in the same text. Measured over the code fixtures
(`tests/detect/code_corpus/`, one file each) and the corpus's hand-written code and log
negatives (`prose:code` and `prose:log` in `negatives.jsonl`, each sentence read on its own,
as the message it stands for).

    python tests/detect/corpus/entropy_on_code.py [--show]

`--show` prints each added finding's file and offsets (the fixtures are synthetic, so their
text is safe to print, and is printed too).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import evaluate as ev

from holdback.detect import DetectorSet

HERE = Path(__file__).resolve().parent
CODE_CORPUS = HERE.parent / "code_corpus"
CODE_AIMS = ("prose:code", "prose:log")
BLOB = re.compile(r"[A-Za-z0-9+/_\-]{32,}")  # the runs the detector could take


def added(plain: DetectorSet, entropy: DetectorSet, text: str) -> list[tuple[int, int]]:
    """The spans the entropy set reports as secrets and the default set does not."""
    base = {(f.start, f.end, f.kind) for f in plain.detect(text)}
    return [
        (f.start, f.end)
        for f in entropy.detect(text)
        if f.kind == "secret" and (f.start, f.end, f.kind) not in base
    ]


def texts() -> list[tuple[str, list[tuple[str, str]]]]:
    """(name, [(where, text)]): a fixture file is one text, an aim of code negatives many."""
    out = [
        (p.name, [(p.name, p.read_text(encoding="utf-8"))]) for p in sorted(CODE_CORPUS.iterdir())
    ]
    examples = ev.load_examples(HERE)
    for aim in CODE_AIMS:
        chosen = [(ex.source, ex.text) for ex in examples if ex.aims == aim]
        out.append((f"negatives.jsonl [{aim}]", chosen))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--show", action="store_true", help="print each added finding")
    args = p.parse_args(argv)
    plain = DetectorSet.from_config()
    entropy = DetectorSet.from_config(entropy_secrets=True)
    rows = [
        "| file | KiB | texts | runs of 32+ | entropy findings | texts with one | per KiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    total_bytes = total_found = total_runs = 0
    shown: list[str] = []
    for name, parts in texts():
        found = [
            (where, text, s, e) for where, text in parts for s, e in added(plain, entropy, text)
        ]
        size = sum(len(text.encode("utf-8")) for _, text in parts)
        runs = sum(len(BLOB.findall(text)) for _, text in parts)
        hit = len({where for where, _, _, _ in found})
        total_bytes += size
        total_found += len(found)
        total_runs += runs
        rows.append(f"| {name} | {size / 1024:.1f} | {len(parts)} | {runs} | {len(found)} | {hit} "
                    f"| {len(found) / (size / 1024):.3f} |")  # fmt: skip
        shown += [f"{where} [{s}:{e}] {text[s:e]!r}" for where, text, s, e in found]
    kib = total_bytes / 1024
    rows.append(f"| all | {kib:.1f} | | {total_runs} | {total_found} | | {total_found / kib:.3f} |")
    print("\n".join(rows))
    if args.show:
        print("\n".join(shown) or "no findings")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
