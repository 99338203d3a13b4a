"""`/api/admin/groups`: the team's groups and their members (reveal levels are per group).

The rules:
- A group is a name (1 to 200 characters, no control characters) and its members, users by
  name. A rename that keeps the name, or a membership that was so already, changes nothing
  and is not recorded.
- Deleting a group takes its reveal levels and shares with it, so the reveal rules change at
  once (`rules_changed`), as for a policy change.
- Adding a member answers the group (201 when they joined, 200 when they were in it);
  removing one who was not in the group is a 404.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from holdback.app.admin_common import admin_route, bad, record, refusals
from holdback.app.http_api import _body, _runtime, name_of, problem
from holdback.store.records import Group, User


def group_json(group: Group) -> dict[str, Any]:
    return {
        "id": group.id,
        "name": group.name,
        "created_at": group.created_at.isoformat(),
        "members": list(group.members),
    }


@admin_route
async def list_groups(request: Request, admin: User) -> Response:
    groups = await _runtime(request).store.list_groups()
    return JSONResponse({"groups": [group_json(g) for g in groups]})


@admin_route
async def create_group(request: Request, admin: User) -> Response:
    runtime = _runtime(request)
    name = name_of(await _body(request), "name")
    if name is None:
        return bad("send JSON with a 'name' of 1 to 200 characters, no control characters")
    with refusals():
        group = await runtime.store.create_group(name)
    await record(runtime, admin, "group.create", name)
    return JSONResponse(group_json(group), status_code=201)


@admin_route
async def rename_group(request: Request, admin: User) -> Response:
    runtime = _runtime(request)
    old = request.path_params["name"]
    new = name_of(await _body(request), "name")
    if new is None:
        return bad("send JSON with the new 'name' of 1 to 200 characters")
    with refusals():
        group = await runtime.store.rename_group(old, new)
    if new != old:
        await record(runtime, admin, "group.rename", old, "->", new)
    return JSONResponse(group_json(group))


@admin_route
async def delete_group(request: Request, admin: User) -> Response:
    runtime = _runtime(request)
    name = request.path_params["name"]
    with refusals():
        await runtime.store.delete_group(name)
    runtime.service.rules_changed()  # its levels went with it
    await record(runtime, admin, "group.delete", name)
    return Response(status_code=204)


async def _membership(request: Request, admin: User, adding: bool) -> Response:
    runtime = _runtime(request)
    group, user = request.path_params["name"], request.path_params["user"]
    with refusals():
        change = runtime.store.add_member if adding else runtime.store.remove_member
        changed = await change(group, user)
        found = await runtime.store.get_group(group)
    if changed:
        await record(runtime, admin, "group.member.add" if adding else "group.member.remove",
                     group, user)  # fmt: skip
    if not adding:
        if not changed:
            return problem(404, "not_found", "that user is not in that group")
        return Response(status_code=204)
    if found is None:  # deleted in between
        return problem(404, "not_found", "no such group")
    return JSONResponse(group_json(found), status_code=201 if changed else 200)


@admin_route
async def add_member(request: Request, admin: User) -> Response:
    return await _membership(request, admin, True)


@admin_route
async def remove_member(request: Request, admin: User) -> Response:
    return await _membership(request, admin, False)
