"""Pseudonymization cost per KiB, from 1 KiB to a whole frame (64 KiB), prose and adversarial.

The rule it checks: no input costs super-linear time. Every adversarial input (digit runs,
runs of separators, repeated `@`, dots and brackets, base64 lines, key-like and address-like
runs) is measured beside ordinary chat text of the same size, and each must cost about as much
per KiB at 64 KiB as at 1 KiB, and not much more than prose does.

Each measurement is the CPU time of one `pseudonymize` call with a fresh `Pseudonymizer` (its
one-text detection cache would otherwise hide the detectors) and a fresh vault; contenders run
in interleaved rounds and each keeps its best round (see `timing.py`).

`--base REV` measures prose throughput against an earlier revision instead, side by side in one
run: the revision is checked out into a temporary git worktree and measured in its own
interpreter (as `chain_compare.py` does), on the same texts as this checkout, in interleaved
rounds.

    python bench/pseudonymize_bench.py [--base <rev>] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from detect_bench import chat_text

from holdback.detect import DetectorSet
from holdback.pseudonymize import Pseudonymizer
from holdback.vault import Vault

KIB = 1024
SIZES = (1, 4, 16, 64)  # KiB; 64 KiB is the default frame limit (HOLDBACK_MAX_FRAME_BYTES)
DIGITS = "0123456789"
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _repeat(unit: str) -> Callable[[int, int], str]:
    def make(n: int, seed: int) -> str:
        shift = seed % len(unit)
        return ((unit * (n // len(unit) + 2))[shift:])[:n]

    return make


def _digit_groups(sizes: tuple[int, ...], seps: tuple[str, ...]) -> Callable[[int, int], str]:
    def make(n: int, seed: int) -> str:
        rng = random.Random(seed)
        out: list[str] = []
        length = 0
        while length < n:
            group = "".join(rng.choice(DIGITS) for _ in range(rng.choice(sizes)))
            out.append(group + rng.choice(seps))
            length += len(out[-1])
        return "".join(out)[:n]

    return make


def _base64_lines(n: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = []
    length = 0
    while length < n:
        lines.append("".join(rng.choice(B64) for _ in range(64)))
        length += 65
    return "\n".join(lines)[:n] + "!"


def _random(alphabet: str) -> Callable[[int, int], str]:
    def make(n: int, seed: int) -> str:
        rng = random.Random(seed)
        return "".join(rng.choice(alphabet) for _ in range(n))

    return make


def prose(n: int, seed: int = 5) -> str:
    return chat_text(n, seed=seed)[:n]


ADVERSARIAL: dict[str, Callable[[int, int], str]] = {
    "digit groups (1-4 digits, spaces)": _digit_groups((1, 2, 3, 4), (" ",)),
    "digit groups (2 digits, spaces)": _digit_groups((2,), (" ",)),
    "digit groups, mixed separators": _digit_groups(
        (1, 2, 3, 4), (" ", "-", ".", "/", "\u2013", "  ", ". ", " - ", "(", ")", "+")
    ),
    "one run of digits": _random(DIGITS),
    "separator runs": _random(" -./_\u2013"),
    "repeated @": _repeat("@"),
    "a@a@a@": _repeat("a@"),
    "repeated dots": _repeat("."),
    "a.a.a.": _repeat("a."),
    "brackets ((((": _repeat("((((())))"),
    "(1) (1) (1)": _repeat("(1) "),
    "<a_1_1_1 (token-like)": lambda n, seed: "<" + _repeat("a_1")(n - 1, seed),
    "base64 lines, no header": _base64_lines,
    "sk-sk-sk- (key-like)": _repeat("sk-"),
    "a@b.b.b. (address-like)": lambda n, seed: "a@" + _repeat("b.")(n - 2, seed),
}


def _cost(detectors: DetectorSet, text: str) -> float:
    pseudonymizer = Pseudonymizer(detectors)
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        pseudonymizer.pseudonymize(text, Vault())
        return time.process_time() - start
    finally:
        gc.enable()


def run(rounds: int = 3, sizes: tuple[int, ...] = SIZES) -> dict[str, dict[int, float]]:
    """Best CPU milliseconds per KiB, by input and by size in KiB.

    Every round measures texts of its own (another seed), so no round finds the checks of an
    earlier one remembered (`regex_detector.in_context`): each cost is the cost of new text.
    """
    detectors = DetectorSet.from_config()
    inputs: dict[str, Callable[[int, int], str]] = {"prose (chat text, 0.5 % PII)": prose}
    inputs.update(ADVERSARIAL)
    for make in inputs.values():  # warm metadata and tables, on text no round measures
        Pseudonymizer(detectors).pseudonymize(make(KIB, 999), Vault())
    best = {(name, size): float("inf") for name in inputs for size in sizes}
    for r in range(rounds):
        for name, make in inputs.items():
            for size in sizes:
                text = make(size * KIB, 100 + r)
                best[(name, size)] = min(best[(name, size)], _cost(detectors, text))
    out: dict[str, dict[int, float]] = {name: {} for name in inputs}
    for (name, size), seconds in best.items():
        out[name][size] = seconds * 1000 / size
    return out


def report(r: dict[str, dict[int, float]]) -> str:
    sizes = sorted(next(iter(r.values())))
    prose_name = next(iter(r))
    top = sizes[-1]
    prose_top = r[prose_name][top]
    head = " | ".join(f"{s} KiB" for s in sizes)
    rows = [
        f"### Pseudonymize cost per KiB, 1 KiB to {top} KiB (ms of CPU per KiB)",
        "",
        f"| input | {head} | growth {sizes[0]}→{top} KiB | vs prose at {top} KiB |",
        "|---|" + "---:|" * (len(sizes) + 2),
    ]
    worst = 0.0
    for name, costs in r.items():
        cells = " | ".join(f"{costs[s]:.2f}" for s in sizes)
        growth = costs[top] / costs[sizes[0]]
        ratio = costs[top] / prose_top
        if name != prose_name:
            worst = max(worst, ratio)
        rows.append(f"| {name} | {cells} | {growth:.2f}× | {ratio:.2f}× |")
    prose_mb = KIB / (prose_top / 1000) / 1e6
    rows += [
        "",
        f"- prose throughput at {top} KiB: **{prose_mb:.2f} MB/s**",
        f"- worst adversarial input vs prose at {top} KiB: **{worst:.2f}×** (target ≤ 3)",
        "- growth: cost per KiB at the largest size over the smallest (1.00× is linear)",
    ]
    return "\n".join(rows)


# -- against an earlier revision -----------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent

# Run inside each side's interpreter, on texts made by this checkout: CPU seconds by size, each
# a fresh Pseudonymizer and a fresh vault on a text of its own.
_MEASURE = r"""
import gc, json, sys, time
from holdback.detect import DetectorSet
from holdback.pseudonymize import Pseudonymizer
from holdback.vault import Vault
given = json.load(open(sys.argv[1], encoding="utf-8"))
detectors = DetectorSet.from_config()
Pseudonymizer(detectors).pseudonymize(given["warm"], Vault())
out = {}
for size, text in given["texts"]:
    pseudonymizer = Pseudonymizer(detectors)
    gc.collect()
    gc.disable()
    start = time.process_time()
    pseudonymizer.pseudonymize(text, Vault())
    out[size] = time.process_time() - start
    gc.enable()
