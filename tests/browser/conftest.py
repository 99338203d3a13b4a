"""Fixtures for the browser tests: one fake model, one real server, one real Chromium.

The rule it keeps: everything is real and on loopback (uvicorn via `holdback serve`, Debian's
Chromium driven by Playwright's sync API, an SSE model server), started once per session to
keep the suite fast, and everything opened is closed again, so pytest's `filterwarnings =
error` never sees a leaked resource. Without /usr/bin/chromium every test module skips itself
(`NEEDS_CHROMIUM`) with the reason shown.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from tests.browser.canary_upstream import CanaryUpstream, running_canary_upstream
from tests.browser.chromium import CHROMIUM, CHROMIUM_ARGS
from tests.browser.server_process import ServerProcess, start_server
from tests.browser.wire import WireTap

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "test-artifacts"


@pytest.fixture(scope="package")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="package")
def canary_upstream() -> Iterator[CanaryUpstream]:
    with running_canary_upstream() as server:
        yield server


@pytest.fixture(scope="package")
def holdback_server(
    tmp_path_factory: pytest.TempPathFactory, canary_upstream: CanaryUpstream
) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("holdback"), canary_upstream.url)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=list(CHROMIUM_ARGS)
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def context(browser: Browser, holdback_server: ServerProcess) -> Iterator[BrowserContext]:
    ctx = browser.new_context(base_url=holdback_server.url, viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(15_000)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()


@pytest.fixture
def tap(page: Page) -> WireTap:
    """Frames of `page`, captured from before its first navigation."""
    return WireTap().attach(page)
