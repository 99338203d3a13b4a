"""The filter chain as the server builds it for one channel, for tests that feed it text."""

from __future__ import annotations

from holdback.detect import DetectorSet
from holdback.stream import Guard, ReplyFilter, Restorer, forbidden_matcher
from holdback.stream.restorer import json_escape
from holdback.vault import Vault


def make_filter(
    detectors: DetectorSet,
    vault: Vault,
    forbidden: list[str],
    *,
    mode: str = "redact",
    projection: str = "markdown",
    window: int = 256,
) -> ReplyFilter:
    """restorer -> guard over `vault`, screening `forbidden` too; JSON escapes for `json`."""
    guard = Guard(
        detectors,
        forbidden=forbidden_matcher(forbidden),
        vault=vault,
        mode=mode,  # type: ignore[arg-type]
        window=window,
        projection=projection,  # type: ignore[arg-type]
    )
    escape = json_escape if projection == "json" else None
    return ReplyFilter(guard, Restorer(vault.index(), escape=escape))


def run_filter(f: ReplyFilter, text: str, chunks: list[str] | None = None) -> tuple[str, str]:
    """(wire text, stored text) for `text`, fed whole or in `chunks`."""
    pieces = chunks if chunks is not None else [text]
    out = "".join(f.feed(c) for c in pieces) + f.flush()
    return out, f.screened
