"""What a running server holds: settings, the store, the chat service and the authenticator.

Built once in the application's lifespan and kept on `app.state.runtime`; routes read it there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from holdback.app.auth import Authenticator
from holdback.app.pipeline import ChatService
from holdback.app.settings import Settings
from holdback.detect import DetectorSet, TermMatcher
from holdback.moderation.calls import ModerationCalls
from holdback.providers.transport import UpstreamClient
from holdback.store.repository import Store

if TYPE_CHECKING:
    from holdback.app.term_reload import TermLists


@dataclass(slots=True)
class Runtime:
    settings: Settings
    store: Store
    service: ChatService
    auth: Authenticator
    web_dir: Path
    http: UpstreamClient | None = None  # the upstream connection pool
    terms: TermLists | None = None  # keeps the detectors in step with the stored term lists
    moderation: ModerationCalls | None = None  # policy moderation (`--moderation`); None: off

    @property
    def detectors(self) -> DetectorSet:
        """The detectors new messages are read with (they follow the term lists)."""
        return self.service.detectors

    @property
    def forbidden(self) -> TermMatcher | None:
        return self.service.forbidden
