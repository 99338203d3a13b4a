"""One reply in flight (`Reply`) and the async pump that drives it (`ReplyPump`).

The rules:
- Every frame comes from a `ReplyMachine` (one per reveal policy, `viewers.Views`); the pump
  only feeds it the provider's events and stores the storage view's outcome, tokenized.
- A reply does not belong to a connection: if every client goes away, it still completes and
  is stored. Only Stop (`ChatService.cancel`) or a shutdown cancels it; the final write runs
  to its end even then, and every viewer hears how the reply ended.
- What it released is checkpointed as it goes (`Store.reply_checkpoints`), so a crash loses
  at most the last moment; the final write deletes the checkpoints.
- Every value a viewer was shown at `plain` or `masked` is audited: the tokens the reply's
  stored text holds, at that viewer's level for their kind (`reveal_items`), in the final
  write for those watching then, and on its own for a viewer who resumes it afterwards.
- A finished reply stays resumable for `KEPT_SECONDS` (at most `KEPT_REPLIES` of them), so a
  client that reloads just after the end replays what it missed, then `assistant_done`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from holdback.app.rendered_views import RenderedViews, Rendering
from holdback.app.viewers import Views, connection_of, view_vault
from holdback.errors import HoldbackError, describe
from holdback.moderation.base import ModerationFailedError, Moderator
from holdback.moderation.gate import Check, ModerationGate, OpenGate
from holdback.providers.base import ChatRequest, Provider
from holdback.reply import Outcome
from holdback.reveal import LITERAL, OWNER, Level, RevealPolicy
from holdback.stream import ReplyFilter
from holdback.stream.guard import FORBIDDEN
from holdback.stream.projection import ProjectionMode
from holdback.tokens import TokenIndex, find_tokens
from holdback.vault import Vault

if TYPE_CHECKING:
    from holdback.app.pipeline import ChatService

log = logging.getLogger("holdback.pipeline")

WireFrame = dict[str, Any]
Emit = Callable[[WireFrame], None]
KEPT_SECONDS = 300.0  # how long a finished reply can be resumed
KEPT_REPLIES = 256  # finished replies kept for resuming, at most


@dataclass(eq=False, slots=True)
class Reply:
    """One assistant reply, and the connections watching it, each under its own reveal
    policy (`viewers.Views`)."""

    conversation_id: str
    message_id: str = ""
    task: asyncio.Task[None] | None = None
    views: Views | Rendering | None = None
    # Connections that asked to watch before the reply's views existed.
    waiting: list[tuple[Emit, RevealPolicy, int]] = field(default_factory=list)
    # Who was shown the reply, under which policy: their reveals are audited with it.
    viewers: dict[str, RevealPolicy] = field(default_factory=dict)
    kinds: Mapping[str, str] = field(default_factory=dict)  # token -> kind, for the audit
    meta: dict[str, object] = field(default_factory=dict)  # the placeholder's, as stored
    stopped: bool = False  # its user pressed Stop
    finished_at: float | None = None  # the loop's time when its final write was done

    def attach(
        self,
        emit: Emit,
        policy: RevealPolicy,
        viewer_id: str | None = None,
        after_seq: int = 0,
    ) -> None:
        """Send `emit` the reply's frames after `after_seq` under `policy`, then the rest; a
        connection attached already is attached again through `emit` alone."""
        if self.views is None:
            self.detach(emit)
            self.waiting.append((emit, policy, after_seq))
        else:
            self.views.attach(emit, policy, after_seq)
        if viewer_id is not None:
            self.viewers[viewer_id] = policy

    def detach(self, emit: Emit) -> None:
        connection = connection_of(emit)
        self.waiting = [w for w in self.waiting if connection_of(w[0]) is not connection]
        if self.views is not None:
            self.views.detach(emit)

    def sends_to(self, emit: Emit) -> bool:
        """Whether `emit`'s connection is attached (or waits to be) to the reply."""
        connection = connection_of(emit)
        if any(connection_of(w[0]) is connection for w in self.waiting):
            return True
        return self.views is not None and self.views.sends_to(emit)

    def reveal_items(
        self, policy: RevealPolicy, texts: Iterable[str]
    ) -> list[tuple[str, str, Level]]:
        """(token, kind, level) of each value `texts` show a viewer under `policy` plain or
        masked."""
        tokens = sorted({m.group(0) for text in texts for m in find_tokens(text)})
        out: list[tuple[str, str, Level]] = []
        for token in tokens:
            kind = self.kinds.get(token)
            if kind is None or kind == LITERAL:
                continue
            level = policy.level(kind)
            if level != "label":
                out.append((token, kind, level))
        return out


