"""Writes the labelled detection corpus: deterministic, fully labelled, every label validated.

Run it from anywhere: `python tests/detect/corpus/build_corpus.py` rewrites
`terms/<kind>.txt`, `<kind>.jsonl` for every kind and `negatives.jsonl` next to this file;
`--check` rebuilds in memory and fails if the files on disk differ.

Rules the output keeps:
- Same seed, same bytes: every kind draws from its own `random.Random` seeded by name.
- Every gold span passes `gold_checks.check_span` (an independent validator per kind), gold
  spans never overlap, and the leak scan finds nothing unlabelled (`leak_scan.py`).
- Every template is used; each kind has at least 40 templates, 300 gold values and about a
  tenth of its number-like values in evasion variants; negatives aim at least 150 sentences
  at each kind, 1500 in all, and carry no spans.

Templates live in `templates/positive/<kind>.txt` and `templates/negative/<aim>.txt`, one
per line; `templates/formats/<kind>.txt` hold the formats of issue 14 (separators, scripts,
labels and markdown around values, keys without digits), written to `formats.jsonl` after every
other file, so adding them changes no other file (`\\n` for a line break, `#` starts a comment line).
`templates/prose/<category>.txt` hold hand-written negatives of real-looking text (code, logs,
markdown, CJK prose, number look-alikes): each line is used exactly once, aimed at
`prose:<category>`, and appended to `negatives.jsonl` after everything else is built, so they
change no earlier line; at least 300 of them, 50 per category. `{{kind}}` or
`{{kind:variant}}` is a fresh value of that kind; `{{date}}`, `{{bad_card}}` and the other
names in `hard_negatives.MAKERS` are look-alikes; `{{near_<kind>}}` is a near miss of a term.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import address_and_key_makers as akm
import format_makers
import hard_negatives
import leak_scan
import value_makers as vm
from gold_checks import check_span, has_evasion
from term_lists import TERM_KINDS, build_term_lists

from holdback.errors import HoldbackError

HERE = Path(__file__).resolve().parent
SEED = 20240611
BUILTIN_KINDS = ("email", "phone", "credit_card", "iban", "us_ssn", "ip_address", "secret", "jwt")
KINDS = BUILTIN_KINDS + TERM_KINDS
NUMBER_LIKE = ("phone", "credit_card", "iban", "us_ssn", "ip_address")
EVADE = {"email": 0.12, "secret": 0.05, "jwt": 0.05} | dict.fromkeys(NUMBER_LIKE, 0.12)
EXAMPLES_PER_KIND = 330
FORMAT_EXAMPLES_PER_KIND = 40
NEGATIVES_PER_AIM = 160
MIN_TEMPLATES = 40
MIN_POSITIVES = 300
MIN_NEGATIVES_PER_AIM = 150
MIN_NEGATIVES = 1500
MIN_EVADED_SHARE = 0.08
PROSE_CATEGORIES = ("cjk", "code", "log", "lookalike", "markdown")
MIN_PROSE = 300
MIN_PROSE_PER_CATEGORY = 50
ATTEMPTS = 60

_PLACEHOLDER = re.compile(r"\{\{(?P<name>\w+)(?::(?P<variant>\w+))?\}\}")

Maker = Callable[[random.Random, str, float], vm.Fragment]
MAKERS: dict[str, Maker] = {
    "email": vm.make_email,
    "phone": vm.make_phone,
    "credit_card": vm.make_card,
    "iban": vm.make_iban,
    "us_ssn": vm.make_ssn,
    "ip_address": akm.make_ip,
    "secret": akm.make_secret,
    "jwt": akm.make_jwt,
}


class CorpusBuildError(HoldbackError):
    """A template or the generated corpus breaks one of the corpus's rules."""


@dataclass(frozen=True)
class Template:
    source: str  # file:line, for error messages
    text: str


@dataclass(frozen=True)
class Example:
    text: str
    spans: tuple[tuple[int, int, str], ...]
    aims: str | None = None

    def to_json(self) -> str:
        record: dict[str, object] = {
            "text": self.text,
            "spans": [{"start": s, "end": e, "kind": k} for s, e, k in self.spans],
        }
        if self.aims is not None:
            record["aims"] = self.aims
        return json.dumps(record, ensure_ascii=True)


