"""`make bench`: the core's micro-benchmarks, measured side by side in one run.

Restorer, detection and pseudonymization (including the cost per KiB of adversarial text, 1 KiB
to 64 KiB), and the guard.

Each section prints a markdown table and the ratios the issues set targets for. The whole
report is also written to bench/results/latest.md.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import detect_bench
import guard_bench
import pseudonymize_bench
import restorer_bench
import team_bench


def main() -> int:
    sections = [
        f"Machine: {platform.machine()}, Python {platform.python_version()}; "
        "command: `make bench`\n",
        restorer_bench.report(restorer_bench.run()),
        detect_bench.report(detect_bench.run()),
        pseudonymize_bench.report(pseudonymize_bench.run()),
        guard_bench.report(guard_bench.run()),
        team_bench.report(team_bench.run()),
    ]
    text = "\n\n".join(sections)
    print(text)
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.md").write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
