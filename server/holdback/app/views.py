"""How stored records look to a client: restored for their owner, or as the model saw them.

Stored text is always tokenized. The owner's view puts every token back (tool-call arguments
with JSON-escaped values, so they stay valid JSON); the model's view shows the stored text as it
is. Titles are stored tokenized too and restored like any other text.
"""

from __future__ import annotations

import json
from typing import Any

from holdback.store.records import Conversation, Message
from holdback.stream import Restorer, restore
from holdback.stream.restorer import json_escape
from holdback.tokens import TokenIndex
from holdback.vault import Vault


def _tool_calls(message: Message) -> list[dict[str, str]]:
    try:
        calls = json.loads(message.parts.get("tool_calls", "[]"))
    except ValueError:
        return []
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


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
        "finish_reason": message.finish_reason,
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
        "finish_reason": message.finish_reason,
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
