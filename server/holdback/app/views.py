"""How stored records look to a client: restored for their owner, or as the model saw them.

Stored text is always tokenized. The owner's view puts every token back (tool-call arguments
with JSON-escaped values, so they stay valid JSON); the model's view shows the stored text as it
is. Titles are stored tokenized too and restored like any other text.

A user's own message reads back exactly as it was typed: where the user spelled a value
otherwise than the vault (`Sarah@Acme.com` after `sarah@acme.com`), the message's sealed
spellings put the typed spelling back at its span; so does a title made from that message.
A model's reply restores every token to the vault's value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from holdback.app.pipeline import make_title
from holdback.pseudonymize import restore_as_typed, restore_in_order
from holdback.reply.frames import REPLACED_TOOL_NAME, TOOL_NAME, finish_reason
from holdback.store.records import Conversation, Message
from holdback.stream import Restorer, restore
from holdback.stream.restorer import json_escape
from holdback.tokens import TokenIndex
from holdback.vault import Vault

_CALL_ID = re.compile(r"call_[0-9a-f]{0,16}_?[0-9]{1,4}")


def _tool_calls(message: Message) -> list[dict[str, str]]:
    """Stored tool calls, with names and ids held to the frame rules (rows from before them)."""
    try:
        calls = json.loads(message.parts.get("tool_calls", "[]"))
    except ValueError:
        return []
    if not isinstance(calls, list):
        return []
    out = []
    for n, c in enumerate((c for c in calls if isinstance(c, dict)), start=1):
        name, call_id, arguments = c.get("name"), c.get("call_id"), c.get("arguments")
        out.append(
            {
                "call_id": call_id
                if isinstance(call_id, str) and _CALL_ID.fullmatch(call_id)
                else f"call_{n}",
                "name": name
                if isinstance(name, str) and TOOL_NAME.fullmatch(name)
                else REPLACED_TOOL_NAME,
                "arguments": arguments if isinstance(arguments, str) else "",
            }
        )
    return out


def _finish_reason(message: Message) -> str | None:
    """Stored reasons from before the closed vocabulary are read through it."""
    if message.role != "assistant":
        return None
    return finish_reason(message.finish_reason)


def _restore_json_values(text: str, index: TokenIndex) -> str:
    restorer = Restorer(index, escape=json_escape)
    return restorer.feed(text) + restorer.flush()


def _spans(message: Message) -> list[tuple[int, int, str]] | None:
    """The message's masked spans, `(start, end, token)`, or None if its meta has none."""
    spans = message.meta.get("masked")
    if not isinstance(spans, list):
        return None
    out = []
    for span in spans:
        if not isinstance(span, dict):
            return None
        start, end, token = span.get("start"), span.get("end"), span.get("token")
        if not (isinstance(start, int) and isinstance(end, int) and isinstance(token, str)):
            return None
        out.append((start, end, token))
    return out


def user_text(message: Message, index: TokenIndex, typed: Mapping[int, str] | None) -> str:
    """A user message's text as typed: its own spellings at their spans, when it has any."""
    if typed and message.role == "user":
        spans = _spans(message)
        if spans is not None:
            text = restore_as_typed(message.text, spans, typed, index)
            if text is not None:
                return text
    return restore(message.text, index)


def restore_message(
    message: Message, vault: Vault, typed: Mapping[int, str] | None = None
) -> dict[str, Any]:
    """A stored message as its owner sees it: every token back to its value, and a user
    message's own spellings (`typed`, from `Store.load_spellings`) back where it typed them."""
    index = vault.index()
    return {
        "id": message.id,
        "role": message.role,
        "text": user_text(message, index, typed),
        "reasoning": restore(message.parts.get("reasoning", ""), index),
        "tool_calls": [
            {
                "call_id": c.get("call_id", ""),
                "name": c.get("name", ""),
                "arguments": _restore_json_values(c.get("arguments", ""), index),
            }
            for c in _tool_calls(message)
        ],
        "masked": message.meta.get("masked", []),
        "status": message.status,
        "finish_reason": _finish_reason(message),
        "created_at": message.created_at.isoformat(),
    }


def model_view(message: Message) -> dict[str, Any]:
    """A stored message as the model saw it: tokenized, as stored."""
    return {
        "id": message.id,
        "role": message.role,
        "text": message.text,
        "reasoning": message.parts.get("reasoning", ""),
        "tool_calls": _tool_calls(message),
        "masked": message.meta.get("masked", []),
        "status": message.status,
        "finish_reason": _finish_reason(message),
        "created_at": message.created_at.isoformat(),
    }


def owner_title(
    conversation: Conversation,
    vault: Vault,
    messages: Sequence[Message],
    typed: Mapping[str, Mapping[int, str]],
) -> str:
    """The title as its owner sees it: made from the first message, it is spelled as typed."""
    index = vault.index()
    first = next((m for m in messages if m.role == "user"), None)
    if first is not None and typed.get(first.id) and conversation.title == make_title(first.text):
        spans = _spans(first)
        if spans is not None:
            title = restore_in_order(
                conversation.title, [token for _, _, token in spans], typed[first.id], index
            )
            if title is not None:
                return title
    return restore(conversation.title, index)


def conversation_json(
    conversation: Conversation, vault: Vault | None = None, *, title: str | None = None
) -> dict[str, Any]:
    """A conversation's summary; its title restored with `vault`, unless `title` is given."""
    if title is None:
        title = conversation.title
        if vault is not None:
            title = restore(title, vault.index())
    return {
        "id": conversation.id,
        "title": title or "New chat",
        "created_at": conversation.created_at.isoformat(),
        "updated_at": conversation.updated_at.isoformat(),
    }
