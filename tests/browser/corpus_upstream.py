"""The fake model of the browser corpus run: it plays the adversarial case a test has set.

The rule it keeps: the upstream sends exactly the bytes the corpus renders for the current case
(`tests.adversarial.cases.render`), to every request until the next case is set, so a retried
request sees the same answer and a run depends on nothing but the case, its chunking and seed.
"""

from __future__ import annotations

import threading

from tests.adversarial.cases import Case, Chunking, Wire, render
from tests.providers.fakeserver import FakeUpstream, RecordedRequest, Reply


class CorpusUpstream(FakeUpstream):
    """Answers every request with the wire of the case last given to `play`."""

    def __init__(self) -> None:
        super().__init__()
        self._wire: Wire | None = None
        self._case_lock = threading.Lock()

    def play(self, case: Case, chunking: Chunking) -> None:
        wire = render(case.script, chunking, case.seed)
        with self._case_lock:
            self._wire = wire

    def reply_for(self, request: RecordedRequest) -> Reply:
        with self._case_lock:
            wire = self._wire
        if wire is None:
            return Reply(status=500, chunks=[b'{"error": "no case is playing"}'], headers={})
        return Reply(
            status=wire.status, chunks=wire.chunks, headers={"content-type": wire.content_type}
        )
