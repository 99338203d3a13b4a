"""The HTTP API: session, login, conversations, shares, health (admin routes: `admin_api`).

Every conversation belongs to its owner, who may share it with a user or a group, to read it
or to continue it; anyone else gets 404 for it, exactly as for one that does not exist, and
only the owner renames, deletes or shares it. What the owner reads is restored (tokens back
to values, but for kinds never restored); a user it is shared with reads it under their
reveal policy (`views.Reader`); `?view=model` shows what the model saw, tokenized, to the
owner and to admins; a user's own message reads back exactly as typed (its sealed spellings)
where the value is shown plain. Every value a read shows whole or in part is recorded on the
reveal trail, by token and kind.

A conversation's title is pseudonymized like any other text, and refuses NUL as messages do;
a title that would overfill the conversation's vault is refused (409 `vault_full`) and
changes nothing. State-changing requests from a foreign origin are refused
(403). Logins are throttled (429 with `Retry-After`) and checked off the event loop (see
`auth.py`); a disabled user is refused exactly like a wrong password; logging out ends the
session's open WebSockets.
"""

from __future__ import annotations

import heapq
from datetime import timedelta
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from holdback.app.auth import (
    SESSION_COOKIE,
    LoginBusyError,
    cookie_settings,
    retry_after,
    session_key,
)
from holdback.app.runtime import Runtime
from holdback.app.views import (
    Reader,
    conversation_json,
    model_view,
    owner_title,
    restore_message,
)
from holdback.errors import HoldbackError, wire_message
from holdback.reveal import Level, RevealPolicy
from holdback.store.conversations import path_to
from holdback.store.errors import (
    ConversationNotFoundError,
    GroupNotFoundError,
    InvalidRecordError,
    UserNotFoundError,
    VaultFullError,
)
from holdback.store.records import Conversation, Share, SharedConversation, User
from holdback.store.repository import Store
from holdback.stream import restore
from holdback.vault import Vault

MAX_NAME_CHARS = 200  # a user's or a group's name (`store.accounts.MAX_NAME_CHARS`)


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def problem(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"code": code, "message": message}, status_code=status)


def refused(status: int, exc: HoldbackError) -> JSONResponse:
    """An error holdback raised on purpose: its wire code and our sentence for it."""
    return problem(status, exc.code, wire_message(exc.code))


def limited(status: int, code: str, wait: float) -> JSONResponse:
    """A refusal the client may retry: after `Retry-After` seconds."""
    response = problem(status, code, wire_message(code))
    response.headers["Retry-After"] = retry_after(wait)
    return response


async def _body(request: Request) -> dict[str, Any] | None:
    try:
        data = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def name_of(body: dict[str, Any] | None, field: str) -> str | None:
    """`body[field]` if it is a name a user or group can have, else None."""
    value = body.get(field) if body else None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_CHARS:
        return None
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return None
    return value


async def any_conversation(store: Store, conversation_id: str) -> Conversation | None:
    """A conversation whoever owns it (for an admin's `?view=model`)."""
    owner_id = await store.owner_of(conversation_id)
    if owner_id is None:
        return None
    return await store.get_conversation(conversation_id, owner_id)


async def _user(request: Request) -> User | Response:
    runtime = _runtime(request)
    if not runtime.auth.host_allowed(request):
        return problem(403, "forbidden_host", "this server answers only to its own address")
    if request.method not in ("GET", "HEAD") and not runtime.auth.origin_allowed(request):
        return problem(403, "forbidden_origin", "cross-site requests are refused")
    user = await runtime.auth.user(request)
    if user is None:
        return problem(401, "unauthorized", "sign in first")
    return user


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def session(request: Request) -> Response:
    runtime = _runtime(request)
    if not runtime.auth.host_allowed(request):
        return problem(403, "forbidden_host", "this server answers only to its own address")
    user = await runtime.auth.user(request)
    return JSONResponse(
        {
            "auth": runtime.settings.auth,
            "user": {"id": user.id, "name": user.name} if user else None,
        }
    )


