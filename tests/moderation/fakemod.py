"""A loopback moderation service for tests: a real HTTP/1.1 server on 127.0.0.1.

The rule it keeps: moderators are tested over real sockets, never with a mocked client. It is
the providers' `FakeUpstream` (scripted replies, each request recorded), plus: an answer
computed from the request (`decide`), a gate that holds every request before its answer
(`hold()` / `release()`), and a count of the requests being answered at once (`active`,
`peak`), so a concurrency bound can be seen from the service's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable

from tests.providers.fakeserver import FakeUpstream, RecordedRequest, Reply

JSON = {"content-type": "application/json"}


def answer(payload: object, status: int = 200) -> Reply:
    """A JSON answer, framed by Content-Length."""
    return Reply.json(status, payload, framing="length")


class ModerationService(FakeUpstream):
    def __init__(self, decide: Callable[[RecordedRequest], Reply] | None = None) -> None:
        super().__init__()
        self.decide = decide
        self.active = 0
        self.peak = 0
        self._held = False
        self._gate: asyncio.Event | None = None
        self._arrived = threading.Condition()

    async def _start(self) -> None:
        await super()._start()
        self._gate = asyncio.Event()
        self._gate.set()

    async def _stop(self) -> None:
        assert self._gate is not None
        self._gate.set()
        await super()._stop()

    def hold(self) -> None:
        """From now on every request waits, unanswered, until `release()`."""
        asyncio.run_coroutine_threadsafe(self._gate_clear(), self._loop).result(timeout=10)

    async def _gate_clear(self) -> None:
        assert self._gate is not None
        self._gate.clear()

    def release(self) -> None:
        assert self._gate is not None
        self._loop.call_soon_threadsafe(self._gate.set)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> None:
        """Block until `count` requests have arrived (in total)."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self.requests)} requests arrived, not {count}")
                self._arrived.wait(left)

    def reply_for(self, request: RecordedRequest) -> Reply:
        if self.decide is not None:
            return self.decide(request)
        return super().reply_for(request)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            request = await self._read_request(reader)
            if request is None:
                return
            self.active += 1
            self.peak = max(self.peak, self.active)
            try:
                with self._arrived:
                    self.requests.append(request)
                    self._arrived.notify_all()
                assert self._gate is not None
                await self._gate.wait()
                await self._send(self.reply_for(request), writer)
            finally:
                self.active -= 1
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
