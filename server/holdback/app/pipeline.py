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
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from holdback.app.cluster import Cluster
from holdback.app.offloop import OffLoop
from holdback.app.remote_replies import RemoteReplies
from holdback.app.rendered_views import RenderedViews
from holdback.app.reply_pump import KEPT_REPLIES, KEPT_SECONDS, Reply, ReplyPump, reply_index
from holdback.app.viewers import TooManyViewsError, Views, connection_of
from holdback.app.watching import Watcher, Watchers, policy_for
from holdback.detect import DetectorSet, TermMatcher
from holdback.errors import HoldbackError, wire_message
from holdback.moderation.base import Moderator
from holdback.moderation.windows import DEFAULT_BOUND, Windows
from holdback.providers.base import ChatMessage, ChatRequest, Provider
from holdback.pseudonymize import Analysis, Masked, Pseudonymizer, restore_in_order, spellings
from holdback.reply.frames import MaskedSpan, MessageAccepted
from holdback.reveal import RevealPolicy, Rules
from holdback.store.records import Conversation, Message, VaultItem
from holdback.store.repository import Store
from holdback.store.turns import AFTER_LEAF
from holdback.stream import Guard, GuardMode, ReplyFilter, Restorer, restore
from holdback.stream.projection import ProjectionMode
from holdback.stream.restorer import json_escape
from holdback.tokens import TokenIndex, find_tokens
from holdback.vault import Vault

__all__ = [
    "AFTER_LEAF",
    "ChatError",
    "ChatService",
    "OffLoop",
    "Reply",
    "json_escape",
    "make_title",
    "reply_index",
]

log = logging.getLogger("holdback.pipeline")
RULES_TTL = 1.0  # seconds a read of the reveal rules is used for
INSTRUCTIONS_TTL = 5.0  # seconds a read of a user's instructions is used for
INSTRUCTIONS_CACHED = 1024  # users whose instructions are kept
# What the model is told when asked to continue a reply its length limit cut off.
CONTINUE_PROMPT = "Continue your previous reply exactly where it stopped, without repeating it."

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


class UnknownMessageError(ChatError):
    """No such message, or not in a conversation the user may continue."""

    code = "message_not_found"


class NotEditableError(ChatError):
    """Edit of a reply, regenerate of a user's message, continue of a reply not cut short."""

    code = "not_editable"


class NotResumableError(ChatError):
    """A reply this server no longer holds (or never ran): read it back over HTTP."""

    code = "not_resumable"


class InputModeratedError(ChatError):
    """`--moderate-input`: the moderator did not allow the user's message (tokenized)."""

    code = "moderation_blocked"

    def __init__(self, category: str | None) -> None:
        super().__init__()
        self.category = category


class UnknownModelError(ChatError):
    """A model id this server does not serve."""

    code = "unknown_model"


