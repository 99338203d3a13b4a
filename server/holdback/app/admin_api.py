"""The admin API (`/api/admin/...`) and the audit trail (`/api/audit`): users, groups, API
tokens, reveal policies.

The rules:
- Only admins: a member is refused with 403 `forbidden`, someone not signed in with 401, as
  on every route (`http_api._user`: a disabled user's sessions and tokens name nobody).
- Every change an admin makes is recorded (`Store.record_admin`) with the admin, the action
  (`group.create`) and its target by name: a user, a group, a kind, a token's id. Never a
  password, a token's text or a value. Reads (lists, the preview, the audit) are not.
- Bad input is a 400 that changes nothing; an unknown user, group or token is a 404; a name
  taken, or a change that would leave no admin, a 409. Answers are our own sentences: a
  store error's message never reaches the client.
- A new API token's text is in the answer that creates it and nowhere else: lists show ids,
  names, owners and times only.
- A policy change holds for the next reply on this server at once (`rules_changed`), and on
  the others within a second (`pipeline.RULES_TTL`).
- An admin cannot disable or delete themselves (another admin can), so no admin locks
  themselves out by mistake; the store keeps the last admin from being deleted or demoted.
- The audit is JSON or CSV (`format=csv`); a CSV cell that a spreadsheet would take for a
  formula (`=`, `+`, `-`, `@`, tab, CR) is written as text, with a leading `'`.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from holdback.app.auth import hash_password
from holdback.app.http_api import _body, _runtime, _user, name_of, problem
from holdback.app.pipeline import OffLoop
from holdback.app.runtime import Runtime
from holdback.errors import wire_message
from holdback.reveal import LEVELS, check_level
from holdback.store.errors import (
    GroupExistsError,
    GroupNotFoundError,
    InvalidRecordError,
    LastAdminError,
    RecordNotFoundError,
    StoreError,
    UserExistsError,
    UserNotFoundError,
)
from holdback.store.records import AdminEvent, ApiToken, Group, RevealEvent, User

MIN_PASSWORD = 8  # as `holdback user add`
MAX_PASSWORD = 1024
MAX_TARGET = 400  # `store.audit_log.MAX_TARGET_CHARS`
MAX_PREVIEW_VALUES = 100
MAX_PREVIEW_CHARS = 1000
MAX_EVENTS = 10_000  # `store.audit_log.MAX_EVENTS`
DEFAULT_SCOPE = "default"  # the organisation's default levels in a policy route
_KIND = re.compile(r"[a-z0-9][a-z0-9_-]{0,199}\Z")  # `store.team.check_kind`
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


# -- who may ask, and how refusals read ---------------------------------------------------


async def _admin(request: Request) -> User | Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    if not user.is_admin:
        return problem(403, "forbidden", wire_message("forbidden"))
    return user


def _bad(message: str) -> JSONResponse:
    return problem(400, "bad_request", message)


def _refused(exc: StoreError) -> JSONResponse:
    """A store refusal as our own sentence (its message is never passed on)."""
    if isinstance(exc, UserNotFoundError):
        return problem(404, "not_found", "no such user")
    if isinstance(exc, GroupNotFoundError):
        return problem(404, "not_found", "no such group")
    if isinstance(exc, RecordNotFoundError):
        return problem(404, "not_found", "no such API token")
    if isinstance(exc, UserExistsError):
        return problem(409, "exists", "a user of that name exists already")
    if isinstance(exc, GroupExistsError):
        return problem(409, "exists", "a group of that name exists already")
    if isinstance(exc, LastAdminError):
        return problem(
            409, "last_admin", "that is the last admin; make another user an admin first"
        )
    if isinstance(exc, InvalidRecordError):
        return _bad("the request does not fit: check the names, kinds and levels it gives")
    raise exc


async def _did(runtime: Runtime, admin: User, action: str, *names: str) -> None:
    """Record an admin's action on its targets, by name."""
    target = " ".join(names)
    if len(target) > MAX_TARGET:
        target = target[: MAX_TARGET - 1] + "…"
    await runtime.store.record_admin(admin.id, action, target)


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


