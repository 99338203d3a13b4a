"""Term lists kept in the database take effect for new messages without a restart.

The rules:
- The detectors come from the settings and the store's term lists (`detectors_for`, the one
  place they are built): a sensitive list adds a dictionary of its kind, every forbidden list
  goes into the forbidden matcher; a team's `--patterns` and `--people` files add their
  detectors (`team_detectors`, loaded once per change of the file). `--sensitive-terms` and
  `--forbidden-terms` files are saved into the store at start, so they are lists like any
  other (and a file wins at the next start over an edit made to its list since).
- A change made here (`reload`, after an admin's edit) holds at once; one made elsewhere (the
  command line, another server) within `POLL_SECONDS`, by a cheap look at the lists' count
  and last change. New messages use the new detectors; a reply under way keeps its own.
- A reload that fails keeps the detectors in use, and is logged by type: a list that cannot
  be read never leaves the server screening with less than it had.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from holdback.app.settings import Settings
from holdback.app.team_detectors import team_detectors
from holdback.detect import DetectorSet, TermMatcher
from holdback.errors import HoldbackError, describe
from holdback.store.records import TermList
from holdback.store.repository import Store
from holdback.stream import forbidden_matcher

log = logging.getLogger("holdback.terms")
POLL_SECONDS = 2.0


def detectors_for(
    settings: Settings, lists: Sequence[TermList]
) -> tuple[DetectorSet, TermMatcher | None]:
    dictionaries: dict[str, list[str]] = {}
    forbidden_terms: list[str] = []
    for term_list in lists:
        if term_list.purpose == "sensitive":
            dictionaries.setdefault(term_list.kind, []).extend(term_list.terms)
        else:
            forbidden_terms.extend(term_list.terms)
    detectors = DetectorSet.from_config(
        dictionaries,
        phone_region=settings.phone_region,
        phone_regions=settings.phone_regions,
        entropy_secrets=settings.entropy_secrets,
        extra=team_detectors(settings.patterns_file, settings.people_file),
    )
    return detectors, forbidden_matcher(forbidden_terms) if forbidden_terms else None


class TermLists:
    """Keeps the chat service's detectors in step with the store's term lists."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        use: Callable[[DetectorSet, TermMatcher | None], None],
        *,
        version: tuple[int, str] | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._use = use  # ChatService.use_terms
        self._version = version  # of the lists the service uses now
        self._task: asyncio.Task[None] | None = None
        self.reloads = 0
        self._reloaded: asyncio.Event | None = None

    async def reload(self) -> None:
        """Read the lists now and use them for new messages."""
        version = await self._store.term_lists_version()
        lists = await self._store.load_term_lists()
        detectors, forbidden = detectors_for(self._settings, lists)
        self._use(detectors, forbidden)
        self._version = version
        self.reloads += 1
        if self._reloaded is not None:
            self._reloaded.set()

    async def until_reloads(self, reloads: int) -> None:
        """Return once `reloads` reloads were done (for tests)."""
        while self.reloads < reloads:
            self._reloaded = event = asyncio.Event()
            await event.wait()

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="holdback-term-lists")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                if await self._store.term_lists_version() != self._version:
                    await self.reload()
                    log.info("term lists changed: new messages use them")
            except (HoldbackError, OSError) as exc:
                log.warning("could not reload the term lists: %s", describe(exc))
