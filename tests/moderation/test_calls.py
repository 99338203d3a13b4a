"""`ModerationCalls`: every check bounded in time and tries, at most `concurrency` in flight,
identical checks answered once, and every failure our own `ModerationFailedError`. The
moderator is the webhook against a real loopback service, except where a check needs a
moderator that misbehaves in-process (raising what no moderator should, answering a
non-verdict)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from holdback.moderation.base import Channel, ModerationFailedError, Verdict
from holdback.moderation.calls import ModerationCalls
from holdback.moderation.webhook import WebhookModerator
from tests.moderation.fakemod import ModerationService, answer
from tests.providers.fakeserver import RecordedRequest, Reply

pytestmark = pytest.mark.anyio


def echo(request: RecordedRequest) -> Reply:
    """Withholds a window that says "secret", names the channel; allows the rest."""
    body = request.json()
    if "secret" in body["text"]:
        return answer({"action": "withhold", "category": body["channel"]})
    return answer({"action": "allow"})


def hooked(service: ModerationService, **kwargs: object) -> ModerationCalls:
    service.decide = echo
    moderator = WebhookModerator(service.url + "/m", client=None)
    kwargs.setdefault("retry_delay", 0.0)
    return ModerationCalls(moderator, **kwargs)  # type: ignore[arg-type]


async def until(condition: Callable[[], bool], within: float = 5.0) -> None:
    """Wait until `condition()` holds (the service runs on its own thread)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not come about in time")
        await asyncio.sleep(0.005)


async def test_identical_checks_are_answered_from_the_cache(service: ModerationService) -> None:
    checks = hooked(service)
    try:
        first = await checks.check("a secret plan.", "content", "c-1")
        again = await checks.check("a secret plan.", "content", "c-2")
        other_channel = await checks.check("a secret plan.", "reasoning", "c-1")
        other_text = await checks.check("a fine plan.", "content", "c-1")
    finally:
        await checks.aclose()
    assert first == again == Verdict("withhold", "content")
    assert other_channel == Verdict("withhold", "reasoning")
    assert other_text == Verdict("allow")
    assert len(service.requests) == 3
    assert checks.hits == 1


async def test_the_cache_is_bounded_and_least_recently_used(service: ModerationService) -> None:
    checks = hooked(service, cache_size=2)
    try:
        for text in ("one.", "two.", "one.", "three.", "one.", "two."):
            await checks.check(text, "content", "c")
    finally:
        await checks.aclose()
    # one, two, (one hit), three evicts two, (one hit), two again
    assert [r.json()["text"] for r in service.requests] == ["one.", "two.", "three.", "two."]


async def test_failures_are_not_cached(service: ModerationService) -> None:
    service.enqueue(answer({"action": "nope"}), answer({"action": "allow"}))
    checks = ModerationCalls(WebhookModerator(service.url, client=None), retry_delay=0.0)
    try:
        with pytest.raises(ModerationFailedError):
            await checks.check("same.", "content", "c")
        assert await checks.check("same.", "content", "c") == Verdict("allow")
    finally:
        await checks.aclose()


async def test_identical_checks_in_flight_share_one_call(service: ModerationService) -> None:
    checks = hooked(service)
    service.hold()
    try:
        tasks = [
            asyncio.create_task(checks.check("secret.", "content", f"c-{i}")) for i in range(5)
        ]
        await asyncio.to_thread(service.wait_for_requests, 1)
        service.release()
        verdicts = await asyncio.gather(*tasks)
    finally:
        await checks.aclose()
    assert verdicts == [Verdict("withhold", "content")] * 5
    assert len(service.requests) == 1
    assert checks.hits == 4


async def test_a_cancelled_check_leaves_a_shared_call_running(service: ModerationService) -> None:
    checks = hooked(service)
    service.hold()
    try:
        first = asyncio.create_task(checks.check("secret.", "content", "c-1"))
        second = asyncio.create_task(checks.check("secret.", "content", "c-2"))
        await asyncio.to_thread(service.wait_for_requests, 1)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        service.release()
        assert await second == Verdict("withhold", "content")
    finally:
        await checks.aclose()


