"""The organisation's term lists (clients, staff, project code names) that the corpus uses.

Rule: no term may occur, as whole words and ignoring case, inside another term of any list,
and no term starts or ends with punctuation. Then every dictionary match in a sentence has
exactly one right answer, and the gold labels never have to pick between nested terms.
Terms are invented or rare enough that ordinary prose never says them by accident; the
generator's leak scan checks that on every sentence anyway.

The lists are built from fixed parts with a fixed seed and written to `terms/<kind>.txt`.
"""

from __future__ import annotations

import random
import re

CLIENT_STEMS = (
    "Acme", "Globex", "Initech", "Vandelay", "Zentrix", "Quorvane", "Brightwell", "Halvorsen",
    "Oskarsson", "Kettleby", "Marwick", "Pendleford", "Vostrikov", "Tamberlane", "Ildrith",
    "Corvanta", "Myrtledge", "Ostrander", "Quillfeather", "Ravensholt", "Sandoval", "Thorncastle",
    "Umbridge", "Valtieri", "Wexmoor", "Yarborough", "Zephyrion", "Abernethy", "Bellcourt",
    "Carrowmore", "Dunleavy", "Eldermoor", "Fairhaven", "Greystroke", "Hollinsworth", "Ironvale",
    "Jessamine", "Kilbride", "Larkspur", "Mossgiel", "Northcote", "Orrington", "Pemberton",
    "Quarrington", "Rosenthal", "Stellaris", "Tregothnan", "Ulverston", "Verwood", "Whitlock",
    "Xanthos", "Ystrad", "Zoltanek", "Amberline", "Blackridge", "Cinderford", "Drummond",
    "Emberton", "Foxborough", "Glenrothes", "Harrowgate", "Inverkip", "Jorvik", "Kestwick",
    "Lindenhof", "Merriweather", "Nettlefield", "Oakhurst", "Prestwick", "Quenby", "Redcastle",
    "Silverdale", "Trelawney", "Upperthorpe", "Vexley", "Wolfenden", "Yelverton", "Zanzotto",
    "Aldercroft", "Brennock", "Calderwood", "Dovecote", "Elmsworth", "Farrowdale", "Gaultier",
    "Hexworth", "Isenbrook", "Juniperra", "Kingsolver", "Lochmere", "Montague-Reyes",
    "Nordvik", "Okafor-Dunn", "Pellucid", "Quintessa", "Rutherglen", "Strathmore", "Tolliver",
    "Ufficio", "Valderrama", "Wyndham", "Xerxia", "Yamaguchi-Hart", "Zellweger", "Arcturo",
    "Belvoir", "Castellan", "Dextera", "Everhart", "Fennimore", "Galloway", "Hadrian",
    "Ingleby", "Jaspertown", "Kilmarnock", "Lorimer", "Mallowan", "Nightingale-Ross", "Orsino",
    "Pennyroyal", "Quaritch", "Rookwood", "Sallow", "Tennant-Bligh", "Ulrich", "Verity",
    "Whistler", "Yorke", "Zaragoza-Lind", "Ashcombe", "Birchall", "Coldharbour",
)  # fmt: skip
CLIENT_SUFFIXES = (
    "Holdings", "Industries", "Logistics", "Capital", "Labs", "Group", "Partners", "Systems",
    "GmbH", "Foods", "Pharma", "Analytics", "Maritime", "Energy", "Insurance", "Retail",
    "Biotech", "& Sons", "Textiles", "Aerospace", "Ventures", "Robotics", "Hotels", "Bank",
    "Mining", "Media", "S.A", "AG", "Kft", "Ltd",
)  # fmt: skip

FIRST_NAMES = (
    "Sarah", "Jürgen", "Aoife", "Siobhán", "Zoë", "José", "Björn", "Mateo", "Priyanka",
    "Oluwaseun", "Hiroshi", "Margarethe", "Thandiwe", "Ciarán", "Anneliese", "Rafaela",
    "Dmitri", "Ingeborg", "Kwabena", "Leocadia", "Maximilian", "Nkechi", "Ottoline", "Perpetua",
    "Quentin", "Rosalind", "Svetlana", "Tobias", "Ulrike", "Valentina", "Wilhelmina",
    "Xiomara", "Yevgenia", "Zebedee", "Annika", "Bartholomew", "Cordelia", "Desmond",
    "Evangeline", "Florentyna", "Gwendolyn", "Horatio", "Isolde", "Jarrah", "Kasimir",
    "Lavinia", "Mortimer", "Niamh", "Octavia", "Peregrine", "Radomir", "Saoirse", "Thaddeus",
    "Ursula", "Vasilisa", "Wendell", "Ximena", "Yolanda", "Zygmunt", "Mei-Ling", "Jean-Luc",
)  # fmt: skip
LAST_NAMES = (
    "O'Brien", "O'Neill", "D'Angelo", "Smith-Jones", "García", "Nguyen", "Müller",
    "Van der Berg", "Okonkwo-Bello", "Fitzgerald", "Lindqvist", "Kowalczyk", "Abernathy",
    "Vasquez-Ortiz", "McAllister", "Thistlewood", "Oyelaran", "Brandvold", "Castellanos",
    "Dziedzic", "Eriksdottir", "Featherstonehaugh", "Grimaldi", "Haverkamp", "Iwasaki",
    "Jankowska", "Kristiansen", "Laurentis", "Marchetti", "Nakagawa", "Ostrowski", "Pellegrino",
    "Quiñones", "Rasmussen", "Szymańska", "Takahashi", "Ulyanova", "Vanterpool", "Wojciechowski",
    "Xenakis", "Yilmaz", "Zografos", "De la Cruz", "MacGillivray", "Ní Bhriain", "Achterberg",
    "Bellweather", "Coulthard", "Delacroix", "Etheridge", "Fairweather-Lowe", "Gallagher",
    "Holloway", "Ignatieva", "Jelinek", "Kavanagh-Price", "Lockhart", "Montgomery", "Nightly",
    "Ortolani", "Prendergast", "Quartermaine", "Ravenscroft", "Stavropoulos", "Tremblay",
    "Underhill", "Villanueva", "Whitcombe", "Yardley", "Zubiri",
)  # fmt: skip