def load_templates(path: Path) -> list[Template]:
    templates = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        text = line.replace("\\n", "\n").replace("\\t", "\t")
        templates.append(Template(f"{path.name}:{number}", text))
    if len({t.text for t in templates}) != len(templates):
        raise CorpusBuildError(f"{path.name} repeats a template")
    return templates


class Filler:
    """Fills templates with fresh values from one random stream."""

    def __init__(self, rng: random.Random, terms: Mapping[str, list[str]]) -> None:
        self.rng = rng
        self.terms = terms

    def fragment(self, name: str, variant: str) -> vm.Fragment:
        if (name, variant) in format_makers.MAKERS:
            return format_makers.MAKERS[(name, variant)](self.rng)
        if name in MAKERS:
            return MAKERS[name](self.rng, variant, EVADE[name])
        if name in self.terms:
            return vm.make_term(self.rng, name, self.terms[name], 0.05)
        if name.startswith("near_") and name[5:] in self.terms:
            return vm.Fragment(hard_negatives.near_term(self.rng, self.terms[name[5:]]), ())
        if name in hard_negatives.MAKERS:
            return vm.Fragment(hard_negatives.MAKERS[name](self.rng), ())
        raise CorpusBuildError(f"unknown placeholder {name!r}")

    def fill(self, template: Template) -> tuple[str, list[tuple[int, int, str]]]:
        """The sentence and its gold spans."""
        out: list[str] = []
        spans: list[tuple[int, int, str]] = []
        pos, length = 0, 0
        for m in _PLACEHOLDER.finditer(template.text):
            literal = template.text[pos : m.start()]
            out.append(literal)
            length += len(literal)
            frag = self.fragment(m["name"], m["variant"] or "")
            spans.extend((length + s, length + e, k) for s, e, k in frag.spans)
            out.append(frag.text)
            length += len(frag.text)
            pos = m.end()
        out.append(template.text[pos:])
        return "".join(out), spans


def problems(
    text: str,
    spans: list[tuple[int, int, str]],
    folded_terms: Mapping[str, frozenset[str]],
    pattern: re.Pattern[str],
) -> list[str]:
    """Everything wrong with a labelled sentence; empty when it may enter the corpus."""
    found = []
    for s, e, k in spans:
        why = check_span(k, text, s, e, folded_terms)
        if why is not None:
            found.append(f"gold {k} at {s}:{e}: {why}")
    ordered = sorted(spans)
    found.extend(f"gold spans overlap at {b[0]}" for a, b in pairwise(ordered) if b[0] < a[1])
    found.extend(leak_scan.leaks(text, spans, pattern, TERM_KINDS))
    return found


class Builder:
    def __init__(self, terms: Mapping[str, list[str]]) -> None:
        self.terms = terms
        self.folded = {k: frozenset(t.casefold() for t in v) for k, v in terms.items()}
        self.pattern = leak_scan.term_pattern(t for v in terms.values() for t in v)
        self.seen: set[str] = set()

    def examples(self, name: str, templates: list[Template], count: int, aims: str | None
                 ) -> list[Example]:  # fmt: skip
        rng = random.Random(f"{SEED}:{name}")
        filler = Filler(rng, self.terms)
        order = list(templates)
        rng.shuffle(order)
        made: list[Example] = []
        turn = 0
        while len(made) < count:
            if not order:
                raise CorpusBuildError(f"{name}: templates ran out after {len(made)} sentences")
            template = order[turn % len(order)]
            turn += 1
            if not _PLACEHOLDER.search(template.text):
                order.remove(template)  # a fixed sentence is used once
                if template.text in self.seen:
                    continue
            for _ in range(ATTEMPTS):
                text, spans = filler.fill(template)
                if text in self.seen:
                    continue
                if aims is not None and spans:
                    raise CorpusBuildError(f"{template.source}: a negative template has values")
                if not problems(text, spans, self.folded, self.pattern):
                    break
            else:
                why = problems(text, spans, self.folded, self.pattern) or ["only duplicates"]
                raise CorpusBuildError(f"{template.source}: no clean sentence: {why[0]}")
            self.seen.add(text)
            made.append(Example(text, tuple(sorted(spans)), aims))
        return made

    def each_once(self, name: str, templates: list[Template], aims: str) -> list[Example]:
        """One sentence per template, in file order: hand-written text is not resampled."""
        filler = Filler(random.Random(f"{SEED}:{name}"), self.terms)
        made: list[Example] = []
        for template in templates:
            for _ in range(ATTEMPTS):
                text, spans = filler.fill(template)
                if spans:
                    raise CorpusBuildError(f"{template.source}: a negative template has values")
                why = problems(text, [], self.folded, self.pattern)
                if text in self.seen:
                    why.append("a duplicate")
                if not why or not _PLACEHOLDER.search(template.text):
                    break
            if why:
                raise CorpusBuildError(f"{template.source}: not a clean negative: {why[0]}")
            self.seen.add(text)
            made.append(Example(text, (), aims))
        return made


