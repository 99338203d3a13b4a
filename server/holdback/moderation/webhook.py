"""`http:<url>`: a JSON webhook, so a team can plug in Llama Guard, a vLLM classifier or
their own service. The contract is exact, and anything else is a failure.

- request: `POST <url>`, `content-type: application/json`, body
  `{"text": <window, tokenized>, "channel": "content" | "reasoning" | "tool_call",
  "conversation_id": <id>}`; with `HOLDBACK_MODERATION_TOKEN` set, also
  `Authorization: Bearer <token>`;
- response: status `200`, a JSON media type, body `{"action": "allow" | "block" |
  "withhold", "category": <string>}`, where `category` is optional (absent or `null`) and,
  when given, a short name (`CATEGORY_RE`: a letter or digit, then up to 63 of letters,
  digits, `_ . / -`);
- a failure: any other status, a body that is not JSON or not an object, another key, a key
  of another type, an unknown action, a category of another shape, a body over 16 KiB. A
  `5xx` or `429`, a refused or dropped connection and a timeout may be asked again
  (`ModerationUnavailableError`); the rest may not.

The URL is `http://` or `https://` with a host (loopback is fine: a classifier beside the
server), and carries no user name or password (use the token) and no fragment.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from holdback.errors import ConfigurationError
from holdback.moderation.base import (
    ACTIONS,
    CATEGORY_RE,
    Channel,
    ModerationFailedError,
    Verdict,
)
from holdback.moderation.upstream import post_json, where
from holdback.providers.transport import UpstreamClient

TOKEN_VARIABLE = "HOLDBACK_MODERATION_TOKEN"
MAX_ANSWER_BYTES = 16 * 1024
_KEYS = frozenset({"action", "category"})


class InvalidWebhookURLError(ConfigurationError):
    """An `http:<url>` moderator's URL is not one holdback will post windows to."""


def check_url(url: str) -> str:
    """`url` if a webhook may be posted to it; else an `InvalidWebhookURLError` saying why."""
    usage = "--moderation http:<url> needs an http:// or https:// URL with a host"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidWebhookURLError(f"{usage}; this one does not parse") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidWebhookURLError(usage)
    if parts.username is not None or parts.password is not None:
        raise InvalidWebhookURLError(
            f"{usage} and no user name or password in it (set {TOKEN_VARIABLE} instead)"
        )
    if parts.fragment or url.endswith("#"):
        raise InvalidWebhookURLError(f"{usage} and no #fragment")
    if any(c.isspace() for c in url) or (port is not None and port == 0):
        raise InvalidWebhookURLError(f"{usage}, no spaces and a port above 0")
    return url


class WebhookModerator:
    """A moderator that asks a team's own service, by the contract above."""

    def __init__(
        self,
        url: str,
        *,
        client: UpstreamClient | None,
        token: str | None = None,
        timeout: float = 3.0,
    ) -> None:
        self.url = check_url(url)
        self._own_client = client is None
        self._client = client if client is not None else UpstreamClient()
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout

    @property
    def name(self) -> str:
        return f"http:{where(self.url)}"

    async def check(self, text: str, channel: Channel, conversation_id: str) -> Verdict:
        answer = await post_json(
            self._client,
            self.url,
            {"text": text, "channel": channel, "conversation_id": conversation_id},
            time_limit=self._timeout,
            headers=self._headers,
            max_bytes=MAX_ANSWER_BYTES,
        )
        return verdict(answer)

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()


def verdict(answer: object) -> Verdict:
    """The verdict of a webhook's answer; a failure for anything the contract does not name."""
    bad = ModerationFailedError("the webhook's answer does not keep the moderation contract")
    if not isinstance(answer, dict) or not answer.keys() <= _KEYS:
        raise bad
    action = answer.get("action")
    category = answer.get("category")
    if not isinstance(action, str) or action not in ACTIONS:
        raise bad
    if category is not None and (not isinstance(category, str) or not CATEGORY_RE.match(category)):
        raise bad
    return Verdict(action, category)
