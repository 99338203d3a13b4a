"""The corpus of a team's detectors: sentences marked with the values they hold, for precision
and recall (`test_team_corpus.py`, and the figures in docs/detectors.md).

A marked value is `[[text|kind]]`. Positives come from the people list below and the formats of
`PATTERNS`, written in the forms people write them; negatives are the same family names as
ordinary words (`the baker`, `young people`), names that are not on the list, and identifiers
one character off, with a failing check digit, or inside a longer word.
"""

from __future__ import annotations

import re
from itertools import cycle

PEOPLE_CSV = """given,family,aliases
Sarah Jane,Connor,Sally
Tom,Baker,Tommy
Olivia,Young,Liv
Ibrahim,Okafor,
José,García,Pepe
Mei,Lin,
Hannah,Rose,
Arjun,Mehta,
Grace,Hunt,
Lukas,Schneider,
Amara,Nwosu,
Peter,Stone,
Chloé,Dubois,
Kenji,Watanabe,
Fiona,Walker,
Dmitri,Volkov,
Ana,Silva,
Oliver,King,
Priya,Nair,
Liam,Murphy,
"""

PATTERNS_TOML = r"""
[[pattern]]
label = "account"
regex = ['ACC-\d{4}-\d{5}']
match = ["ACC-2024-00817"]
no_match = ["ACC-2024-0081"]

[[pattern]]
label = "matter"
regex = ['MAT/\d{5}']
context = ["matter", "file", "case"]
match = ["matter MAT/88213"]
no_match = ["MAT/88213"]

[[pattern]]
label = "policy"
regex = ['PL\d{9}[\dX]']
validator = "mod11"
match = ["PL0306406152"]
no_match = ["PL0306406153"]

[[pattern]]
label = "employee"
regex = ['E\d{6}']
context = ["employee", "staff", "badge"]
context_window = 30
match = ["employee E204417"]
"""

# (given, family) as the corpus writes them; the family names that are common words need a
# title, an initial or a given name.
NAMES = [
    ("Sarah", "Connor"), ("Tom", "Baker"), ("Olivia", "Young"), ("Ibrahim", "Okafor"),
    ("José", "García"), ("Mei", "Lin"), ("Hannah", "Rose"), ("Arjun", "Mehta"),
    ("Grace", "Hunt"), ("Lukas", "Schneider"), ("Amara", "Nwosu"), ("Peter", "Stone"),
    ("Chloé", "Dubois"), ("Kenji", "Watanabe"), ("Fiona", "Walker"), ("Dmitri", "Volkov"),
    ("Ana", "Silva"), ("Oliver", "King"), ("Priya", "Nair"), ("Liam", "Murphy"),
]  # fmt: skip
COMMON = {"Baker", "Young", "Rose", "Hunt", "Stone", "Walker", "King"}

