"""`openai:<model>`: OpenAI's moderations API in its published format, served from loopback.

The request is `POST {OPENAI_BASE_URL}/moderations` with a bearer key and
`{"model", "input"}`; the answer's one result becomes a verdict: not flagged allows, flagged
takes the configured action of its flagged categories (default block) and names the
highest-scoring one. Every other answer fails closed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from holdback.moderation.base import ModerationFailedError, Verdict
from holdback.moderation.calls import ModerationCalls
from holdback.moderation.openai import (
    InvalidModerationActionsError,
    OpenAIModerator,
    parse_actions,
)
from tests.moderation.fakemod import ModerationService, answer

pytestmark = pytest.mark.anyio

EXAMPLE: dict[str, Any] = json.loads(
    (Path(__file__).parent / "fixtures" / "openai_moderation_docs_example.json").read_text()
)
KEY = "sk-moderation-canary-5d1e"
WINDOW = "The plan for <ORG_1> is below."


def example(**changes: Any) -> dict[str, Any]:
    """The published example with some categories' flags and scores changed."""
    body = copy.deepcopy(EXAMPLE)
    result = body["results"][0]
    for name, (hit, score) in changes.items():
        name = name.replace("__", "/").replace("_", "-")
        result["categories"][name] = hit
        result["category_scores"][name] = score
    result["flagged"] = any(result["categories"].values())
    return body


def clean() -> dict[str, Any]:
    return example(violence=(False, 0.01))


def moderator(service: ModerationService, **kwargs: Any) -> OpenAIModerator:
    kwargs.setdefault("api_key", KEY)
    return OpenAIModerator(
        "omni-moderation-latest", client=None, base_url=service.url + "/v1/", **kwargs
    )


async def ask(service: ModerationService, body: object, **kwargs: Any) -> Verdict:
    service.enqueue(answer(body))
    mod = moderator(service, **kwargs)
    try:
        return await mod.check(WINDOW, "content", "c-1")
    finally:
        await mod.aclose()


async def test_the_request_is_the_published_one(service: ModerationService) -> None:
    await ask(service, clean())
    (request,) = service.requests
    assert request.method == "POST"
    assert request.path == "/v1/moderations"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {"model": "omni-moderation-latest", "input": WINDOW}


async def test_no_key_sends_no_authorization(service: ModerationService) -> None:
    await ask(service, clean(), api_key=None)
    assert "authorization" not in service.requests[0].headers


async def test_the_published_example_blocks_for_violence(service: ModerationService) -> None:
    assert await ask(service, EXAMPLE) == Verdict("block", "violence")


async def test_not_flagged_allows(service: ModerationService) -> None:
    assert await ask(service, clean()) == Verdict("allow")


async def test_the_highest_scoring_flagged_category_is_named(service: ModerationService) -> None:
    body = example(violence=(True, 0.61), self_harm__intent=(True, 0.93), hate=(False, 0.99))
    assert await ask(service, body) == Verdict("block", "self-harm/intent")


async def test_configured_actions_per_category(service: ModerationService) -> None:
    actions = parse_actions("violence=withhold, self-harm=block")
    assert await ask(service, EXAMPLE, actions=actions) == Verdict("withhold", "violence")
    # The parent's action covers a subcategory; the strictest flagged action wins, and is
    # named by its own highest-scoring category.
    body = example(violence=(True, 0.99), self_harm__instructions=(True, 0.40))
    assert await ask(service, body, actions=actions) == Verdict("block", "self-harm/instructions")
    ignore = parse_actions("violence=allow")
    assert await ask(service, EXAMPLE, actions=ignore) == Verdict("allow")
    default = parse_actions("*=withhold")
    assert await ask(service, EXAMPLE, actions=default) == Verdict("withhold", "violence")


async def test_a_legacy_models_null_flags_are_not_flagged(service: ModerationService) -> None:
    body = clean()
    body["results"][0]["categories"]["illicit"] = None
    del body["results"][0]["category_applied_input_types"]
    assert await ask(service, body) == Verdict("allow")


def _broken(change: str) -> dict[str, Any]:
    body = copy.deepcopy(EXAMPLE)
    result = body["results"][0]
    if change == "no-results":
        del body["results"]
    elif change == "two-results":
        body["results"].append(copy.deepcopy(result))
    elif change == "zero-results":
        body["results"] = []
    elif change == "flag-contradicts":
        result["flagged"] = False
    elif change == "flagged-nothing":
        result["categories"]["violence"] = False
    elif change == "flag-type":
        result["flagged"] = "true"
    elif change == "category-type":
        result["categories"]["violence"] = 1
    elif change == "score-type":
        result["category_scores"]["violence"] = "0.8"
    elif change == "score-bool":
        result["category_scores"]["violence"] = True
    elif change == "score-range":
        result["category_scores"]["violence"] = 1.5
    elif change == "bad-category-name":
        result["categories"]["<script>"] = True
    elif change == "no-scores":
        del result["category_scores"]
    elif change == "not-an-object":
        return [result]  # type: ignore[return-value]
    return body


@pytest.mark.parametrize(
    "change",
    [
        "no-results",
        "two-results",
        "zero-results",
        "flag-contradicts",
        "flagged-nothing",
        "flag-type",
        "category-type",
        "score-type",
        "score-bool",
        "score-range",
        "bad-category-name",
        "no-scores",
        "not-an-object",
    ],
)
async def test_answers_outside_the_format_fail_closed(
    service: ModerationService, change: str
) -> None:
    service.enqueue(answer(_broken(change)), answer(clean()))
    checks = ModerationCalls(moderator(service), timeout=2.0, retry_delay=0.0)
    try:
        with pytest.raises(ModerationFailedError):
            await checks.check(WINDOW, "content", "c-1")
    finally:
        await checks.aclose()
    assert len(service.requests) == 1


async def test_an_api_error_fails_and_names_no_key(service: ModerationService) -> None:
    error = {
        "error": {"message": f"Incorrect API key provided: {KEY}", "type": "invalid_request_error"}
    }
    service.enqueue(answer(error, status=401))
    checks = ModerationCalls(moderator(service), timeout=2.0, retry_delay=0.0)
    try:
        with pytest.raises(ModerationFailedError) as caught:
            await checks.check(WINDOW, "content", "c-1")
    finally:
        await checks.aclose()
    assert len(service.requests) == 1  # 401 is final
    assert KEY not in str(caught.value)


async def test_a_500_is_asked_again_once(service: ModerationService) -> None:
    service.enqueue(answer({"error": {"message": "oops"}}, status=500), answer(EXAMPLE))
    checks = ModerationCalls(moderator(service), timeout=2.0, retry_delay=0.0)
    try:
        assert await checks.check(WINDOW, "content", "c-1") == Verdict("block", "violence")
    finally:
        await checks.aclose()
    assert len(service.requests) == 2


@pytest.mark.parametrize(
    "value",
    ["violence", "violence=", "=block", "violence=stop", "<b>=block", "violence:block"],
)
def test_bad_actions_are_refused_by_name(value: str) -> None:
    with pytest.raises(InvalidModerationActionsError, match="HOLDBACK_MODERATION_ACTIONS"):
        parse_actions(value)


def test_actions_parse() -> None:
    assert parse_actions("") == {}
    assert parse_actions(" violence=withhold , *=block,") == {"violence": "withhold", "*": "block"}
