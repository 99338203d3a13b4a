"""`openai:<model>`: OpenAI's moderations API, in its own request and response format.

The rules it keeps:
- request: `POST {OPENAI_BASE_URL}/moderations`, `Authorization: Bearer $OPENAI_API_KEY`,
  body `{"model": <model>, "input": <window, tokenized>}`;
- response: `{"id", "model", "results": [{"flagged": bool, "categories": {name: bool|null},
  "category_scores": {name: number}, ...}]}`, exactly one result for the one input. Other
  fields (`category_applied_input_types`) are ignored; `null` for a category is "not
  flagged" (older models do not score `illicit`);
- the verdict: not flagged is `allow`. Flagged, each flagged category takes its configured
  action (`HOLDBACK_MODERATION_ACTIONS`: the category's own, else its parent's before the
  `/`, else `*`'s, else `block`); the strictest action of them wins (`block` over
  `withhold` over `allow`), and its category is the highest-scoring flagged category with
  that action (ties by name, so the verdict is a function of the answer);
- anything else is a failure: a result count other than one, a `flagged` that disagrees with
  the categories, a flag or score of another type, a score outside 0..1, a category name
  outside `CATEGORY_RE`. The answer is untrusted text: never logged, never quoted.
"""

from __future__ import annotations

from collections.abc import Mapping

from holdback.errors import ConfigurationError
from holdback.moderation.base import (
    ACTIONS,
    CATEGORY_RE,
    Action,
    Channel,
    ModerationFailedError,
    Verdict,
)
from holdback.moderation.upstream import post_json, where
from holdback.providers.transport import UpstreamClient

DEFAULT_BASE_URL = "https://api.openai.com/v1"
ACTIONS_VARIABLE = "HOLDBACK_MODERATION_ACTIONS"
_SEVERITY: dict[Action, int] = {"allow": 0, "withhold": 1, "block": 2}


class InvalidModerationActionsError(ConfigurationError):
    """`HOLDBACK_MODERATION_ACTIONS` is not a list of `category=action` pairs."""


def parse_actions(value: str) -> dict[str, Action]:
    """`violence=withhold,self-harm=block,*=withhold`: category (or `*`) -> action."""
    actions: dict[str, Action] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, equals, action = (part.strip() for part in item.partition("="))
        if not equals or (name != "*" and not CATEGORY_RE.match(name)):
            raise InvalidModerationActionsError(
                f"{ACTIONS_VARIABLE} must list category=action pairs separated by commas "
                "(a category is a short name such as violence or self-harm/intent, or *)"
            )
        if action not in ACTIONS:
            raise InvalidModerationActionsError(
                f"{ACTIONS_VARIABLE}: the action for {name} must be allow, block or withhold"
            )
        actions[name] = action
    return actions


class OpenAIModerator:
    """A moderator that asks OpenAI's moderations API (or a server that speaks it)."""

    def __init__(
        self,
        model: str,
        *,
        client: UpstreamClient | None,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        actions: Mapping[str, Action] | None = None,
        timeout: float = 3.0,
    ) -> None:
        self.model = model
        self.url = base_url.rstrip("/") + "/moderations"
        self._own_client = client is None
        self._client = client if client is not None else UpstreamClient()
        self._headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._actions = dict(actions or {})
        self._timeout = timeout

    @property
    def name(self) -> str:
        return f"openai:{self.model} at {where(self.url)}"

    async def check(self, text: str, channel: Channel, conversation_id: str) -> Verdict:
        answer = await post_json(
            self._client,
            self.url,
            {"model": self.model, "input": text},
            time_limit=self._timeout,
            headers=self._headers,
        )
        return self.verdict(answer)

    def action_for(self, category: str) -> Action:
        """The configured action of a flagged category."""
        for name in (category, category.partition("/")[0], "*"):
            if name in self._actions:
                return self._actions[name]
        return "block"

    def verdict(self, answer: object) -> Verdict:
        """The verdict an answer of the moderations API gives; a failure for any other."""
        flagged, categories, scores = _result(answer)
        hits = [name for name, hit in categories.items() if hit]
        if flagged != bool(hits):
            raise ModerationFailedError("the moderation answer's flag contradicts its categories")
        if not hits:
            return Verdict("allow")
        by_action = {name: self.action_for(name) for name in hits}
        action = max(by_action.values(), key=_SEVERITY.__getitem__)
        if action == "allow":
            return Verdict("allow")
        chosen = [name for name in hits if by_action[name] == action]
        category = max(chosen, key=lambda name: (scores.get(name, 0.0), name))
        return Verdict(action, category)

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()


def _result(answer: object) -> tuple[bool, dict[str, bool], dict[str, float]]:
    """(flagged, categories, scores) of the one result; a failure for any other shape."""
    bad = ModerationFailedError("the moderation answer is not in the moderations API's format")
    if not isinstance(answer, dict):
        raise bad
    results = answer.get("results")
    if not isinstance(results, list) or len(results) != 1 or not isinstance(results[0], dict):
        raise bad
    result = results[0]
    flagged = result.get("flagged")
    raw_categories = result.get("categories")
    raw_scores = result.get("category_scores")
    if not isinstance(flagged, bool):
        raise bad
    if not isinstance(raw_categories, dict) or not isinstance(raw_scores, dict):
        raise bad
    categories: dict[str, bool] = {}
    for name, hit in raw_categories.items():
        if not CATEGORY_RE.match(name) or not (hit is None or isinstance(hit, bool)):
            raise bad
        categories[name] = bool(hit)
    scores: dict[str, float] = {}
    for name, score in raw_scores.items():
        if not CATEGORY_RE.match(name) or isinstance(score, bool):
            raise bad
        if not isinstance(score, int | float) or not 0.0 <= score <= 1.0:
            raise bad
        scores[name] = float(score)
    return flagged, categories, scores