PROJECT_ADJECTIVES = (
    "Amber", "Silent", "Crimson", "Velvet", "Iron", "Hollow", "Copper", "Jade", "Obsidian",
    "Cobalt", "Saffron", "Midnight", "Scarlet", "Ivory", "Onyx", "Glass", "Frozen", "Gilded",
    "Sunken", "Restless", "Distant", "Emerald", "Violet", "Azure", "Russet",
)  # fmt: skip
PROJECT_NOUNS = (
    "Kestrel", "Falcon", "Heron", "Lynx", "Orca", "Meridian", "Lantern", "Tundra", "Quarry",
    "Sparrow", "Monsoon", "Glacier", "Citadel", "Comet", "Nebula", "Marten", "Osprey",
    "Pelican", "Cormorant", "Ibex", "Jackal", "Tamarind", "Wolverine", "Basilisk", "Gryphon",
)  # fmt: skip
PROJECT_CODES = (
    "Bluejay-7", "Nimbus-X2", "Halcyon-9", "Zephyrine", "Quillon", "Marrowgate", "Tidewrack",
    "Skylark-4", "Greyhaven", "Thornback", "Starling-12", "Vantablue", "Crosswind-3", "Ashfall",
    "Dovetail-8", "Emberlight", "Farsight-5", "Gloamwood", "Hearthstone-2", "Ironbark",
    "Juniper-6", "Keystone-11", "Lodestar-1", "Moonraker-3", "Nightjar", "Outrider-9",
    "Pathfinder-7", "Quicksilver-4", "Riverrun", "Sandpiper-5", "Thunderhead", "Umberfall",
    "Vanguard-10", "Wayfarer-2", "Xylem-3", "Yellowtail", "Zenith-8", "Aurora-6", "Brimstone",
    "Cassiopeia", "Driftwood-4", "Eventide", "Foxglove-9", "Gossamer", "Harbinger-3",
)  # fmt: skip

TERM_KINDS = ("client", "person", "project")
_WORD = re.compile(r"\w")


def _nests(small: str, big: str) -> bool:
    """Whether `small` occurs in `big` on word boundaries, ignoring case."""
    s, b = small.casefold(), big.casefold()
    start = b.find(s)
    while start != -1:
        end = start + len(s)
        before = b[start - 1] if start > 0 else " "
        after = b[end] if end < len(b) else " "
        if not _WORD.match(before) and not _WORD.match(after):
            return True
        start = b.find(s, start + 1)
    return False


def _case_safe(term: str) -> bool:
    """Upper- and lower-casing must keep the length, or spans would shift (e.g. `ß`)."""
    return len(term.upper()) == len(term) == len(term.lower())


def build_term_lists(seed: int = 13) -> dict[str, list[str]]:
    rng = random.Random(seed)
    stems = [s for s in CLIENT_STEMS if s != "Acme"]
    rng.shuffle(stems)
    stems.insert(40, "Acme")
    single, multi = stems[:40], stems[40:]
    clients = list(single)
    for stem in multi:
        suffixes = rng.sample(CLIENT_SUFFIXES, 3)
        if stem == "Acme" and "Holdings" not in suffixes:
            suffixes[0] = "Holdings"  # the issue's own example
        clients.extend(f"{stem} {suffix}" for suffix in suffixes)
    people = sorted({f"{f} {last}" for f in FIRST_NAMES for last in LAST_NAMES})
    people = rng.sample(people, 320)
    projects = [f"{a} {n}" for a in PROJECT_ADJECTIVES for n in PROJECT_NOUNS]
    projects = rng.sample(projects, 270) + list(PROJECT_CODES)
    lists = {"client": sorted(clients), "person": sorted(people), "project": sorted(projects)}
    every = [t for terms in lists.values() for t in terms]
    for term in every:
        if not _case_safe(term) or not (term[0].isalnum() and term[-1].isalnum()):
            raise ValueError(f"term {term!r} breaks the term-list rule")
    folded = sorted({t.casefold() for t in every}, key=len)
    if len(folded) != len(every):
        raise ValueError("a term appears twice")
    for i, small in enumerate(folded):
        for big in folded[i + 1 :]:
            if _nests(small, big):
                raise ValueError(f"term {small!r} nests inside {big!r}")
    return lists
