"""`/api/audit`: the trail of reveals and admin actions, for admins, as JSON or CSV.

The rules:
- Admins only (`admin_common.admin_route`); reading the trail is not itself recorded.
- The trail holds tokens, kinds and names, never a value (`store.audit_log`).
- Newest first; `since` is inclusive and `until` exclusive (ISO times, UTC when no zone is
  given); at most `MAX_EVENTS` rows. A `user` may be a deleted user's id, whose events keep it.
- The audit is JSON or CSV (`format=csv`); a CSV cell that a spreadsheet would take for a
  formula (`=`, `+`, `-`, `@`, tab, CR) is written as text, with a leading `'`.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from holdback.app.admin_common import admin_route, bad
from holdback.app.http_api import _runtime, problem
from holdback.store.records import AdminEvent, RevealEvent, User

MAX_EVENTS = 10_000  # `store.audit_log.MAX_EVENTS`
_ID = re.compile(r"[0-9a-f]{32}\Z")
AUDIT_COLUMNS = (
    "time",
    "event",
    "user",
    "user_id",
    "conversation_id",
    "message_id",
    "token",
    "kind",
    "level",
    "target",
)


def _moment(text: str | None) -> datetime | None:
    if text is None or text == "":
        return None
    moment = datetime.fromisoformat(text)  # ValueError for the caller
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def csv_cell(text: str | None) -> str:
    """A cell a spreadsheet shows as text: one that could start a formula gets a `'`."""
    if text is None:
        return ""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _reveal_row(event: RevealEvent, names: dict[str, str]) -> dict[str, str | None]:
    return {
        "time": event.created_at.isoformat(),
        "event": "reveal",
        "user": names.get(event.viewer_id or ""),
        "user_id": event.viewer_id,
        "conversation_id": event.conversation_id,
        "message_id": event.message_id,
        "token": event.token,
        "kind": event.kind,
        "level": event.level,
        "target": None,
    }


def _admin_row(event: AdminEvent, names: dict[str, str]) -> dict[str, str | None]:
    return {
        "time": event.created_at.isoformat(),
        "event": event.action,
        "user": names.get(event.actor_id or "") if event.actor_id else "(command line)",
        "user_id": event.actor_id,
        "conversation_id": None,
        "message_id": None,
        "token": None,
        "kind": None,
        "level": None,
        "target": event.target,
    }


@admin_route
async def audit(request: Request, admin: User) -> Response:
    """The trail, newest first: the reveals (to `user`, in `conversation`) and, unless a
    conversation is asked for, the admin actions (by `user`), within `since`..`until`."""
    store = _runtime(request).store
    query = request.query_params
    try:
        since, until = _moment(query.get("since")), _moment(query.get("until"))
    except ValueError:
        return bad("since and until are ISO times, e.g. 2026-12-01T09:00:00Z")
    try:
        limit = int(query.get("limit", "1000"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_EVENTS:
        return bad(f"limit is a number from 1 to {MAX_EVENTS}")
    conversation = query.get("conversation") or None
    if conversation is not None and not _ID.match(conversation):
        return bad("conversation is a conversation's id")
    users = await store.list_users()
    names = {u.id: u.name for u in users}
    viewer: str | None = None
    if query.get("user"):
        name = query["user"]
        viewer = next((u.id for u in users if u.name == name), None)
        if viewer is None and _ID.match(name):
            viewer = name  # a deleted user's events keep their id
        if viewer is None:
            return problem(404, "not_found", "no such user")
    reveals = await store.list_reveal_events(
        viewer_id=viewer, conversation_id=conversation, since=since, until=until, limit=limit
    )
    rows = [(e.created_at, _reveal_row(e, names)) for e in reveals]
    if conversation is None:
        actions = await store.list_admin_events(
            actor_id=viewer, since=since, until=until, limit=limit
        )
        rows += [(e.created_at, _admin_row(e, names)) for e in actions]
    rows.sort(key=lambda row: row[0], reverse=True)
    events = [row for _, row in rows[:limit]]
    if query.get("format") == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(AUDIT_COLUMNS)
        writer.writerows([csv_cell(event[c]) for c in AUDIT_COLUMNS] for event in events)
        return Response(
            out.getvalue(),
            media_type="text/csv",
            headers={"Content-Disposition": 'attachment; filename="holdback-audit.csv"'},
        )
    return JSONResponse({"events": events})
