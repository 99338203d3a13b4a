"""A team's own detectors from files: `--patterns FILE` (TOML) and `--people FILE` (CSV).

The rules: a file is read, checked and compiled once, and read again only when it changed
(its size or modification time), so every reload of the term lists (`term_reload.detectors_for`)
reuses the same detectors, and the stream scanner's tables built for them; a file that cannot be
used refuses the start with one line naming the file, the entry or line, and the reason
(`settings.resolve` loads them), never a value from it.
"""

from __future__ import annotations

import threading
from pathlib import Path

from holdback.detect.base import Detector
from holdback.detect.people import PeopleMatcher, load_people
from holdback.detect.team_patterns import PatternSet, load_patterns

_lock = threading.Lock()
_cache: dict[tuple[str, str], tuple[tuple[int, int], Detector]] = {}


def _stamp(path: Path) -> tuple[int, int]:
    try:
        info = path.stat()
    except OSError:
        return (-1, -1)  # the load reports why it cannot be read
    return (info.st_size, info.st_mtime_ns)


def _loaded(what: str, path: Path) -> Detector:
    key = (what, str(path))
    stamp = _stamp(path)
    with _lock:
        known = _cache.get(key)
        if known is not None and known[0] == stamp and stamp[0] >= 0:
            return known[1]
    detector: Detector = (
        load_patterns(path) if what == "patterns" else PeopleMatcher(load_people(path))
    )
    with _lock:
        _cache[key] = (stamp, detector)
    return detector


def patterns_of(path: Path) -> PatternSet:
    detector = _loaded("patterns", path)
    assert isinstance(detector, PatternSet)
    return detector


def people_of(path: Path) -> PeopleMatcher:
    detector = _loaded("people", path)
    assert isinstance(detector, PeopleMatcher)
    return detector


def team_detectors(patterns: Path | None, people: Path | None) -> list[Detector]:
    """The detectors of the configured files (none for a file not given)."""
    out: list[Detector] = []
    if patterns is not None:
        out.extend(patterns_of(patterns).detectors())
    if people is not None:
        out.append(people_of(people))
    return out
