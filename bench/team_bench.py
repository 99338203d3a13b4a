"""A team's detectors in the output guard: the cost per chunk with 10,000 people and 50
patterns against none (target ≤ 1.3×), and the time to load them.

The reply is the guard benchmark's realistic one, with a few listed people and identifiers the
model wrote on its own; the people are made up from syllables (a tenth with a family name that
is a common word), the patterns are fifty formats of the shapes teams use.
"""

from __future__ import annotations

import random
import time

from corpus import chunk, make_vault
from guard_bench import reply_with_pii
from timing import per_chunk

from holdback.detect import DetectorSet
from holdback.detect.people import COMMON_WORDS, PeopleMatcher, Person
from holdback.detect.team_patterns import parse_patterns
from holdback.stream import Guard, forbidden_matcher

_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ra",
    "ten",
    "vo",
    "shi",
    "an",
    "del",
    "mor",
    "quin",
    "bel",
    "tor",
    "sa",
    "ve",
    "lu",
    "ni",
    "for",
    "ga",
    "ze",
]


def people(n: int, seed: int = 7) -> list[Person]:
    rng = random.Random(seed)
    common = sorted(COMMON_WORDS)
    out = []
    for i in range(n):
        given = "".join(rng.choice(_SYLLABLES) for _ in range(2)).title()
        if i % 10 == 0:
            family = rng.choice(common).title()
        else:
            family = "".join(rng.choice(_SYLLABLES) for _ in range(3)).title()
        out.append(Person((given,), family))
    return out


def patterns(n: int) -> dict[str, object]:
    shapes = [
        r"{p}-\d{{4}}-\d{{5}}",
        r"{p}/\d{{5,6}}",
        r"{p}\d{{8}}",
        r"{p}-[A-Z]{{2}}\d{{6}}",
        r"{p} \d{{3}} \d{{3}} \d{{3}}",
    ]
    entries = []
    for i in range(n):
        prefix = "".join(chr(65 + (i * 7 + k * 3) % 26) for k in range(3))
        entry: dict[str, object] = {
            "label": f"format{i}",
            "regex": [shapes[i % len(shapes)].format(p=prefix)],
        }
        if i % 5 == 1:
            entry["context"] = ["matter", "case"]
        entries.append(entry)
    return {"pattern": entries}


def run() -> dict[str, float]:
    vault = make_vault(50)
    listed = people(10_000)
    start = time.perf_counter()
    matcher = PeopleMatcher(listed)
    load_people = time.perf_counter() - start
    start = time.perf_counter()
    pattern_set = parse_patterns(patterns(50))
    load_patterns = time.perf_counter() - start
    base = DetectorSet.from_config()
    team = DetectorSet.from_config(extra=[*pattern_set.detectors(), matcher])
    text = reply_with_pii(vault)
    third = len(text) // 3
    p = listed[1]
    text = (
        text[:third]
        + f" Ask {p.given[0]} {p.family} about AHO-2024-00817. "
        + text[third : 2 * third]
        + f" Ms {listed[3].family} signed. "
        + text[2 * third :]
    )
    chunks = chunk(text)
    forbidden = forbidden_matcher(["db01.corp.internal"])
    Guard(team, forbidden=forbidden).feed(text)  # warm the scanner's tables
    Guard(base, forbidden=forbidden).feed(text)
    costs = per_chunk(
        {
            "none": lambda: Guard(base, forbidden=forbidden),
            "team": lambda: Guard(team, forbidden=forbidden),
        },
        chunks,
    )
    return {
        "none_us": costs["none"] * 1e6,
        "team_us": costs["team"] * 1e6,
        "ratio": costs["team"] / costs["none"],
        "forms": float(len(matcher)),
        "load_people_s": load_people,
        "load_patterns_s": load_patterns,
    }


def report(r: dict[str, float]) -> str:
    return "\n".join(
        [
            "### A team's detectors in the guard (10,000 people, 50 patterns)",
            "",
            "| guard | µs/chunk |",
            "|---|---:|",
            f"| built-in detectors | {r['none_us']:.1f} |",
            f"| + 10,000 people and 50 patterns | {r['team_us']:.1f} |",
            "",
            f"- with vs without: **{r['ratio']:.2f}×** (target ≤ 1.3)",
            f"- 10,000 people are {r['forms']:,.0f} forms, loaded in {r['load_people_s']:.2f} s;"
            f" 50 patterns compiled and checked in {r['load_patterns_s'] * 1000:.0f} ms",
        ]
    )


if __name__ == "__main__":
    print(report(run()))