def build() -> dict[str, str]:
    """The corpus's files, by path relative to this directory, with their contents."""
    terms = build_term_lists()
    builder = Builder(terms)
    files = {f"terms/{k}.txt": "".join(t + "\n" for t in v) for k, v in terms.items()}
    gold: Counter[str] = Counter()
    evaded: Counter[str] = Counter()
    for kind in KINDS:
        templates = load_templates(HERE / "templates" / "positive" / f"{kind}.txt")
        if len(templates) < MIN_TEMPLATES:
            raise CorpusBuildError(f"{kind} has {len(templates)} templates, fewer than 40")
        examples = builder.examples(kind, templates, EXAMPLES_PER_KIND, None)
        for ex in examples:
            gold.update(k for _, _, k in ex.spans)
            evaded.update(k for s, e, k in ex.spans if has_evasion(ex.text[s:e]))
        files[f"{kind}.jsonl"] = "".join(ex.to_json() + "\n" for ex in examples)
    negatives: list[Example] = []
    for path in sorted((HERE / "templates" / "negative").glob("*.txt")):
        negatives += builder.examples(path.stem, load_templates(path), NEGATIVES_PER_AIM,
                                      path.stem)  # fmt: skip
    files["negatives.jsonl"] = "".join(ex.to_json() + "\n" for ex in negatives)
    formats: list[Example] = []
    for path in sorted((HERE / "templates" / "formats").glob("*.txt")):
        formats += builder.examples(f"formats:{path.stem}", load_templates(path),
                                    FORMAT_EXAMPLES_PER_KIND, None)  # fmt: skip
    files["formats.jsonl"] = "".join(ex.to_json() + "\n" for ex in formats)
    prose: list[Example] = []
    for category in PROSE_CATEGORIES:
        path = HERE / "templates" / "prose" / f"{category}.txt"
        made = builder.each_once(f"prose:{category}", load_templates(path), f"prose:{category}")
        if len(made) < MIN_PROSE_PER_CATEGORY:
            raise CorpusBuildError(f"only {len(made)} prose negatives of {category}")
        prose += made
    if len(prose) < MIN_PROSE:
        raise CorpusBuildError(f"only {len(prose)} hand-written prose negatives")
    files["negatives.jsonl"] += "".join(ex.to_json() + "\n" for ex in prose)
    print(f"prose negatives: {dict(Counter(ex.aims for ex in prose))}", file=sys.stderr)
    aims = Counter(ex.aims for ex in negatives)
    print("kind           gold  evaded  negatives", file=sys.stderr)
    for k in KINDS:
        print(f"{k:<13} {gold[k]:5d}  {evaded[k]:6d}  {aims[k]:9d}", file=sys.stderr)
    print(f"negatives: {len(negatives)}", file=sys.stderr)
    for kind in KINDS:
        if gold[kind] < MIN_POSITIVES:
            raise CorpusBuildError(f"{kind} has {gold[kind]} gold values, fewer than 300")
        if kind in NUMBER_LIKE and evaded[kind] < MIN_EVADED_SHARE * gold[kind]:
            raise CorpusBuildError(f"too few evasion variants of {kind}")
        if aims[kind] < MIN_NEGATIVES_PER_AIM:
            raise CorpusBuildError(f"only {aims[kind]} negatives aim at {kind}")
    if len(negatives) < MIN_NEGATIVES:
        raise CorpusBuildError(f"only {len(negatives)} negatives")
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files on disk")
    args = parser.parse_args(argv)
    files = build()
    stale = [
        p
        for p, body in files.items()
        if not (HERE / p).exists() or (HERE / p).read_text(encoding="utf-8") != body
    ]
    if args.check:
        for p in stale:
            print(f"out of date: {p}", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        (HERE / p).parent.mkdir(parents=True, exist_ok=True)
        (HERE / p).write_text(files[p], encoding="utf-8")
    print(f"wrote {len(stale)} of {len(files)} files", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
