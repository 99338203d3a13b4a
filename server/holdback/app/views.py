"""How stored records look to a client: restored for their owner, or as the model saw them.

Stored text is always tokenized. The owner's view puts every token back (tool-call arguments
with JSON-escaped values, so they stay valid JSON); the model's view shows the stored text as it
is. Titles are stored tokenized too and restored like any other text.

A user's own message reads back exactly as it was typed: where the user spelled a value
otherwise than the vault (`Sarah@Acme.com` after `sarah@acme.com`), the message's sealed
spellings put the typed spelling back at its span; so does a title made from that message.
A model's reply restores every token to the vault's value.

Over HTTP every viewer reads through a `Reader`: each token restored as their reveal policy
shows it, a user's own spellings only where the policy shows the value plain, and a note of
every token whose value, whole or in part, the texts showed them (`revealed`, for the reveal
trail: tokens and kinds, never values). Under a plain policy (the owner's, unless a kind is
never restored) the index is the vault's own, so the owner reads exactly as before; under any
other, it is `RevealPolicy.index` of the vault without its forbidden terms, which are never
restored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from holdback.app.pipeline import make_title
from holdback.moderation.base import CATEGORY_RE
from holdback.pseudonymize import restore_as_typed, restore_in_order
from holdback.reply.frames import ENDED_BY, REPLACED_TOOL_NAME, TOOL_NAME, finish_reason
from holdback.reveal import LITERAL, OWNER, Level, RevealPolicy
from holdback.store.records import Conversation, Message
from holdback.stream import Restorer, restore
from holdback.stream.guard import FORBIDDEN
from holdback.stream.restorer import json_escape, url_label
from holdback.tokens import TOKEN_RE, TokenIndex, token_id
from holdback.vault import Vault

_CALL_ID = re.compile(r"call_[0-9a-f]{0,16}_?[0-9]{1,4}")
# What the reveal trail takes for a kind (`store.team.check_kind`); any other is rewritten.
_TRAIL_KIND = re.compile(r"[a-z0-9][a-z0-9_-]{0,199}\Z")
_NOT_KIND_CHARS = re.compile(r"[^a-z0-9_-]+")


class Reader:
    """One viewer's reading of one conversation: the index that restores each token as the
    viewer's policy shows it, and the tokens its texts showed at `plain` or `masked`.

    With `track`, what was shown is noted (`revealed`). With a plain policy the index is the
    vault's own, as the owner has always read it.
    """

    def __init__(self, vault: Vault, policy: RevealPolicy = OWNER, *, track: bool = False):
        self.policy = policy
        if policy.plain:
            self.index = vault.index()
        else:
            self.index = policy.index(e for e in vault.entries() if e.kind != FORBIDDEN)
        self.track = track
        self._kinds = {token_id(e.token): e.kind for e in vault.entries()}
        self._shown: set[str] = set()

    def plain(self, token: str) -> bool:
        """Whether the value of `token` (`<EMAIL_1>`) is shown to this viewer as it is."""
        if not TOKEN_RE.fullmatch(token):
            return False
        kind = self._kinds.get(token[1:-1])
        if kind is None or token[1:-1] not in self.index.values:
            return False
        return self.policy.plain or self.policy.level(kind) == "plain"

    def typed(self, message: Message, typed: Mapping[int, str] | None) -> Mapping[int, str]:
        """The message's own spellings this viewer may see: at spans shown plain."""
        if not typed or self.policy.plain:
            return typed or {}
        spans = _spans(message) or []
        return {i: text for i, text in typed.items() if i < len(spans) and self.plain(spans[i][2])}

    def note(self, text: str) -> None:
        """Note the tokens that restoring `text` shows (not those shown as a URL's label)."""
        if not self.track or not text or not self.index.values:
            return
        restorer = Restorer(self.index)
        for piece, ident in restorer.feed_pieces(text) + restorer.flush_pieces():
            if ident is not None and piece != url_label(ident):
                self._shown.add(ident)

    def note_tokens(self, tokens: Sequence[str]) -> None:
        """Note exact tokens shown by a user's message restored as typed."""
        if self.track:
            self._shown.update(t[1:-1] for t in tokens if TOKEN_RE.fullmatch(t))

    def revealed(self) -> list[tuple[str, str, Level]]:
        """`(token, kind, level)` of each value noted since the last call, at `plain` or
        `masked`, sorted; the note starts over."""
        found: list[tuple[str, str, Level]] = []
        for ident in sorted(self._shown):
            kind = self._kinds.get(ident)
            if kind is None or kind in (LITERAL, FORBIDDEN) or ident not in self.index.values:
                continue
            level = self.policy.level(kind)
            if level in ("plain", "masked"):
                found.append((f"<{ident}>", trail_kind(kind), level))
        self._shown.clear()
        return found


def trail_kind(kind: str) -> str:
    """A vault kind as the reveal trail names it (lower case, letters, digits, `_`, `-`)."""
    if _TRAIL_KIND.match(kind):
        return kind
    cleaned = _NOT_KIND_CHARS.sub("-", kind.lower()).strip("-_")[:200]
    return cleaned if _TRAIL_KIND.match(cleaned) else "value"


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


