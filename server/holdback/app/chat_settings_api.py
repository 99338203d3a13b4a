"""What a user sets: a conversation's title, system prompt, model and branch shown
(`PATCH /api/conversations/{id}`), and their own custom instructions (`/api/me/instructions`).

The rules:
- Only a conversation's owner changes it; for anyone else it does not exist (404).
- A title and a system prompt may hold values: each is pseudonymized with the conversation's
  vault, like a message, before it is stored; the answer shows them restored for the owner.
  Custom instructions are sealed as they are (`store/branches.py`) and pseudonymized with a
  conversation's vault each time a message uses them; a change holds for this server's next
  message at once, and within `pipeline.INSTRUCTIONS_TTL` on the others.
- `model` must be one of this server's models (`GET /api/models`), or null for the default.
- `current_leaf` picks the branch shown: any message of the conversation; its branch runs to
  its newest descendant.
- One PATCH may set several fields; each is checked before any is changed, and a body that
  names none is a 400. Bad input changes nothing.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from holdback.app.http_api import _body, _runtime, _user, problem, refused
from holdback.app.views import conversation_json
from holdback.store.branches import MAX_INSTRUCTIONS_CHARS, UNSET
from holdback.store.conversations import MAX_SYSTEM_PROMPT_CHARS
from holdback.store.errors import VaultFullError
from holdback.stream import restore
from holdback.vault import Vault

MAX_TITLE_CHARS = 200
FIELDS = ("title", "system_prompt", "model", "current_leaf")


def _text(value: Any, limit: int, *, blank: bool) -> str | None:
    """`value` if it is text a user may set (no NUL, within `limit`), else None."""
    if not isinstance(value, str) or "\x00" in value or len(value) > limit:
        return None
    if not blank and not value.strip():
        return None
    return value


async def update_conversation(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    runtime = _runtime(request)
    store = runtime.store
    conversation = await store.get_conversation(request.path_params["id"], user.id)
    if conversation is None:
        return problem(404, "not_found", "no such conversation")
    body = await _body(request)
    if body is None or not any(name in body for name in FIELDS):
        return problem(400, "bad_request", f"send JSON with one or more of {', '.join(FIELDS)}")
    title = system_prompt = None
    if "title" in body:
        title = _text(body["title"], 10_000, blank=False)
        if title is None:
            return problem(400, "bad_request", "'title' must be non-empty text, without NUL")
    if "system_prompt" in body:
        system_prompt = _text(body["system_prompt"] or "", MAX_SYSTEM_PROMPT_CHARS, blank=True)
        if system_prompt is None:
            return problem(
                400,
                "bad_request",
                f"'system_prompt' must be text of at most {MAX_SYSTEM_PROMPT_CHARS} characters",
            )
    model: object = UNSET
    if "model" in body:
        model = body["model"]
        if model is not None and model not in runtime.service.models:
            return problem(400, "unknown_model", "no such model on this server")
    leaf = body.get("current_leaf")
    if "current_leaf" in body and not (isinstance(leaf, str) and 0 < len(leaf) <= 64):
        return problem(400, "bad_request", "'current_leaf' must be a message id")
    if isinstance(leaf, str):
        found = await store.message_of(leaf)
        if found is None or found.conversation_id != conversation.id:
            return problem(404, "message_not_found", "no such message in this conversation")
    vault = Vault(await store.load_vault(conversation.id))
    try:
        if title is not None:
            masked = await runtime.service.mask_text(
                conversation.id, title.strip()[:MAX_TITLE_CHARS], vault
            )
            await store.rename_conversation(conversation.id, user.id, masked)
        prompt: object = UNSET
        if system_prompt is not None:
            prompt = system_prompt.strip() and await runtime.service.mask_text(
                conversation.id, system_prompt.strip(), vault
            )
        if prompt is not UNSET or model is not UNSET:
            await store.update_settings(conversation.id, user.id, system_prompt=prompt, model=model)
    except VaultFullError as exc:  # what was not stored yet stays as it was
        return refused(409, exc)
    if isinstance(leaf, str):
        await store.choose_branch(conversation.id, user.id, leaf)
    changed = await store.get_conversation(conversation.id, user.id) or conversation
    answer = conversation_json(changed, vault)
    index = vault.index()
    answer["system_prompt"] = restore(changed.system_prompt or "", index)
    answer["model"] = changed.model or runtime.service.default_model
    answer["current_leaf"] = changed.current_leaf
    return JSONResponse(answer)


async def get_instructions(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    return JSONResponse({"text": await _runtime(request).store.instructions_of(user.id)})


async def put_instructions(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    body = await _body(request)
    text = _text(body.get("text") if body else None, MAX_INSTRUCTIONS_CHARS, blank=True)
    if text is None:
        return problem(
            400,
            "bad_request",
            f"send JSON with 'text': at most {MAX_INSTRUCTIONS_CHARS} characters, without NUL",
        )
    runtime = _runtime(request)
    await runtime.store.set_instructions(user.id, text.strip())
    runtime.service.instructions_changed(user.id)
    return JSONResponse({"text": text.strip()})


routes = [
    Route("/api/conversations/{id}", update_conversation, methods=["PATCH"]),
    Route("/api/me/instructions", get_instructions, methods=["GET"]),
    Route("/api/me/instructions", put_instructions, methods=["PUT"]),
]
