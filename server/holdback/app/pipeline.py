"""The chat pipeline: one user message in, one screened and restored reply out.

The order is the product's promise:
1. pseudonymize the user's text with the conversation's vault, and store the new vault entries
   *before* the model is called;
2. store the user message (tokenized), and tell the client what was masked;
3. pump the model's events through the reply's `ReplyMachine` (`holdback.reply`), the one door
   every reply frame goes out of, and send what it returns;
4. store the machine's outcome (tokenized, screened), then send its closing frames.

While the reply streams, what it released so far is saved too (the store's reply
checkpoints: at least every second or every 2 KiB), so a crash loses at most the last
checkpoint's worth of what the user saw.

This module is the thin async part: timeouts, cancellation and the store live here, decisions
about what a client may see do not. One reply is in flight per conversation; a second message
for it is refused (`busy`). A reply does not belong to a connection: if the client goes away,
the reply still completes and is stored. Nothing here logs or raises with an original value.

The vault a reply works with is built from the store's entries, as stored (detector kind,
normalized form), and grows only by the entries the store hands back. A user's message is
stored with its own spellings of values the vault spells otherwise (sealed), so it reads back
exactly as typed. A large message is pseudonymized off the event loop, on a bounded number of
worker threads, so other users are not stalled while it is analyzed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from holdback.app.viewers import TooManyViewsError, Views, view_vault
from holdback.app.watching import Watcher, Watchers, connection_of, policy_for
from holdback.detect import DetectorSet, TermMatcher
from holdback.errors import HoldbackError, describe, wire_message
from holdback.providers.base import ChatMessage, ChatRequest, Provider
from holdback.pseudonymize import Analysis, Masked, Pseudonymizer, restore_in_order, spellings
from holdback.reply.frames import MaskedSpan, MessageAccepted
from holdback.reveal import LITERAL, OWNER, RevealPolicy, Rules
from holdback.store.records import Message, VaultItem
from holdback.store.repository import Store
from holdback.stream import Guard, GuardMode, ReplyFilter, Restorer, restore
from holdback.stream.guard import FORBIDDEN
from holdback.stream.projection import ProjectionMode
from holdback.stream.restorer import json_escape
from holdback.tokens import TokenIndex, find_tokens
from holdback.vault import Vault

__all__ = ["ChatError", "ChatService", "OffLoop", "Reply", "json_escape", "make_title"]

log = logging.getLogger("holdback.pipeline")
RULES_TTL = 1.0  # seconds a read of the reveal rules is used for

WireFrame = dict[str, Any]
Emit = Callable[[WireFrame], None]


class ChatError(HoldbackError):
    """A request the pipeline refuses; each subclass names why, and carries its wire code."""

    def __init__(self) -> None:
        super().__init__(wire_message(self.code))


class RateLimitedError(ChatError):
    """The user sent more messages than the rate limit allows."""

    code = "rate_limited"


class ConversationBusyError(ChatError):
    """A reply is already streaming in this conversation; a second message is refused."""

    code = "busy"


class UnknownConversationError(ChatError):
    """No such conversation, or it is another user's."""

    code = "not_found"


@dataclass(eq=False, slots=True)
class Reply:
    """One assistant reply in flight, and the connections watching it, each under its own
    reveal policy (`viewers.Views`)."""

    conversation_id: str
    message_id: str = ""
    task: asyncio.Task[None] | None = None
    views: Views | None = None
    # Connections that asked to watch before the reply's views existed.
    waiting: list[tuple[Emit, RevealPolicy]] = field(default_factory=list)
    # Who was shown the reply, under which policy: their reveals are audited with it.
    viewers: dict[str, RevealPolicy] = field(default_factory=dict)

    def attach(self, emit: Emit, policy: RevealPolicy, viewer_id: str | None = None) -> None:
        if self.views is None:
            self.waiting.append((emit, policy))
        else:
            self.views.attach(emit, policy)
        if viewer_id is not None:
            self.viewers[viewer_id] = policy

    def detach(self, emit: Emit) -> None:
        self.waiting = [(e, p) for e, p in self.waiting if e is not emit]
        if self.views is not None:
            self.views.detach(emit)