def _moderation_category(message: Message) -> str | None:
    """The category a moderator blocked a reply for (screened when it was stored)."""
    found = message.meta.get("moderation_category")
    return found if isinstance(found, str) and CATEGORY_RE.match(found) else None


def _attachments(message: Message) -> list[Any]:
    """What a user message records of its documents (`uploads.attachments_meta`: ids, sizes,
    the block fence; the names and texts are in its text, `uploads.split_composed`)."""
    found = message.meta.get("attachments")
    return found if isinstance(found, list) else []


def _ended_by(message: Message) -> str | None:
    """Who stopped a reply early (`reply.frames.ENDED_BY`), from its meta; None otherwise."""
    ended = message.meta.get("ended_by")
    return ended if ended in ENDED_BY else None


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


def user_text(
    message: Message,
    index: TokenIndex,
    typed: Mapping[int, str] | None,
    reader: Reader | None = None,
) -> str:
    """A user message's text as typed: its own spellings at their spans, when it has any (for
    a `reader`, those at spans it shows plain)."""
    if reader is not None:
        typed = reader.typed(message, typed)
    if typed and message.role == "user":
        spans = _spans(message)
        if spans is not None:
            text = restore_as_typed(message.text, spans, typed, index)
            if text is not None:
                if reader is not None:
                    reader.note_tokens([token for _, _, token in spans])
                return text
    if reader is not None:
        reader.note(message.text)
    return restore(message.text, index)


def restore_message(
    message: Message,
    vault: Vault,
    typed: Mapping[int, str] | None = None,
    *,
    reader: Reader | None = None,
) -> dict[str, Any]:
    """A stored message as its owner sees it: every token back to its value, and a user
    message's own spellings (`typed`, from `Store.load_spellings`) back where it typed them.
    With a `reader`, as that reader's viewer sees it (and noted in it)."""
    index = vault.index() if reader is None else reader.index
    reasoning = message.parts.get("reasoning", "")
    calls = _tool_calls(message)
    if reader is not None:
        reader.note(reasoning)
        for call in calls:
            reader.note(call.get("arguments", ""))
    return {
        "id": message.id,
        "role": message.role,
        "text": user_text(message, index, typed, reader),
        "reasoning": restore(reasoning, index),
        "tool_calls": [
            {
                "call_id": c.get("call_id", ""),
                "name": c.get("name", ""),
                "arguments": _restore_json_values(c.get("arguments", ""), index),
            }
            for c in calls
        ],
        "masked": message.meta.get("masked", []),
        "status": message.status,
        "finish_reason": _finish_reason(message),
        "created_at": message.created_at.isoformat(),
        "parent_id": message.parent_id,
        "model": message.model,
        "ended_by": _ended_by(message),
        "attachments": _attachments(message),
        "moderation_category": _moderation_category(message),
    }


def model_view(message: Message) -> dict[str, Any]:
    """A stored message as the model saw it: tokenized, as stored; a reply with the system
    text it was asked with (the owner's instructions and the system prompt, tokenized)."""
    body = {
        "id": message.id,
        "role": message.role,
        "text": message.text,
        "reasoning": message.parts.get("reasoning", ""),
        "tool_calls": _tool_calls(message),
        "masked": message.meta.get("masked", []),
        "status": message.status,
        "finish_reason": _finish_reason(message),
        "created_at": message.created_at.isoformat(),
        "parent_id": message.parent_id,
        "model": message.model,
        "ended_by": _ended_by(message),
        "attachments": _attachments(message),
        "moderation_category": _moderation_category(message),
    }
    system = message.meta.get("system")
    if isinstance(system, str) and system:
        body["system"] = system
    return body


def owner_title(
    conversation: Conversation,
    vault: Vault,
    messages: Sequence[Message],
    typed: Mapping[str, Mapping[int, str]],
    *,
    reader: Reader | None = None,
) -> str:
    """The title as its owner sees it: made from the first message, it is spelled as typed.
    With a `reader`, as that reader's viewer sees it (and noted in it)."""
    index = vault.index() if reader is None else reader.index
    first = next((m for m in messages if m.role == "user"), None)
    if first is not None and typed.get(first.id) and conversation.title == make_title(first.text):
        spans = _spans(first)
        spelled = typed[first.id] if reader is None else reader.typed(first, typed[first.id])
        if spans is not None and spelled:
            title = restore_in_order(
                conversation.title, [token for _, _, token in spans], spelled, index
            )
            if title is not None:
                if reader is not None:
                    reader.note_tokens([m.group() for m in TOKEN_RE.finditer(conversation.title)])
                return title
    if reader is not None:
        reader.note(conversation.title)
    return restore(conversation.title, index)


def conversation_json(
    conversation: Conversation,
    vault: Vault | None = None,
    *,
    title: str | None = None,
    reader: Reader | None = None,
) -> dict[str, Any]:
    """A conversation's summary; its title restored with `vault` (or as `reader` shows it, and
    noted in it), unless `title` is given."""
    if title is None:
        title = conversation.title
        if reader is not None:
            reader.note(title)
            title = restore(title, reader.index)
        elif vault is not None:
            title = restore(title, vault.index())
    return {
        "id": conversation.id,
        "title": title or "New chat",
        "created_at": conversation.created_at.isoformat(),
        "updated_at": conversation.updated_at.isoformat(),
    }
