"""The chat pipeline, driven directly: `ChatService` over a real SQLite store.

The providers here are real `Provider` implementations that script their events from the
request they are given (what a model would do), so the order of the pipeline's steps, every
channel's filter, the guard's modes, faults, cancellation and shutdown can be observed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from holdback.app.pipeline import (
    ChatError,
    ChatService,
    RateLimiter,
    Reply,
    make_title,
)
from holdback.app.views import restore_message
from holdback.detect import DetectorSet
from holdback.errors import wire_message
from holdback.providers.base import ChatRequest
from holdback.providers.events import (
    End,
    Event,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from holdback.reveal import OWNER
from holdback.store import Store, VaultKey
from holdback.store.errors import DatabaseLockedError
from holdback.stream import forbidden_matcher
from holdback.vault import Vault
from tests.app.support import (
    CARD,
    EMAIL,
    FORBIDDEN,
    INJECTED,
    INJECTED_EMAIL,
    USER_CANARIES,
    leaks,
    split_random,
)

pytestmark = pytest.mark.anyio

QUOTED_CLIENT = 'O"Hare \\ Sons'  # a term whose value needs JSON escaping
Script = Callable[[ChatRequest], list[Event]]


class ScriptedProvider:
    """A provider whose reply is computed from the request; `gate` can hold it mid-stream."""

    def __init__(self, script: Script, delay: float = 0.0) -> None:
        self.script = script
        self.delay = delay
        self.requests: list[ChatRequest] = []
        self.on_call: Callable[[ChatRequest], Any] | None = None

    @property
    def name(self) -> str:
        return "scripted"

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        self.requests.append(request)
        if self.on_call is not None:
            await self.on_call(request)
        for event in self.script(request):
            if self.delay:
                await asyncio.sleep(self.delay)
            yield event


def last_user(request: ChatRequest) -> str:
    return [m.content for m in request.turns() if m.role == "user"][-1]


def echo(extra: str = "") -> Script:
    def script(request: ChatRequest) -> list[Event]:
        pieces = split_random(last_user(request) + extra, random.Random(3))
        return [*(TextDelta("content", p) for p in pieces), End("stop", None)]

    return script


class Collector:
    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    def __call__(self, frame: dict[str, Any]) -> None:
        self.frames.append(dict(frame))

    def text(self, channel: str = "content") -> str:
        return "".join(
            f["text"]
            for f in self.frames
            if f["type"] == "assistant_delta" and f["channel"] == channel
        )

    def last(self) -> dict[str, Any]:
        return self.frames[-1]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(
        f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}", vault_key=VaultKey.generate(source="test")
    )
    try:
        yield opened
    finally:
        await opened.close()


def service(store: Store, provider: ScriptedProvider, **kwargs: Any) -> ChatService:
    detectors = DetectorSet.from_config({"clients": [QUOTED_CLIENT]})
    return ChatService(
        store, provider, detectors, forbidden=forbidden_matcher([FORBIDDEN]), **kwargs
    )


async def run_reply(svc: ChatService, user_id: str, text: str, cid: str | None = None) -> Collector:
    sink = Collector()
    reply = await svc.submit(user_id, cid, text, sink)
    assert reply.task is not None
    await asyncio.wait_for(reply.task, timeout=10)
    return sink


async def test_values_are_vaulted_and_stored_before_the_model_is_called(store: Store) -> None:
    user = await store.create_user("alice", None)
    seen: dict[str, Any] = {}
    provider = ScriptedProvider(echo())

    async def probe(request: ChatRequest) -> None:
        conversations = await store.list_conversations(user.id)
        cid = conversations[0].id
        seen["vault"] = await store.load_vault(cid)
        seen["messages"] = [(m.role, m.text, m.status) for m in await store.list_messages(cid)]

    provider.on_call = probe
    text = f"Mail {EMAIL} the card {CARD}."
    sink = await run_reply(service(store, provider), user.id, text)
    assert seen["vault"] == {"<EMAIL_1>": EMAIL, "<CREDIT_CARD_1>": CARD}
    assert seen["messages"] == [
        ("user", "Mail <EMAIL_1> the card <CREDIT_CARD_1>.", "complete"),
        ("assistant", "", "incomplete"),
    ]
    assert [m.content for m in provider.requests[0].turns()] == [
        "Mail <EMAIL_1> the card <CREDIT_CARD_1>."
    ]
    assert sink.text() == text
    assert [f["type"] for f in sink.frames[:2]] == ["message_accepted", "assistant_start"]
    assert sink.last()["status"] == "complete"


async def test_every_channel_and_tool_call_is_filtered_on_its_own(store: Store) -> None:
    user = await store.create_user("alice", None)

    def script(request: ChatRequest) -> list[Event]:
        tokens = re.findall(r"<[A-Z_]+_\d+>", last_user(request))
        email, client = tokens
        arguments = json.dumps({"to": email, "about": client, "cc": INJECTED_EMAIL})
        events: list[Event] = [TextDelta("reasoning", f"They want {email[:4]}")]
        events.append(TextDelta("content", f"Writing to {email[:3]}"))
        events.append(TextDelta("reasoning", f"{email[4:]} and {FORBIDDEN}."))
        events.append(TextDelta("content", f"{email[3:]} now."))
        events.append(ToolCallStart("call_1", "send_email", 0))
        events.append(ToolCallStart("call_2", "lookup", 1))
        for i in range(0, len(arguments), 4):
            events.append(ToolCallDelta("call_1", arguments[i : i + 4]))
            events.append(ToolCallDelta("call_2", '{"q": "' if i == 0 else ""))
        events.append(ToolCallDelta("call_2", client + '"}'))
        events += [ToolCallEnd("call_1"), ToolCallEnd("call_2"), End("tool_calls", None)]
        return events

    provider = ScriptedProvider(script)
    sink = await run_reply(
        service(store, provider), user.id, f"Write to {EMAIL} for {QUOTED_CLIENT} please"
    )
    assert sink.text("reasoning") == f"They want {EMAIL} and [redacted]."
    assert sink.text() == f"Writing to {EMAIL} now."
    calls: dict[str, str] = {}
    for f in sink.frames:
        if f["type"] == "assistant_delta" and f["channel"] == "tool_call":
            calls[f["call_id"]] = calls.get(f["call_id"], "") + f["text"]
    # Call ids are the server's own, in the order the calls began; never the upstream's.
    assert not {"call_1", "call_2"} & set(calls)
    first, second = list(calls)
    assert first.endswith("_1")
    assert second.endswith("_2")
    # Values inside JSON arguments are JSON-escaped, so the arguments stay valid JSON.
    assert json.loads(calls[first]) == {
        "to": EMAIL,
        "about": QUOTED_CLIENT,
        "cc": "[redacted email]",
    }
    assert json.loads(calls[second]) == {"q": QUOTED_CLIENT}
    assert sink.last()["finish_reason"] == "tool_calls"
    wire = json.dumps(sink.frames)
    assert "<EMAIL_1>" not in wire.replace('"token": "<EMAIL_1>"', "")
    assert leaks(wire, INJECTED) == []
    cid = sink.frames[0]["conversation_id"]
    stored = (await store.list_messages(cid))[1]
    assert stored.text == "Writing to <EMAIL_1> now."
    assert stored.parts["reasoning"] == "They want <EMAIL_1> and [redacted]."
    stored_calls = json.loads(stored.parts["tool_calls"])
    assert json.loads(stored_calls[0]["arguments"])["to"] == "<EMAIL_1>"
    assert json.loads(stored_calls[1]["arguments"]) == {"q": "<CLIENTS_1>"}
    audit = await store.list_audit(cid)
    assert [(a.action, a.counts) for a in audit] == [
        ("masked", {"EMAIL": 1, "CLIENTS": 1}),
        ("redacted", {"FORBIDDEN": 1, "EMAIL": 1}),
    ]


async def test_block_mode_stops_the_reply(store: Store) -> None:
    user = await store.create_user("alice", None)
    extra = f" Also {INJECTED_EMAIL} and more text after it."
    provider = ScriptedProvider(echo(extra))
    svc = service(store, provider, guard_mode="block")
    sink = await run_reply(svc, user.id, f"Hello {EMAIL}")
    errors = [f for f in sink.frames if f["type"] == "error"]
    assert [e["code"] for e in errors] == ["blocked"]
    assert errors[0]["message"] == wire_message("blocked")  # ours, whatever was found
    assert sink.last()["status"] == "blocked"
    # What the guard released before the offending value is kept, nothing from it on.
    assert sink.text().startswith(f"Hello {EMAIL}")
    assert f"Hello {EMAIL} Also ".startswith(sink.text())
    assert leaks(json.dumps(sink.frames), INJECTED) == []
    cid = sink.frames[0]["conversation_id"]
    stored = (await store.list_messages(cid))[1]
    assert stored.status == "blocked"
    assert INJECTED_EMAIL not in stored.text
    assert "blocked" in [a.action for a in await store.list_audit(cid)]


async def test_an_upstream_error_keeps_what_was_sent(store: Store) -> None:
    user = await store.create_user("alice", None)

    def script(request: ChatRequest) -> list[Event]:
        return [
            TextDelta("content", "Partial answer for <EMA"),
            TextDelta("content", "IL_1>"),
            StreamError("upstream_timeout", "openai: no data for 60 s", True),
        ]

    sink = await run_reply(service(store, ScriptedProvider(script)), user.id, f"Hi {EMAIL}")
    assert sink.text() == f"Partial answer for {EMAIL}"
    error = next(f for f in sink.frames if f["type"] == "error")
    assert error["code"] == "upstream_timeout"
    assert sink.last()["status"] == "incomplete"
    stored = (await store.list_messages(sink.frames[0]["conversation_id"]))[1]
    assert stored.text == "Partial answer for <EMAIL_1>"
    assert stored.status == "incomplete"


async def test_a_provider_that_crashes_is_an_internal_error_without_values(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    user = await store.create_user("alice", None)

    def script(request: ChatRequest) -> list[Event]:
        raise RuntimeError("adapter bug while handling " + last_user(request))

    sink = await run_reply(service(store, ScriptedProvider(script)), user.id, f"Hi {EMAIL}")
    assert [f["code"] for f in sink.frames if f["type"] == "error"] == ["internal"]
    assert sink.last()["status"] == "incomplete"
    assert "reply" in caplog.text  # the failure was logged ...
    assert leaks(caplog.text, USER_CANARIES) == []  # ... with tokens only


async def test_one_reply_per_conversation_and_cancel(store: Store) -> None:
    user = await store.create_user("alice", None)
    provider = ScriptedProvider(echo(), delay=0.01)
    svc = service(store, provider)
    sink = Collector()
    reply = await svc.submit(user.id, None, "a fairly long message " * 5, sink)
    with pytest.raises(ChatError) as busy:
        await svc.submit(user.id, reply.conversation_id, "second", Collector())
    assert busy.value.code == "busy"
    await asyncio.sleep(0.1)
    assert await svc.cancel(user.id, reply.conversation_id) is True
    assert sink.last()["status"] == "incomplete"
    assert sink.last()["finish_reason"] == "other"
    assert reply.conversation_id not in svc.replies
    assert await svc.cancel(user.id, reply.conversation_id) is False
    messages = await store.list_messages(reply.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].text == sink.text()
    other = await store.create_user("mallory", None)
    with pytest.raises(ChatError) as missing:
        await svc.cancel(other.id, reply.conversation_id)
    assert missing.value.code == "not_found"


async def test_shutdown_finishes_or_stores_incomplete(store: Store) -> None:
    user = await store.create_user("alice", None)
    quick = service(store, ScriptedProvider(echo(), delay=0.001))
    sink = Collector()
    reply = await quick.submit(user.id, None, "short", sink)
    await quick.shutdown(5.0)
    assert reply.task is not None
    assert reply.task.done()
    assert sink.last()["status"] == "complete"

    slow = service(store, ScriptedProvider(echo(), delay=0.05))
    sink = Collector()
    reply = await slow.submit(user.id, None, "long " * 100, sink)
    await asyncio.sleep(0.2)
    await slow.shutdown(0.1)
    assert sink.last()["status"] == "incomplete"
    stored = (await store.list_messages(reply.conversation_id))[1]
    assert stored.status == "incomplete"
    assert stored.finish_reason == "other"
    assert stored.text
    assert ("long " * 100).startswith(stored.text)
    await slow.shutdown(0.1)  # nothing left: returns at once


async def test_a_failing_connection_does_not_stop_the_reply(store: Store) -> None:
    user = await store.create_user("alice", None)
    svc = service(store, ScriptedProvider(echo(), delay=0.001))
    good = Collector()
    reply = await svc.submit(user.id, None, "hello there", good)

    def broken(frame: dict[str, Any]) -> None:
        raise ConnectionResetError("gone")

    reply.attach(broken, OWNER)
    assert reply.task is not None
    await asyncio.wait_for(reply.task, timeout=10)
    assert reply.views is not None
    assert broken not in reply.views.storage.sinks
    assert good.text() == "hello there"
    assert good.last()["status"] == "complete"


async def test_rate_limit_refuses_before_storing(store: Store) -> None:
    user = await store.create_user("alice", None)
    svc = service(store, ScriptedProvider(echo()), rate_limit_per_minute=2)
    await run_reply(svc, user.id, "one")
    await run_reply(svc, user.id, "two")
    with pytest.raises(ChatError) as limited:
        await svc.submit(user.id, None, "three", Collector())
    assert limited.value.code == "rate_limited"
    assert len(await store.list_conversations(user.id)) == 2


def test_rate_limiter_refills() -> None:
    limiter = RateLimiter(60_000)  # 1000 a second
    while limiter.allow("u"):
        pass
    assert limiter.allow("v")  # buckets are per key
    time.sleep(0.01)
    assert limiter.allow("u")
    slow = RateLimiter(1)
    assert slow.allow("u")
    assert not slow.allow("u")


def test_make_title() -> None:
    assert make_title("  Hello\n  world ") == "Hello world"
    assert make_title("") == "New chat"
    long = "word " * 11 + "<EMAIL_12> trailing"
    title = make_title(long)
    assert title.endswith("…")
    assert "<EMAIL_1" not in title
    assert len(title) <= 61
    assert make_title("x" * 100) == "x" * 60 + "…"


def test_reply_detach_is_idempotent() -> None:
    reply = Reply("c1")
    sink = Collector()
    reply.attach(sink, OWNER)
    reply.detach(sink)
    reply.detach(sink)
    assert reply.waiting == []
    assert sink.frames == []


async def test_a_cancel_while_the_reply_is_being_stored_still_stores_it_and_ends_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = await store.create_user("alice", None)
    svc = service(store, ScriptedProvider(echo(), delay=0.001))
    gate = asyncio.Event()
    writing = asyncio.Event()
    real_finish = store.finish_reply

    async def slow_finish(*args: Any, **kwargs: Any) -> None:
        writing.set()
        await gate.wait()
        await real_finish(*args, **kwargs)

    monkeypatch.setattr(store, "finish_reply", slow_finish)
    sink = Collector()
    reply = await svc.submit(user.id, None, "hello there, see you soon", sink)
    assert reply.task is not None
    await asyncio.wait_for(writing.wait(), timeout=5)
    reply.task.cancel()  # Stop or shutdown arrives while the write waits for the lock
    await asyncio.sleep(0.05)
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await reply.task
    done = sink.last()
    assert done["type"] == "assistant_done"
    assert done["status"] == "complete"
    stored = (await store.list_messages(reply.conversation_id))[1]
    assert stored.status == "complete"
    assert stored.text == sink.text() == "hello there, see you soon"
    assert reply.conversation_id not in svc.replies


async def test_a_reply_that_cannot_be_stored_still_ends_and_says_so(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    user = await store.create_user("alice", None)
    svc = service(store, ScriptedProvider(echo(), delay=0.001))

    async def failing_finish(*args: Any, **kwargs: Any) -> None:
        raise DatabaseLockedError("the database is locked (gave up after waiting 5s)")

    monkeypatch.setattr(store, "finish_reply", failing_finish)
    sink = await run_reply(svc, user.id, "write to canary.value@example.org please")
    codes = [f.get("code") for f in sink.frames if f["type"] == "error"]
    assert codes == ["storage_failed"]
    done = sink.last()
    assert done["type"] == "assistant_done"
    assert done["status"] == "incomplete"
    assert "canary.value" not in caplog.text
    assert all("canary.value" not in f.get("message", "") for f in sink.frames)


async def test_busy_is_refused_without_telling_another_user_the_conversation_exists(
    store: Store,
) -> None:
    user = await store.create_user("alice", None)
    other = await store.create_user("mallory", None)
    svc = service(store, ScriptedProvider(echo(), delay=0.01))
    reply = await svc.submit(user.id, None, "a fairly long message " * 5, Collector())
    with pytest.raises(ChatError) as refused:
        await svc.submit(other.id, reply.conversation_id, "mine now", Collector())
    assert refused.value.code == "not_found"
    with pytest.raises(ChatError) as busy:
        await svc.submit(user.id, reply.conversation_id, "again", Collector())
    assert busy.value.code == "busy"
    assert reply.task is not None
    await asyncio.wait_for(reply.task, timeout=10)


async def test_a_bare_id_typed_before_it_existed_keeps_its_text(store: Store) -> None:
    user = await store.create_user("alice", None)
    provider = ScriptedProvider(echo())
    svc = service(store, provider)
    first = await run_reply(svc, user.id, "Call her EMAIL_1 for now")
    cid = first.frames[0]["conversation_id"]
    second = await run_reply(svc, user.id, f"Her address is {EMAIL}", cid)
    # The real address got the next id; the literal one the user typed stays literal.
    assert [m["token"] for m in second.frames[0]["masked"]] == ["<EMAIL_2>"]
    assert first.text() == "Call her EMAIL_1 for now"
    vault = Vault(await store.load_vault(cid))
    messages = [restore_message(m, vault) for m in await store.list_messages(cid)]
    assert messages[0]["text"] == "Call her EMAIL_1 for now"
    assert messages[1]["text"] == "Call her EMAIL_1 for now"  # the echo, stored and restored
    assert messages[2]["text"] == f"Her address is {EMAIL}"
    assert provider.requests[-1].turns()[0].content == "Call her EMAIL_1 for now"


async def test_a_forbidden_term_the_user_types_is_masked_and_never_restored(store: Store) -> None:
    user = await store.create_user("alice", None)
    provider = ScriptedProvider(echo(" and <FORBIDDEN_1> again"))
    svc = service(store, provider)
    sink = await run_reply(svc, user.id, f"Is {FORBIDDEN} up?")
    sent = last_user(provider.requests[-1])
    assert FORBIDDEN not in sent
    assert sent == "Is <FORBIDDEN_1> up?"
    assert [m["kind"] for m in sink.frames[0]["masked"]] == ["forbidden"]
    # The model's echo, and the token it writes on its own, stay redacted on the wire.
    assert sink.text() == "Is [redacted] up? and [redacted] again"
    assert leaks(json.dumps(sink.frames[1:]), [FORBIDDEN]) == []
    cid = sink.frames[0]["conversation_id"]
    vault = Vault(await store.load_vault(cid))
    history = [restore_message(m, vault) for m in await store.list_messages(cid)]
    assert history[0]["text"] == f"Is {FORBIDDEN} up?"  # the user's own words, as typed
    assert FORBIDDEN not in history[1]["text"]