async def login(request: Request) -> Response:
    runtime = _runtime(request)
    if not runtime.auth.origin_allowed(request):
        return problem(403, "forbidden_origin", "cross-site requests are refused")
    if runtime.settings.auth != "password":
        return problem(400, "no_login", "this server runs without logins (--auth none)")
    body = await _body(request)
    if (
        body is None
        or not isinstance(body.get("username"), str)
        or not isinstance(body.get("password"), str)
    ):
        return problem(400, "bad_request", "send JSON with 'username' and 'password'")
    name, address = body["username"], request.client.host if request.client else ""
    throttle = runtime.auth.throttle
    wait = throttle.begin(name, address)
    if wait > 0:
        return limited(429, "login_throttled", wait)
    matched: bool | None = None  # None: not checked, which counts neither way
    try:
        user = await runtime.store.get_user_by_name(name)
        # A disabled user is checked like an unknown name (the dummy hash: the same time)
        # and refused like a wrong password, so the answer tells nobody that they exist.
        if user is not None and user.disabled:
            user = None
        matched = await runtime.auth.passwords.check(
            user.password_hash if user else None, body["password"]
        )
    except LoginBusyError:
        return limited(503, "login_busy", 1.0)
    finally:
        throttle.end(name, address, matched=matched)
    if user is None or not matched:
        return problem(401, "bad_credentials", "wrong username or password")
    secret = await runtime.store.create_session(
        user.id, timedelta(days=runtime.settings.session_days)
    )
    response = JSONResponse({"user": {"id": user.id, "name": user.name}})
    response.set_cookie(
        SESSION_COOKIE,
        secret,
        max_age=runtime.settings.session_days * 86400,
        **cookie_settings(request),  # type: ignore[arg-type]
    )
    return response


async def logout(request: Request) -> Response:
    runtime = _runtime(request)
    if not runtime.auth.origin_allowed(request):
        return problem(403, "forbidden_origin", "cross-site requests are refused")
    secret = request.cookies.get(SESSION_COOKIE)
    if secret:
        await runtime.store.delete_session(secret)
        runtime.auth.sockets.end(session_key(secret))
    response = JSONResponse({"ok": True})
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


async def _viewer_policy(runtime: Runtime, viewer: User) -> RevealPolicy:
    """How a viewer who does not own a conversation is shown its values."""
    rules = await runtime.service._rules()
    return rules.for_viewer(owner=False, groups=await runtime.store.groups_of(viewer.id))


async def _record(
    runtime: Runtime,
    viewer: User,
    conversation_id: str,
    message_id: str | None,
    reader: Reader,
) -> None:
    """Put what `reader` showed the viewer of one message (or of the title) on the trail."""
    items = reader.revealed()
    if items:
        await runtime.store.record_reveals(viewer.id, conversation_id, message_id, items)