def _when(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


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


async def list_users(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    store = _runtime(request).store
    groups = await store.list_groups()
    return JSONResponse({"users": [user_json(u, groups) for u in await store.list_users()]})


async def add_user(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    body = await _body(request)
    name, password = name_of(body, "name"), _password(body)
    role = (body or {}).get("role", "member")
    if name is None or password is None or role not in ("admin", "member"):
        return _bad(
            f"send JSON with a 'name', a 'password' of {MIN_PASSWORD} to {MAX_PASSWORD} "
            "characters, and optionally a 'role' ('admin' or 'member')"
        )
    if await runtime.store.get_user_by_name(name) is not None:
        return problem(409, "exists", "a user of that name exists already")
    password_hash = await _hash(request, password)
    try:
        user = await runtime.store.create_user(name, password_hash)
        await _did(runtime, admin, "user.add", name)
        if role != user.role:
            user, _ = await runtime.store.set_role(name, role)
            await _did(runtime, admin, "user.role", name, role)
    except StoreError as exc:
        return _refused(exc)
    return JSONResponse(user_json(user), status_code=201)


async def _set_disabled(request: Request, disabled: bool) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    name = request.path_params["name"]
    if disabled and name == admin.name:
        return _bad("an admin cannot disable themselves; another admin can")
    try:
        user, changed = await (
            runtime.store.disable_user(name) if disabled else runtime.store.enable_user(name)
        )
    except StoreError as exc:
        return _refused(exc)
    if changed:
        await _did(runtime, admin, "user.disable" if disabled else "user.enable", name)
    return JSONResponse({**user_json(user), "changed": changed})


async def disable_user(request: Request) -> Response:
    return await _set_disabled(request, True)


async def enable_user(request: Request) -> Response:
    return await _set_disabled(request, False)


async def set_role(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    name = request.path_params["name"]
    body = await _body(request)
    role = body.get("role") if body else None
    if role not in ("admin", "member"):
        return _bad("send JSON with a 'role': 'admin' or 'member'")
    try:
        user, changed = await runtime.store.set_role(name, role)
    except StoreError as exc:
        return _refused(exc)
    if changed:
        await _did(runtime, admin, "user.role", name, role)
    return JSONResponse({**user_json(user), "changed": changed})


async def set_password(request: Request) -> Response:
    """A new password for a user; their sessions end (their API tokens stay)."""
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    name = request.path_params["name"]
    password = _password(await _body(request))
    if password is None:
        return _bad(f"send JSON with a 'password' of {MIN_PASSWORD} to {MAX_PASSWORD} characters")
    if await runtime.store.get_user_by_name(name) is None:
        return problem(404, "not_found", "no such user")
    password_hash = await _hash(request, password)
    try:
        user = await runtime.store.set_password(name, password_hash)
    except StoreError as exc:
        return _refused(exc)
    await _did(runtime, admin, "user.password", name)
    return JSONResponse(user_json(user))


async def delete_user(request: Request) -> Response:
    """Delete a user: `?conversations_to=ADMIN` hands their conversations to that admin,
    `?shred=1` deletes them with their vaults. One of the two is required."""
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    name = request.path_params["name"]
    heir = request.query_params.get("conversations_to") or None
    shred = request.query_params.get("shred") in ("1", "true", "yes")
    if (heir is None) == (not shred):
        return _bad(
            "say where their conversations go: ?conversations_to=ADMIN (an admin's name) "
            "or ?shred=1 (deleted with their vaults)"
        )
    if name == admin.name:
        return _bad("an admin cannot delete themselves; another admin can")
    if heir is not None and heir == name:
        return _bad("a deleted user's conversations go to another user")
    if heir is not None:
        found = await runtime.store.get_user_by_name(heir)
        if found is None or not found.is_admin:
            return _bad("conversations_to names an admin, and no admin has that name")
    try:
        owned = await runtime.store.delete_user(name, conversations_to=heir)
    except StoreError as exc:
        return _refused(exc)
    fate = f"(given to {heir})" if heir is not None else "(shredded)"
    await _did(runtime, admin, "user.delete", name, fate)
    return JSONResponse(
        {
            "deleted": name,
            "conversations": owned,
            "conversations_to": heir,
            "shredded": heir is None,
        }
    )


# -- groups -------------------------------------------------------------------------------


def group_json(group: Group) -> dict[str, Any]:
    return {
        "id": group.id,
        "name": group.name,
        "created_at": group.created_at.isoformat(),
        "members": list(group.members),
    }


async def list_groups(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    groups = await _runtime(request).store.list_groups()
    return JSONResponse({"groups": [group_json(g) for g in groups]})


async def create_group(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    name = name_of(await _body(request), "name")
    if name is None:
        return _bad("send JSON with a 'name' of 1 to 200 characters, no control characters")
    try:
        group = await runtime.store.create_group(name)
    except StoreError as exc:
        return _refused(exc)
    await _did(runtime, admin, "group.create", name)
    return JSONResponse(group_json(group), status_code=201)


async def rename_group(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    old = request.path_params["name"]
    new = name_of(await _body(request), "name")
    if new is None:
        return _bad("send JSON with the new 'name' of 1 to 200 characters")
    try:
        group = await runtime.store.rename_group(old, new)
    except StoreError as exc:
        return _refused(exc)
    if new != old:
        await _did(runtime, admin, "group.rename", old, "->", new)
    return JSONResponse(group_json(group))


async def delete_group(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    name = request.path_params["name"]
    try:
        await runtime.store.delete_group(name)
    except StoreError as exc:
        return _refused(exc)
    runtime.service.rules_changed()  # its levels went with it
    await _did(runtime, admin, "group.delete", name)
    return Response(status_code=204)


async def _membership(request: Request, adding: bool) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    group, user = request.path_params["name"], request.path_params["user"]
    try:
        change = runtime.store.add_member if adding else runtime.store.remove_member
        changed = await change(group, user)
        found = await runtime.store.get_group(group)
    except StoreError as exc:
        return _refused(exc)
    if changed:
        await _did(runtime, admin, "group.member.add" if adding else "group.member.remove",
                   group, user)  # fmt: skip
    if not adding:
        if not changed:
            return problem(404, "not_found", "that user is not in that group")
        return Response(status_code=204)
    if found is None:  # deleted in between
        return problem(404, "not_found", "no such group")
    return JSONResponse(group_json(found), status_code=201 if changed else 200)


async def add_member(request: Request) -> Response:
    return await _membership(request, True)


async def remove_member(request: Request) -> Response:
    return await _membership(request, False)


# -- API tokens ---------------------------------------------------------------------------


def token_json(token: ApiToken) -> dict[str, Any]:
    """A token as listed: never its text (only a hash of it is stored)."""
    return {
        "id": token.id,
        "name": token.name,
        "owner": token.user_name,
        "created_at": token.created_at.isoformat(),
        "last_used_at": _when(token.last_used_at),
        "revoked_at": _when(token.revoked_at),
        "active": token.active,
    }


async def list_tokens(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
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


async def create_token(request: Request) -> Response:
    """A new API token for a user: its text is in this answer, and never again."""
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    body = await _body(request)
    owner = name_of(body, "user")
    label = (body or {}).get("name", "api")
    if owner is None or not isinstance(label, str) or not 0 < len(label.strip()) <= 200:
        return _bad("send JSON with the 'user' (a name) and optionally a 'name' for the token")
    if any(ord(c) < 32 or ord(c) == 127 for c in label):
        return _bad("a token's name cannot contain control characters")
    user = await runtime.store.get_user_by_name(owner)
    if user is None:
        return problem(404, "not_found", "no such user")
    if user.disabled:
        return problem(409, "user_disabled", "that user is disabled; enable them first")
    try:
        secret = await runtime.store.create_api_token(user.id, label)
    except StoreError as exc:
        return _refused(exc)
    listed = await runtime.store.find_api_token(secret)
    await _did(runtime, admin, "token.create", owner, listed.id if listed else "")
    out: dict[str, Any] = token_json(listed) if listed is not None else {"owner": owner}
    out["token"] = secret
    return JSONResponse(out, status_code=201)


async def revoke_token(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    try:
        token, changed = await runtime.store.revoke_api_token(request.path_params["id"])
    except StoreError as exc:
        return _refused(exc)
    if changed:
        await _did(runtime, admin, "token.revoke", token.user_name, token.id)
    return JSONResponse({**token_json(token), "changed": changed})


# -- reveal policies ----------------------------------------------------------------------


def _kind(text: object) -> str | None:
    return text if isinstance(text, str) and _KIND.match(text) else None


_BAD_KIND = (
    "a kind is lower-case letters, digits, '_' and '-', at most 200 (e.g. 'email', 'client-names')"
)


def _scope(text: str) -> str | None:
    """A policy route's scope: None for the organisation's default, else a group's name."""
    return None if text == DEFAULT_SCOPE else text


async def list_policies(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
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


async def set_policy(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    scope = request.path_params["scope"]
    kind = _kind(request.path_params["kind"])
    if kind is None:
        return _bad(_BAD_KIND)
    body = await _body(request)
    level = body.get("level") if body else None
    if level not in LEVELS:
        return _bad(f"send JSON with a 'level': one of {', '.join(LEVELS)}")
    try:
        changed = await runtime.store.set_level(_scope(scope), kind, check_level(level))
    except StoreError as exc:
        return _refused(exc)
    runtime.service.rules_changed()
    if changed:
        await _did(runtime, admin, "policy.set", scope, kind, level)
    return JSONResponse({"scope": scope, "kind": kind, "level": level, "changed": changed})


async def clear_policy(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    scope = request.path_params["scope"]
    kind = _kind(request.path_params["kind"])
    if kind is None:
        return _bad(_BAD_KIND)
    try:
        changed = await runtime.store.clear_level(_scope(scope), kind)
    except StoreError as exc:
        return _refused(exc)
    runtime.service.rules_changed()
    if not changed:
        return problem(404, "not_found", "no level is set for that kind there")
    await _did(runtime, admin, "policy.clear", scope, kind)
    return Response(status_code=204)


async def never_restore(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    body = await _body(request)
    kind = _kind(body.get("kind") if body else None)
    if kind is None:
        return _bad("send JSON with the 'kind': " + _BAD_KIND)
    changed = await runtime.store.never_restore(kind)
    runtime.service.rules_changed()
    if changed:
        await _did(runtime, admin, "policy.never_restore", kind)
    return JSONResponse(
        {"kind": kind, "never_restore": True, "changed": changed},
        status_code=201 if changed else 200,
    )


async def allow_restore(request: Request) -> Response:
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    runtime = _runtime(request)
    kind = _kind(request.path_params["kind"])
    if kind is None:
        return _bad(_BAD_KIND)
    changed = await runtime.store.allow_restore(kind)
    runtime.service.rules_changed()
    if not changed:
        return problem(404, "not_found", "that kind is not marked never restored")
    await _did(runtime, admin, "policy.allow_restore", kind)
    return Response(status_code=204)


async def preview_policy(request: Request) -> Response:
    """How sample values would be shown to a viewer: the owner (`"owner": true`), or a
    member of `groups` (names; none: the organisation default; also as `group`, or in
    `viewer`). Nothing is stored or logged; the samples are sent back only as shown."""
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    store = _runtime(request).store
    body = await _body(request)
    usage = (
        "send JSON with 'values': [{'kind', 'value'}] (at most "
        f"{MAX_PREVIEW_VALUES}), and 'groups': [names] or 'owner': true"
    )
    if body is None:
        return _bad(usage)
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
        return _bad(usage)
    samples: list[tuple[str, str]] = []
    for item in values:
        kind = _kind(item.get("kind")) if isinstance(item, dict) else None
        value = item.get("value") if isinstance(item, dict) else None
        if kind is None or not isinstance(value, str) or len(value) > MAX_PREVIEW_CHARS:
            return _bad(usage + "; " + _BAD_KIND)
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


# -- the audit trail ----------------------------------------------------------------------


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


async def audit(request: Request) -> Response:
    """The trail, newest first: the reveals (to `user`, in `conversation`) and, unless a
    conversation is asked for, the admin actions (by `user`), within `since`..`until`."""
    admin = await _admin(request)
    if isinstance(admin, Response):
        return admin
    store = _runtime(request).store
    query = request.query_params
    try:
        since, until = _moment(query.get("since")), _moment(query.get("until"))
    except ValueError:
        return _bad("since and until are ISO times, e.g. 2026-12-01T09:00:00Z")
    try:
        limit = int(query.get("limit", "1000"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_EVENTS:
        return _bad(f"limit is a number from 1 to {MAX_EVENTS}")
    conversation = query.get("conversation") or None
    if conversation is not None and not _ID.match(conversation):
        return _bad("conversation is a conversation's id")
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


routes = [
    Route("/api/admin/users", list_users, methods=["GET"]),
    Route("/api/admin/users", add_user, methods=["POST"]),
    Route("/api/admin/users/{name}/disable", disable_user, methods=["POST"]),
    Route("/api/admin/users/{name}/enable", enable_user, methods=["POST"]),
    Route("/api/admin/users/{name}/role", set_role, methods=["POST"]),
    Route("/api/admin/users/{name}/password", set_password, methods=["POST"]),
    Route("/api/admin/users/{name}", delete_user, methods=["DELETE"]),
    Route("/api/admin/groups", list_groups, methods=["GET"]),
    Route("/api/admin/groups", create_group, methods=["POST"]),
    Route("/api/admin/groups/{name}", rename_group, methods=["PATCH"]),
    Route("/api/admin/groups/{name}", delete_group, methods=["DELETE"]),
    Route("/api/admin/groups/{name}/members/{user}", add_member, methods=["POST"]),
    Route("/api/admin/groups/{name}/members/{user}", remove_member, methods=["DELETE"]),
    Route("/api/admin/tokens", list_tokens, methods=["GET"]),
    Route("/api/admin/tokens", create_token, methods=["POST"]),
    Route("/api/admin/tokens/{id}/revoke", revoke_token, methods=["POST"]),
    Route("/api/admin/policies", list_policies, methods=["GET"]),
    Route("/api/admin/policies/preview", preview_policy, methods=["POST"]),
    Route("/api/admin/policies/{scope}/{kind}", set_policy, methods=["PUT"]),
    Route("/api/admin/policies/{scope}/{kind}", clear_policy, methods=["DELETE"]),
    Route("/api/admin/never-restore", never_restore, methods=["POST"]),
    Route("/api/admin/never-restore/{kind}", allow_restore, methods=["DELETE"]),
    Route("/api/audit", audit, methods=["GET"]),
]
