"""Who watches a conversation, and under which reveal policy each viewer is served.

The rules:
- A connection watches a conversation (`watch` frame) only if its user may read it now: the
  owner, or a user it is shared with, directly or through a group (`Store.access_of`).
  Anyone else, and a conversation that does not exist, is `not_found`: the two look alike.
- A viewer's reveal policy is resolved from the organisation's rules at the moment a reply
  is attached to them (`reveal.resolve`): each new reply checks again whether they may still
  read the conversation and how, so a revoked share or a changed policy holds from the next
  reply on, and a viewer who lost access is dropped.
- A watcher is attached to the reply in flight, if there is one, from its start, and to
  every later reply of the conversation, until the connection goes. Bounds: at most
  `MAX_WATCHERS` connections per conversation and `MAX_WATCHED` conversations per connection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from holdback.app.viewers import connection_of
from holdback.errors import HoldbackError
from holdback.reveal import RevealPolicy, Rules
from holdback.store.repository import Store

log = logging.getLogger("holdback.pipeline")

WireFrame = dict[str, Any]
Emit = Callable[[WireFrame], None]
MAX_WATCHERS = 64  # connections watching one conversation
MAX_WATCHED = 32  # conversations one connection watches


class TooManyWatchersError(HoldbackError):
    """A conversation, or a connection, is at its bound of watchers."""

    code = "too_many_watchers"


@dataclass(frozen=True, slots=True)
class Watcher:
    emit: Emit
    viewer_id: str


async def policy_for(
    store: Store, viewer_id: str, conversation_id: str, rules: Rules
) -> RevealPolicy | None:
    """The viewer's policy for the conversation now, or None if they may not read it."""
    standing = await store.standing_of(conversation_id, viewer_id)  # one read
    if standing is None:
        return None
    access, groups = standing
    if access == "owner":
        return rules.for_viewer(owner=True)
    return rules.for_viewer(owner=False, groups=groups)


class Watchers:
    """The connections watching each conversation (not the one that sent a message: it is
    attached to its own reply by `ChatService.submit`)."""

    def __init__(self) -> None:
        self._by_conversation: dict[str, list[Watcher]] = {}

    def add(self, conversation_id: str, watcher: Watcher) -> bool:
        """Start watching; False if this connection already watches the conversation."""
        watching = self._by_conversation.setdefault(conversation_id, [])
        connection = connection_of(watcher.emit)
        if any(connection_of(w.emit) is connection for w in watching):
            return False
        if len(watching) >= MAX_WATCHERS:
            raise TooManyWatchersError(f"a conversation has at most {MAX_WATCHERS} watchers")
        if self.watched_by(watcher.emit) >= MAX_WATCHED:
            raise TooManyWatchersError(f"a connection watches at most {MAX_WATCHED} chats")
        watching.append(watcher)
        return True

    def remove(self, emit: Emit) -> None:
        """The connection of `emit` is gone: it watches nothing any more."""
        for conversation_id in list(self._by_conversation):
            connection = connection_of(emit)
            kept = [
                w
                for w in self._by_conversation[conversation_id]
                if connection_of(w.emit) is not connection
            ]
            if kept:
                self._by_conversation[conversation_id] = kept
            else:
                del self._by_conversation[conversation_id]

    def drop(self, conversation_id: str, watcher: Watcher) -> None:
        kept = [w for w in self._by_conversation.get(conversation_id, []) if w is not watcher]
        if kept:
            self._by_conversation[conversation_id] = kept
        else:
            self._by_conversation.pop(conversation_id, None)

    def of(self, conversation_id: str) -> list[Watcher]:
        return list(self._by_conversation.get(conversation_id, ()))

    def watched_by(self, emit: Emit) -> int:
        connection = connection_of(emit)
        return sum(
            any(connection_of(w.emit) is connection for w in ws)
            for ws in self._by_conversation.values()
        )
