"""`/api/admin/users` and `/api/admin/tokens`: the team's users, and their API tokens.

The rules:
- A password is 8 to 1024 characters, hashed off the event loop; it is never recorded or
  answered. A new password ends the user's sessions (their API tokens stay).
- A new API token's text is in the answer that creates it and nowhere else: lists show ids,
  names, owners and times only.
- An admin cannot disable or delete themselves (another admin can), so no admin locks
  themselves out by mistake; the store keeps the last admin from being deleted or demoted.
- A deleted user's conversations go to an admin, or are shredded with their vaults: the
  request says which.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from holdback.app.admin_common import admin_route, bad, record, refusals, when
from holdback.app.auth import hash_password
from holdback.app.http_api import _body, _runtime, name_of, problem
from holdback.app.pipeline import OffLoop
from holdback.store.records import ApiToken, Group, User

MIN_PASSWORD = 8  # as `holdback user add`
MAX_PASSWORD = 1024


def _password(body: dict[str, Any] | None) -> str | None:
    password = body.get("password") if body else None
    if not isinstance(password, str) or not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        return None
    return password


async def _hash(request: Request, password: str) -> str:
    """argon2 off the event loop, on one thread of this app's own."""
    state = request.app.state
    pool: OffLoop | None = getattr(state, "admin_hashing", None)
    if pool is None:
        pool = state.admin_hashing = OffLoop(1)
    return await pool.run(lambda: hash_password(password))


# -- users --------------------------------------------------------------------------------


def user_json(user: User, groups: Iterable[Group] = ()) -> dict[str, Any]:
    return {
        "id": user.id,
        "name": user.name,
        "role": user.role,
        "disabled": user.disabled,
        "created_at": user.created_at.isoformat(),
        "groups": sorted(g.name for g in groups if user.name in g.members),
    }


@admin_route
async def list_users(request: Request, admin: User) -> Response:
    store = _runtime(request).store
    groups = await store.list_groups()
    return JSONResponse({"users": [user_json(u, groups) for u in await store.list_users()]})


@admin_route
async def add_user(request: Request, admin: User) -> Response:
    runtime = _runtime(request)
    body = await _body(request)
    name, password = name_of(body, "name"), _password(body)
    role = (body or {}).get("role", "member")
    if name is None or password is None or role not in ("admin", "member"):
        return bad(
            f"send JSON with a 'name', a 'password' of {MIN_PASSWORD} to {MAX_PASSWORD} "
            "characters, and optionally a 'role' ('admin' or 'member')"
        )
    if await runtime.store.get_user_by_name(name) is not None:
        return problem(409, "exists", "a user of that name exists already")
    password_hash = await _hash(request, password)
    with refusals():
        user = await runtime.store.create_user(name, password_hash)
        await record(runtime, admin, "user.add", name)
        if role != user.role:
            user, _ = await runtime.store.set_role(name, role)
            await record(runtime, admin, "user.role", name, role)
    return JSONResponse(user_json(user), status_code=201)


async def _set_disabled(request: Request, admin: User, disabled: bool) -> Response:
    runtime = _runtime(request)
    name = request.path_params["name"]
    if disabled and name == admin.name:
        return bad("an admin cannot disable themselves; another admin can")
    with refusals():
        user, changed = await (
            runtime.store.disable_user(name) if disabled else runtime.store.enable_user(name)
        )
    if changed:
        await record(runtime, admin, "user.disable" if disabled else "user.enable", name)
    return JSONResponse({**user_json(user), "changed": changed})


@admin_route
async def disable_user(request: Request, admin: User) -> Response:
    return await _set_disabled(request, admin, True)


@admin_route
async def enable_user(request: Request, admin: User) -> Response:
    return await _set_disabled(request, admin, False)


@admin_route
async def set_role(request: Request, admin: User) -> Response:
    runtime = _runtime(request)
    name = request.path_params["name"]
    body = await _body(request)
    role = body.get("role") if body else None
    if role not in ("admin", "member"):
        return bad("send JSON with a 'role': 'admin' or 'member'")
    with refusals():
        user, changed = await runtime.store.set_role(name, role)
    if changed:
        await record(runtime, admin, "user.role", name, role)
    return JSONResponse({**user_json(user), "changed": changed})


