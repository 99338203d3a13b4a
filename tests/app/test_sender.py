"""The per-connection sender: a bounded queue that coalesces deltas for a slow client.

The sender writes to a real Starlette `WebSocket` whose ASGI `send` is held shut while the
test plays a client that is not reading: the first frame is in flight, everything after it
waits in the queue. Deltas of one stream merge there, other frames keep their order, and a
queue that passes its byte limit closes the connection with 1013 instead of growing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from starlette.websockets import WebSocket

from holdback.app.sender import Sender, encode

pytestmark = pytest.mark.anyio


class HeldChannel:
    """The server side of one ASGI WebSocket whose outgoing messages can be held back."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.broken = False
        self._incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._incoming.put_nowait({"type": "websocket.connect"})

    async def receive(self) -> dict[str, Any]:
        return await self._incoming.get()

    async def send(self, message: dict[str, Any]) -> None:
        await self.flowing.wait()
        if self.broken:
            raise OSError("connection reset by peer")
        self.messages.append(message)

    def frames(self) -> list[dict[str, Any]]:
        return [orjson.loads(m["text"]) for m in self.messages if m["type"] == "websocket.send"]

    def close_code(self) -> int | None:
        closes = [m for m in self.messages if m["type"] == "websocket.close"]
        return int(closes[-1].get("code", 1000)) if closes else None


@pytest.fixture
async def channel() -> HeldChannel:
    return HeldChannel()


@pytest.fixture
async def websocket(channel: HeldChannel) -> WebSocket:
    scope = {"type": "websocket", "path": "/ws", "headers": [], "query_string": b""}
    ws = WebSocket(scope, channel.receive, channel.send)
    await ws.accept()
    return ws


@pytest.fixture
async def running(websocket: WebSocket) -> AsyncIterator[tuple[Sender, asyncio.Task[None]]]:
    sender = Sender(websocket, limit_bytes=4096)
    writer = asyncio.create_task(sender.run())
    yield sender, writer
    sender.stop()
    await asyncio.wait_for(writer, timeout=5)


def delta(
    text: str, message_id: str = "m1", channel: str = "content", **extra: str
) -> dict[str, Any]:
    return {
        "type": "assistant_delta",
        "conversation_id": "c1",
        "message_id": message_id,
        "channel": channel,
        "text": text,
        **extra,
    }


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_frames_go_out_in_order(channel: HeldChannel, running: tuple[Sender, Any]) -> None:
    sender, _ = running
    frames = [{"type": "assistant_start", "message_id": "m1"}, delta("Hel"), delta("lo")]
    for frame in frames:
        sender.send(frame)
        await settle()
    await sender.drain()
    assert channel.frames() == frames  # a client that keeps up gets every frame as it was


async def test_deltas_coalesce_while_the_client_is_slow(
    channel: HeldChannel, running: tuple[Sender, Any]
) -> None:
    sender, _ = running
    channel.flowing.clear()
    sender.send({"type": "assistant_start", "message_id": "m1"})
    await settle()  # in flight, held
    pieces = [f"piece {i}; " for i in range(200)]
    for piece in pieces:
        sender.send(delta(piece))
    sender.send(delta("thinking", channel="reasoning"))
    sender.send(delta("more ", channel="content"))
    sender.send(delta('{"to": ', channel="tool_call", call_id="a", name="send_email"))
    sender.send(delta('"x"}', channel="tool_call", call_id="a", name="send_email"))
    sender.send(delta("{}", channel="tool_call", call_id="b", name="lookup"))
    sender.send({"type": "assistant_done", "message_id": "m1", "status": "complete"})
    sender.send(delta("next reply", message_id="m2"))
    channel.flowing.set()
    await sender.drain()
    frames = channel.frames()
    assert [(f["type"], f.get("channel"), f.get("call_id"), f.get("text")) for f in frames] == [
        ("assistant_start", None, None, None),
        ("assistant_delta", "content", None, "".join(pieces)),
        ("assistant_delta", "reasoning", None, "thinking"),
        ("assistant_delta", "content", None, "more "),
        ("assistant_delta", "tool_call", "a", '{"to": "x"}'),
        ("assistant_delta", "tool_call", "b", "{}"),
        ("assistant_done", None, None, None),
        ("assistant_delta", "content", None, "next reply"),
    ]
    assert not sender.overflowed


async def test_a_client_too_slow_is_closed_with_1013(
    channel: HeldChannel, running: tuple[Sender, asyncio.Task[None]]
) -> None:
    sender, writer = running
    channel.flowing.clear()
    sender.send(delta("first"))
    await settle()
    sent = 0
    while not sender.overflowed:
        sender.send(delta("x" * 100))
        sent += 100
        assert sent <= 4096 + 100, "the queue grew past its limit"
    assert sender.closed
    sender.send(delta("after the close"))  # dropped, not queued
    channel.flowing.set()
    await asyncio.wait_for(writer, timeout=5)
    assert channel.close_code() == 1013
    assert [f["text"] for f in channel.frames()] == ["first"]


