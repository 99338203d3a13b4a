"""Guard benchmark: the per-chunk cost of screening, and what it holds back.

The guard's partial scans go through its incremental scanner; `ReferenceGuard` does every scan
in full with `DetectorSet.scan`, the straightforward way, and is measured in the same rounds.
"""

from __future__ import annotations

from collections.abc import Callable

from corpus import chunk, make_reply, make_vault
from detect_bench import terms
from restorer_bench import percentile
from timing import per_chunk

from holdback.detect import DetectorSet, TermMatcher
from holdback.stream import Guard, ReplyFilter, Restorer, forbidden_matcher


class ReferenceGuard(Guard):
    """The guard with every scan done in full: what the incremental scanner must equal."""

    _incremental = False


def reply_with_pii(vault: dict[str, str]) -> str:
    """A realistic reply, with a few values the model produced on its own."""
    text = make_reply(vault, length=20_000)
    extras = [" Contact bob@evil.com. ", " Call 415-555-2671. ", " Host db01.corp.internal. "]
    step = len(text) // (len(extras) + 1)
    for i, extra in enumerate(extras, 1):
        text = text[: i * step] + extra + text[i * step :]
    return text


def held_after_each_feed(guard: Guard, chunks: list[str]) -> tuple[list[int], str]:
    held, out = [], []
    for c in chunks:
        out.append(guard.feed(c))
        held.append(len(guard.pending))
    out.append(guard.flush())
    return held, "".join(out)


def run() -> dict[str, float]:
    vault = make_vault(50)
    chunks = chunk(reply_with_pii(vault))
    detectors = DetectorSet.from_config()
    few = forbidden_matcher(["db01.corp.internal", *terms(9)])
    many = forbidden_matcher(["db01.corp.internal", *terms(9_999)])

    def chain(forbidden: TermMatcher) -> Callable[[], ReplyFilter]:
        return lambda: ReplyFilter(Guard(detectors, forbidden=forbidden), Restorer(vault))

    chain(few)().feed("".join(chunks))  # warm the validators' caches
    chain(many)().feed("".join(chunks))
    costs = per_chunk(
        {
            "restorer": lambda: Restorer(vault),
            "guard": lambda: Guard(detectors, forbidden=few),
            "reference": lambda: ReferenceGuard(detectors, forbidden=few),
            "10": chain(few),
            "10k": chain(many),
        },
        chunks,
    )
    held, out = held_after_each_feed(Guard(detectors, forbidden=few), chunks)
    ref_held, ref_out = held_after_each_feed(ReferenceGuard(detectors, forbidden=few), chunks)
    if (held, out) != (ref_held, ref_out):
        raise AssertionError("the incremental guard differs from the reference guard")
    return {
        "restorer_us": costs["restorer"] * 1e6,
        "guard_us": costs["guard"] * 1e6,
        "reference_us": costs["reference"] * 1e6,
        "chain_10_us": costs["10"] * 1e6,
        "chain_10k_us": costs["10k"] * 1e6,
        "ratio_terms": costs["10k"] / costs["10"],
        "held_p50": percentile(held, 50),
        "held_p99": percentile(held, 99),
        "held_max": float(max(held)),
    }


def report(r: dict[str, float]) -> str:
    return "\n".join(
        [
            "### Output guard (1–8-character chunks of a realistic reply, all detectors)",
            "",
            "| filter chain | µs/chunk |",
            "|---|---:|",
            f"| restorer alone | {r['restorer_us']:.1f} |",
            f"| guard alone (10 forbidden terms), every scan in full | {r['reference_us']:.1f} |",
            f"| guard alone (10 forbidden terms) | {r['guard_us']:.1f} |",
            f"| guard (10 forbidden terms) + restorer | {r['chain_10_us']:.1f} |",
            f"| guard (10,000 forbidden terms) + restorer | {r['chain_10k_us']:.1f} |",
            "",
            f"- guard vs every scan in full: **{r['reference_us'] / r['guard_us']:.1f}×** faster;"
            " same output and same held text after every chunk",
            f"- guard + restorer vs restorer alone: **{r['chain_10_us'] / r['restorer_us']:.1f}×**",
            f"- 10,000 vs 10 forbidden terms: **{r['ratio_terms']:.2f}×** (target ≤ 1.3)",
            f"- characters the guard holds after each feed: p50 {r['held_p50']:.0f}, "
            f"p99 {r['held_p99']:.0f}, max {r['held_max']:.0f}",
        ]
    )


if __name__ == "__main__":
    print(report(run()))
