"""The admin console (`/admin.html`) in real Chromium, against a `--auth password` server.

The first user (an admin) signs in, follows the "Admin" link, creates a group, adds a member,
sets a policy level, previews it, creates an API token (its text shown once) and revokes it,
and finds each change in the audit; makes a term list, edits it, sees it mask the next chat
message without a restart, and deletes it. A member sees no link, and the console itself shows them
"Admins only" and nothing of the console. The oracle is the page's DOM, checked against the
server's own answers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.app.support import process_env, run_holdback
from tests.browser.canary_upstream import CanaryUpstream
from tests.browser.chat_page import open_chat, send
from tests.browser.chromium import NEEDS_CHROMIUM
from tests.browser.server_process import ServerProcess, start_server
from tests.browser.wire import WireTap

pytestmark = [pytest.mark.browser, pytest.mark.slow, NEEDS_CHROMIUM]

MARKUP = "<img src=x><i>ops</i>"
PASSWORDS = {"root": "root's long password", "mia": "mia's long password"}
# Made-up client names, in no canary file the server was started with.
CLIENTS = ("Initech Larkspur", "Umbrella Wrenfield")


@pytest.fixture(scope="module")
def team_server(
    tmp_path_factory: pytest.TempPathFactory, canary_upstream: CanaryUpstream
) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("admin-console")
    # In subprocesses: Playwright's sync API holds an event loop on this thread.
    env = process_env(root, {"HOLDBACK_DATA_DIR": str(root / "data")})
    for name, password in PASSWORDS.items():  # the first user is the admin
        done = run_holdback(["user", "add", name], env, stdin=password + "\n")
        assert done.returncode == 0, done.stderr
    server = start_server(root, canary_upstream.url, extra_args=("--auth", "password"))
    try:
        yield server
    finally:
        server.stop()


def signed_in(browser: Browser, server: ServerProcess, name: str) -> tuple[BrowserContext, Page]:
    ctx = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(15_000)
    page = ctx.new_page()
    page.goto("/")
    page.fill("#login-username", name)
    page.fill("#login-password", PASSWORDS[name])
    page.click("#login-submit")
    expect(page.get_by_test_id("connection-state")).to_have_text("connected")
    return ctx, page


def console_errors(page: Page) -> list[str]:
    """The page's console errors from now on (a CSP refusal would be one)."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return errors


def console_tab(ctx: BrowserContext, tab: str) -> tuple[Page, list[str]]:
    """A new page of the admin console, on `tab`, and its console errors."""
    page = ctx.new_page()
    errors = console_errors(page)
    page.goto("/admin.html")
    page.get_by_role("tab", name=tab).click()
    return page, errors


def test_an_admin_runs_the_team_from_the_console(
    browser: Browser, team_server: ServerProcess
) -> None:
    ctx, page = signed_in(browser, team_server, "root")
    errors = console_errors(page)
    try:
        link = page.get_by_test_id("admin-link")
        expect(link).to_be_visible()
        link.click()
        expect(page).to_have_url(f"{team_server.url}/admin.html")
        expect(page.get_by_test_id("admin-gate")).to_be_hidden()
        users = page.get_by_test_id("user-row")
        expect(users).to_have_count(2)
        expect(
            page.locator('[data-testid="user-row"][data-user="root"] [data-testid="user-role"]')
        ).to_have_text("admin")
        expect(
            page.locator('[data-testid="user-row"][data-user="mia"] [data-testid="user-state"]')
        ).to_have_text("active")

        # Groups: create one, add mia.
        page.get_by_role("tab", name="Groups").click()
        page.get_by_label("New group name").fill("support")
        page.get_by_role("button", name="Create group").click()
        group = page.locator('[data-testid="group-row"][data-group="support"]')
        expect(group).to_be_visible()
        group.get_by_label("User to add to support").select_option("mia")
        group.get_by_role("button", name="Add member to support").click()
        expect(group.locator('[data-testid="group-member"][data-user="mia"]')).to_be_visible()
        # A name is text, never markup.
        page.get_by_label("New group name").fill(MARKUP)
        page.get_by_role("button", name="Create group").click()
        expect(page.locator("#groups-body").get_by_text(MARKUP, exact=True)).to_be_visible()
        assert page.locator("#groups-body img, #groups-body i").count() == 0

        # Policies: e-mail addresses are labels for the group; the preview says so.
        page.get_by_role("tab", name="Policies").click()
        level = page.get_by_label("email level for group support")
        level.select_option("label")
        expect(page.get_by_test_id("admin-notice")).to_contain_text("email is label")
        expect(page.get_by_label("email level for group support")).to_have_value("label")
        page.get_by_label("Preview as").select_option("group:support")
        page.get_by_role("button", name="Preview", exact=True).click()
        email = page.locator('[data-testid="preview-row"][data-kind="email"]')
        expect(email.get_by_test_id("preview-level")).to_have_text("label")
        shown = email.get_by_test_id("preview-shown").inner_text()
        assert shown
        assert "ann.example@example.org" not in shown

        # API tokens: the text is shown once, never listed; then revoked.
        page.get_by_role("tab", name="API tokens").click()
        page.get_by_label("Token owner").select_option("mia")
        page.get_by_label("Token name").fill("ci")
        page.get_by_role("button", name="Create token").click()
        secret_box = page.get_by_test_id("token-secret")
        expect(secret_box).to_be_visible()
        secret = secret_box.inner_text()
        assert len(secret) >= 20
        row = page.get_by_test_id("token-row")
        expect(row).to_have_count(1)
        expect(row.get_by_test_id("token-status")).to_have_text("active")
        assert secret not in row.inner_text()
        page.get_by_role("button", name="Done").click()
        expect(page.get_by_test_id("token-secret-box")).to_be_hidden()
        row.get_by_role("button", name="Revoke ci (mia)").click()
        row.get_by_role("button", name="Confirm revoke").click()
        expect(row.get_by_test_id("token-status")).to_have_text("revoked")
        expect(row.locator("td").last).to_have_text("")
        assert secret not in page.content()

        # The audit holds each change; the CSV link follows the filters.
        page.get_by_role("tab", name="Audit").click()
        events = page.get_by_test_id("audit-row")
        for action, target in (
            ("group.create", "support"),
            ("group.member.add", "support mia"),
            ("policy.set", "support email label"),
            ("token.create", "mia "),
            ("token.revoke", "mia "),
        ):
            entry = page.locator(f'[data-testid="audit-row"][data-event="{action}"]')
            expect(entry.filter(has_text=target).first).to_be_visible()
        assert events.count() >= 6
        page.get_by_label("Audit user").fill("root")
        page.get_by_role("button", name="Apply filters").click()
        expect(page.get_by_test_id("audit-csv")).to_have_attribute(
            "href", "/api/audit?user=root&format=csv"
        )
        csv = ctx.request.get("/api/audit?user=root&format=csv")
        assert csv.ok
        assert csv.text().startswith("time,event,user")
        assert "token.revoke" in csv.text()
        assert secret not in csv.text()
        assert not errors, errors  # a CSP refusal would be one
    finally:
        ctx.close()