FORMS = [
    "{g} {f}", "Ms {f}", "Dr. {f}", "{i}. {f}", "{f}, {g}", "{G} {F}", "{g} {f}'s", "Prof {f}",
    "{i} {f}", "Mr. {f}", "{g} {f}".lower(),
]  # fmt: skip
PERSON_TEMPLATES = [
    "Please send the draft to {p} before Friday.",
    "I met {p} at the hearing yesterday.",
    "Can you summarise the notes from {p}?",
    "The letter was signed by {p} and countersigned later.",
    "{p} asked whether the deadline could move.",
    "We still owe {p} an answer on the settlement.",
]
NEGATIVES = [
    "The baker opened early and the bread was still warm.",
    "Young people voted in large numbers this year.",
    "She planted a rose by the gate.",
    "The hunt for a new office took months.",
    "A stone wall runs along the lane.",
    "Every walker on the trail carried water.",
    "The king in the story never speaks.",
    "Ask the baker for a receipt.",
    "He looked young for his age.",
    "The treasure hunt starts at noon.",
    "We cut the stone to size.",
    "The dog walker arrives at eight.",
    "King-size beds cost more.",
    "Rose-coloured glasses again.",
    "Sarah said hello; she is new here.",
    "[[Connor|person]] is on our list, but Connors Ltd is a supplier.",
    "Mr Smith and Dr Jones are not clients.",
    "John Carter called about the invoice.",
    "Meet me at Lincoln Square.",
    "The silva forest report is overdue.",
    "Reference ACC-2024-0081 is one digit short.",
    "XACC-2024-00817 is part of a longer code.",
    "ACC-2024-008171 has too many digits.",
    "The code MAT/88213 appeared without any context at all here.",
    "Policy PL0306406153 fails its check digit.",
    "Order E204417 shipped on Monday.",
    "Version 2024-00817 of the spec.",
    "The murphy bed folds away.",
    "Nair is a town and also a word in some languages.",
    "It was a young, fine day.",
]
ID_SENTENCES = [
    "The account [[ACC-2024-00817|account]] is overdue.",
    "Move funds from [[acc-2023-11872|account]] to savings.",
    "Accounts [[ACC-2021-00001|account]] and [[ACC-2021-00002|account]] were merged.",
    "The matter [[MAT/88213|matter]] is listed for March.",
    "[[MAT/10442|matter]] is the file we discussed.",
    "Case ref: [[MAT/55120|matter]].",
    "Policy [[PL0306406152|policy]] renews in June.",
    "Check [[pl080442957X|policy]] before the call.",
    "The employee id [[E204417|employee]] was revoked.",
    "Badge [[E100233|employee]] opened the door at 02:14.",
    "Staff member [[E555019|employee]] is on leave.",
    "Your account number is [[ACC-2019-44120|account]], keep it safe.",
    "Please file the matter under [[MAT/77001|matter]].",
    "Both [[PL0306406152|policy]] and [[PL080442957X|policy]] lapsed.",
    "The account: [[ACC-2024-00999|account]].",
    "For the matter at hand, see [[MAT/20301|matter]].",
    "Employee [[E777102|employee]] and employee [[E777103|employee]] swapped shifts.",
    "Write to [[Sarah Connor|person]] about [[ACC-2024-00817|account]].",
    "[[Dr. Okafor|person]] holds the file [[MAT/31337|matter]].",
    "[[Ms Young|person]] renewed [[PL0306406152|policy]].",
]


def _people_sentences() -> list[str]:
    out: list[str] = []
    templates = cycle(PERSON_TEMPLATES)
    for given, family in NAMES:
        for form in FORMS:
            text = form.format(g=given, f=family, i=given[0], G=given.upper(), F=family.upper())
            value = text.removesuffix("'s")
            rest = text[len(value) :]
            out.append(next(templates).format(p=f"[[{value}|person]]{rest}"))
    # A common-word family name alone is the word, and is not marked.
    for family in sorted(COMMON):
        out.append(f"I spoke with {family} about it.")
    # Family names that are not common words are found alone.
    for _, family in NAMES:
        if family not in COMMON:
            out.append(f"Tell [[{family}|person]] the news.")
    return out


# Forms people write that are not matched whole (a hyphenated given name, two initials, the
# family name first with an initial after): counted, to keep the recall honest.
HARD = [
    "Ask [[Sarah-Jane Connor|person]] to call back.",
    "Per [[S.J. Connor|person]]'s memo, we wait.",
    "[[Connor S.|person]] filed it on Monday.",
]

CORPUS: list[str] = [*_people_sentences(), *ID_SENTENCES, *NEGATIVES, *HARD]

_MARK = re.compile(r"\[\[(.+?)\|(\w+)\]\]")


def unmarked(sentence: str) -> tuple[str, set[tuple[int, int, str]]]:
    """The sentence as written, and the spans of its marked values (start, end, kind)."""
    spans: set[tuple[int, int, str]] = set()
    out: list[str] = []
    pos = length = 0
    for m in _MARK.finditer(sentence):
        out.append(sentence[pos : m.start()])
        length += m.start() - pos
        spans.add((length, length + len(m.group(1)), m.group(2)))
        out.append(m.group(1))
        length += len(m.group(1))
        pos = m.end()
    out.append(sentence[pos:])
    return "".join(out), spans
