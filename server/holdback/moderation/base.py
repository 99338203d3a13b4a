"""The moderator interface: one window of screened, tokenized reply text in, one verdict out.

The rules:
- A window reaches a moderator tokenized, as the model saw it: never an original value.
- A verdict is `allow`, `block` (stop the reply, `blocked`, with the category) or `withhold`
  (replace the window with `[withheld by policy: <category>]` and go on). A category is a
  short name from a closed shape (`CATEGORY_RE`); anything else the moderator sends is refused.
- Any other answer, an error or a timeout is a failure (`ModerationFailedError`, wire code
  `moderation_failed`): the reply stops, and no unverified text follows. Never "probably fine".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from holdback.errors import HoldbackError

Action: TypeAlias = Literal["allow", "block", "withhold"]
ACTIONS: tuple[Action, ...] = ("allow", "block", "withhold")
Channel: TypeAlias = Literal["content", "reasoning", "tool_call"]
CATEGORY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,63}\Z")


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    category: str | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ModerationFailedError("a verdict's action is allow, block or withhold")
        if self.category is not None and not CATEGORY_RE.match(self.category):
            raise ModerationFailedError("a verdict's category is a short name")


ALLOW = Verdict("allow")


class ModerationFailedError(HoldbackError):
    """A moderator timed out, failed or answered something that is not a verdict."""

    code = "moderation_failed"


class ModerationUnavailableError(ModerationFailedError):
    """The moderator could not be reached, dropped the connection or answered 5xx (or 429):
    the same check may work if asked again (`calls.ModerationCalls` retries it, bounded). A
    malformed answer is never this: asking again would not make it a verdict."""


class Moderator(Protocol):
    """One moderation backend (`off` has none). `check` raises `ModerationFailedError` on any
    failure; the caller bounds its time, retries and concurrency (`calls.ModerationCalls`)."""

    async def check(self, text: str, channel: Channel, conversation_id: str) -> Verdict: ...

    async def aclose(self) -> None: ...
