"""`/api/admin/policies` and `/api/admin/never-restore`: how values are shown to viewers.

The rules:
- A level is set per kind for the organisation's default (the scope `default`) or for a
  group; a kind is lower-case letters, digits, `_` and `-`, checked before the store is.
- A policy change holds for the next reply on this server at once (`rules_changed`), and on
  the others within a second (`pipeline.RULES_TTL`).
- A never-restored kind is shown plain to nobody, owners included, whatever the levels say.
- The preview shows how sample values would read to a viewer; nothing of it is stored,
  recorded or logged, and the samples are sent back only as shown.
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from holdback.app.admin_common import admin_route, bad, record, refusals
from holdback.app.http_api import _body, _runtime, problem
from holdback.reveal import LEVELS, check_level
from holdback.store.records import User

MAX_PREVIEW_VALUES = 100
MAX_PREVIEW_CHARS = 1000
DEFAULT_SCOPE = "default"  # the organisation's default levels in a policy route
_KIND = re.compile(r"[a-z0-9][a-z0-9_-]{0,199}\Z")  # `store.team.check_kind`
_BAD_KIND = (
    "a kind is lower-case letters, digits, '_' and '-', at most 200 (e.g. 'email', 'client-names')"
)


def _kind(text: object) -> str | None:
    return text if isinstance(text, str) and _KIND.match(text) else None


def _scope(text: str) -> str | None:
    """A policy route's scope: None for the organisation's default, else a group's name."""
    return None if text == DEFAULT_SCOPE else text


@admin_route
async def list_policies(request: Request, admin: User) -> Response:
    store = _runtime(request).store
    levels = await store.list_levels()
    never = (await store.reveal_rules()).never_restore
    return JSONResponse(
        {
            "levels": [
                {
                    "scope": s.group if s.group is not None else DEFAULT_SCOPE,
                    "group": s.group,
                    "kind": s.kind,
                    "level": s.level,
                    "updated_at": s.updated_at.isoformat(),
                }
                for s in levels
            ],
            "never_restore": sorted(never),
            "available_levels": list(LEVELS),
        }
    )


@admin_route
async def set_policy(request: Request, admin: User) -> Response:
    runtime = _runtime(request)
    scope = request.path_params["scope"]
    kind = _kind(request.path_params["kind"])
    if kind is None:
        return bad(_BAD_KIND)
    body = await _body(request)
    level = body.get("level") if body else None
    if level not in LEVELS:
        return bad(f"send JSON with a 'level': one of {', '.join(LEVELS)}")
    with refusals():
        changed = await runtime.store.set_level(_scope(scope), kind, check_level(level))
    runtime.service.rules_changed()
    if changed:
        await record(runtime, admin, "policy.set", scope, kind, level)
    return JSONResponse({"scope": scope, "kind": kind, "level": level, "changed": changed})


@admin_route
async def clear_policy(request: Request, admin: User) -> Response:
    runtime = _runtime(request)
    scope = request.path_params["scope"]
    kind = _kind(request.path_params["kind"])
    if kind is None:
        return bad(_BAD_KIND)
    with refusals():
        changed = await runtime.store.clear_level(_scope(scope), kind)
    runtime.service.rules_changed()
    if not changed:
        return problem(404, "not_found", "no level is set for that kind there")
    await record(runtime, admin, "policy.clear", scope, kind)
    return Response(status_code=204)


@admin_route
async def never_restore(request: Request, admin: User) -> Response:
    runtime = _runtime(request)
    body = await _body(request)
    kind = _kind(body.get("kind") if body else None)
    if kind is None:
        return bad("send JSON with the 'kind': " + _BAD_KIND)
    changed = await runtime.store.never_restore(kind)
    runtime.service.rules_changed()
    if changed:
        await record(runtime, admin, "policy.never_restore", kind)
    return JSONResponse(
        {"kind": kind, "never_restore": True, "changed": changed},
        status_code=201 if changed else 200,
    )


@admin_route
async def allow_restore(request: Request, admin: User) -> Response:
    runtime = _runtime(request)
    kind = _kind(request.path_params["kind"])
    if kind is None:
        return bad(_BAD_KIND)
    changed = await runtime.store.allow_restore(kind)
    runtime.service.rules_changed()
    if not changed:
        return problem(404, "not_found", "that kind is not marked never restored")
    await record(runtime, admin, "policy.allow_restore", kind)
    return Response(status_code=204)


@admin_route
async def preview_policy(request: Request, admin: User) -> Response:
    """How sample values would be shown to a viewer: the owner (`"owner": true`), or a
    member of `groups` (names; none: the organisation default; also as `group`, or in
    `viewer`). Nothing is stored or logged; the samples are sent back only as shown."""
    store = _runtime(request).store
    body = await _body(request)
    usage = (
        "send JSON with 'values': [{'kind', 'value'}] (at most "
        f"{MAX_PREVIEW_VALUES}), and 'groups': [names] or 'owner': true"
    )
    if body is None:
        return bad(usage)
    viewer = body.get("viewer")
    if isinstance(viewer, dict):  # {"viewer": {"groups": [...], "owner": false}}
        body = {**body, **viewer}
    elif viewer is not None:  # {"viewer": [group names]}
        body = {**body, "groups": viewer}
    names = body.get("groups", [])
    if isinstance(body.get("group"), str):
        names = [body["group"]]
    owner = body.get("owner", False)
    values = body.get("values")
    if (
        not isinstance(names, list)
        or not all(isinstance(n, str) for n in names)
        or not isinstance(owner, bool)
        or not isinstance(values, list)
        or len(values) > MAX_PREVIEW_VALUES
    ):
        return bad(usage)
    samples: list[tuple[str, str]] = []
    for item in values:
        kind = _kind(item.get("kind")) if isinstance(item, dict) else None
        value = item.get("value") if isinstance(item, dict) else None
        if kind is None or not isinstance(value, str) or len(value) > MAX_PREVIEW_CHARS:
            return bad(usage + "; " + _BAD_KIND)
        samples.append((kind, value))
    groups = {g.name: g.id for g in await store.list_groups()}
    if any(n not in groups for n in names):
        return problem(404, "not_found", "no such group")
    rules = await store.reveal_rules()
    policy = rules.for_viewer(owner=owner, groups=[groups[n] for n in names])
    return JSONResponse(
        {
            "owner": owner,
            "groups": names,
            "values": [
                {"kind": kind, "level": policy.level(kind), "shown": policy.render(kind, value)}
                for kind, value in samples
            ],
        }
    )
