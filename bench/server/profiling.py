"""Sampling profiles of a server under load, summarised as text a report can quote.

The rule it keeps: the profiler (py-spy) samples the server process from outside, during the
measurement window only, and the summary is computed from its raw collapsed stacks: the share
of samples in which a function is on the stack (inclusive) and on top of it (self).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path


class ProfilerMissingError(RuntimeError):
    """py-spy is not installed in the benchmark's environment."""


def py_spy() -> str:
    exe = Path(sys.executable).parent / "py-spy"
    if exe.exists():
        return str(exe)
    found = shutil.which("py-spy")
    if found is None:
        raise ProfilerMissingError("py-spy is needed for --profile: pip install 'py-spy>=0.3'")
    return found


def start(pid: int, seconds: float, out: Path, rate: int = 250) -> subprocess.Popen[bytes]:
    """Sample `pid` for `seconds` into collapsed-stack text at `out`."""
    argv = [py_spy(), "record", "--pid", str(pid), "--duration", str(max(1, round(seconds)))]
    argv += ["--rate", str(rate), "--format", "raw", "--output", str(out), "--nonblocking"]
    argv.append("--gil")  # only the thread holding the GIL: where the CPU goes
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _frame_name(frame: str) -> str:
    # py-spy raw frames look like `function (path/to/file.py:123)`; keep function and file.
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = Path(path).parts
    short = "/".join(parts[-2:]) if parts else path
    return f"{name} ({short})"


def summarize(raw: str, top: int = 25) -> tuple[int, list[tuple[str, float, float]]]:
    """Total samples and the `top` functions as (name, inclusive %, self %), by inclusive."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        for name in set(frames):
            inclusive[name] += count
        own[frames[-1]] += count
    rows = (
        [
            (name, inclusive[name] / total * 100, own[name] / total * 100)
            for name, _ in inclusive.most_common(top)
        ]
        if total
        else []
    )
    return total, rows


def self_table(raw: str, top: int = 25) -> str:
    """Markdown: the functions with the most self time."""
    _, rows = summarize(raw, top=10_000)
    rows.sort(key=lambda r: -r[2])
    lines = ["| function | self % | inclusive % |", "|---|---|---|"]
    for name, inc, own in rows[:top]:
        lines.append(f"| `{name}` | {own:.1f} | {inc:.1f} |")
    return "\n".join(lines)


def inclusive_table(raw: str, top: int = 40) -> str:
    """Markdown: the functions most often on the stack."""
    _, rows = summarize(raw, top=top)
    lines = ["| function | inclusive % | self % |", "|---|---|---|"]
    for name, inc, own in rows:
        lines.append(f"| `{name}` | {inc:.1f} | {own:.1f} |")
    return "\n".join(lines)
