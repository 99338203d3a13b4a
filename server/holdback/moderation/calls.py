"""`ModerationCalls`: how every check reaches a moderator, bounded in time, tries and number.

The rules it keeps:
- each call to the moderator has `timeout` seconds (default 3, `HOLDBACK_MODERATION_TIMEOUT`);
  running out is a failure;
- a call that failed in a way asking again may mend (a timeout, `ModerationUnavailableError`:
  refused or dropped connections, `5xx`, `429`) is made again, at most `retries` more times
  (default 1), after `retry_delay` seconds. A malformed answer, a refusal or a verdict that
  is not a `Verdict` is never asked again;
- at most `concurrency` checks are in flight per process (default 8,
  `HOLDBACK_MODERATION_CONCURRENCY`), each holding its slot through its retries; a check
  waits at most `timeout` seconds for a slot, and not getting one is a failure (asking again
  would only add to the load). So one check takes at most
  `timeout × (retries + 2) + retry_delay × retries`;
- identical checks (the same text on the same channel) are answered from a cache of the
  last `cache_size` verdicts (default 1024), and identical checks in flight at once share
  one call. The cache is keyed by a digest of the text, so it holds no window's text;
- every failure is one `ModerationFailedError` with our own message (never the moderator's
  words, never the window's text) and one log line: the moderator's name, the cause as our
  own sentence (or, for an error we did not expect, its type and place: `errors.describe`),
  the attempts made. Cancelling a check never cancels a call another check shares.

`ModerationCalls` is itself a `Moderator`: whoever holds it asks it like any moderator.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import OrderedDict

from holdback.errors import describe
from holdback.moderation.base import (
    Channel,
    ModerationFailedError,
    ModerationUnavailableError,
    Moderator,
    Verdict,
)

DEFAULT_TIMEOUT = 3.0
DEFAULT_RETRIES = 1
DEFAULT_CONCURRENCY = 8
DEFAULT_CACHE_SIZE = 1024
DEFAULT_RETRY_DELAY = 0.05

log = logging.getLogger("holdback.moderation")


def _key(text: str, channel: Channel) -> bytes:
    return hashlib.blake2b(f"{channel}\0{text}".encode(), digest_size=20).digest()


class ModerationCalls:
    """A moderator's checks, with a timeout, bounded retries, a concurrency bound and a cache."""

    def __init__(
        self,
        moderator: Moderator,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        concurrency: int = DEFAULT_CONCURRENCY,
        cache_size: int = DEFAULT_CACHE_SIZE,
        retry_delay: float = DEFAULT_RETRY_DELAY,
        name: str | None = None,
    ) -> None:
        if not timeout > 0 or retries < 0 or concurrency < 1 or cache_size < 0:
            raise ValueError("timeout > 0, retries >= 0, concurrency >= 1, cache_size >= 0")
        self.moderator = moderator
        self.timeout = timeout
        self.retries = retries
        self.concurrency = concurrency
        self.cache_size = cache_size
        self.retry_delay = retry_delay
        self.name = name or str(getattr(moderator, "name", type(moderator).__name__))
        self._slots = asyncio.Semaphore(concurrency)
        self._cache: OrderedDict[bytes, Verdict] = OrderedDict()
        self._shared: dict[bytes, asyncio.Task[Verdict]] = {}
        self.in_flight = 0  # calls the moderator is answering now
        self.waiting = 0  # checks waiting for a free slot
        self.calls = 0  # calls made, retries included
        self.hits = 0  # checks answered from the cache or by a shared call
        self._closed = False

    async def check(self, text: str, channel: Channel, conversation_id: str) -> Verdict:
        """The verdict for one window; `ModerationFailedError` for any failure."""
        if self._closed:
            raise ModerationFailedError("moderation is closed: the server is stopping")
        key = _key(text, channel)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            self.hits += 1
            return cached
        task = self._shared.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                self._decide(text, channel, conversation_id)
            )
            self._shared[key] = task
            task.add_done_callback(lambda done: self._settled(key, done))
        else:
            self.hits += 1
        # A caller's cancellation (Stop, a closed reply) leaves a call others share running;
        # the call's own cancellation (`aclose`) is a failure for every caller.
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            caller = asyncio.current_task()
            if task.cancelled() and (caller is None or not caller.cancelling()):
                raise ModerationFailedError(
                    "the policy check was stopped: the server is stopping"
                ) from None
            raise

    def _settled(self, key: bytes, task: asyncio.Task[Verdict]) -> None:
        if self._shared.get(key) is task:
            del self._shared[key]
        if task.cancelled():
            return
        if task.exception() is None and self.cache_size:
            self._cache[key] = task.result()
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    async def _decide(self, text: str, channel: Channel, cid: str) -> Verdict:
        self.waiting += 1
        try:
            async with asyncio.timeout(self.timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise self._failed(f"had no free slot within {self.timeout:g} s", 0) from None
        finally:
            self.waiting -= 1
        self.in_flight += 1
        try:
            return await self._attempts(text, channel, cid)
        finally:
            self.in_flight -= 1
            self._slots.release()

    async def _attempts(self, text: str, channel: Channel, cid: str) -> Verdict:
        attempts = 0
        while True:
            attempts += 1
            self.calls += 1
            try:
                async with asyncio.timeout(self.timeout):
                    verdict = await self.moderator.check(text, channel, cid)
            except TimeoutError:
                reason = f"did not answer within {self.timeout:g} s"
            except ModerationUnavailableError as exc:
                reason = str(exc)
            except ModerationFailedError as exc:
                raise self._failed(str(exc), attempts) from None
            except Exception as exc:
                raise self._failed(f"failed unexpectedly ({describe(exc)})", attempts) from None
            else:
                if not isinstance(verdict, Verdict):
                    raise self._failed("answered something that is not a verdict", attempts)
                return verdict
            if attempts > self.retries:
                raise self._failed(reason, attempts)
            log.info("moderation: %s: %s; asking again", self.name, reason)
            await asyncio.sleep(self.retry_delay)

    def _failed(self, reason: str, attempts: int) -> ModerationFailedError:
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        log.warning("moderation failed: %s: %s (%s)", self.name, reason, tries)
        return ModerationFailedError(f"the policy check failed ({tries})")

    async def aclose(self) -> None:
        """Stop: checks in flight fail, and the moderator is closed."""
        self._closed = True
        tasks = list(self._shared.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, ModerationFailedError):
                await task
        self._cache.clear()
        await self.moderator.aclose()
