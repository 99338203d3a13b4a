"""The chat pipeline: one user message in, one screened and restored reply out.

The order is the product's promise:
1. pseudonymize the user's text with the conversation's vault, and store the new vault entries
   *before* the model is called;
2. store the user message (tokenized), and tell the client what was masked;
3. stream the model's reply; every channel (content, reasoning, each tool call's arguments)
   has its own filter, guard then restorer, so a held fragment never crosses channels;
4. send frames; store the assistant message as the guard released it (tokenized, screened).

A fault never opens a leak: if a filter fails, no further text of that reply is sent, only an
error. One reply is in flight per conversation; a second message for it is refused (`busy`).
A reply does not belong to a connection: if the client goes away, the reply still completes and
is stored. Nothing here logs or raises with an original value.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from holdback.detect import DetectorSet, TermMatcher
from holdback.errors import FilterFailedError, HoldbackError, describe
from holdback.providers.base import ChatMessage, ChatRequest, Provider
from holdback.providers.events import (
    End,
    Event,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from holdback.pseudonymize import Masked, Pseudonymizer
from holdback.store.records import Message, VaultItem
from holdback.store.repository import Store
from holdback.stream import Guard, GuardMode, ReplyBlockedError, ReplyFilter, Restorer, restore
from holdback.tokens import TokenIndex, parse_id, token_id
from holdback.vault import Vault

log = logging.getLogger("holdback.pipeline")

Frame = dict[str, Any]
Emit = Callable[[Frame], None]


class ChatError(HoldbackError):
    """A request the pipeline refuses; `code` is the error frame's code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def json_escape(value: str) -> str:
    """A value as it must appear inside a JSON string (tool-call arguments)."""
    return json.dumps(value, ensure_ascii=False)[1:-1]


@dataclass(slots=True)
class _Call:
    call_id: str
    name: str
    filter: ReplyFilter
    done: bool = False


@dataclass(eq=False, slots=True)
class Reply:
    """One assistant reply in flight, and the connections watching it."""

    conversation_id: str
    message_id: str = ""
    sinks: list[Emit] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def emit(self, frame: Frame) -> None:
        for sink in list(self.sinks):
            try:
                sink(frame)
            except Exception:  # a broken connection must not stop the reply
                log.warning("dropping frames for a connection that failed")
                self.detach(sink)

    def detach(self, sink: Emit) -> None:
        with contextlib.suppress(ValueError):
            self.sinks.remove(sink)


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
        phone_region: str = "US",
        rate_limit_per_minute: int = 30,
    ) -> None:
        self.store = store
        self.provider = provider
        self.detectors = detectors
        self.forbidden = forbidden
        self.guard_mode = guard_mode
        self.guard_window = guard_window
        self.phone_region = phone_region
        self.pseudonymizer = Pseudonymizer(detectors, phone_region=phone_region)
        self.limiter = RateLimiter(rate_limit_per_minute)
        self.replies: dict[str, Reply] = {}

    # -- entry points ----------------------------------------------------------------------

    async def submit(
        self, user_id: str, conversation_id: str | None, text: str, emit: Emit
    ) -> Reply:
        """Accept a user message and start its reply; returns once the reply is under way."""
        if not self.limiter.allow(user_id):
            raise ChatError("rate_limited", "too many messages; wait a moment and try again")
        if conversation_id is not None and conversation_id in self.replies:
            # Refused before the vault is read and decrypted; checked again below, after the
            # awaits, because a reply may have started meanwhile.
            await self._check_owner(user_id, conversation_id)
            raise ChatError("busy", "a reply is already streaming in this conversation")
        if conversation_id is None:
            conversation = await self.store.create_conversation(user_id, "")
            stored: dict[str, str] = {}
        else:
            opened = await self.store.open_conversation(conversation_id, user_id)
            if opened is None:
                raise ChatError("not_found", "no such conversation")
            conversation, stored = opened
        if conversation.id in self.replies:
            raise ChatError("busy", "a reply is already streaming in this conversation")
        reply = self.replies[conversation.id] = Reply(conversation.id, sinks=[emit])
        try:
            vault = Vault(stored)
            masked_text, masked = await self._pseudonymize(conversation.id, text, vault)
            spans = [
                {"start": m.start, "end": m.end, "kind": m.kind, "token": m.token} for m in masked
            ]
            title = None if conversation.title else make_title(masked_text)
            accepted_title = restore(title or conversation.title, vault.index())
            # One transaction: the user message, its title and audit, the history the model
            # reads, and the placeholder the reply is written into.
            turn = await self.store.begin_reply(
                conversation.id,
                masked_text,
                meta={"masked": spans},
                title=title,
                owner_id=user_id,
                masked=Counter(m.kind for m in masked),
            )
        except BaseException:
            self.replies.pop(reply.conversation_id, None)
            raise
        # From here the placeholder exists, so the reply task owns it and always finishes it.
        reply.message_id = turn.assistant.id
        reply.task = asyncio.create_task(
            self._run(reply, vault, turn.history), name=f"reply-{reply.message_id}"
        )
        emit(
            {
                "type": "message_accepted",
                "conversation_id": conversation.id,
                "message_id": turn.user.id,
                "masked": spans,
                "title": accepted_title,
            }
        )
        reply.emit(
            {
                "type": "assistant_start",
                "conversation_id": conversation.id,
                "message_id": turn.assistant.id,
            }
        )
        return reply

    async def _check_owner(self, user_id: str, conversation_id: str) -> None:
        if await self.store.get_conversation(conversation_id, user_id) is None:
            raise ChatError("not_found", "no such conversation")

    async def cancel(self, user_id: str, conversation_id: str) -> bool:
        await self._check_owner(user_id, conversation_id)
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
        for token, value in vault_now.items():
            if token not in vault:
                vault.add(token, token_kind(token), value)
        masked, _ = await self._pseudonymize(conversation_id, text, vault)
        return masked

    # -- steps -----------------------------------------------------------------------------

    async def _pseudonymize(
        self, conversation_id: str, text: str, vault: Vault
    ) -> tuple[str, list[Masked]]:
        while True:
            analysis = self.pseudonymizer.analyze(text, vault)
            if analysis.masked_text is not None:
                return analysis.masked_text, analysis.masked
            items = [VaultItem(m.kind, m.value, m.normalized) for m in analysis.missing]
            tokens = await self.store.assign_tokens(conversation_id, items)
            for item, token in zip(analysis.missing, tokens, strict=True):
                vault.add(token, item.kind, item.value, item.normalized)

    def _filter(self, index: TokenIndex, vault: Vault, json_values: bool) -> ReplyFilter:
        guard = Guard(
            self.detectors,
            forbidden=self.forbidden,
            vault=vault,
            mode=self.guard_mode,
            window=self.guard_window,
            phone_region=self.phone_region,
        )
        return ReplyFilter(guard, Restorer(index, escape=json_escape if json_values else None))

    async def _run(self, reply: Reply, vault: Vault, history: list[Message]) -> None:
        run = _ReplyRun(self, reply, vault)
        try:
            await run.stream(history)
        except asyncio.CancelledError:
            await asyncio.shield(run.finish("incomplete", "cancelled"))
            raise
        except Exception as exc:
            log.error("reply %s failed: %s", reply.message_id, describe(exc))
            reply.emit(_error(reply, "internal", "the reply failed; what was sent so far is kept"))
            await asyncio.shield(run.finish("incomplete", None))
        finally:
            self.replies.pop(reply.conversation_id, None)


