"""Side-by-side timing: every contender runs once per round, rounds interleave, best wins.

Interleaving means a burst of load on the machine hits all contenders alike, so the ratios the
benchmarks report stay meaningful on a busy machine; taking each contender's best round removes
most of the remaining noise.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from typing import Protocol


class StreamFilter(Protocol):
    def feed(self, chunk: str) -> str: ...
    def flush(self) -> str: ...


def per_chunk(
    makers: Mapping[str, Callable[[], StreamFilter]],
    chunks: Mapping[str, list[str]] | list[str],
    rounds: int = 7,
) -> dict[str, float]:
    """Best seconds per chunk for each contender, measured in interleaved rounds."""
    best = dict.fromkeys(makers, float("inf"))
    for _ in range(rounds):
        for name, make in makers.items():
            stream = chunks[name] if isinstance(chunks, Mapping) else chunks
            f = make()
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                for c in stream:
                    f.feed(c)
                f.flush()
                elapsed = time.perf_counter() - start
            finally:
                gc.enable()
            best[name] = min(best[name], elapsed / len(stream))
    return best
