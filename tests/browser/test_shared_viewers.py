"""Two people, one live reply, in real Chromium: the owner and a viewer it is shared with.

The owner sends a message with an e-mail address and a phone number; while the reply streams,
the conversation is shared read-only with bob, whose organisation policy shows e-mail
addresses masked and everything else as labels. bob opens the conversation and watches the
reply live. Every raw frame bob's page received, and every text and attribute it rendered,
must hold neither value; the owner's page must show both, exactly. The oracle is plain
substring search over what Playwright recorded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from holdback.store import Store
from holdback.store.crypto import load_vault_key
from tests.app.support import process_env, run_holdback
from tests.browser.canary_upstream import CanaryUpstream
from tests.browser.chat_page import assistant_message, send
from tests.browser.server_process import ServerProcess, start_server
from tests.browser.wire import WireTap

pytestmark = [pytest.mark.browser, pytest.mark.slow]

EMAIL = "ann.viewcanary@example.org"
PHONE = "+1 415 555 0193"
PASSWORDS = {"alice": "alice's long password", "bob": "bob's long password"}


@pytest.fixture(scope="module")
def team_server(
    tmp_path_factory: pytest.TempPathFactory, canary_upstream: CanaryUpstream
) -> Iterator[tuple[ServerProcess, Path]]:
    root = tmp_path_factory.mktemp("team")
    data = root / "data"
    # In subprocesses: Playwright's sync API holds an event loop on this thread.
    env = process_env(root, {"HOLDBACK_DATA_DIR": str(data)})
    for name, password in PASSWORDS.items():
        done = run_holdback(["user", "add", name], env, stdin=password + "\n")
        assert done.returncode == 0, done.stderr
    done = run_holdback(["policy", "set", "--default", "email", "masked"], env)
    assert done.returncode == 0, done.stderr
    server = start_server(root, canary_upstream.url, extra_args=("--auth", "password"))
    try:
        yield server, data
    finally:
        server.stop()


def signed_in(
    browser: Browser, server: ServerProcess, name: str
) -> tuple[BrowserContext, Page, WireTap]:
    ctx = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(15_000)
    page = ctx.new_page()
    tap = WireTap().attach(page)
    page.goto("/")
    page.fill("#login-username", name)
    page.fill("#login-password", PASSWORDS[name])
    page.click("#login-submit")
    expect(page.get_by_test_id("connection-state")).to_have_text("connected")
    return ctx, page, tap


def share_with_bob(data: Path, conversation_id: str) -> None:
    async def run() -> None:
        store = await Store.open(
            f"sqlite+aiosqlite:///{data / 'holdback.db'}",
            vault_key=load_vault_key(data, {}, create=False),
            migrate=False,
        )
        try:
            users = {u.name: u for u in await store.list_users()}
            await store.share(conversation_id, users["alice"].id, user="bob", access="read")
        finally:
            await store.close()

    # Playwright's sync API holds an event loop on this thread: the store runs on another.
    failures: list[BaseException] = []

    def thread() -> None:
        try:
            asyncio.run(run())
        except BaseException as exc:  # reported below, on the test's thread
            failures.append(exc)

    worker = threading.Thread(target=thread)
    worker.start()
    worker.join(30)
    assert not failures, failures


def everything_rendered(page: Page) -> str:
    """The page's text and every attribute value, as the browser holds them."""
    shown: str = page.evaluate(
        """() => {
          const parts = [document.body.innerText];
          for (const el of document.querySelectorAll('*'))
            for (const a of el.attributes) parts.push(a.value);
          return parts.join('\\n');
        }"""
    )
    return shown + "\n" + page.url


def test_a_restricted_viewer_never_receives_the_owners_values(
    browser: Browser, team_server: tuple[ServerProcess, Path]
) -> None:
    server, data = team_server
    a_ctx, owner, owner_tap = signed_in(browser, server, "alice")
    b_ctx, viewer, viewer_tap = signed_in(browser, server, "bob")
    try:
        send(owner, f"canary:slow:6 Please mail {EMAIL} or call {PHONE} about the plan.")
        owner_tap.wait_for(owner, lambda: bool(owner_tap.of_type("assistant_start")), "start")
        chat = str(owner_tap.of_type("message_accepted")[0]["conversation_id"])
        share_with_bob(data, chat)
        viewer.goto(f"/#/c/{chat}")
        viewer_tap.wait_for(
            viewer, lambda: bool(viewer_tap.of_type("assistant_done")), "bob's reply", 30
        )
        owner_tap.wait_for(
            owner, lambda: bool(owner_tap.of_type("assistant_done")), "alice's reply", 30
        )
        message_id = str(owner_tap.of_type("assistant_done")[0]["message_id"])
        expect(assistant_message(viewer, message_id)).to_have_attribute("data-status", "complete")
        expect(assistant_message(owner, message_id)).to_have_attribute("data-status", "complete")
        watched: list[dict[str, Any]] = viewer_tap.received_json()
        assert any(f.get("type") == "assistant_delta" for f in watched)
        raw = "\n".join(f.payload for f in viewer_tap.frames)
        rendered = everything_rendered(viewer)
        for spelling in (EMAIL, PHONE, "viewcanary", "555 0193"):
            assert spelling not in raw
            assert spelling not in rendered
        assert "a\u2022\u2022\u2022@example.org" in rendered
        assert "[phone number]" in rendered
        mine = everything_rendered(owner)
        assert EMAIL in mine
        assert PHONE in mine
    finally:
        a_ctx.close()
        b_ctx.close()
