"""How stored records look to a client: restored for their owner, or as the model saw them.

Stored text is always tokenized. The owner's view puts every token back (tool-call arguments
with JSON-escaped values, so they stay valid JSON); the model's view shows the stored text as it
is. Titles are stored tokenized too and restored like any other text.
"""

from __future__ import annotations

import json
import re
from typing import Any

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


def restore_message(message: Message, vault: Vault) -> dict[str, Any]:
    """A stored message as its owner sees it: every token back to its value."""
    index = vault.index()
    return {
        "id": message.id,
        "role": message.role,
        "text": restore(message.text, index),
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


def conversation_json(conversation: Conversation, vault: Vault | None = None) -> dict[str, Any]:
    title = conversation.title
    if vault is not None:
        title = restore(title, vault.index())
    return {
        "id": conversation.id,
        "title": title or "New chat",
        "created_at": conversation.created_at.isoformat(),
        "updated_at": conversation.updated_at.isoformat(),
    }