class _ReplyRun:
    """The per-reply state: one filter per channel and per tool call, and what to store."""

    def __init__(self, service: ChatService, reply: Reply, vault: Vault) -> None:
        self.service = service
        self.reply = reply
        self.index = vault.index()
        self.vault = vault
        self.channels: dict[str, ReplyFilter] = {}
        self.calls: dict[str, _Call] = {}
        self.finished = False
        self.failed = False
        self.blocked_kinds: Counter[str] = Counter()

    def _channel(self, name: str) -> ReplyFilter:
        f = self.channels.get(name)
        if f is None:
            f = self.channels[name] = self.service._filter(self.index, self.vault, False)
        return f

    def _delta(self, channel: str, text: str, **extra: str) -> None:
        if text:
            self.reply.emit(
                {
                    "type": "assistant_delta",
                    "conversation_id": self.reply.conversation_id,
                    "message_id": self.reply.message_id,
                    "channel": channel,
                    "text": text,
                    **extra,
                }
            )

    async def stream(self, history: list[Message]) -> None:
        request = ChatRequest(
            [
                ChatMessage("user" if m.role == "user" else "assistant", m.text)
                for m in history
                if m.role in ("user", "assistant") and m.text
            ]
        )
        events = self.service.provider.stream(request)
        try:
            await self._consume(events)
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _consume(self, events: AsyncIterator[Event]) -> None:
        async for event in events:
            try:
                if not self._handle(event):
                    continue
            except ReplyBlockedError as blocked:
                await self._blocked(blocked)
                return
            except FilterFailedError:
                self.failed = True
                self.reply.emit(
                    _error(
                        self.reply, "filter_failed", "the reply was stopped: a safety filter failed"
                    )
                )
                await self.finish("incomplete", None, flush=False)
                return
            if isinstance(event, StreamError):
                self.reply.emit(_error(self.reply, event.code, event.message))
                await self.finish("incomplete", None)
                return
            if isinstance(event, End):
                await self.finish("complete", event.finish_reason)
                return
        if not self.finished:
            await self.finish("incomplete", None)

    def _handle(self, event: Event) -> bool:
        """Route one event through its filter; True when the event ends the stream."""
        if isinstance(event, TextDelta):
            self._delta(event.channel, self._channel(event.channel).feed(event.text))
            return False
        if isinstance(event, ToolCallStart):
            call = _Call(
                event.call_id, event.name, self.service._filter(self.index, self.vault, True)
            )
            self.calls[event.call_id] = call
            return False
        if isinstance(event, ToolCallDelta):
            open_call = self.calls.get(event.call_id)
            if open_call is not None and not open_call.done:
                text = open_call.filter.feed(event.arguments)
                self._delta("tool_call", text, call_id=open_call.call_id, name=open_call.name)
            return False
        if isinstance(event, ToolCallEnd):
            ended = self.calls.get(event.call_id)
            if ended is not None and not ended.done:
                self._close_call(ended)
            return False
        return True

    def _close_call(self, call: _Call) -> None:
        call.done = True
        self._delta("tool_call", call.filter.flush(), call_id=call.call_id, name=call.name)

    def _flush_all(self) -> None:
        for name, f in self.channels.items():
            self._delta(name, f.flush())
        for call in self.calls.values():
            if not call.done:
                self._close_call(call)

    async def _blocked(self, blocked: ReplyBlockedError) -> None:
        # What the guard released before the offending text may still go out, restored.
        for name, f in self.channels.items():
            if f.guard is not None and f.guard.blocked:
                self._delta(name, f.restorer.feed(blocked.safe_prefix) + f.restorer.flush())
                f.record(blocked.safe_prefix)
        for call in self.calls.values():
            g = call.filter.guard
            if g is not None and g.blocked:
                text = call.filter.restorer.feed(blocked.safe_prefix) + call.filter.restorer.flush()
                self._delta("tool_call", text, call_id=call.call_id, name=call.name)
                call.filter.record(blocked.safe_prefix)
        self.failed = True
        self.reply.emit(
            _error(
                self.reply,
                "blocked",
                "the reply was stopped: it contained " + ", ".join(blocked.kinds),
            )
        )
        self.blocked_kinds.update(blocked.kinds)
        await self.finish("blocked", "blocked", flush=False)

    async def finish(self, status: str, finish_reason: str | None, *, flush: bool = True) -> None:
        if self.finished:
            return
        self.finished = True
        if flush and not self.failed:
            try:
                self._flush_all()
            except ReplyBlockedError as blocked:
                self.finished = False
                await self._blocked(blocked)
                return
            except HoldbackError:
                self.failed = True
                status = "incomplete"
                self.reply.emit(
                    _error(
                        self.reply, "filter_failed", "the reply was stopped: a safety filter failed"
                    )
                )
        content = self.channels.get("content")
        parts = {name: f.screened for name, f in self.channels.items() if name != "content"}
        if self.calls:
            parts["tool_calls"] = json.dumps(
                [
                    {"call_id": c.call_id, "name": c.name, "arguments": c.filter.screened}
                    for c in self.calls.values()
                ]
            )
        redacted: Counter[str] = Counter()
        for f in [*self.channels.values(), *(c.filter for c in self.calls.values())]:
            if f.guard is not None:
                redacted.update(f.guard.redacted)
        stored = self.service.store.finish_reply(
            self.reply.conversation_id,
            self.reply.message_id,
            text=content.screened if content is not None else "",
            parts=parts,
            status=status,
            finish_reason=finish_reason,
            redacted=redacted,
            blocked=self.blocked_kinds,
        )
        # The write runs to its end even if the reply is cancelled meanwhile (Stop, shutdown),
        # and the client hears how the reply ended whether or not it could be stored.
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
        if failure is not None or not write.done() or write.cancelled():
            log.error(
                "reply %s could not be stored: %s",
                self.reply.message_id,
                describe(failure) if failure is not None else "interrupted",
            )
            self.reply.emit(_error(self.reply, "storage_failed", "the reply could not be stored"))
            status = "incomplete"
        self.reply.emit(
            {
                "type": "assistant_done",
                "conversation_id": self.reply.conversation_id,
                "message_id": self.reply.message_id,
                "finish_reason": finish_reason,
                "status": status,
            }
        )
        if cancelled:
            raise asyncio.CancelledError


def token_kind(token: str) -> str:
    """The detector kind a token was made for: `<CREDIT_CARD_1>` -> `credit_card`."""
    return parse_id(token_id(token))[0].lower()


def _error(reply: Reply, code: str, message: str) -> Frame:
    return {
        "type": "error",
        "code": code,
        "message": message,
        "conversation_id": reply.conversation_id,
        "message_id": reply.message_id,
    }


def make_title(masked_text: str, limit: int = 60) -> str:
    """A conversation's title: the start of its first message, tokenized like all stored text."""
    line = " ".join(masked_text.split())
    if len(line) <= limit:
        return line or "New chat"
    cut = line[:limit]
    # Never cut a token in half.
    open_at = cut.rfind("<")
    if open_at > cut.rfind(">"):
        cut = cut[:open_at]
    return cut.rstrip() + "…"
