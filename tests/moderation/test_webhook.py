"""`http:<url>`: the webhook's exact contract over a real loopback server. Each verdict is
read as sent; every other answer fails closed, and only the faults that asking again may mend
are asked again (once)."""

from __future__ import annotations

import time

import pytest

from holdback.moderation.base import ModerationFailedError, ModerationUnavailableError, Verdict
from holdback.moderation.calls import ModerationCalls
from holdback.moderation.webhook import InvalidWebhookURLError, WebhookModerator, check_url
from tests.moderation.fakemod import JSON, ModerationService, answer
from tests.providers.fakeserver import Reply, unused_port

pytestmark = pytest.mark.anyio

WINDOW = "Dear <PERSON_1>, the plan is ready."


def hook(service: ModerationService, **kwargs: object) -> WebhookModerator:
    return WebhookModerator(service.url + "/check?team=a", client=None, **kwargs)  # type: ignore[arg-type]


def calls(moderator: WebhookModerator, timeout: float = 2.0) -> ModerationCalls:
    return ModerationCalls(moderator, timeout=timeout, retry_delay=0.0)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"action": "allow"}, Verdict("allow")),
        ({"action": "allow", "category": None}, Verdict("allow")),
        ({"action": "block", "category": "violence"}, Verdict("block", "violence")),
        ({"action": "block"}, Verdict("block")),
        (
            {"action": "withhold", "category": "medical/diagnosis"},
            Verdict("withhold", "medical/diagnosis"),
        ),
        ({"category": "self-harm", "action": "withhold"}, Verdict("withhold", "self-harm")),
    ],
)
async def test_the_verdicts_of_the_contract(
    service: ModerationService, payload: dict[str, object], expected: Verdict
) -> None:
    service.enqueue(answer(payload))
    moderator = hook(service)
    try:
        assert await moderator.check(WINDOW, "reasoning", "c-42") == expected
    finally:
        await moderator.aclose()


async def test_the_request_is_exactly_the_contract(service: ModerationService) -> None:
    service.enqueue(answer({"action": "allow"}), answer({"action": "allow"}))
    plain = hook(service)
    with_token = hook(service, token="hook-token-1")
    try:
        await plain.check(WINDOW, "tool_call", "c-7")
        await with_token.check(WINDOW, "content", "c-8")
    finally:
        await plain.aclose()
        await with_token.aclose()
    first, second = service.requests
    assert first.method == "POST"
    assert first.path == "/check?team=a"
    assert first.headers["content-type"] == "application/json"
    assert first.json() == {"text": WINDOW, "channel": "tool_call", "conversation_id": "c-7"}
    assert "authorization" not in first.headers
    assert second.headers["authorization"] == "Bearer hook-token-1"
    assert second.json()["channel"] == "content"


MALFORMED = [
    pytest.param(Reply(200, [b"{not json"], JSON, framing="length"), id="malformed-json"),
    pytest.param(
        Reply(200, [b'{"action": "allow"}'], {"content-type": "text/plain"}, framing="length"),
        id="not-json-type",
    ),
    pytest.param(answer([{"action": "allow"}]), id="a-list"),
    pytest.param(answer("allow"), id="a-string"),
    pytest.param(answer({}), id="no-action"),
    pytest.param(answer({"action": "maybe"}), id="unknown-action"),
    pytest.param(answer({"action": "ALLOW"}), id="action-case"),
    pytest.param(answer({"action": True}), id="action-type"),
    pytest.param(answer({"action": "block", "category": 7}), id="category-type"),
    pytest.param(answer({"action": "block", "category": ""}), id="category-empty"),
    pytest.param(answer({"action": "block", "category": "<b>x</b>"}), id="category-shape"),
    pytest.param(answer({"action": "block", "category": "a" * 65}), id="category-long"),
    pytest.param(answer({"action": "allow", "score": 0.1}), id="another-key"),
    pytest.param(answer({"action": "allow"}, status=201), id="status-201"),
    pytest.param(answer({"action": "allow"}, status=302), id="status-302"),
    pytest.param(answer({"error": "no"}, status=400), id="status-400"),
    pytest.param(answer({"action": "allow", "category": "x" * 20_000}), id="too-large"),
]