async def test_memory_stays_bounded_under_a_flood(
    channel: HeldChannel, running: tuple[Sender, asyncio.Task[None]]
) -> None:
    sender, writer = running
    channel.flowing.clear()
    for _ in range(20_000):  # 2 MB offered to a client that reads nothing
        sender.send(delta("y" * 100))
    assert sender.overflowed
    channel.flowing.set()
    await asyncio.wait_for(writer, timeout=5)
    assert sum(len(f["text"]) for f in channel.frames()) <= 4096


async def test_a_vanished_client_stops_the_writer_quietly(
    channel: HeldChannel, running: tuple[Sender, asyncio.Task[None]]
) -> None:
    sender, writer = running
    channel.broken = True
    sender.send(delta("into the void"))
    await asyncio.wait_for(writer, timeout=5)
    assert sender.closed
    sender.send(delta("ignored"))  # never raises to the reply that emits it


async def test_drain_waits_for_the_queue(channel: HeldChannel, running: tuple[Sender, Any]) -> None:
    sender, _ = running
    channel.flowing.clear()
    sender.send({"type": "error", "code": "frame_too_large", "message": "too big"})
    sender.send({"type": "error", "code": "second", "message": "queued"})
    drained = asyncio.create_task(sender.drain())
    await settle()
    assert not drained.done()
    channel.flowing.set()
    await asyncio.wait_for(drained, timeout=5)
    assert [f["code"] for f in channel.frames()] == ["frame_too_large", "second"]


async def test_a_frame_shared_by_connections_is_never_changed(websocket: WebSocket) -> None:
    # A view sends one frame object to every connection of its policy; a merge in one
    # connection's queue must not change what the others (and a late joiner's replay) get.
    held, flowing = HeldChannel(), HeldChannel()
    slow_ws = WebSocket(dict(websocket.scope), held.receive, held.send)
    fast_ws = WebSocket(dict(websocket.scope), flowing.receive, flowing.send)
    await slow_ws.accept()
    await fast_ws.accept()
    held.flowing.clear()
    slow, fast = Sender(slow_ws, 4096), Sender(fast_ws, 4096)
    writers = [asyncio.create_task(s.run()) for s in (slow, fast)]
    first, second, third = delta("a"), delta("b"), delta("c")
    slow.send({"type": "assistant_start", "message_id": "m1"})
    await settle()  # in flight, held
    for frame in (first, second, third):
        slow.send(frame)
        fast.send(frame)
        await settle()
    assert (first["text"], second["text"], third["text"]) == ("a", "b", "c")
    held.flowing.set()
    await slow.drain()
    await fast.drain()
    assert [f.get("text") for f in held.frames()] == [None, "abc"]
    assert [f["text"] for f in flowing.frames()] == ["a", "b", "c"]
    for s in (slow, fast):
        s.stop()
    await asyncio.wait_for(asyncio.gather(*writers), timeout=5)


async def test_watched_frames_wait_and_go_together(
    channel: HeldChannel, websocket: WebSocket
) -> None:
    sender = Sender(websocket, 4096, watch_interval=30.0)
    writer = asyncio.create_task(sender.run())
    try:
        sender.send_watched({"type": "assistant_start", "message_id": "w1"})
        for piece in ("one ", "two ", "three"):
            sender.send_watched(delta(piece, message_id="w1"))
            await settle()
        assert channel.frames() == []  # a watcher's frames wait (here, up to 30 s)
        sender.send({"type": "message_accepted", "message_id": "own"})  # one of its own
        await sender.drain()
        assert [(f["type"], f.get("text")) for f in channel.frames()] == [
            ("assistant_start", None),
            ("assistant_delta", "one two three"),
            ("message_accepted", None),
        ]
    finally:
        sender.stop()
        await asyncio.wait_for(writer, timeout=5)


async def test_watched_frames_go_within_the_interval(
    channel: HeldChannel, websocket: WebSocket
) -> None:
    sender = Sender(websocket, 4096, watch_interval=0.02)
    writer = asyncio.create_task(sender.run())
    try:
        for piece in ("a", "b", "c"):
            sender.send_watched(delta(piece))
        await sender.drain()  # the timer, not another frame, sends them
        assert [f["text"] for f in channel.frames()] == ["abc"]
    finally:
        sender.stop()
        await asyncio.wait_for(writer, timeout=5)


def test_encode_is_compact_json() -> None:
    assert encode({"type": "x", "text": "é"}) == '{"type":"x","text":"é"}'
