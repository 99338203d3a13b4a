"""The HTTP API: session, login, conversations, health.

Every conversation belongs to its owner: another user gets 404 for it, exactly as for one that
does not exist. What the owner reads is restored (tokens back to values); `?view=model` shows
what the model saw, tokenized; a user's own message reads back exactly as typed (its sealed
spellings). A conversation's title is pseudonymized like any other text, and refuses NUL as
messages do; a title that would overfill the conversation's vault is refused (409
`vault_full`) and changes nothing. State-changing requests from a foreign origin are refused
(403). Logins are throttled (429 with `Retry-After`) and checked off the event loop (see
`auth.py`); a disabled user is refused exactly like a wrong password; logging out ends the
session's open WebSockets.
"""

from __future__ import annotations

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
from holdback.app.views import conversation_json, model_view, owner_title, restore_message
from holdback.errors import HoldbackError, wire_message
from holdback.store.errors import VaultFullError
from holdback.store.records import User
from holdback.vault import Vault


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


async def list_conversations(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    store = _runtime(request).store
    out = []
    for conversation in await store.list_conversations(user.id):
        vault = (
            Vault(await store.load_vault(conversation.id)) if "<" in conversation.title else None
        )
        out.append(conversation_json(conversation, vault))
    return JSONResponse({"conversations": out})


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
    user = await _user(request)
    if isinstance(user, Response):
        return user
    runtime = _runtime(request)
    conversation = await runtime.store.get_conversation(request.path_params["id"], user.id)
    if conversation is None:
        return problem(404, "not_found", "no such conversation")
    # Look for a reply in flight *before* reading the messages: one that finishes in between
    # is then reported as streaming (the client looks again), never as a stale "incomplete".
    reply = runtime.service.replies.get(conversation.id)
    messages = await runtime.store.list_messages(conversation.id)
    vault = Vault(await runtime.store.load_vault(conversation.id))
    if request.query_params.get("view") == "model":
        body = conversation_json(conversation)
        body["messages"] = [model_view(m) for m in messages]
        body["view"] = "model"
    else:
        typed = await runtime.store.load_spellings(conversation.id)
        title = owner_title(conversation, vault, messages, typed)
        body = conversation_json(conversation, vault, title=title)
        body["messages"] = [restore_message(m, vault, typed.get(m.id)) for m in messages]
        body["view"] = "owner"
    body["streaming"] = reply is not None
    if reply is not None:
        # The reply in flight is stored as it goes; say so, so a client that reconnects
        # keeps watching it instead of taking it for finished.
        for message in body["messages"]:
            if message["id"] == reply.message_id:
                message["status"] = "streaming"
                message["finish_reason"] = None
    return JSONResponse(body)


async def rename_conversation(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    runtime = _runtime(request)
    conversation = await runtime.store.get_conversation(request.path_params["id"], user.id)
    if conversation is None:
        return problem(404, "not_found", "no such conversation")
    body = await _body(request)
    title = body.get("title") if body else None
    if not isinstance(title, str) or not title.strip() or "\x00" in title:
        return problem(400, "bad_request", "send JSON with a non-empty 'title', without NUL")
    vault = Vault(await runtime.store.load_vault(conversation.id))
    try:
        masked = await runtime.service.mask_text(conversation.id, title.strip()[:200], vault)
    except VaultFullError as exc:  # the title stays as it was
        return refused(409, exc)
    await runtime.store.rename_conversation(conversation.id, user.id, masked)
    renamed = await runtime.store.get_conversation(conversation.id, user.id) or conversation
    return JSONResponse(conversation_json(renamed, vault))


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


routes = [
    Route("/healthz", healthz),
    Route("/api/session", session),
    Route("/api/login", login, methods=["POST"]),
    Route("/api/logout", logout, methods=["POST"]),
    Route("/api/conversations", list_conversations, methods=["GET"]),
    Route("/api/conversations", create_conversation, methods=["POST"]),
    Route("/api/conversations/{id}", get_conversation, methods=["GET"]),
    Route("/api/conversations/{id}", rename_conversation, methods=["PATCH"]),
    Route("/api/conversations/{id}", delete_conversation, methods=["DELETE"]),
]