@pytest.mark.parametrize("reply", MALFORMED)
async def test_any_other_answer_fails_and_is_not_asked_again(
    service: ModerationService, reply: Reply
) -> None:
    service.enqueue(reply, answer({"action": "allow"}))
    checks = calls(hook(service))
    try:
        with pytest.raises(ModerationFailedError) as caught:
            await checks.check(WINDOW, "content", "c-1")
    finally:
        await checks.aclose()
    assert len(service.requests) == 1  # a malformed answer is final
    assert caught.value.code == "moderation_failed"


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(answer({"error": "down"}, status=500), id="http-500"),
        pytest.param(answer({"error": "down"}, status=503), id="http-503"),
        pytest.param(answer({"error": "slow down"}, status=429), id="http-429"),
        pytest.param(
            Reply(200, [b'{"action": "al', b'low"}'], JSON, framing="length", cut_after=1),
            id="cut-connection",
        ),
    ],
)
async def test_faults_that_may_mend_are_asked_again_once(
    service: ModerationService, reply: Reply
) -> None:
    service.enqueue(reply, reply, answer({"action": "allow"}))
    checks = calls(hook(service))
    try:
        with pytest.raises(ModerationFailedError):
            await checks.check(WINDOW, "content", "c-1")
    finally:
        await checks.aclose()
    assert len(service.requests) == 2  # one retry, then it fails closed


async def test_a_retry_that_works_gives_its_verdict(service: ModerationService) -> None:
    service.enqueue(answer({}, status=502), answer({"action": "withhold", "category": "x"}))
    checks = calls(hook(service))
    try:
        assert await checks.check(WINDOW, "content", "c-1") == Verdict("withhold", "x")
    finally:
        await checks.aclose()
    assert len(service.requests) == 2


async def test_the_moderator_alone_names_faults_that_may_mend(service: ModerationService) -> None:
    service.enqueue(answer({}, status=500), answer({"action": "what"}))
    moderator = hook(service)
    try:
        with pytest.raises(ModerationUnavailableError):
            await moderator.check(WINDOW, "content", "c-1")
        with pytest.raises(ModerationFailedError) as caught:
            await moderator.check(WINDOW, "content", "c-1")
        assert not isinstance(caught.value, ModerationUnavailableError)
    finally:
        await moderator.aclose()


async def test_a_refused_connection_fails_after_one_retry() -> None:
    checks = calls(WebhookModerator(f"http://127.0.0.1:{unused_port()}/", client=None))
    try:
        with pytest.raises(ModerationFailedError):
            await checks.check(WINDOW, "content", "c-1")
    finally:
        await checks.aclose()
    assert checks.calls == 2


async def test_a_slow_moderator_fails_within_the_time_bound(service: ModerationService) -> None:
    service.hold()  # never answers: no head, no body
    checks = calls(hook(service, timeout=0.2), timeout=0.2)
    started = time.monotonic()
    try:
        with pytest.raises(ModerationFailedError):
            await checks.check(WINDOW, "content", "c-1")
    finally:
        await checks.aclose()
    elapsed = time.monotonic() - started
    assert elapsed < 0.2 * (checks.retries + 2) + 0.5
    assert len(service.requests) == 2


async def test_a_body_that_stalls_fails_within_the_time_bound(service: ModerationService) -> None:
    stalled = Reply(200, [b'{"action": ', b'"allow"}'], JSON, framing="length", stall_after=1)
    service.enqueue(stalled, stalled)
    checks = calls(hook(service, timeout=5.0), timeout=0.25)  # the call's bound, not the HTTP one
    started = time.monotonic()
    try:
        with pytest.raises(ModerationFailedError):
            await checks.check(WINDOW, "content", "c-1")
    finally:
        await checks.aclose()
    assert time.monotonic() - started < 0.25 * 3 + 0.5


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9000/check",
        "https://guard.example/v1/moderate?x=1",
        "http://[::1]:8080/",
        "http://localhost/",
    ],
)
def test_urls_that_may_be_posted_to(url: str) -> None:
    assert check_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "ftp://guard.example/",
        "file:///etc/passwd",
        "guard.example/check",
        "http:///nohost",
        "http://user:pw@guard.example/",
        "http://guard.example/#frag",
        "http://guard.example:99999/",
        "http://guard.example:0/",
        "http://guard example/",
    ],
)
def test_urls_that_are_refused(url: str) -> None:
    with pytest.raises(InvalidWebhookURLError, match="http:// or https://"):
        check_url(url)