async def list_conversations(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    runtime = _runtime(request)
    store = runtime.store
    owned, found = await store.list_conversations(user.id), await store.shared_with(user.id)
    rules = await runtime.service._rules()
    mine = rules.for_viewer(owner=True)
    theirs = await _viewer_policy(runtime, user) if found else mine

    async def summary(conversation: Conversation, policy: RevealPolicy) -> dict[str, Any]:
        if "<" not in conversation.title:  # no token: nothing to restore
            return conversation_json(conversation)
        vault = Vault(await store.load_vault(conversation.id))
        reader = Reader(vault, policy, track=True)
        body = conversation_json(conversation, reader=reader)
        await _record(runtime, user, conversation.id, None, reader)
        return body

    own = []
    for conversation in owned:
        body = await summary(conversation, mine)
        body.update(shared=False, owner=user.name, access="owner")
        own.append((conversation.updated_at, body))
    shared = []
    for item in found:
        body = await summary(item.conversation, theirs)
        body.update(shared=True, owner=item.owner, access=item.access)
        shared.append((item.conversation.updated_at, body))
    # Both lists are newest first; merged, each keeps its own order.
    merged = heapq.merge(own, shared, key=lambda pair: pair[0], reverse=True)
    return JSONResponse({"conversations": [body for _, body in merged]})


async def create_conversation(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    body = await _body(request) or {}
    title = body.get("title")
    if isinstance(title, str) and "\x00" in title:
        return problem(400, "bad_request", "a title cannot contain NUL characters")
    runtime = _runtime(request)
    conversation = await runtime.store.create_conversation(user.id, "")
    if isinstance(title, str) and title.strip():
        vault = Vault()
        try:
            masked = await runtime.service.mask_text(conversation.id, title.strip()[:200], vault)
        except VaultFullError as exc:
            # Refused whole: the conversation made for this title goes too.
            await runtime.store.delete_conversation(conversation.id, user.id)
            return refused(409, exc)
        await runtime.store.rename_conversation(conversation.id, user.id, masked)
        conversation = (
            await runtime.store.get_conversation(conversation.id, user.id) or conversation
        )
        return JSONResponse(conversation_json(conversation, vault), status_code=201)
    return JSONResponse(conversation_json(conversation), status_code=201)


async def get_conversation(request: Request) -> Response:
    """The conversation as the viewer may read it: the owner restored (under the owner's
    policy), a user it is shared with under theirs, `?view=model` tokenized for the owner and
    admins; for anyone else it does not exist."""
    user = await _user(request)
    if isinstance(user, Response):
        return user
    runtime = _runtime(request)
    store = runtime.store
    conversation_id = request.path_params["id"]
    model = request.query_params.get("view") == "model"
    conversation = await store.get_conversation(conversation_id, user.id)
    share: SharedConversation | None = None
    if conversation is None:
        share = next(
            (s for s in await store.shared_with(user.id) if s.conversation.id == conversation_id),
            None,
        )
        if share is not None and (not model or user.is_admin):
            conversation = share.conversation
        elif model and user.is_admin:
            conversation = await any_conversation(store, conversation_id)
            if conversation is not None:
                await store.record_admin(user.id, "conversation.model_view", conversation.id)
    if conversation is None:
        return problem(404, "not_found", "no such conversation")
    # Look for a reply in flight *before* reading the messages: one that finishes in between
    # is then reported as streaming (the client looks again), never as a stale "incomplete".
    reply = runtime.service.replies.get(conversation.id)
    messages = await store.list_messages(conversation.id)
    owner = share is None and conversation.owner_id == user.id
    if model:
        body = conversation_json(conversation)
        body["messages"] = [model_view(m) for m in messages]
        body["system_prompt"] = conversation.system_prompt or ""
        body["view"] = "model"
    else:
        vault = Vault(await store.load_vault(conversation.id))
        typed = await store.load_spellings(conversation.id)
        if owner:
            policy = (await runtime.service._rules()).for_viewer(owner=True)
        else:
            policy = await _viewer_policy(runtime, user)
        reader = Reader(vault, policy, track=True)
        title = owner_title(conversation, vault, messages, typed, reader=reader)
        shown: list[tuple[str | None, list[tuple[str, str, Level]]]] = [(None, reader.revealed())]
        body = conversation_json(conversation, vault, title=title)
        body["messages"] = []
        for m in messages:
            body["messages"].append(restore_message(m, vault, typed.get(m.id), reader=reader))
            shown.append((m.id, reader.revealed()))
        body["system_prompt"] = ""
        if conversation.system_prompt:
            reader.note(conversation.system_prompt)
            body["system_prompt"] = restore(conversation.system_prompt, reader.index)
            shown.append((None, reader.revealed()))
        await runtime.store.record_read(user.id, conversation.id, shown)  # one write per read
        body["view"] = "owner" if owner else "shared"
    if share is not None:
        body.update(shared=True, owner=share.owner, access=share.access)
    elif owner:
        body.update(shared=False, owner=user.name, access="owner")
    # The tree is every message (each with its `parent_id`); the branch shown is the path to
    # the current leaf.
    body["current_path"] = [m.id for m in path_to(messages, conversation.current_leaf)]
    body["model"] = conversation.model or runtime.service.default_model
    body["streaming"] = reply is not None
    if reply is not None:
        # The reply in flight is stored as it goes; say so, so a client that reconnects
        # keeps watching it instead of taking it for finished.
        for message in body["messages"]:
            if message["id"] == reply.message_id:
                message["status"] = "streaming"
                message["finish_reason"] = None
    return JSONResponse(body)


async def delete_conversation(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    runtime = _runtime(request)
    conversation_id = request.path_params["id"]
    if await runtime.store.get_conversation(conversation_id, user.id) is None:
        return problem(404, "not_found", "no such conversation")
    reply = runtime.service.replies.get(conversation_id)
    if reply is not None:
        await runtime.service.cancel(user.id, conversation_id)
    await runtime.store.delete_conversation(conversation_id, user.id)
    return Response(status_code=204)


def share_json(share: Share) -> dict[str, Any]:
    return {
        "id": share.id,
        "conversation_id": share.conversation_id,
        "user": share.user,
        "group": share.group,
        "access": share.access,
        "created_at": share.created_at.isoformat(),
    }


async def create_share(request: Request) -> Response:
    """The owner shares a conversation with one user or one group, to read or to continue."""
    user = await _user(request)
    if isinstance(user, Response):
        return user
    store = _runtime(request).store
    conversation_id = request.path_params["id"]
    if await store.get_conversation(conversation_id, user.id) is None:
        return problem(404, "not_found", "no such conversation")
    body = await _body(request)
    grantee, group = name_of(body, "user"), name_of(body, "group")
    access = body.get("access") if body else None
    if (grantee is None) == (group is None) or access not in ("read", "write"):
        return problem(
            400,
            "bad_request",
            "send JSON with a 'user' or a 'group' (a name) and 'access': 'read' or 'write'",
        )
    try:
        share = await store.share(
            conversation_id, user.id, user=grantee, group=group, access=access
        )
    except ConversationNotFoundError:
        return problem(404, "not_found", "no such conversation")
    except UserNotFoundError:
        return problem(400, "bad_request", "there is no user of that name")
    except GroupNotFoundError:
        return problem(400, "bad_request", "there is no group of that name")
    except InvalidRecordError:
        return problem(400, "bad_request", "a conversation is not shared with its owner")
    return JSONResponse(share_json(share), status_code=201)


async def list_shares(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    try:
        shares = await _runtime(request).store.list_shares(request.path_params["id"], user.id)
    except ConversationNotFoundError:
        return problem(404, "not_found", "no such conversation")
    return JSONResponse({"shares": [share_json(s) for s in shares]})


async def delete_share(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    store = _runtime(request).store
    try:
        removed = await store.unshare(
            request.path_params["id"], user.id, request.path_params["share_id"]
        )
    except ConversationNotFoundError:
        return problem(404, "not_found", "no such conversation")
    if not removed:
        return problem(404, "not_found", "no such share")
    return Response(status_code=204)


routes = [
    Route("/healthz", healthz),
    Route("/api/session", session),
    Route("/api/login", login, methods=["POST"]),
    Route("/api/logout", logout, methods=["POST"]),
    Route("/api/conversations", list_conversations, methods=["GET"]),
    Route("/api/conversations", create_conversation, methods=["POST"]),
    Route("/api/conversations/{id}", get_conversation, methods=["GET"]),
    Route("/api/conversations/{id}", delete_conversation, methods=["DELETE"]),
    Route("/api/conversations/{id}/shares", list_shares, methods=["GET"]),
    Route("/api/conversations/{id}/shares", create_share, methods=["POST"]),
    Route("/api/conversations/{id}/shares/{share_id}", delete_share, methods=["DELETE"]),
]