def test_an_admin_manages_users(browser: Browser, team_server: ServerProcess) -> None:
    ctx, page = signed_in(browser, team_server, "root")
    try:
        page.goto("/admin.html")
        for name in ("tess", "ugo"):
            page.get_by_label("New user name").fill(name)
            page.get_by_label("New user password").fill(f"{name}'s long password")
            page.get_by_role("button", name="Add user").click()
            expect(page.locator(f'[data-testid="user-row"][data-user="{name}"]')).to_be_visible()
        tess = page.locator('[data-testid="user-row"][data-user="tess"]')
        assert "null" not in page.locator("#users-body").inner_text()
        tess.get_by_role("button", name="Make admin tess").click()
        expect(tess.get_by_test_id("user-role")).to_have_text("admin")
        tess.get_by_role("button", name="Make member tess").click()
        expect(tess.get_by_test_id("user-role")).to_have_text("member")
        tess.get_by_role("button", name="Disable tess").click()
        expect(tess.get_by_test_id("user-state")).to_have_text("disabled")
        tess.get_by_role("button", name="Enable tess").click()
        expect(tess.get_by_test_id("user-state")).to_have_text("active")
        tess.get_by_role("button", name="Reset password of tess").click()
        tess.get_by_label("New password for tess").fill("tess's new password")
        tess.get_by_role("button", name="Set password").click()
        expect(page.get_by_test_id("admin-notice")).to_contain_text("tess's password is set")
        # Delete: a confirm step, then the conversations go to an admin, or are shredded.
        tess.get_by_role("button", name="Delete tess").click()
        tess.get_by_role("button", name="Cancel").click()
        expect(tess.get_by_role("button", name="Confirm delete")).to_have_count(0)
        tess.get_by_role("button", name="Delete tess").click()
        tess.get_by_label("Admin to receive tess's conversations").select_option("root")
        tess.get_by_role("button", name="Confirm delete").click()
        expect(tess).to_have_count(0)
        ugo = page.locator('[data-testid="user-row"][data-user="ugo"]')
        ugo.get_by_role("button", name="Delete ugo").click()
        ugo.get_by_label("Shred conversations", exact=False).check()
        ugo.get_by_role("button", name="Confirm delete").click()
        expect(ugo).to_have_count(0)
        page.get_by_role("tab", name="Audit").click()
        expect(page.get_by_text("tess (given to root)")).to_be_visible()
        expect(page.get_by_text("ugo (shredded)")).to_be_visible()
    finally:
        ctx.close()


