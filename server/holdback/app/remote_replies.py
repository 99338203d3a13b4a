"""Replies another process runs, as this process's viewers watch and resume them.

The rules:
- A remote reply is shown from the frames its process published (`app/cluster.py`), read by
  number, rendered here under each viewer's own policy from this conversation's vault,
  exactly as the running process renders them for its own viewers
  (`rendered_views.RemoteViews`): the same frames, numbered alike.
- One remote reply per message on this process, whoever watches it and however many ask for
  it at once (they share one lookup); it is followed until
  its `assistant_done`, then kept for `KEPT_SECONDS` so a resume here replays it.
- What a viewer here was shown at `plain` or `masked` is audited here when the reply ends
  (the running process audits its own viewers), tokens and kinds only.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from holdback.app.cluster import Cluster
from holdback.app.rendered_views import RemoteViews
from holdback.app.reply_pump import KEPT_REPLIES, KEPT_SECONDS, Reply, reply_index
from holdback.errors import describe
from holdback.reply.frames import AssistantDelta
from holdback.reveal import OWNER, RevealPolicy
from holdback.store.repository import Store
from holdback.stream.guard import FORBIDDEN
from holdback.tokens import TokenIndex
from holdback.vault import Vault

log = logging.getLogger("holdback.cluster")


class RemoteReplies:
    def __init__(self, store: Store, cluster: Cluster) -> None:
        self.store = store
        self.cluster = cluster
        self._replies: OrderedDict[str, Reply] = OrderedDict()  # by message id
        self._audits: set[asyncio.Task[None]] = set()
        self._lookups: dict[str, asyncio.Task[Reply | None]] = {}  # by message id

    async def reply(self, conversation_id: str, message_id: str) -> Reply | None:
        """The reply as published so far (and followed from now on), or None if nothing of
        it was published (it never ran elsewhere, or its frames are gone). Callers asking
        for one message at once share one lookup, and so one remote reply."""
        self._forget_old()
        found = self._replies.get(message_id)
        if found is not None:
            return found if found.conversation_id == conversation_id else None
        lookup = self._lookups.get(message_id)
        if lookup is None:
            lookup = asyncio.get_running_loop().create_task(
                self._look_up(conversation_id, message_id)
            )
            self._lookups[message_id] = lookup
            lookup.add_done_callback(lambda _: self._lookups.pop(message_id, None))
        # A caller that goes away leaves the lookup to those still waiting for it.
        reply = await asyncio.shield(lookup)
        if reply is None or reply.conversation_id != conversation_id:
            return None
        return reply

    async def _look_up(self, conversation_id: str, message_id: str) -> Reply | None:
        vault = Vault(await self.store.load_vault(conversation_id))
        entries = [e for e in vault.entries() if e.kind != FORBIDDEN]
        owner_index = reply_index(vault)

        def index_for(policy: RevealPolicy) -> TokenIndex:
            return owner_index if policy == OWNER else policy.index(entries)

        views = RemoteViews(conversation_id, message_id, index_for)
        reply = Reply(conversation_id, message_id, views=views)
        reply.kinds = {e.token: e.kind for e in entries}
        views.on_end = lambda: self._ended(reply)
        await self.cluster.follow(conversation_id, message_id, views)
        if views.shown == 1 and not views.ended:
            running = await self.cluster.running_elsewhere(conversation_id)
            if running != message_id:
                self.cluster.unfollow(conversation_id, message_id, views)
                return None
        self._replies[message_id] = reply
        while len(self._replies) > KEPT_REPLIES:
            self._replies.popitem(last=False)
        return reply

    def _ended(self, reply: Reply) -> None:
        views = reply.views
        assert isinstance(views, RemoteViews)
        self.cluster.unfollow(reply.conversation_id, reply.message_id, views)
        reply.finished_at = asyncio.get_running_loop().time()
        texts = [f.text for f in views.released if isinstance(f, AssistantDelta)]
        task = asyncio.get_running_loop().create_task(self._audit(reply, texts))
        self._audits.add(task)
        task.add_done_callback(self._audits.discard)

    async def _audit(self, reply: Reply, texts: list[str]) -> None:
        try:
            for viewer_id, policy in reply.viewers.items():
                items = reply.reveal_items(policy, texts)
                await self.store.record_read(viewer_id, reply.conversation_id,
                                             [(reply.message_id, items)])  # fmt: skip
        except Exception as exc:
            log.error("a remote reply's reveals were not recorded: %s", describe(exc))

    def _forget_old(self) -> None:
        now = asyncio.get_running_loop().time()
        for message_id, reply in list(self._replies.items()):
            if reply.finished_at is not None and now - reply.finished_at > KEPT_SECONDS:
                del self._replies[message_id]
