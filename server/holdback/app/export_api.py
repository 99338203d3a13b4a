"""`GET /api/conversations/{id}/export?format=md|json`: a conversation as a file, restored
for the one who downloads it.

The rules:
- The same access as `GET /api/conversations/{id}`: its owner, or a user it is shared with
  (directly or through a group); for anyone else it does not exist (404, as a conversation
  that does not exist).
- Restored exactly as that read restores it (`views.Reader` under the owner's policy, or the
  viewer's, and a user's own spellings only where a value is shown plain); what the export
  showed plain or masked is recorded on the reveal trail, one transaction, as a read is.
- What is exported is the branch shown (`current_path`): from the conversation's current
  leaf back through `parent_id` to the first message. JSON carries what the read carries for
  those messages; Markdown the title, each message with its role, model and time, its text
  (documents included, as the message holds them), its attachments as recorded, and a note
  for a reply that did not complete.
- The file's name is made of the conversation's id and the date, never of its title, which
  may hold a value; the answer is never cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from holdback.app.http_api import _runtime, _user, problem
from holdback.app.views import Reader, conversation_json, owner_title, restore_message
from holdback.reveal import Level
from holdback.store.conversations import path_to
from holdback.store.records import Conversation, Message, SharedConversation
from holdback.stream import restore
from holdback.vault import Vault

FORMATS = ("md", "json")
ROLES = {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool"}
_ATTACHMENT_FIELDS = ("id", "index", "size", "chars", "media_type")


def current_path(conversation: Conversation, messages: Sequence[Message]) -> list[Message]:
    """The branch shown, first message first: the one `GET /api/conversations/{id}` names in
    `current_path` (from `current_leaf`, else the last message by `seq`, back through
    `parent_id`); messages without any `parent_id` (rows from before the tree) are one line,
    in `seq` order."""
    if all(m.parent_id is None for m in messages):
        return sorted(messages, key=lambda m: m.seq)
    return path_to(messages, conversation.current_leaf)


def _attachments(message: Message, reader: Reader) -> list[dict[str, Any]]:
    """What a message records of its documents (`meta["attachments"]`: ids, sizes, types;
    their names and text are in the message's text, restored with it), and a name if one is
    recorded, restored for the reader."""
    found = message.meta.get("attachments")
    if not isinstance(found, list):
        return []
    out = []
    for item in found:
        if not isinstance(item, dict):
            continue
        shown: dict[str, Any] = {
            key: item[key]
            for key in _ATTACHMENT_FIELDS
            if isinstance(item.get(key), str | int) and not isinstance(item.get(key), bool)
        }
        name = item.get("name")
        if isinstance(name, str):
            reader.note(name)
            shown["name"] = restore(name, reader.index)
        out.append(shown)
    return out


def _attachment_line(n: int, item: dict[str, Any]) -> str:
    what = [str(item[k]) for k in ("media_type",) if item.get(k)]
    if isinstance(item.get("size"), int):
        what.append(f"{item['size']} bytes")
    name = f"`{item['name']}`" if item.get("name") else f"document {item.get('index', n)}"
    return f"- {name}" + (f" ({', '.join(what)})" if what else "")


async def _readable(
    request: Request, user_id: str, conversation_id: str
) -> tuple[Conversation, SharedConversation | None] | None:
    store = _runtime(request).store
    conversation = await store.get_conversation(conversation_id, user_id)
    if conversation is not None:
        return conversation, None
    share = next(
        (s for s in await store.shared_with(user_id) if s.conversation.id == conversation_id),
        None,
    )
    return (share.conversation, share) if share is not None else None


def _heading(text: str) -> str:
    return " ".join(text.split()) or "New chat"


def markdown(body: dict[str, Any]) -> str:
    """The exported conversation as Markdown."""
    lines = [f"# {_heading(body['title'])}", ""]
    count = len(body["messages"])
    lines += [f"*Exported from holdback, {count} message{'s' if count != 1 else ''}.*", ""]
    if body.get("system_prompt"):
        lines += ["**System prompt:**", "", body["system_prompt"], ""]
    for m in body["messages"]:
        role = ROLES.get(m["role"], m["role"].capitalize())
        model = f" ({m['model']})" if m.get("model") else ""
        lines += ["---", "", f"### {role}{model} · {m['created_at']}", ""]
        if m["text"]:
            lines += [m["text"], ""]
        for call in m["tool_calls"]:
            lines += [f"Tool call `{call['name']}`:", "", "```json", call["arguments"], "```", ""]
        if m.get("attachments"):
            lines += ["Attachments:", ""]
            lines += [_attachment_line(n, a) for n, a in enumerate(m["attachments"], 1)]
            lines += [""]
        if m["status"] != "complete":
            why = f": {m['finish_reason']}" if m.get("finish_reason") else ""
            lines += [f"*({m['status']}{why})*", ""]
    return "\n".join(lines).rstrip() + "\n"


async def export_conversation(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    fmt = request.query_params.get("format", "md")
    if fmt not in FORMATS:
        return problem(400, "bad_request", "format is md or json")
    runtime = _runtime(request)
    store = runtime.store
    conversation_id = request.path_params["id"]
    readable = await _readable(request, user.id, conversation_id)
    if readable is None:
        return problem(404, "not_found", "no such conversation")
    conversation, share = readable
    reply = runtime.service.replies.get(conversation.id)
    messages = await store.list_messages(conversation.id)
    path = current_path(conversation, messages)
    vault = Vault(await store.load_vault(conversation.id))
    typed = await store.load_spellings(conversation.id)
    rules = await runtime.service._rules()
    if share is None:
        policy = rules.for_viewer(owner=True)
    else:
        policy = rules.for_viewer(owner=False, groups=await store.groups_of(user.id))
    reader = Reader(vault, policy, track=True)
    title = owner_title(conversation, vault, messages, typed, reader=reader)
    shown: list[tuple[str | None, list[tuple[str, str, Level]]]] = [(None, reader.revealed())]
    body = conversation_json(conversation, vault, title=title)
    body["messages"] = []
    for m in path:
        restored = restore_message(m, vault, typed.get(m.id), reader=reader)
        attachments = _attachments(m, reader)
        if attachments and "attachments" not in restored:  # the read's own, if it has them
            restored["attachments"] = attachments
        if reply is not None and m.id == reply.message_id:
            restored.update(status="streaming", finish_reason=None)
        body["messages"].append(restored)
        shown.append((m.id, reader.revealed()))
    body["system_prompt"] = ""
    if conversation.system_prompt:
        reader.note(conversation.system_prompt)
        body["system_prompt"] = restore(conversation.system_prompt, reader.index)
        shown.append((None, reader.revealed()))
    await store.record_read(user.id, conversation.id, shown)  # one write per export
    body["current_path"] = [m.id for m in path]
    body["model"] = conversation.model or runtime.service.default_model
    body["view"] = "shared" if share is not None else "owner"
    if share is not None:
        body.update(shared=True, owner=share.owner, access=share.access)
    else:
        body.update(shared=False, owner=user.name, access="owner")
    body["streaming"] = reply is not None
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    name = f"holdback-{conversation.id[:12]}-{stamp}.{fmt}"
    headers = {
        "Content-Disposition": f'attachment; filename="{name}"',
        "Cache-Control": "no-store",
    }
    if fmt == "json":
        return JSONResponse(body, headers=headers)
    return Response(
        markdown(body).encode("utf-8"),
        media_type="text/markdown; charset=utf-8",
        headers=headers,
    )


routes = [Route("/api/conversations/{id}/export", export_conversation, methods=["GET"])]