class ReplyPump:
    """The async pump around one reply's `Views`: events in, frames out, the storage view's
    outcome stored. Timeouts and cancellation live here; every frame comes from a machine."""

    def __init__(self, service: ChatService, reply: Reply, vault: Vault) -> None:
        self.service = service
        self.reply = reply
        entries = [e for e in vault.entries() if e.kind != FORBIDDEN]
        reply.kinds = {e.token: e.kind for e in entries}
        terms = (service.detectors, service.forbidden)
        indexes: dict[RevealPolicy, tuple[TokenIndex, Vault]] = {OWNER: (reply_index(vault), vault)}

        def make_filter(
            policy: RevealPolicy, projection: ProjectionMode, json_values: bool
        ) -> ReplyFilter:
            made = indexes.get(policy)
            if made is None:
                made = indexes[policy] = (policy.index(entries), view_vault(vault, policy))
            return service._filter(made[0], made[1], projection, json_values, terms)

        self.moderator = service.moderation
        self._calls: set[asyncio.Task[None]] = set()
        prefix = f"call_{secrets.token_hex(4)}"
        self.views: Views | RenderedViews
        if self.moderator is None and service.cluster is None:
            self.views = Views(reply.conversation_id, reply.message_id, make_filter,
                               call_prefix=prefix)  # fmt: skip
        else:

            def index_for(policy: RevealPolicy) -> TokenIndex:
                return indexes[OWNER][0] if policy == OWNER else policy.index(entries)

            def shown(category: str) -> bool:  # the guard finds nothing in a category
                screen = make_filter(OWNER, "plain", False)
                try:
                    return screen.feed(category) + screen.flush() == category
                except HoldbackError:
                    return False

            bound = service.moderation_window
            gate_type = ModerationGate if self.moderator is not None else OpenGate
            gate = gate_type(reply.conversation_id, reply.message_id, bound=bound,
                             screen_category=shown)  # fmt: skip
            self.views = RenderedViews(reply.conversation_id, reply.message_id, make_filter,
                                        index_for, gate, call_prefix=prefix)  # fmt: skip
            cluster = service.cluster
            if cluster is not None:  # every process shows what was released, numbered

                def publish(wires: list[dict[str, object]]) -> None:
                    cluster.publish(reply.conversation_id, reply.message_id, wires)

                self.views.publish = publish
        reply.views = self.views
        for emit, policy, after_seq in reply.waiting:
            self.views.attach(emit, policy, after_seq)
        reply.waiting.clear()
        self.checkpoint = service.store.reply_checkpoints(
            reply.conversation_id, reply.message_id, self._storable
        )

    def _meta(self, outcome: Outcome) -> dict[str, object] | None:
        """The placeholder's meta and how the reply ended early, if it did: who stopped it,
        and the category of a moderation block (so a reload still says why)."""
        extra: dict[str, object] = {}
        if outcome.ended_by is not None:
            extra["ended_by"] = outcome.ended_by
        if isinstance(self.views, RenderedViews) and self.views.gate.blocked is not None:
            extra["moderation_category"] = self.views.gate.blocked
        return {**self.reply.meta, **extra} if extra else None

    def _storable(self) -> tuple[str, dict[str, str]]:
        outcome = self.views.outcome()
        return outcome.text, outcome.parts

    def reveals(self, texts: Iterable[str]) -> list[tuple[str, str, str, str]]:
        """(viewer, token, kind, level) for each value the reply showed a viewer plain or
        masked: the tokens its stored text holds, at each viewer's level for their kind."""
        texts = list(texts)
        return [
            (viewer_id, *item)
            for viewer_id, policy in self.reply.viewers.items()
            for item in self.reply.reveal_items(policy, texts)
        ]

    async def run(self, provider: Provider, request: ChatRequest) -> None:
        try:
            events = provider.stream(request)
            try:
                async for event in events:
                    self.checkpoint.released(self.views.receive(event))
                    self._moderate()
                    if self.views.ended:
                        break
            finally:
                aclose = getattr(events, "aclose", None)
                if aclose is not None:
                    await aclose()
            self.views.interrupt()  # the stream ended without a terminal event
            await self._verdicts()
        except asyncio.CancelledError:
            self.views.interrupt("user" if self.reply.stopped else "server")
            self._abandon()
            await self.finish()
            raise
        except Exception as exc:
            log.error("reply %s failed: %s", self.reply.message_id, describe(exc))
            self.views.fail("internal")
            self._abandon()
        await self.finish()

    # -- moderation: each window's verdict asked as soon as it is whole, in parallel ------

    def _moderate(self) -> None:
        views = self.views
        if not isinstance(views, RenderedViews) or self.moderator is None:
            return
        for check in views.checks():
            task = asyncio.create_task(self._verdict(self.moderator, views, check))
            self._calls.add(task)
            task.add_done_callback(self._calls.discard)

    async def _verdict(self, moderator: Moderator, views: RenderedViews, check: Check) -> None:
        if check.prefetch:  # only warms the moderator's cache; the window asks for itself
            with contextlib.suppress(Exception):
                await moderator.check(check.text, check.channel, self.reply.conversation_id)
            return
        try:
            verdict = await moderator.check(check.text, check.channel, self.reply.conversation_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # fail closed: nothing unverified follows
            if not isinstance(exc, ModerationFailedError):
                log.error("moderation of reply %s failed: %s", self.reply.message_id,
                          describe(exc))  # fmt: skip
            views.moderation_failed()
            return
        self.checkpoint.released(views.decide(check.id, verdict))

    async def _verdicts(self) -> None:
        """Wait until every window asked about has its verdict (or the moderation failed)."""
        self._moderate()
        while self._calls:
            await asyncio.wait(set(self._calls))
            self._moderate()

    def _abandon(self) -> None:
        for task in self._calls:
            task.cancel()
        if isinstance(self.views, RenderedViews):
            self.views.abandon()

    async def finish(self) -> None:
        """Store the outcome, then send the closing frames: the write runs to its end even if
        the reply is cancelled meanwhile (Stop, shutdown), and the client hears how the reply
        ended whether or not it could be stored."""
        outcome = self.views.outcome()

        async def store() -> None:
            await self.checkpoint.close()  # the final write comes after every checkpoint
            await self.service.store.finish_reply(
                self.reply.conversation_id,
                self.reply.message_id,
                text=outcome.text,
                parts=outcome.parts,
                status=outcome.status,
                finish_reason=outcome.finish_reason,
                redacted=outcome.redacted,
                blocked=outcome.blocked,
                checkpointed=self.checkpoint.tried,
                reveals=self.reveals([outcome.text, *outcome.parts.values()]),
                meta=self._meta(outcome),
            )

        stored = store()
        cancelled = False
        write = asyncio.ensure_future(stored)
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            cancelled = True
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([write])
        except Exception:
            pass  # read from the task below
        failure = write.exception() if write.done() and not write.cancelled() else None
        ok = failure is None and write.done() and not write.cancelled()
        if not ok:
            log.error(
                "reply %s could not be stored: %s",
                self.reply.message_id,
                describe(failure) if failure is not None else "interrupted",
            )
        self.views.done(stored=ok)
        self.reply.finished_at = asyncio.get_running_loop().time()
        if cancelled:
            raise asyncio.CancelledError


def reply_index(vault: Vault) -> TokenIndex:
    """What a reply may restore: every token but a forbidden term's, which stays redacted."""
    entries = vault.entries()
    if all(e.kind != FORBIDDEN for e in entries):
        return vault.index()
    return TokenIndex({e.token: e.value for e in entries if e.kind != FORBIDDEN})
