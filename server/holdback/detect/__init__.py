"""Detection of sensitive values in text (sans-I/O): built-in kinds and custom dictionaries.

`detect(text)` returns the findings of the built-in detectors; a `DetectorSet` adds an
organisation's dictionaries and a phone region. Offsets always point into the original text,
however it was disguised (see `normalize`).
"""

from holdback.detect.base import Candidates, Detector, Finding
from holdback.detect.detectors import DetectorSet, Scan, default_detectors, detect
from holdback.detect.dictionary import TermMatcher, normalize_term
from holdback.detect.normalize import Normalized, normalize

__all__ = [
    "Candidates",
    "Detector",
    "DetectorSet",
    "Finding",
    "Normalized",
    "Scan",
    "TermMatcher",
    "default_detectors",
    "detect",
    "normalize",
    "normalize_term",
]
