"""A pytest plugin that sends every test's upstream traffic through `StreamingTransport`.

The rule it keeps: the provider suite's expectations hold whichever transport carries the
bytes. Every `httpx.AsyncClient` made without its own transport (the one `providers/http.py`
makes when none is given, and the tests' own clients) gets a `StreamingTransport`, unless a
proxy variable applies, as in the application. Run the
suites through it with:

    .venv/bin/python -m pytest -p tests.providers.through_transport tests/providers tests/app
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from holdback.providers.transport import StreamingTransport
from holdback.providers.transport import proxies_configured as proxied


@pytest.fixture(autouse=True)
def _streaming_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    original = httpx.AsyncClient.__init__

    def init(self: httpx.AsyncClient, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("transport") is None and not kwargs.get("mounts") and not proxied():
            kwargs["transport"] = StreamingTransport()
        original(self, *args, **kwargs)

    monkeypatch.setattr(httpx.AsyncClient, "__init__", init)
