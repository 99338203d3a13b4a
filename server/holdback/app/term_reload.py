"""Term lists kept in the database take effect for new messages without a restart.

The rules:
- The detectors come from the settings, the store's term lists and its pattern sets and
  people lists (`detectors_for`, the one place they are built): a sensitive list adds a
  dictionary of its kind, every forbidden list goes into the forbidden matcher; a team's
  `--patterns` and `--people` files and the stored sets and lists add their detectors
  (`team_detectors`, compiled once per change of a file or an entry). `--sensitive-terms` and
  `--forbidden-terms` files are saved into the store at start, so they are lists like any
  other (and a file wins at the next start over an edit made to its list since).
- A change made here (`reload`, after an admin's edit) holds at once; one made elsewhere (the
  command line, another server) within `POLL_SECONDS`, by a cheap look at the count and last
  change of the lists, sets and people lists. New messages use the new detectors; a reply under
  way keeps its own. The detectors are built on a worker thread: a large people list does not
  stall the event loop.
- A reload that fails keeps the detectors in use, and is logged by type: a list that cannot
  be read never leaves the server screening with less than it had.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TypeAlias

from holdback.app.settings import Settings
from holdback.app.team_detectors import team_detectors
from holdback.detect import DetectorSet, TermMatcher
from holdback.errors import HoldbackError, describe
from holdback.store.records import TermList
from holdback.store.repository import Store
from holdback.store.team_detectors import TeamDetector
from holdback.stream import forbidden_matcher

log = logging.getLogger("holdback.terms")
POLL_SECONDS = 2.0
Version: TypeAlias = tuple[object, ...]  # of the term lists, and of the team's detectors


def detectors_for(
    settings: Settings, lists: Sequence[TermList], team: Sequence[TeamDetector] = ()
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
        extra=team_detectors(settings.patterns_file, settings.people_file, team),
    )
    return detectors, forbidden_matcher(forbidden_terms) if forbidden_terms else None


async def sources_version(store: Store) -> Version:
    """A cheap look that changes with any change to a term list, pattern set or people list."""
    return (await store.term_lists_version(), await store.team_detectors_version())


async def current(
    settings: Settings, store: Store
) -> tuple[Version, DetectorSet, TermMatcher | None]:
    """The store's version and the detectors it makes now (the version read first, so a change
    made while they are built is seen by the next look)."""
    version = await sources_version(store)
    lists = await store.load_term_lists()
    team = await store.load_team_detectors()
    detectors, forbidden = await asyncio.to_thread(detectors_for, settings, lists, team)
    return version, detectors, forbidden


class TermLists:
    """Keeps the chat service's detectors in step with the store's term lists."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        use: Callable[[DetectorSet, TermMatcher | None], None],
        *,
        version: Version | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._use = use  # ChatService.use_terms
        self._version = version  # of the lists the service uses now
        self._task: asyncio.Task[None] | None = None
        self.reloads = 0
        self._reloaded: asyncio.Event | None = None
        # One reload at a time: one that started earlier never replaces a later one's lists.
        self._reloading = asyncio.Lock()

    async def reload(self) -> None:
        """Read the lists now and use them for new messages."""
        async with self._reloading:
            version, detectors, forbidden = await current(self._settings, self._store)
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
                if await sources_version(self._store) != self._version:
                    await self.reload()
                    log.info("term lists or team detectors changed: new messages use them")
            except (HoldbackError, OSError) as exc:
                log.warning("could not reload the term lists: %s", describe(exc))