print(json.dumps(out))
"""


def _measure_side(server: Path, texts: Path) -> dict[int, float]:
    env = {"PYTHONPATH": str(server), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(texts)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return {int(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def compare(base: str, rounds: int = 5, sizes: tuple[int, ...] = SIZES) -> str:
    """Prose throughput of `base` and of this checkout, best of interleaved rounds."""
    best: dict[str, dict[int, float]] = {
        side: dict.fromkeys(sizes, float("inf")) for side in ("base", "head")
    }
    with tempfile.TemporaryDirectory(prefix="holdback-base-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), base],
            check=True,
            capture_output=True,
        )
        try:
            for r in range(rounds):
                texts = Path(tmp) / f"round{r}.json"
                given = {
                    "warm": prose(64 * KIB, 999),
                    "texts": [(size, prose(size * KIB, 100 + r)) for size in sizes],
                }
                texts.write_text(json.dumps(given), encoding="utf-8")
                for side, server in (("base", tree / "server"), ("head", ROOT / "server")):
                    for size, seconds in _measure_side(server, texts).items():
                        best[side][size] = min(best[side][size], seconds)
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )
    rows = [
        f"### Pseudonymize prose throughput, {base} and this checkout (MB/s, best of {rounds} "
        "interleaved rounds)",
        "",
        f"| size | {base} | this checkout | this checkout / {base} |",
        "|---:|---:|---:|---:|",
    ]
    for size in sizes:
        before = size * KIB / best["base"][size] / 1e6
        after = size * KIB / best["head"][size] / 1e6
        rows.append(f"| {size} KiB | {before:.2f} | {after:.2f} | {after / before:.2f}× |")
    top = sizes[-1]
    ratio = best["base"][top] / best["head"][top]
    rows += [
        "",
        f"- throughput at {top} KiB, this checkout / {base}: **{ratio:.2f}×** (target ≥ 0.8)",
    ]
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--base", help="an earlier revision to measure prose throughput against")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    if args.base:
        print(compare(args.base, rounds=args.rounds or 5))
    else:
        print(report(run(rounds=args.rounds or 3)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