class RateLimiter:
    """A token bucket per user: `rate` messages a minute, bursts of up to `rate`."""

    def __init__(self, per_minute: int) -> None:
        self.capacity = float(per_minute)
        self.refill = per_minute / 60.0
        self._buckets: dict[str, tuple[float, float]] = {}

    def allow(self, key: str) -> bool:
        now = time.monotonic()
        tokens, last = self._buckets.get(key, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - last) * self.refill)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return False
        self._buckets[key] = (tokens - 1, now)
        return True


class ChatService:
    def __init__(
        self,
        store: Store,
        provider: Provider,
        detectors: DetectorSet,
        *,
        forbidden: TermMatcher | None = None,
        guard_mode: GuardMode = "redact",
        guard_window: int = 256,
        phone_region: str | None = None,
        rate_limit_per_minute: int = 30,
        offload_chars: int = 1024,
        offload_workers: int = 2,
        models: Mapping[str, Provider] | None = None,
    ) -> None:
        self.store = store
        self.provider = provider
        # Model id -> provider, the default first; `provider` alone is the model "default".
        self.models: dict[str, Provider] = dict(models) if models else {"default": provider}
        self.default_model = next(iter(self.models))
        self.guard_mode = guard_mode
        self.guard_window = guard_window
        self.phone_region = phone_region
        self.use_terms(detectors, forbidden)
        self.limiter = RateLimiter(rate_limit_per_minute)
        self.replies: dict[str, Reply] = {}
        self.watchers = Watchers()
        self._rules_cache: tuple[float, Rules] | None = None
        self.offload_chars = offload_chars
        self.off_loop = OffLoop(offload_workers)

    def use_terms(self, detectors: DetectorSet, forbidden: TermMatcher | None) -> None:
        """The detectors and forbidden terms for every message from now on; a reply under way
        keeps the ones it started with."""
        self.detectors = detectors
        self.forbidden = forbidden
        # Forbidden terms the user types are masked before the model too, like sensitive ones;
        # in a reply they stay redacted (`reply_index` never restores them).
        masking = detectors
        if forbidden is not None and len(forbidden):
            masking = detectors.with_detectors([*detectors.detectors, forbidden])
        self.pseudonymizer = Pseudonymizer(masking, phone_region=self.phone_region)

    # -- entry points ----------------------------------------------------------------------

    async def submit(
        self, user_id: str, conversation_id: str | None, text: str, emit: Emit
    ) -> Reply:
        """Accept a user message and start its reply; returns once the reply is under way."""
        if not self.limiter.allow(user_id):
            raise RateLimitedError
        if conversation_id is not None and conversation_id in self.replies:
            # Refused before the vault is read and decrypted; checked again below, after the
            # awaits, because a reply may have started meanwhile.
            await self._writable(user_id, conversation_id)
            raise ConversationBusyError
        # A new conversation is created by its first write (the vault's or the turn's).
        creating: str | None = None
        owner_id = user_id
        if conversation_id is None:
            conversation_id, stored_title, vault = self.store.new_conversation_id(), "", Vault()
            creating = user_id
            policy = await self._policy(user_id, owner=True)
        else:
            # The owner's own conversation (one read), else one shared with them to continue.
            opened = await self.store.open_conversation(conversation_id, user_id)
            if opened is not None:
                policy = await self._policy(user_id, owner=True)
            else:
                owner_id, policy = await self._writable(user_id, conversation_id)
                opened = await self.store.open_conversation(conversation_id, owner_id)
            if opened is None:
                raise UnknownConversationError
            conversation, stored = opened
            stored_title, vault = conversation.title, Vault(stored)
        if conversation_id in self.replies:
            raise ConversationBusyError
        reply = self.replies[conversation_id] = Reply(conversation_id)
        try:
            masked_text, masked, created = await self._pseudonymize(
                conversation_id, text, vault, create_for=creating
            )
            spans = [
                {"start": m.start, "end": m.end, "kind": m.kind, "token": m.token} for m in masked
            ]
            # What the user typed where the vault spells a value otherwise: sealed with the
            # message, so it reads back as typed.
            typed = spellings(masked, vault)
            index = vault.index()
            if stored_title:
                accepted_title = restore(stored_title, index)
                title = None
            else:
                title = make_title(masked_text)
                tokens = [m.token for m in masked]
                accepted_title = restore_in_order(title, tokens, typed, index) or restore(
                    title, index
                )
            # One transaction: the user message, its title, audit and spellings, the history
            # the model reads, and the placeholder the reply is written into.
            turn = await self.store.begin_reply(
                conversation_id,
                masked_text,
                meta={"masked": spans},
                title=title,
                owner_id=owner_id,
                masked=Counter(m.kind for m in masked),
                spellings=typed,
                create_for=None if created else creating,
            )
        except BaseException:
            self.replies.pop(reply.conversation_id, None)
            raise
        # From here the placeholder exists, so the reply task owns it and always finishes it.
        reply.message_id = turn.assistant.id
        pump = _ReplyPump(self, reply, vault)
        reply.task = asyncio.create_task(
            self._run(pump, turn.history), name=f"reply-{reply.message_id}"
        )
        emit(
            MessageAccepted(
                conversation_id,
                turn.user.id,
                tuple(MaskedSpan(m.start, m.end, m.kind, m.token) for m in masked),
                accepted_title,
            ).wire()
        )
        reply.attach(emit, policy, user_id)
        await self._attach_watchers(reply, emit)
        return reply

    async def watch(self, viewer_id: str, conversation_id: str, emit: Emit) -> Reply | None:
        """Send `emit` the conversation's reply in flight (from its start), which is returned,
        and every later one, under the viewer's policy; `not_found` if they may not read it."""
        policy = await policy_for(self.store, viewer_id, conversation_id, await self._rules())
        if policy is None:
            raise UnknownConversationError
        watcher = Watcher(emit, viewer_id)
        if not self.watchers.add(conversation_id, watcher):
            return None
        reply = self.replies.get(conversation_id)
        if reply is not None:  # the policy just read holds for the reply in flight
            self._attach_as(reply, watcher, policy)
        return reply

    def unwatch(self, emit: Emit) -> None:
        """A connection is gone: it watches nothing any more."""
        self.watchers.remove(emit)

    async def _attach_watchers(self, reply: Reply, sender: Emit) -> None:
        for watcher in self.watchers.of(reply.conversation_id):
            if connection_of(watcher.emit) is not connection_of(sender):
                await self._attach(reply, watcher)

    async def _attach(self, reply: Reply, watcher: Watcher) -> None:
        """Attach a watcher under its policy as it stands now, or drop it if it lost access."""
        try:
            rules = await self._rules()
            policy = await policy_for(self.store, watcher.viewer_id, reply.conversation_id, rules)
        except HoldbackError as exc:
            log.warning("a watcher could not be attached: %s", type(exc).__name__)
            return
        if policy is None:
            self.watchers.drop(reply.conversation_id, watcher)
            return
        self._attach_as(reply, watcher, policy)

    @staticmethod
    def _attach_as(reply: Reply, watcher: Watcher, policy: RevealPolicy) -> None:
        try:
            reply.attach(watcher.emit, policy, watcher.viewer_id)
        except TooManyViewsError:
            log.warning("a reply has as many distinct viewers' policies as it may")

    async def _policy(self, viewer_id: str, *, owner: bool) -> RevealPolicy:
        rules = await self._rules()
        if owner:
            return rules.for_viewer(owner=True)
        return rules.for_viewer(owner=False, groups=await self.store.groups_of(viewer_id))

    async def _rules(self) -> Rules:
        """The organisation's reveal rules, read at most once every `RULES_TTL` seconds (a
        change made on another server holds within that; `rules_changed` for this one's)."""
        now = time.monotonic()
        cached = self._rules_cache
        if cached is not None and now - cached[0] < RULES_TTL:
            return cached[1]
        rules = await self.store.reveal_rules()
        self._rules_cache = (now, rules)
        return rules

    def rules_changed(self) -> None:
        self._rules_cache = None

    async def _writable(self, user_id: str, conversation_id: str) -> tuple[str, RevealPolicy]:
        """The owner's id and the writer's policy, if `user_id` may continue the conversation
        (its owner, or shared with them to continue); else `not_found`."""
        access = await self.store.access_of(conversation_id, user_id)
        if access not in ("owner", "write"):
            raise UnknownConversationError
        owner_id = user_id if access == "owner" else await self.store.owner_of(conversation_id)
        if owner_id is None:
            raise UnknownConversationError
        return owner_id, await self._policy(user_id, owner=access == "owner")

    async def cancel(self, user_id: str, conversation_id: str) -> bool:
        await self._writable(user_id, conversation_id)
        reply = self.replies.get(conversation_id)
        if reply is None or reply.task is None:
            return False
        reply.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reply.task
        return True

    async def shutdown(self, grace: float) -> None:
        """Let replies in flight finish for up to `grace` seconds; the rest stop as incomplete."""
        tasks = [r.task for r in self.replies.values() if r.task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def mask_text(self, conversation_id: str, text: str, vault: Vault) -> str:
        """Pseudonymize a text (a title, say) with the conversation's vault, storing new tokens."""
        vault_now = await self.store.load_vault(conversation_id)
        for ident in vault_now.reserved:
            vault.reserve(ident)
        for entry in vault_now.entries:
            if entry.token not in vault:
                vault.add(entry.token, entry.kind, entry.value, entry.normalized)
        masked, _, _ = await self._pseudonymize(conversation_id, text, vault)
        return masked

    # -- steps -----------------------------------------------------------------------------

    async def _pseudonymize(
        self, conversation_id: str, text: str, vault: Vault, *, create_for: str | None = None
    ) -> tuple[str, list[Masked], bool]:
        """The masked text and its spans, and whether the conversation was created (with
        `create_for`, by the first vault update)."""
        created = False
        while True:
            analysis = await self._analyze(text, vault)
            if analysis.complete:
                assert analysis.masked_text is not None
                return analysis.masked_text, analysis.masked, created
            items = [VaultItem(m.kind, m.value, m.normalized) for m in analysis.missing]
            # New tokens, and the bare ids the user typed reserved so they are never allocated.
            update = await self.store.update_vault(
                conversation_id,
                items,
                reserve=analysis.reserve,
                create_for=None if created else create_for,
            )
            created = created or create_for is not None
            for ident in update.reserved:
                vault.reserve(ident)
            # The entries as stored: a value another writer stored first keeps its spelling.
            for token, entry in update.entries.items():
                if token not in vault:
                    vault.add(token, entry.kind, entry.value, entry.normalized)

    async def _analyze(self, text: str, vault: Vault) -> Analysis:
        """One analysis pass; a large text's runs on a worker thread. The vault is not
        touched by anything else meanwhile: this conversation's next change waits for it."""
        if len(text) <= self.offload_chars:
            return self.pseudonymizer.analyze(text, vault)
        return await self.off_loop.run(lambda: self.pseudonymizer.analyze(text, vault))

    def _filter(
        self,
        index: TokenIndex,
        vault: Vault,
        projection: ProjectionMode,
        json_values: bool,
        terms: tuple[DetectorSet, TermMatcher | None],
    ) -> ReplyFilter:
        """A channel's filter: `index` restores (as a viewer is shown), `vault` holds what the
        guard lets through as it is, `terms` are the detectors the reply started with."""
        guard = Guard(
            terms[0],
            forbidden=terms[1],
            vault=vault,
            mode=self.guard_mode,
            window=self.guard_window,
            phone_region=self.phone_region,
            projection=projection,
        )
        return ReplyFilter(guard, Restorer(index, escape=json_escape if json_values else None))

    async def _run(self, pump: _ReplyPump, history: list[Message]) -> None:
        try:
            await pump.run(history)
        finally:
            self.replies.pop(pump.reply.conversation_id, None)


class _ReplyPump:
    """The async pump around one reply's `Views` (a `ReplyMachine` per reveal policy):
    events in, frames out, the storage view's outcome stored.

    Timeouts and cancellation live here; every frame comes from a machine.
    """

    def __init__(self, service: ChatService, reply: Reply, vault: Vault) -> None:
        self.service = service
        self.reply = reply
        entries = [e for e in vault.entries() if e.kind != FORBIDDEN]
        self._kinds = {e.token: e.kind for e in entries}
        terms = (service.detectors, service.forbidden)
        indexes: dict[RevealPolicy, tuple[TokenIndex, Vault]] = {OWNER: (reply_index(vault), vault)}

        def make_filter(
            policy: RevealPolicy, projection: ProjectionMode, json_values: bool
        ) -> ReplyFilter:
            made = indexes.get(policy)
            if made is None:
                made = indexes[policy] = (policy.index(entries), view_vault(vault, policy))
            return service._filter(made[0], made[1], projection, json_values, terms)

        self.views = Views(
            reply.conversation_id,
            reply.message_id,
            make_filter,
            call_prefix=f"call_{secrets.token_hex(4)}",
        )
        reply.views = self.views
        for emit, policy in reply.waiting:
            self.views.attach(emit, policy)
        reply.waiting.clear()
        self.checkpoint = service.store.reply_checkpoints(
            reply.conversation_id, reply.message_id, self._storable
        )

    def _storable(self) -> tuple[str, dict[str, str]]:
        outcome = self.views.outcome()
        return outcome.text, outcome.parts

    def reveals(self, texts: Iterable[str]) -> list[tuple[str, str, str, str]]:
        """(viewer, token, kind, level) for each value the reply showed a viewer plain or
        masked: the tokens its stored text holds, at each viewer's level for their kind."""
        tokens = sorted({m.group(0) for text in texts for m in find_tokens(text)})
        out: list[tuple[str, str, str, str]] = []
        for viewer_id, policy in self.reply.viewers.items():
            for token in tokens:
                kind = self._kinds.get(token)
                if kind is None or kind == LITERAL:
                    continue
                level = policy.level(kind)
                if level != "label":
                    out.append((viewer_id, token, kind, level))
        return out

    async def run(self, history: list[Message]) -> None:
        request = ChatRequest(
            [
                ChatMessage("user" if m.role == "user" else "assistant", m.text)
                for m in history
                if m.role in ("user", "assistant") and m.text
            ]
        )
        try:
            events = self.service.provider.stream(request)
            try:
                async for event in events:
                    self.checkpoint.released(self.views.receive(event))
                    if self.views.ended:
                        break
            finally:
                aclose = getattr(events, "aclose", None)
                if aclose is not None:
                    await aclose()
        except asyncio.CancelledError:
            self.views.interrupt()
            await self.finish()
            raise
        except Exception as exc:
            log.error("reply %s failed: %s", self.reply.message_id, describe(exc))
            self.views.fail("internal")
        self.views.interrupt()  # the stream ended without a terminal event
        await self.finish()

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
        if cancelled:
            raise asyncio.CancelledError


def reply_index(vault: Vault) -> TokenIndex:
    """What a reply may restore: every token but a forbidden term's, which stays redacted."""
    entries = vault.entries()
    if all(e.kind != FORBIDDEN for e in entries):
        return vault.index()
    return TokenIndex({e.token: e.value for e in entries if e.kind != FORBIDDEN})


T = TypeVar("T")


class OffLoop:
    """CPU-bound work off the event loop, on at most `workers` threads at a time.

    The rule: a caller that is cancelled (its client left, the server stops) does not free
    the worker, which runs to its end; its slot is released only then, so no number of
    abandoned requests can start more than `workers` threads. The threads are daemons: the
    work is pure computation, with nothing to flush, and must not keep a stopping server alive.
    """

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError("OffLoop needs at least one worker")
        self.workers = workers
        self._slots: asyncio.Semaphore | None = None

    async def run(self, work: Callable[[], T]) -> T:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        slots = self._slots
        await slots.acquire()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()

        def settle(result: T | None, error: BaseException | None) -> None:
            slots.release()
            if done.done():
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(result)  # type: ignore[arg-type]

        def thread() -> None:
            error: BaseException | None = None
            result: T | None = None
            try:
                result = work()
            except BaseException as exc:
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(settle, result, error)

        try:
            threading.Thread(target=thread, name="holdback-offloop", daemon=True).start()
        except BaseException:
            slots.release()
            raise
        return await done


def make_title(masked_text: str, limit: int = 60) -> str:
    """A conversation's title: the start of its first message, tokenized like all stored text."""
    line = " ".join(masked_text.split())
    if len(line) <= limit:
        return line or "New chat"
    cut = line[:limit]
    # Never cut a token in half.
    for m in find_tokens(line):
        if m.start() < limit < m.end():
            cut = line[: m.start()]
            break
    return cut.rstrip() + "…"
