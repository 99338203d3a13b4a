"""Framing and sending to one WebSocket, with a bounded queue that coalesces deltas.

The rule: the reply never waits for a slow client, and a slow client never makes memory grow
without bound. Frames wait in a queue; a delta that arrives while the previous delta of the
same message, channel and tool call is still waiting is merged into it, so a client that falls
behind gets fewer, larger frames. If the text waiting still passes the byte limit, the client is
too slow to serve: the connection is closed (1013, try again later) and the reply goes on
server-side, to be read back over HTTP.

Frames of replies this connection only watches (`send_watched`: another connection sent the
message) may wait up to `watch_interval` seconds, coalescing as above, so a viewer costs the
server one write per interval rather than one per frame; frames of a reply the connection
asked for (`send`) go at once, and take whatever waits with them, in order.

One frame sent to many connections (a reply's viewers under one policy) is encoded once: the
frame last encoded is remembered by identity, and wire frames are never changed once made (a
merge changes this queue's own copy). Once the socket is accepted, frames go straight to the
server's `send` (`RAW_SEND` in the scope), past the middlewares, which only watch the handshake
and the close.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any

import orjson
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketState

Frame = dict[str, Any]
RAW_SEND = "holdback.raw_send"  # the scope key of the server's own `send`
_OVERHEAD = 64  # bytes a queued frame counts beyond its text

_last: tuple[Frame, str] | None = None


def encode(frame: Frame) -> str:
    global _last
    last = _last
    if last is not None and last[0] is frame:
        return last[1]
    text = orjson.dumps(frame).decode()
    _last = (frame, text)
    return text


class Sender:
    def __init__(self, websocket: WebSocket, limit_bytes: int, watch_interval: float = 0.0) -> None:
        self.websocket = websocket
        self.limit_bytes = limit_bytes
        self.watch_interval = watch_interval
        self._loop = asyncio.get_running_loop()
        self._due: float | None = None  # when what is queued must be written
        self._timer: asyncio.TimerHandle | None = None
        # Entries are [frame, its encoding or None once a merge changed it].
        self._queue: deque[list[Any]] = deque()
        self._queued_bytes = 0
        self._wakeup = asyncio.Event()
        self._drained = asyncio.Event()
        self.closed = False
        self.overflowed = False

    def send(self, frame: Frame) -> None:
        """Queue a frame (never blocks); merge it into a waiting delta of the same stream."""
        self._queue_frame(frame, 0.0)

    def send_watched(self, frame: Frame) -> None:
        """`send`, for a frame that may wait up to `watch_interval` to go with others."""
        self._queue_frame(frame, self.watch_interval)

    def _queue_frame(self, frame: Frame, wait: float) -> None:
        if self.closed:
            return
        due = self._loop.time() + wait
        if self._due is None or due < self._due:
            self._due = due
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if wait > 0:
                self._timer = self._loop.call_at(due, self._wakeup.set)
            else:
                self._wakeup.set()
        queue = self._queue
        if queue and frame.get("type") == "assistant_delta":
            last = queue[-1]
            waiting = last[0]
            if waiting.get("type") == "assistant_delta" and _same_stream(waiting, frame):
                if last[1] is not None:  # the first merge: the frame may be shared
                    waiting = last[0] = dict(waiting)
                    last[1] = None
                waiting["text"] += frame["text"]
                if "seq" in frame:  # a merged frame is numbered as its last piece
                    waiting["seq"] = frame["seq"]
                self._queued_bytes += len(frame["text"])
                self._check_limit()
                return
        queue.append([frame, encode(frame)])
        self._queued_bytes += len(frame.get("text", "")) + _OVERHEAD
        self._check_limit()

    def _check_limit(self) -> None:
        if self._queued_bytes > self.limit_bytes:
            self.overflowed = True
            self.closed = True
            self._queue.clear()
            self._wakeup.set()

    async def run(self) -> None:
        """Write queued frames until the connection closes."""
        websocket = self.websocket
        raw = websocket.scope.get(RAW_SEND)
        send = raw if raw is not None else websocket.send
        try:
            while True:
                if self.overflowed:
                    with contextlib.suppress(Exception):
                        await websocket.close(code=1013, reason="client too slow")
                    return
                if self._queue and self._due is not None and self._loop.time() < self._due:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                if self._queue:  # due: everything queued goes now
                    frame, text = self._queue.popleft()
                    self._queued_bytes -= len(frame.get("text", "")) + _OVERHEAD
                    if websocket.application_state != WebSocketState.CONNECTED:
                        return
                    message: Message = {"type": "websocket.send", "text": text or encode(frame)}
                    await send(message)
                    if not self._queue:
                        self._due = None
                        self._drained.set()
                    continue
                if self.closed:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
        except Exception:
            pass  # the client went away; replies carry on without it
        finally:
            self.closed = True
            self._drained.set()

    def stop(self) -> None:
        self.closed = True
        self._due = None
        if self._timer is not None:
            self._timer.cancel()
        self._wakeup.set()

    async def drain(self) -> None:
        """Wait (at most 5 seconds) until what is queued has been written."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                while self._queue and not self.overflowed:
                    self._drained.clear()
                    await self._drained.wait()


def _same_stream(a: Frame, b: Frame) -> bool:
    return (
        a.get("message_id") == b.get("message_id")
        and a.get("channel") == b.get("channel")
        and a.get("call_id") == b.get("call_id")
    )