def test_an_admin_edits_a_term_list_that_holds_at_once(
    browser: Browser, team_server: ServerProcess, canary_upstream: CanaryUpstream
) -> None:
    ctx, chat = signed_in(browser, team_server, "root")
    tap = WireTap().attach(chat)
    try:
        page, errors = console_tab(ctx, "Term lists")
        expect(page.get_by_test_id("term-form")).to_be_hidden()

        # New list: the kind follows the name; one term.
        page.get_by_role("button", name="New list").click()
        page.get_by_label("List name").fill("clients")
        expect(page.get_by_label("List kind")).to_have_value("clients")
        page.get_by_label("List purpose").select_option("sensitive")
        page.get_by_label("Terms, one per line").fill(f"{CLIENTS[0]}\n\n")
        expect(page.get_by_test_id("term-count")).to_have_text("1 term")
        page.get_by_role("button", name="Create list").click()
        expect(page.get_by_test_id("admin-notice")).to_contain_text("The list clients is saved")
        expect(page.get_by_test_id("term-form")).to_be_hidden()
        row = page.locator('[data-testid="term-row"][data-list="clients"]')
        expect(row.get_by_test_id("term-terms")).to_have_text("1")
        expect(row.get_by_test_id("term-kind")).to_have_text("clients")
        expect(row.get_by_test_id("term-purpose")).to_have_text("sensitive")
        assert CLIENTS[0] not in page.locator("#terms-body").inner_text()
        assert CLIENTS[0] not in page.get_by_test_id("admin-notice").inner_text()

        # Edit: the terms load into the box; Save replaces them.
        row.get_by_role("button", name="Edit clients").click()
        box = page.get_by_label("Terms, one per line")
        expect(box).to_have_value(CLIENTS[0])
        expect(page.get_by_label("List name")).not_to_be_editable()
        box.fill("\n".join(CLIENTS))
        page.get_by_role("button", name="Save list").click()
        expect(row.get_by_test_id("term-terms")).to_have_text("2")
        expect(page.get_by_label("Terms, one per line")).to_have_value("")

        # Too large for one request: the server's 413, said plainly; the list is unchanged.
        row.get_by_role("button", name="Edit clients").click()
        page.get_by_label("Terms, one per line").fill(
            "\n".join(f"Made-up Client {n:05d}" for n in range(1200))
        )
        page.get_by_role("button", name="Save list").click()
        error = page.get_by_test_id("admin-error")
        expect(error).to_contain_text("larger than this route accepts")
        expect(error).to_contain_text("holdback terms set clients FILE")
        expect(error).to_contain_text("body_too_large")
        page.get_by_role("button", name="Cancel").click()
        expect(page.get_by_test_id("term-form")).to_be_hidden()
        shown = ctx.request.get("/api/admin/term-lists/clients").json()
        assert shown["terms"] == list(CLIENTS)

        # The list holds for the next chat message, without a restart.
        open_chat(chat)
        send(chat, f"Book a call with {CLIENTS[1]} and {CLIENTS[0]} on Friday.")
        tap.wait_for(chat, lambda: bool(tap.of_type("message_accepted")), "message_accepted")
        accepted = tap.of_type("message_accepted")[-1]
        assert [m["kind"] for m in accepted["masked"]] == ["clients", "clients"]
        tap.wait_for(chat, lambda: bool(tap.of_type("assistant_done")), "assistant_done")
        sent = b"".join(canary_upstream.bodies()).decode("utf-8")
        assert "<CLIENTS_1>" in sent
        assert not any(term in sent for term in CLIENTS)

        # Delete: a confirm step first.
        row.get_by_role("button", name="Delete list clients").click()
        row.get_by_role("button", name="Cancel").click()
        expect(row.get_by_role("button", name="Confirm delete")).to_have_count(0)
        row.get_by_role("button", name="Delete list clients").click()
        row.get_by_role("button", name="Confirm delete").click()
        expect(row).to_have_count(0)
        expect(page.get_by_test_id("admin-notice")).to_contain_text("The list clients is deleted")
        assert ctx.request.get("/api/admin/term-lists/clients").status == 404
        assert not [e for e in errors if "413" not in e], errors  # a CSP refusal would be one
    finally:
        ctx.close()


def test_someone_signed_out_is_sent_to_sign_in(
    browser: Browser, team_server: ServerProcess
) -> None:
    ctx = browser.new_context(base_url=team_server.url)
    try:
        page = ctx.new_page()
        page.goto("/admin.html")
        expect(page.get_by_test_id("admin-gate")).to_contain_text("Sign in first")
        expect(page.locator("#console")).to_be_hidden()
    finally:
        ctx.close()


def test_a_member_is_refused(browser: Browser, team_server: ServerProcess) -> None:
    ctx, page = signed_in(browser, team_server, "mia")
    try:
        expect(page.get_by_test_id("admin-link")).to_be_hidden()
        page.goto("/admin.html")
        expect(page.get_by_test_id("admin-gate")).to_contain_text("Admins only")
        expect(page.locator("#console")).to_be_hidden()
        assert page.locator("[data-testid=user-row]").count() == 0
        assert "root" not in page.locator("body").inner_text()
    finally:
        ctx.close()


def test_the_console_follows_the_chosen_theme(browser: Browser, team_server: ServerProcess) -> None:
    ctx = browser.new_context(base_url=team_server.url)
    try:
        page = ctx.new_page()
        page.goto("/admin.html")
        expect(page.locator("html")).not_to_have_attribute("data-theme", "dark")
        page.evaluate("() => localStorage.setItem('holdback-theme', 'dark')")
        page.reload()
        expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    finally:
        ctx.close()
