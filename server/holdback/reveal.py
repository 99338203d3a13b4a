"""Reveal levels: how much of a value a viewer is shown when a reply or the history restores it.

The rules:
- A value is shown at one of three levels: `plain` (the value), `masked` (a partial form that
  names the kind and keeps only what the kind's convention shows: the last four digits of a
  card, the first letter and the domain of an e-mail address, the last two digits of a phone
  number) or `label` (`[card number]`). A masked form never holds more than that, and a value
  too short to mask is shown as the mask alone.
- A `RevealPolicy` gives each kind (a detector kind, or a term list's label) one level, and a
  fallback for the kinds it does not name. Policies are values: equal policies are one key,
  so viewers who see alike share one restorer.
- A viewer's policy is resolved from the organisation's rules (`resolve`): the owner sees
  `plain`; anyone else, per kind, the most revealing level any of their groups gives it, else
  the organisation default's, else `label`. A kind marked *never restored* is shown to
  everyone, the owner too, at their level for it, and at `label` where that level is `plain`.
- Text the user typed as a token (`literal`) is the user's own words, and always shown plain;
  forbidden terms are never restored at all (`reply_index` keeps them out before this).

No I/O and no state: plain functions of values, used by the reply path and the history views.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, get_args

from holdback.errors import HoldbackError
from holdback.tokens import TokenIndex
from holdback.vault import VaultEntry

Level: TypeAlias = Literal["plain", "masked", "label"]
LEVELS: Final[tuple[Level, ...]] = get_args(Level)
MASK: Final = "\u2022"  # •
LITERAL: Final = "literal"
# How revealing each level is: a viewer in several groups gets the most revealing one.
_RANK: Final[Mapping[Level, int]] = {"label": 0, "masked": 1, "plain": 2}
# The label of a kind, as a reader would name it; any other kind (a term list) by its name.
LABELS: Final[Mapping[str, str]] = {
    "email": "email address",
    "phone": "phone number",
    "credit_card": "card number",
    "iban": "IBAN",
    "us_ssn": "SSN",
    "ip_address": "IP address",
    "secret": "secret",
    "name": "name",
}


class InvalidRevealLevelError(HoldbackError, ValueError):
    """A reveal level other than plain, masked or label."""


def check_level(text: str) -> Level:
    if text not in LEVELS:
        raise InvalidRevealLevelError(
            f"a reveal level is one of {', '.join(LEVELS)}, not {text[:40]!r}"
        )
    return text


def label(kind: str) -> str:
    """`[card number]`: what a value of `kind` is, and nothing of it."""
    return f"[{LABELS.get(kind, kind.replace('_', ' '))}]"


def masked(kind: str, value: str) -> str:
    """The partial form of a value of `kind` (see the module's rules)."""
    digits = "".join(c for c in value if c.isascii() and c.isdigit())
    if kind == "email":
        local, at, domain = value.rpartition("@")
        if at and len(local) >= 2 and domain:
            return f"{local[0]}{MASK * 3}@{domain}"
        return f"{MASK * 3}@{domain}" if at and domain else MASK * 3
    if kind == "credit_card" and len(digits) >= 12:
        return f"{MASK * 4} {digits[-4:]}"
    if kind == "phone" and len(digits) >= 6:
        return f"{MASK * 4} {digits[-2:]}"
    if kind == "us_ssn" and len(digits) == 9:
        return f"{MASK * 3}-{MASK * 2}-{digits[-4:]}"
    if kind == "iban":
        compact = "".join(value.split()).upper()
        if len(compact) >= 12:
            return f"{compact[:2]}{MASK * 2} {MASK * 4} {compact[-4:]}"
        return MASK * 4
    if kind == "ip_address":
        return _masked_address(value)
    if kind in ("credit_card", "phone", "us_ssn"):
        return MASK * 4
    if len(value) <= 3:
        return MASK * 3
    return f"{value[0]}{MASK * 3}"


def _masked_address(value: str) -> str:
    try:
        address = ipaddress.ip_address(value.strip("[]"))
    except ValueError:
        return MASK * 3
    if address.version == 4:
        return f"{str(address).split('.')[0]}.{MASK}.{MASK}.{MASK}"
    return f"{address.exploded.split(':')[0]}:{MASK * 3}"


def shown(kind: str, value: str, level: Level) -> str:
    """What a viewer at `level` is shown for a value of `kind`."""
    if level == "plain" or kind == LITERAL:
        return value
    if level == "masked":
        return masked(kind, value)
    return label(kind)


@dataclass(frozen=True, slots=True)
class RevealPolicy:
    """A level per kind (`levels`, sorted pairs) and one for every other kind (`fallback`)."""

    levels: tuple[tuple[str, Level], ...] = ()
    fallback: Level = "plain"

    @classmethod
    def of(cls, levels: Mapping[str, Level], fallback: Level) -> RevealPolicy:
        # Kinds at the fallback level need no entry: equal policies are equal values.
        kept = tuple(sorted((k, v) for k, v in levels.items() if v != fallback))
        return cls(kept, fallback)

    def level(self, kind: str) -> Level:
        for named, level in self.levels:
            if named == kind:
                return level
        return self.fallback

    @property
    def plain(self) -> bool:
        """Every value is shown as it is."""
        return self.fallback == "plain" and not self.levels

    def render(self, kind: str, value: str) -> str:
        return shown(kind, value, self.level(kind))

    def index(self, entries: Iterable[VaultEntry]) -> TokenIndex:
        """The restorer's index for this viewer: each token to its value as shown."""
        return TokenIndex({e.token: self.render(e.kind, e.value) for e in entries})


OWNER: Final = RevealPolicy()  # every value plain


@dataclass(frozen=True, slots=True)
class Rules:
    """The organisation's reveal rules: the default policy, each group's, never-restored kinds.

    `default` and each group's levels name kinds explicitly; a kind none of them names is
    shown at `label` to anyone but the owner.
    """

    default: Mapping[str, Level]
    groups: Mapping[str, Mapping[str, Level]]
    never_restore: frozenset[str] = frozenset()

    def for_viewer(self, *, owner: bool, groups: Iterable[str] = ()) -> RevealPolicy:
        return resolve(self, owner=owner, groups=groups)


NO_RULES: Final = Rules({}, {})


def resolve(rules: Rules, *, owner: bool, groups: Iterable[str] = ()) -> RevealPolicy:
    """The policy of a viewer: the conversation's owner, or a member of `groups`."""
    never = rules.never_restore
    if owner:
        levels: dict[str, Level] = {}
        for kind in never:
            levels[kind] = _not_plain(rules.default.get(kind, "label"))
        return RevealPolicy.of(levels, "plain")
    mine = [rules.groups[g] for g in groups if g in rules.groups]
    kinds = set(rules.default) | never | {k for levels in mine for k in levels}
    chosen: dict[str, Level] = {}
    for kind in kinds:
        named = [levels[kind] for levels in mine if kind in levels]
        level = max(named, key=_RANK.__getitem__) if named else rules.default.get(kind, "label")
        chosen[kind] = _not_plain(level) if kind in never else level
    return RevealPolicy.of(chosen, "label")


def _not_plain(level: Level) -> Level:
    return "label" if level == "plain" else level