async def test_concurrency_is_bounded(service: ModerationService) -> None:
    checks = hooked(service, concurrency=3, timeout=10.0)
    service.hold()
    try:
        tasks = [
            asyncio.create_task(checks.check(f"window {i}.", "content", "c")) for i in range(12)
        ]
        await asyncio.to_thread(service.wait_for_requests, 3)
        # Every other check waits for a slot: nothing more can reach the service now.
        await until(lambda: checks.waiting == 9)
        assert service.active == 3
        assert len(service.requests) == 3
        assert checks.in_flight == 3
        service.release()
        assert await asyncio.gather(*tasks) == [Verdict("allow")] * 12
    finally:
        await checks.aclose()
    assert service.peak == 3
    assert len(service.requests) == 12


async def test_waiting_for_a_slot_is_bounded_and_final(service: ModerationService) -> None:
    checks = hooked(service, concurrency=1, timeout=0.3)
    service.hold()
    try:
        held = asyncio.create_task(checks.check("first.", "content", "c"))
        await asyncio.to_thread(service.wait_for_requests, 1)
        started = time.monotonic()
        with pytest.raises(ModerationFailedError):
            await checks.check("second.", "content", "c")
        assert time.monotonic() - started < 1.0
        with pytest.raises(ModerationFailedError):
            await held  # the held call itself times out (and is asked once more)
    finally:
        service.release()
        await checks.aclose()
    assert [r.json()["text"] for r in service.requests] == ["first.", "first."]


async def test_retries_are_bounded(service: ModerationService) -> None:
    service.enqueue(*[answer({}, status=500)] * 5)
    moderator = WebhookModerator(service.url, client=None)
    for retries, expected in ((0, 1), (1, 2), (3, 4)):
        service.requests.clear()
        checks = ModerationCalls(moderator, retries=retries, retry_delay=0.0)
        with pytest.raises(ModerationFailedError):
            await checks.check(f"w{retries}.", "content", "c")
        assert len(service.requests) == expected
    await moderator.aclose()


class Misbehaving:
    """A moderator that breaks the interface in a given way (no network needed for that)."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.calls = 0

    async def check(self, text: str, channel: Channel, conversation_id: str) -> Verdict:
        self.calls += 1
        if self.how == "raises":
            raise RuntimeError(f"choked on {text}")
        if self.how == "hangs":
            await asyncio.Event().wait()
        return {"action": "allow"}  # type: ignore[return-value]

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize(("how", "calls"), [("raises", 1), ("answers-a-dict", 1), ("hangs", 2)])
async def test_a_misbehaving_moderator_fails_closed(how: str, calls: int) -> None:
    moderator = Misbehaving(how)
    checks = ModerationCalls(moderator, timeout=0.1, retry_delay=0.0)
    with pytest.raises(ModerationFailedError) as caught:
        await checks.check("the window CANARY-CALLS-1.", "content", "c")
    assert moderator.calls == calls
    assert "CANARY" not in str(caught.value)
    assert caught.value.__cause__ is None
    await checks.aclose()


async def test_closing_fails_checks_in_flight_and_later_ones(service: ModerationService) -> None:
    checks = hooked(service)
    service.hold()
    task = asyncio.create_task(checks.check("held.", "content", "c"))
    await asyncio.to_thread(service.wait_for_requests, 1)
    await checks.aclose()
    service.release()
    with pytest.raises(ModerationFailedError, match="stopping"):
        await task
    with pytest.raises(ModerationFailedError, match="closed"):
        await checks.check("later.", "content", "c")


def test_bounds_must_make_sense() -> None:
    moderator = Misbehaving("raises")
    for bad in ({"timeout": 0}, {"retries": -1}, {"concurrency": 0}, {"cache_size": -1}):
        with pytest.raises(ValueError, match="timeout > 0"):
            ModerationCalls(moderator, **bad)  # type: ignore[arg-type]