@admin_route
async def set_password(request: Request, admin: User) -> Response:
    """A new password for a user; their sessions end (their API tokens stay)."""
    runtime = _runtime(request)
    name = request.path_params["name"]
    password = _password(await _body(request))
    if password is None:
        return bad(f"send JSON with a 'password' of {MIN_PASSWORD} to {MAX_PASSWORD} characters")
    if await runtime.store.get_user_by_name(name) is None:
        return problem(404, "not_found", "no such user")
    password_hash = await _hash(request, password)
    with refusals():
        user = await runtime.store.set_password(name, password_hash)
    await record(runtime, admin, "user.password", name)
    return JSONResponse(user_json(user))


@admin_route
async def delete_user(request: Request, admin: User) -> Response:
    """Delete a user: `?conversations_to=ADMIN` hands their conversations to that admin,
    `?shred=1` deletes them with their vaults. One of the two is required."""
    runtime = _runtime(request)
    name = request.path_params["name"]
    heir = request.query_params.get("conversations_to") or None
    shred = request.query_params.get("shred") in ("1", "true", "yes")
    if (heir is None) == (not shred):
        return bad(
            "say where their conversations go: ?conversations_to=ADMIN (an admin's name) "
            "or ?shred=1 (deleted with their vaults)"
        )
    if name == admin.name:
        return bad("an admin cannot delete themselves; another admin can")
    if heir is not None and heir == name:
        return bad("a deleted user's conversations go to another user")
    if heir is not None:
        found = await runtime.store.get_user_by_name(heir)
        if found is None or not found.is_admin:
            return bad("conversations_to names an admin, and no admin has that name")
    with refusals():
        owned = await runtime.store.delete_user(name, conversations_to=heir)
    fate = f"(given to {heir})" if heir is not None else "(shredded)"
    await record(runtime, admin, "user.delete", name, fate)
    return JSONResponse(
        {
            "deleted": name,
            "conversations": owned,
            "conversations_to": heir,
            "shredded": heir is None,
        }
    )


# -- API tokens ---------------------------------------------------------------------------


def token_json(token: ApiToken) -> dict[str, Any]:
    """A token as listed: never its text (only a hash of it is stored)."""
    return {
        "id": token.id,
        "name": token.name,
        "owner": token.user_name,
        "created_at": token.created_at.isoformat(),
        "last_used_at": when(token.last_used_at),
        "revoked_at": when(token.revoked_at),
        "active": token.active,
    }


@admin_route
async def list_tokens(request: Request, admin: User) -> Response:
    store = _runtime(request).store
    owner = request.query_params.get("user")
    owner_id = None
    if owner is not None:
        found = await store.get_user_by_name(owner)
        if found is None:
            return problem(404, "not_found", "no such user")
        owner_id = found.id
    tokens = await store.list_api_tokens(owner_id)
    return JSONResponse({"tokens": [token_json(t) for t in tokens]})


@admin_route
async def create_token(request: Request, admin: User) -> Response:
    """A new API token for a user: its text is in this answer, and never again."""
    runtime = _runtime(request)
    body = await _body(request)
    owner = name_of(body, "user")
    label = (body or {}).get("name", "api")
    if owner is None or not isinstance(label, str) or not 0 < len(label.strip()) <= 200:
        return bad("send JSON with the 'user' (a name) and optionally a 'name' for the token")
    if any(ord(c) < 32 or ord(c) == 127 for c in label):
        return bad("a token's name cannot contain control characters")
    user = await runtime.store.get_user_by_name(owner)
    if user is None:
        return problem(404, "not_found", "no such user")
    if user.disabled:
        return problem(409, "user_disabled", "that user is disabled; enable them first")
    with refusals():
        secret = await runtime.store.create_api_token(user.id, label)
    listed = await runtime.store.find_api_token(secret)
    await record(runtime, admin, "token.create", owner, listed.id if listed else "")
    out: dict[str, Any] = token_json(listed) if listed is not None else {"owner": owner}
    out["token"] = secret
    return JSONResponse(out, status_code=201)


@admin_route
async def revoke_token(request: Request, admin: User) -> Response:
    runtime = _runtime(request)
    with refusals():
        token, changed = await runtime.store.revoke_api_token(request.path_params["id"])
    if changed:
        await record(runtime, admin, "token.revoke", token.user_name, token.id)
    return JSONResponse({**token_json(token), "changed": changed})
