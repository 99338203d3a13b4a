"""`/api/admin/pattern-sets` and `/api/admin/people-lists`: a team's own detectors, edited live.

The rules:
- Admins only, like every `/api/admin/…` route (`admin_common.admin_route`). A pattern set is a
  name and its TOML (`docs/detectors.md`), sent as `{"toml": text}` or as JSON entries
  (`{"patterns": [{"label": ..., "regex": ...}, ...]}`); a people list is a name and its CSV,
  sent as `{"csv": text}` or as JSON rows (`{"people": [{"given", "family", "aliases"}]}`).
  Either way it is judged by the loader a file is (`team_detectors.check_definition`): what
  cannot be used is a 400 with the loader's reason (the entry or line, never a value), and
  nothing is stored. What is stored is sealed like the vault (`Store.save_team_detector`).
- A change holds for the next message at once on this server (`TermLists.reload`), and on
  others within seconds; a reply under way keeps the detectors it started with.
- The admin trail names the set or list, never its content. A definition is shown only to
  admins, and only on its own route; listings give labels and counts. The files given with
  `--patterns` and `--people` are listed as counts too, and are edited where they live.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from holdback.app.admin_common import admin_route, bad, record, refusals
from holdback.app.http_api import _body, _runtime, problem
from holdback.app.runtime import Runtime
from holdback.app.team_detectors import (
    Summary,
    check_definition,
    patterns_of,
    people_in,
    stored_people,
)
from holdback.app.team_forms import patterns_toml, people_csv, people_rows
from holdback.errors import ConfigurationError
from holdback.store.records import User
from holdback.store.team_detectors import TeamDetector, TeamSource, what

# Per source: its route's word, the listing's key, the text's field, the JSON form's field.
ROUTES: dict[TeamSource, tuple[str, str, str, str]] = {
    "patterns": ("pattern-sets", "pattern_sets", "toml", "patterns"),
    "people": ("people-lists", "people_lists", "csv", "people"),
}


def _counts(source: TeamSource, summary: Summary) -> dict[str, Any]:
    if source == "patterns":
        return {"labels": list(summary.labels), "entries": summary.entries}
    return {"people": summary.people}


def _summary(entry: TeamDetector) -> dict[str, Any]:
    """An entry as listed: its counts, or why it cannot be used now (its loader's words)."""
    out: dict[str, Any] = {"name": entry.name, "updated_at": entry.updated_at.isoformat()}
    try:
        out.update(_counts(entry.source, check_definition(entry.source, entry.name, entry.text)))
    except ConfigurationError as exc:
        out["error"] = str(exc)
    return out


def _file(runtime: Runtime, source: TeamSource) -> dict[str, Any] | None:
    """The file given for this source on the command line, as counts (never its path's content)."""
    path: Path | None = (
        runtime.settings.patterns_file if source == "patterns" else runtime.settings.people_file
    )
    if path is None:
        return None
    try:
        if source == "patterns":
            return _counts(source, Summary(labels=patterns_of(path).kinds))
        return _counts(source, Summary(people=len(people_in(path))))
    except ConfigurationError as exc:
        return {"error": str(exc)}


def _handlers(source: TeamSource) -> list[Route]:
    word, listing, text_field, json_field = ROUTES[source]
    noun = what(source)
    base = f"/api/admin/{word}"

    @admin_route
    async def list_entries(request: Request, admin: User) -> Response:
        runtime = _runtime(request)
        entries = await runtime.store.load_team_detectors(source)
        return JSONResponse(
            {listing: [_summary(e) for e in entries], "file": _file(runtime, source)}
        )

    @admin_route
    async def get_entry(request: Request, admin: User) -> Response:
        name = request.path_params["name"]
        entry = await _runtime(request).store.load_team_detector(source, name)
        if entry is None:
            return problem(404, "not_found", f"no such {noun}")
        shown = {**_summary(entry), text_field: entry.text}
        if source == "people" and "error" not in shown:
            shown["rows"] = people_rows(stored_people(name, entry.text))
        return JSONResponse(shown)

    @admin_route
    async def put_entry(request: Request, admin: User) -> Response:
        runtime = _runtime(request)
        name = request.path_params["name"]
        body = await _body(request)
        given = [f for f in (text_field, json_field) if body is not None and f in body]
        if body is None or len(given) != 1:
            return bad(
                f"send JSON with '{text_field}' (the {noun} as a file holds it) or "
                f"'{json_field}' (its {'entries' if source == 'patterns' else 'rows'}), "
                "one of the two"
            )
        try:
            if given[0] == text_field:
                text = body[text_field]
                if not isinstance(text, str):
                    return bad(f"'{text_field}' is the {noun}'s text, a string")
            elif source == "patterns":
                text = patterns_toml(body[json_field], name)
            else:
                text = people_csv(body[json_field], name)
            summary = check_definition(source, name, text)
        except ConfigurationError as exc:
            return bad(str(exc))  # the loader's reason: names entries and lines, never values
        with refusals():
            await runtime.store.save_team_detector(source, name, text)
        await record(runtime, admin, f"{source}.set", name)
        if runtime.terms is not None:
            await runtime.terms.reload()
        return JSONResponse({"name": name, **_counts(source, summary)})

    @admin_route
    async def delete_entry(request: Request, admin: User) -> Response:
        runtime = _runtime(request)
        name = request.path_params["name"]
        if not await runtime.store.delete_team_detector(source, name):
            return problem(404, "not_found", f"no such {noun}")
        await record(runtime, admin, f"{source}.delete", name)
        if runtime.terms is not None:
            await runtime.terms.reload()
        return Response(status_code=204)

    return [
        Route(base, list_entries, methods=["GET"], name=f"list_{listing}"),
        Route(f"{base}/{{name}}", get_entry, methods=["GET"], name=f"get_{source}"),
        Route(f"{base}/{{name}}", put_entry, methods=["PUT"], name=f"put_{source}"),
        Route(f"{base}/{{name}}", delete_entry, methods=["DELETE"], name=f"delete_{source}"),
    ]


routes = [*_handlers("patterns"), *_handlers("people")]
