"""The reply filter chain of two revisions, side by side in one run: CPU per chunk.

The rule it keeps: a speed target against an earlier revision is a ratio measured in one run,
rounds interleaved, on the same input. The earlier revision is checked out into a temporary git
worktree and measured in its own interpreter (`PYTHONPATH` pointing at its `server/`), so each
side runs its own code; the input (a realistic reply in 1-8 character chunks, a 50-entry vault
and 10,000 forbidden terms) comes from this checkout's `bench/corpus.py` for both.

    python bench/chain_compare.py --base <rev> [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run inside each side's interpreter: prints CPU microseconds per chunk, best of `repeat`.
_MEASURE = r"""
import sys, time
sys.path.insert(0, {bench!r})
from corpus import chunk, make_vault
from guard_bench import reply_with_pii
from detect_bench import terms
from holdback.detect import DetectorSet
from holdback.stream import Guard, ReplyFilter, Restorer, forbidden_matcher
vault = make_vault(50)
chunks = chunk(reply_with_pii(vault))
detectors = DetectorSet.from_config()
many = forbidden_matcher(["db01.corp.internal", *terms(9_999)])
def once():
    f = ReplyFilter(Guard(detectors, forbidden=many, vault=vault), Restorer(vault))
    for c in chunks:
        f.feed(c)
    f.flush()
once()
best = min(_cpu(once) for _ in range({repeat}))
print(best / len(chunks) * 1e6)
"""
_CPU = "def _cpu(f):\n    t = time.process_time(); f(); return time.process_time() - t\n"


def measure(server: Path, repeat: int) -> float:
    code = _MEASURE.replace("once()\nbest", _CPU + "once()\nbest").format(
        bench=str(ROOT / "bench"), repeat=repeat
    )
    env = {"PYTHONPATH": str(server), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--base", required=True, help="the earlier revision (a commit or tag)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="holdback-base-") as tmp:
        base = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base],
            check=True,
            capture_output=True,
        )
        try:
            pairs = []
            for _ in range(args.rounds):
                before = measure(base / "server", args.repeat)
                after = measure(ROOT / "server", args.repeat)
                pairs.append((before, after))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                check=False,
                capture_output=True,
            )
    before = statistics.median(b for b, _ in pairs)
    after = statistics.median(a for _, a in pairs)
    print("### Reply filter chain, before and after (10,000 forbidden terms, CPU per chunk)")
    print()
    print(f"| revision | µs/chunk (median of {args.rounds} interleaved rounds) |")
    print("|---|---:|")
    print(f"| {args.base} | {before:.2f} |")
    print(f"| this checkout | {after:.2f} |")
    print()
    print(f"- after / before: **{after / before:.2f}×** (target ≤ 1.5)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