@dataclass(frozen=True, slots=True)
class Ask:
    """What a client asks for: a user message `text` after `parent` and its reply, or (text
    None) a new reply after `parent`; `continues` asks the model to go on with `parent`."""

    text: str | None
    parent: str | None = AFTER_LEAF
    model: str | None = None
    continues: bool = False
    meta: Mapping[str, object] | None = None  # stored with the user message, besides "masked"


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
        # Finished replies, by message id, still resumable (`KEPT_SECONDS`, `KEPT_REPLIES`).
        self.finished: OrderedDict[str, Reply] = OrderedDict()
        self._instructions: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self.watchers = Watchers()
        self._rules_cache: tuple[float, Rules] | None = None
        self.offload_chars = offload_chars
        self.off_loop = OffLoop(offload_workers)
        # A shared PostgreSQL (`app/cluster.py`): leases, published frames, remote replies.
        self.cluster: Cluster | None = None
        self.remote: RemoteReplies | None = None
        # Policy moderation (`holdback.moderation`): None is off.
        self.moderation: Moderator | None = None
        self.moderation_window = DEFAULT_BOUND
        self.moderate_input = False

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
        self,
        user_id: str,
        conversation_id: str | None,
        text: str,
        emit: Emit,
        *,
        parent: str | None = AFTER_LEAF,
        model: str | None = None,
        meta: Mapping[str, object] | None = None,
    ) -> Reply:
        """Accept a user message and start its reply; returns once the reply is under way.
        The message follows `parent` (default: the branch shown); `meta` is stored with it
        (its attachments: `uploads.attachments_meta`)."""
        ask = Ask(text, parent, model, meta=meta)
        return await self._ask(user_id, conversation_id, ask, emit)

    async def edit(
        self,
        user_id: str,
        message_id: str,
        text: str,
        emit: Emit,
        *,
        model: str | None = None,
        meta: Mapping[str, object] | None = None,
    ) -> Reply:
        """A sibling of the user's message `message_id`, with `text`, and its reply."""
        message = await self._message(user_id, message_id)
        if message.role != "user":
            raise NotEditableError
        ask = Ask(text, message.parent_id, model, meta=meta)
        return await self._ask(user_id, message.conversation_id, ask, emit)

    async def regenerate(
        self, user_id: str, message_id: str, emit: Emit, *, model: str | None = None
    ) -> Reply:
        """A sibling of the reply `message_id`: a new reply to the same message (a retry)."""
        message = await self._message(user_id, message_id)
        if message.role != "assistant" or message.parent_id is None:
            raise NotEditableError
        return await self._ask(
            user_id, message.conversation_id, Ask(None, message.parent_id, model), emit
        )

    async def continue_reply(self, user_id: str, message_id: str, emit: Emit) -> Reply:
        """A reply after `message_id`, a reply its length limit cut off, that goes on with it."""
        message = await self._message(user_id, message_id)
        if message.role != "assistant" or message.finish_reason != "length":
            raise NotEditableError
        ask = Ask(None, message.id, message.model, continues=True)
        return await self._ask(user_id, message.conversation_id, ask, emit)

    async def _message(self, user_id: str, message_id: str) -> Message:
        """A message of a conversation the user may continue; else `message_not_found`."""
        message = await self.store.message_of(message_id)
        if message is None:
            raise UnknownMessageError
        try:
            await self._writable(user_id, message.conversation_id)
        except UnknownConversationError:
            raise UnknownMessageError from None
        return message

    async def _ask(self, user_id: str, conversation_id: str | None, ask: Ask, emit: Emit) -> Reply:
        if not await self._allowed(user_id):
            raise RateLimitedError
        if ask.model is not None and ask.model not in self.models:
            raise UnknownModelError
        if conversation_id is not None and conversation_id in self.replies:
            # Refused before the vault is read and decrypted; checked again below, after the
            # awaits, because a reply may have started meanwhile.
            await self._writable(user_id, conversation_id)
            raise ConversationBusyError
        # A new conversation is created by its first write (the vault's or the turn's).
        creating: str | None = None
        owner_id = user_id
        conversation: Conversation | None = None
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
        model = ask.model or (conversation.model if conversation else None) or self.default_model
        if model not in self.models:
            model = self.default_model  # a model this server no longer serves
        if conversation_id in self.replies:
            raise ConversationBusyError
        reply = self.replies[conversation_id] = Reply(conversation_id)
        if self.cluster is not None and not await self._lease(conversation_id):
            self.replies.pop(conversation_id, None)
            raise ConversationBusyError
        try:
            created = False
            masked: list[Masked] = []
            masked_text: str | None = None
            title: str | None = None
            accepted_title = ""
            typed: dict[int, str] = {}
            if ask.text is not None:
                masked_text, masked, created = await self._pseudonymize(
                    conversation_id, ask.text, vault, create_for=creating
                )
                await self._moderate_input(conversation_id, masked_text)
                # What the user typed where the vault spells a value otherwise: sealed with
                # the message, so it reads back as typed.
                typed = spellings(masked, vault)
                index = vault.index()
                if stored_title:
                    accepted_title = restore(stored_title, index)
                else:
                    title = make_title(masked_text)
                    tokens = [m.token for m in masked]
                    accepted_title = restore_in_order(title, tokens, typed, index) or restore(
                        title, index
                    )
            system, made = await self._system(
                owner_id, conversation, conversation_id, vault, None if created else creating
            )
            created = created or made
            spans = [
                {"start": m.start, "end": m.end, "kind": m.kind, "token": m.token} for m in masked
            ]
            # One transaction: the user message, its title, audit and spellings, the branch
            # the model reads, and the placeholder the reply is written into.
            turn = await self.store.begin_reply(
                conversation_id,
                masked_text,
                meta={**(ask.meta or {}), "masked": spans},
                title=title,
                owner_id=owner_id,
                masked=Counter(m.kind for m in masked),
                spellings=typed,
                create_for=None if created else creating,
                parent=ask.parent,
                model=model,
                reply_meta={"system": system} if system else None,
            )
        except BaseException:
            self.replies.pop(reply.conversation_id, None)
            if self.cluster is not None:
                await self.cluster.release(reply.conversation_id)
            raise
        # From here the placeholder exists, so the reply task owns it and always finishes it.
        reply.message_id = turn.assistant.id
        if self.cluster is not None:  # the lease names the reply, for watchers elsewhere
            await self.cluster.acquire(conversation_id, reply.message_id)
        reply.meta = dict(turn.assistant.meta)
        pump = ReplyPump(self, reply, vault)
        request = _request(turn.history, system, continues=ask.continues)
        reply.task = asyncio.create_task(
            self._run(pump, self.models[model], request), name=f"reply-{reply.message_id}"
        )
        if turn.user is not None:
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

    async def _system(
        self,
        owner_id: str,
        conversation: Conversation | None,
        conversation_id: str,
        vault: Vault,
        create_for: str | None,
    ) -> tuple[str, bool]:
        """The system text the model gets (tokenized): the owner's custom instructions,
        pseudonymized with this conversation's vault, then the conversation's system prompt;
        and whether pseudonymizing created the conversation."""
        parts: list[str] = []
        created = False
        instructions = await self.instructions_of(owner_id)
        if instructions.strip():
            masked, _, created = await self._pseudonymize(
                conversation_id, instructions, vault, create_for=create_for
            )
            parts.append(masked)
        if conversation is not None and conversation.system_prompt:
            parts.append(conversation.system_prompt)
        return "\n\n".join(parts), created

    async def _moderate_input(self, conversation_id: str, masked_text: str) -> None:
        """With `moderate_input`, the user's message goes to the moderator first, tokenized,
        window by window; anything but `allow` refuses it (nothing is stored), and a failure
        refuses it too."""
        moderator = self.moderation
        if moderator is None or not self.moderate_input:
            return
        windows = Windows(self.moderation_window)
        texts = [*windows.feed(masked_text), windows.flush()]
        verdicts = await asyncio.gather(
            *(moderator.check(t, "content", conversation_id) for t in texts if t)
        )
        for verdict in verdicts:
            if verdict.action != "allow":
                raise InputModeratedError(self._shown_category(verdict.category))

    def _shown_category(self, category: str | None) -> str | None:
        """A moderator's category, if the guard finds nothing in it (else none is shown)."""
        if category is None:
            return None
        screen = self._filter(
            TokenIndex({}), Vault(), "plain", False, (self.detectors, self.forbidden)
        )
        try:
            return category if screen.feed(category) + screen.flush() == category else None
        except HoldbackError:
            return None

    async def instructions_of(self, user_id: str) -> str:
        """A user's custom instructions, read at most once every `INSTRUCTIONS_TTL` seconds
        (a change made on this server holds at once: `instructions_changed`)."""
        now = time.monotonic()
        cached = self._instructions.get(user_id)
        if cached is not None and now - cached[0] < INSTRUCTIONS_TTL:
            return cached[1]
        text = await self.store.instructions_of(user_id)
        self._instructions[user_id] = (now, text)
        self._instructions.move_to_end(user_id)
        while len(self._instructions) > INSTRUCTIONS_CACHED:
            self._instructions.popitem(last=False)
        return text

    def instructions_changed(self, user_id: str) -> None:
        self._instructions.pop(user_id, None)

    async def resume(
        self,
        viewer_id: str,
        conversation_id: str,
        message_id: str,
        after_seq: int,
        emit: Emit,
    ) -> Reply | None:
        """Send `emit` the frames of reply `message_id` after `after_seq`, under the viewer's
        policy, then the rest live (a finished reply: the rest, then its `assistant_done`);
        the connection then watches the conversation, as after `watch`. Returns the reply if
        it is still in flight."""
        policy = await policy_for(self.store, viewer_id, conversation_id, await self._rules())
        if policy is None:
            raise UnknownConversationError
        reply = self.replies.get(conversation_id)
        if reply is None or reply.message_id != message_id:
            self._forget_finished()
            reply = self.finished.get(message_id)
        if reply is None and self.remote is not None:  # run by another process
            reply = await self.remote.reply(conversation_id, message_id)
        if reply is None or reply.conversation_id != conversation_id:
            raise NotResumableError
        with contextlib.suppress(HoldbackError):  # past a bound: later replies not watched
            self.watchers.add(conversation_id, Watcher(emit, viewer_id))
        try:
            reply.attach(emit, policy, viewer_id, after_seq)
        except TooManyViewsError:
            log.warning("a reply has as many distinct viewers' policies as it may")
            raise NotResumableError from None
        if reply.finished_at is not None:  # audited here: its final write is done
            views = reply.views
            outcome = views.outcome() if isinstance(views, Views | RenderedViews) else None
            if outcome is not None:
                items = reply.reveal_items(policy, [outcome.text, *outcome.parts.values()])
                await self.store.record_read(viewer_id, conversation_id, [(message_id, items)])
            return None
        return reply

    def _forget_finished(self) -> None:
        now = asyncio.get_running_loop().time()
        while self.finished:
            first = next(iter(self.finished.values()))
            if first.finished_at is not None and now - first.finished_at < KEPT_SECONDS:
                break
            self.finished.popitem(last=False)

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
        if reply is None and self.cluster is not None and self.remote is not None:
            running = await self.cluster.running_elsewhere(conversation_id)
            if running is not None:
                reply = await self.remote.reply(conversation_id, running)
        # The policy just read holds for the reply in flight; a connection already sent it
        # (it asked for it, or resumed it) is not sent it twice.
        if reply is not None and not reply.sends_to(emit):
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
            if self.cluster is not None:  # Stop reaches the process that runs it
                return await self.cluster.request_cancel(conversation_id)
            return False
        return await self._stop(reply)

    def cancel_here(self, conversation_id: str) -> None:
        """Stop this process's reply in a conversation (a Stop pressed on another process,
        or a lease lost); its access was checked where the request came in."""
        reply = self.replies.get(conversation_id)
        if reply is not None and reply.task is not None:
            reply.stopped = True
            reply.task.cancel()

    async def _stop(self, reply: Reply) -> bool:
        assert reply.task is not None
        reply.stopped = True
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

    async def _allowed(self, user_id: str) -> bool:
        """The per-user rate limit: this process's bucket, or the cluster's shared one."""
        if self.cluster is None:
            return self.limiter.allow(user_id)
        return bool(await self.store.take_rate_token(user_id, int(self.limiter.capacity)))

    async def _lease(self, conversation_id: str) -> bool:
        assert self.cluster is not None
        try:
            return await self.cluster.acquire(conversation_id)
        except HoldbackError:
            return False

    async def _run(self, pump: ReplyPump, provider: Provider, request: ChatRequest) -> None:
        try:
            await pump.run(provider, request)
        finally:
            reply = pump.reply
            if self.cluster is not None:
                with contextlib.suppress(Exception):  # it expires if it cannot be released
                    await self.cluster.release(reply.conversation_id)
            self.replies.pop(reply.conversation_id, None)
            if reply.finished_at is not None:
                self.finished[reply.message_id] = reply
                while len(self.finished) > KEPT_REPLIES:
                    self.finished.popitem(last=False)


def _request(history: list[Message], system: str, *, continues: bool) -> ChatRequest:
    """What the model is sent: the system text, the branch, and (to continue a reply cut
    off) the request to go on."""
    messages = [ChatMessage("system", system)] if system else []
    messages += [
        ChatMessage("user" if m.role == "user" else "assistant", m.text)
        for m in history
        if m.role in ("user", "assistant") and m.text
    ]
    if continues:
        messages.append(ChatMessage("user", CONTINUE_PROMPT))
    return ChatRequest(messages)


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
