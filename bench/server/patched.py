"""`holdback` with the fix the profile asked for, applied from outside, to measure it.

The rule it keeps: this is holdback's own CLI and code, unchanged except for one documented
difference, so "holdback-fixed" figures measure exactly that difference and nothing else.
The benchmark does not own the server's code; the lead applies the real fix there.

The difference: the upstream provider gets one shared `httpx.AsyncClient` for the process's
lifetime (a connection pool without a cap, since every open reply holds one connection), instead
of a new client per reply. A new client builds a new TLS context (`ssl.create_default_context`
loads the CA bundle) and opens a new TCP connection for every reply; under load the profile
showed about 30 % of the server's samples there.

Run: `python -m server.patched serve ...` (the same arguments as `holdback serve`).
"""

from __future__ import annotations

from typing import Any

import httpx

from holdback import cli
from holdback.app import application
from holdback.providers.base import Provider
from holdback.providers.registry import make_provider


def make_provider_with_shared_client(spec: str, **kwargs: Any) -> Provider:
    if kwargs.get("client") is None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        kwargs["client"] = httpx.AsyncClient(limits=limits)
    return make_provider(spec, **kwargs)


# `application` looks the name up at call time, so rebinding it there is enough.
setattr(application, "make_provider", make_provider_with_shared_client)  # noqa: B010

if __name__ == "__main__":
    raise SystemExit(cli.main())
