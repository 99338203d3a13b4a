"""No window's text, no moderator's answer and no key ever reaches a log line or an error:
canary values go in every place they could come from, through every way a check can fail,
with every logger at DEBUG."""

from __future__ import annotations

import logging

import pytest

from holdback.moderation.base import ModerationFailedError
from holdback.moderation.calls import ModerationCalls
from holdback.moderation.openai import OpenAIModerator
from holdback.moderation.webhook import WebhookModerator
from tests.moderation.fakemod import JSON, ModerationService, answer
from tests.providers.fakeserver import Reply

pytestmark = pytest.mark.anyio

WINDOW = "Tell CANARY-WINDOW-41f7 that <PERSON_1> is late."
BODY = "CANARY-BODY-9c2e"
KEY = "sk-CANARY-KEY-77d0"
CANARIES = ("CANARY-WINDOW", "CANARY-BODY", "CANARY-KEY", "41f7", "9c2e", "77d0")

FAILURES = [
    Reply(
        500,
        [f"internal error near {BODY}".encode()],
        {"content-type": "text/plain"},
        framing="length",
    ),
    Reply(200, [f"{{{BODY}".encode()], JSON, framing="length"),
    answer({"action": BODY}),
    answer({"action": "block", "category": f"<{BODY}>"}),
    answer({"action": "allow", BODY: 1}),
    answer({"error": {"message": f"{BODY} {KEY}"}}, status=401),
    Reply(200, [f'{{"action": "{BODY}'.encode()], JSON, framing="length", cut_after=1),
    answer({"results": [{"flagged": BODY, "categories": {}, "category_scores": {}}]}),
    answer(
        {"results": [{"flagged": True, "categories": {f"{BODY} x": True}, "category_scores": {}}]}
    ),
]


def _text(caplog: pytest.LogCaptureFixture) -> str:
    return caplog.text + "\n".join(
        f"{r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in caplog.records
    )


@pytest.mark.parametrize("kind", ["webhook", "openai"])
@pytest.mark.parametrize("reply", FAILURES)
async def test_no_canary_in_logs_or_errors(
    caplog: pytest.LogCaptureFixture, service: ModerationService, kind: str, reply: Reply
) -> None:
    caplog.set_level(logging.DEBUG)
    service.enqueue(reply, reply)
    if kind == "webhook":
        moderator: WebhookModerator | OpenAIModerator = WebhookModerator(
            service.url + "/hook", client=None, token=KEY
        )
    else:
        moderator = OpenAIModerator("m", client=None, base_url=service.url, api_key=KEY)
    checks = ModerationCalls(moderator, timeout=2.0, retry_delay=0.0)
    try:
        with pytest.raises(ModerationFailedError) as caught:
            await checks.check(WINDOW, "content", "c-1")
    finally:
        await checks.aclose()
    said = _text(caplog) + str(caught.value) + repr(caught.value)
    assert "moderation failed" in caplog.text  # the failure is logged, by our own words
    for canary in CANARIES:
        assert canary not in said
    assert caught.value.__cause__ is None


async def test_a_slow_moderator_logs_no_canary(
    caplog: pytest.LogCaptureFixture, service: ModerationService
) -> None:
    caplog.set_level(logging.DEBUG)
    service.hold()
    checks = ModerationCalls(
        WebhookModerator(service.url, client=None, token=KEY, timeout=0.1), timeout=0.1
    )
    try:
        with pytest.raises(ModerationFailedError):
            await checks.check(WINDOW, "content", "c-1")
    finally:
        service.release()
        await checks.aclose()
    for canary in CANARIES:
        assert canary not in _text(caplog)
