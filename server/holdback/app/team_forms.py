"""A team's detectors in JSON form, as the text a file holds: pattern entries as TOML, people
rows as CSV.

The rule: there is one stored form of a pattern set (its TOML) and of a people list (its CSV),
the one a file holds and the loaders read; the JSON forms the HTTP API also takes are written
into it, and what is written reads back as exactly what was sent (checked), so a JSON entry is
judged by the same loader, with the same errors, as the file's. Errors name the entry or row by
position and the field, never a value.
"""

from __future__ import annotations

import csv
import io
import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

from holdback.detect.people import PeopleFileError, Person
from holdback.detect.team_patterns import PatternFileError

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
PEOPLE_HEADER = ("given", "family", "aliases")


def _toml_string(text: str) -> str:
    """A TOML string: literal (`'\\d{4}'`, backslashes as written) where it can be, else basic."""
    if "'" not in text and all(c == "\t" or (c >= " " and c != "\x7f") for c in text):
        return f"'{text}'"
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(value: object, where: str, field: str) -> str:
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[" + ", ".join(_toml_string(v) for v in value) + "]"
    raise PatternFileError(
        f"{where}: {field} must be a string, a whole number or a list of strings"
    )


def patterns_toml(entries: object, name: str) -> str:
    """Pattern entries (a list of objects with `label`, `regex`, ...) as a patterns file."""
    where = f"pattern set {name!r}"
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise PatternFileError(f"{where}: 'patterns' is a list of entries (objects)")
    parts: list[str] = []
    for i, entry in enumerate(entries, 1):
        lines = ["[[pattern]]"]
        for key, value in entry.items():
            if not isinstance(key, str) or not _BARE_KEY.fullmatch(key):
                raise PatternFileError(f"{where}: entry {i}: a field's name is not usable")
            lines.append(f"{key} = {_toml_value(value, f'{where}: entry {i}', key)}")
        parts.append("\n".join(lines))
    text = "\n\n".join(parts) + "\n" if parts else ""
    # What is written must read back as what was sent, or the loader would judge another thing.
    if tomllib.loads(text) != ({"pattern": entries} if entries else {}):
        raise PatternFileError(f"{where}: the entries cannot be written as TOML")
    return text


def _names(value: object, where: str, field: str, *, required: bool) -> list[str]:
    if value is None:
        if required:
            raise PeopleFileError(f"{where}: {field} is required")
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PeopleFileError(f"{where}: {field} must be a string or a list of strings")
    names = [v.strip() for v in value if v.strip()]
    if required and not names:
        raise PeopleFileError(f"{where}: {field} is required")
    return names


def people_csv(rows: object, name: str) -> str:
    """People rows (objects with `given`, `family` and optional `aliases`) as a people file."""
    where = f"people list {name!r}"
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        raise PeopleFileError(f"{where}: 'people' is a list of rows (objects)")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(PEOPLE_HEADER)
    for i, row in enumerate(rows, 1):
        at = f"{where}, row {i}"
        unknown = sorted(set(row) - set(PEOPLE_HEADER))
        if unknown:
            raise PeopleFileError(f"{at}: unknown field {str(unknown[0])[:40]!r}")
        given = _names(row.get("given"), at, "given", required=False)
        family = _names(row.get("family"), at, "family", required=True)
        aliases = _names(row.get("aliases"), at, "aliases", required=False)
        if len(family) != 1:
            raise PeopleFileError(f"{at}: family is one name")
        if any(c in alias for alias in aliases for c in "|;"):
            raise PeopleFileError(f"{at}: an alias cannot hold | or ;")
        if any(c in cell for cell in (*given, *family, *aliases) for c in "\r\n"):
            raise PeopleFileError(f"{at}: a name is one line")
        if given and given[0].startswith("#"):
            raise PeopleFileError(f"{at}: a given name cannot start with # (a comment)")
        writer.writerow([" ".join(given), family[0], "|".join(aliases)])
    return out.getvalue()


def people_rows(people: Sequence[Person]) -> list[dict[str, Any]]:
    """People as the JSON rows `people_csv` takes (for an admin's own view of a list)."""
    return [
        {"given": " ".join(p.given), "family": p.family, "aliases": list(p.aliases)} for p in people
    ]
