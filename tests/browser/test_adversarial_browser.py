"""The adversarial corpus in real Chromium: what the browser shows is what the guard screened.

The rule these tests keep (issue #13): for a subset of the corpus that covers every category
(and all of `url_restore`), in `redact` and in `block` guard mode, a real `holdback serve`
streams the case's scripted upstream reply to the chat page, and then
- no received WebSocket frame, in any form the client decodes, holds a forbidden value (judged
  by the independent oracle, `tests.adversarial.oracle`; the user's own tokens in
  `message_accepted.masked[].token` are the one exception, by design), nor a URL holding one of
  the case's `url_forbidden` values (the user's own email and term);
- the rendered page, `document.body.textContent` and the tooltips of the reply, holds no
  forbidden value and shows no URL holding a `url_forbidden` value;
- no `href` or `src` attribute in the document (as written, as the browser resolved it, and
  percent-decoded) holds a forbidden or `url_forbidden` value;
- the page fetched nothing from another origin and shows no image from the reply;
- in `redact` mode the benign text (`must_show`) is shown.
Failures are real leaks (or a page that does not show what the server sent), not harness
faults: the harness checks that it saw the reply (frames, `message_accepted`, the final status
on the page) before it judges anything.

Each case gets a fresh page and a fresh conversation, so its tokens are the corpus's
(`<CLIENTS_1>`, `<EMAIL_1>`); the upstream is cut by the corpus's `random` chunking with the
case's seed. Waits poll the captured frames, or the page at every animation frame
(`wait_for_function`); nothing sleeps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page

from tests.adversarial import oracle
from tests.adversarial.cases import CASES, CATEGORIES, Case, write_terms
from tests.browser.chromium import NEEDS_CHROMIUM
from tests.browser.corpus_upstream import CorpusUpstream
from tests.browser.server_process import ServerProcess, start_server
from tests.browser.wire import WireTap

pytestmark = [pytest.mark.browser, NEEDS_CHROMIUM]

MODES = ("redact", "block")
REPLY_TIMEOUT = 20.0

# Every category, the cases most about rendering (entities, escapes, emphasis, code, links)
# weighted up; HTTP errors the server would retry with back-off (429, 5xx) are left to the
# server tier, which runs the whole corpus.
SUBSET: tuple[str, ...] = (
    # fields
    "http400_card",
    "http401_phone",
    "http404_forbidden_host",
    "http422_detail",
    "midstream_error_email",
    "finish_reason_email",
    "finish_reason_markup",
    "tool_id_email",
    "tool_name_email",
    # tool_names
    "tool_name_html",
    "tool_name_bidi_override",
    "tool_name_zero_width_email",
    # json_escapes
    "json_at_escaped",
    "json_surrogate_bold_letters",
    "json_user_token_escaped",
    # markdown_entities
    "md_decimal_at",
    "md_named_at",
    "md_escaped_at",
    "md_bold_local",
    "md_underscore_emphasis",
    "md_code_local",
    "md_strike_local",
    "md_all_entities_email",
    "md_entity_card_all",
    # invisible_lookalike
    "inv_zwsp_local",
    "inv_fullwidth_email",
    "inv_bidi_controls",
    "inv_soft_hyphen_domain",
    "inv_nbsp_card",
    # neighbours
    "nb_angle_brackets",
    "nb_mailto_link",
    "nb_table_cell",
    "nb_code_fence",
    "nb_square_brackets",
    # forbidden_terms
    "term_bold_part",
    "term_entity_letter",
    "term_escaped_dots_host",
    "term_code_part",
    # glued
    "glued_email_domain",
    "glued_entity_token",
    "glued_code_span",
    "glued_url_password",
    "glued_user_email_literal",
    # invented_tokens
    "invented_angle",
    "invented_entity",
    "invented_markdown_escaped",
    "invented_user_token_cut_off",
    "invented_in_reasoning",
    # url_restore: all of them
    *(c.name for c in CASES if c.category == "url_restore"),
    # window
    "window_card_at_250",
    "window_email_at_edge",
    "key_pkcs8",
    # reasoning
    "reasoning_entity_email",
    "reasoning_bold_email",
    "reasoning_invented_token",
)

_BY_NAME = {c.name: c for c in CASES}
BROWSER_CASES: list[Case] = [_BY_NAME[name] for name in dict.fromkeys(SUBSET)]

# What the page shows and links to, read after the reply has rendered. The user's own message
# footer ("the model saw <EMAIL_1>") shows their tokens by design, like `masked[].token`.
PAGE_STATE_JS = """() => {
  const body = document.body.cloneNode(true);
  for (const note of body.querySelectorAll('[data-role="user"] .privacy-note')) note.remove();
  const urls = [];
  for (const el of document.querySelectorAll('[href], [src]')) {
    for (const name of ['href', 'src']) {
      const raw = el.getAttribute(name);
      if (raw === null) continue;
      urls.push(raw);
      if (typeof el[name] === 'string') urls.push(el[name]);
    }
  }
  const tooltips = [...document.querySelectorAll('[data-role="assistant"] [title]')]
    .map((el) => el.getAttribute('title'));
  return {
    text: body.textContent,
    urls,
    tooltips,
    images: document.querySelectorAll('[data-testid="message"] img, img[src]').length,
  };
}"""


@dataclass
class CorpusServer:
    mode: str
    server: ServerProcess
    upstream: CorpusUpstream
    context: BrowserContext


@pytest.fixture(scope="module", params=MODES)
def corpus_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, browser: Browser
) -> Iterator[CorpusServer]:
    mode: str = request.param
    root = tmp_path_factory.mktemp(f"corpus-{mode}")
    sensitive, forbidden = write_terms(root / "terms")
    upstream = CorpusUpstream()
    upstream.start()
    try:
        server = start_server(
            root,
            upstream.url,
            terms=([sensitive], [forbidden]),
            extra_args=("--guard-mode", mode),
        )
        try:
            context = browser.new_context(base_url=server.url)
            context.set_default_timeout(REPLY_TIMEOUT * 1000)
            try:
                yield CorpusServer(mode, server, upstream, context)
            finally:
                context.close()
        finally:
            server.stop()
    finally:
        upstream.stop()


def test_the_subset_covers_every_category() -> None:
    assert len(BROWSER_CASES) >= 30
    assert {c.category for c in BROWSER_CASES} == set(CATEGORIES)
    url_cases = [c for c in BROWSER_CASES if c.category == "url_restore"]
    assert url_cases
    assert all(c.url_forbidden for c in url_cases)


# -- one case ---------------------------------------------------------------------------------


def without_masked_tokens(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The frames minus `message_accepted.masked[].token`, the one field a token belongs in."""
    out = []
    for frame in frames:
        if frame.get("type") == "message_accepted":
            masked = [{k: v for k, v in m.items() if k != "token"} for m in frame.get("masked", [])]
            frame = {**frame, "masked": masked}
        out.append(frame)
    return out


def url_views(urls: list[str]) -> list[str]:
    """Each URL as written, and percent-decoded once and twice."""
    views: list[str] = []
    for url in urls:
        views += [url, unquote(url), unquote(unquote(url))]
    return list(dict.fromkeys(views))


def reply_ended(tap: WireTap) -> bool:
    frames = tap.received_json()
    return any(
        f.get("type") == "assistant_done" or (f.get("type") == "error" and not f.get("message_id"))
        for f in frames
    )


def wait_for_page(page: Page, condition: str, arg: object = None) -> None:
    """Until a page condition holds, checked at every animation frame (`expect` backs off to a
    second between checks, which a run of a hundred and forty cases would feel)."""
    page.wait_for_function(condition, arg=arg, polling="raf", timeout=REPLY_TIMEOUT * 1000)


def open_page(page: Page) -> None:
    page.goto("/")
    wait_for_page(
        page,
        "() => document.querySelector('[data-testid=\"connection-state\"]')"
        "?.textContent === 'connected'",
    )


def send_message(page: Page, text: str) -> None:
    box = page.get_by_label("Message", exact=True)
    box.fill(text)
    wait_for_page(page, "() => !document.querySelector('button[aria-label=\"Send\"]').disabled")
    box.press("Enter")


def wait_until_shown(page: Page, tap: WireTap) -> None:
    """Until the page shows the end of the reply (its final status, or the refusal)."""
    tap.wait_for(page, lambda: reply_ended(tap), "the end of the reply", REPLY_TIMEOUT)
    done = tap.of_type("assistant_done")
    if done:
        selector = (
            '[data-testid="message"][data-role="assistant"]'
            f'[data-message-id="{done[0]["message_id"]}"][data-status="{done[0]["status"]}"]'
        )
    else:
        selector = '[data-testid="message-error"], [data-testid="toast"]'
    wait_for_page(page, "(selector) => document.querySelector(selector) !== null", selector)


def run_case(corpus: CorpusServer, case: Case) -> list[str]:
    """Play one case in a fresh page; every finding, described."""
    origin = corpus.server.url
    page = corpus.context.new_page()
    try:
        requested: list[str] = []
        page.on("request", lambda r: requested.append(r.url))
        tap = WireTap().attach(page)
        open_page(page)
        corpus.upstream.play(case, "random")
        calls = len(corpus.upstream.requests)
        send_message(page, case.user_text)
        wait_until_shown(page, tap)
        state: dict[str, Any] = page.evaluate(PAGE_STATE_JS)
    finally:
        page.close()

    frames = tap.received_json()
    assert frames, "no frame was captured: the checks would prove nothing"
    assert any(f.get("type") == "message_accepted" for f in frames), frames
    assert len(corpus.upstream.requests) > calls, f"the upstream was never called: {frames}"

    problems: list[str] = []
    if leaked := oracle.find_leaks(without_masked_tokens(frames), case.forbidden):
        problems.append(f"on the wire: {leaked}")
    if in_urls := oracle.find_url_leaks(frames, case.url_forbidden):
        problems.append(f"inside a URL on the wire: {in_urls}")

    shown = [state["text"], *state["tooltips"]]
    if leaked := oracle.leaks_in(shown, case.forbidden):
        problems.append(f"shown on the page: {leaked}")
    shown_in_urls = {v for text in shown for v in oracle.values_in_urls(text, case.url_forbidden)}
    if shown_in_urls:
        problems.append(f"shown inside a URL on the page: {sorted(shown_in_urls)}")
    if in_attrs := oracle.leaks_in(
        url_views(state["urls"]), [*case.forbidden, *case.url_forbidden]
    ):
        problems.append(f"in an href or src: {in_attrs}")

    here = urlsplit(origin).netloc
    elsewhere = [u for u in requested if urlsplit(u).netloc != here]
    if elsewhere:
        problems.append(f"fetched from another origin: {elsewhere}")
    if state["images"]:
        problems.append(f"{state['images']} image element(s) on the page")
    if corpus.mode == "redact":
        missing = [s for s in case.must_show if not oracle.leaks_in([state["text"]], [s])]
        if missing:
            problems.append(f"redact mode does not show the benign text {missing}")
    return problems


@pytest.mark.parametrize("case", BROWSER_CASES, ids=[c.name for c in BROWSER_CASES])
def test_case(corpus_server: CorpusServer, case: Case) -> None:
    problems = run_case(corpus_server, case)
    assert not problems, "\n".join([f"{case.name} [{corpus_server.mode}]", *problems])


def test_the_harness_reports_what_the_page_shows(corpus_server: CorpusServer) -> None:
    """A control run: judged against text it really shows, every check reports a finding, so
    a clean case is clean because nothing leaked, not because a check saw nothing."""
    case = dataclasses.replace(
        _BY_NAME["url_markdown_link"],
        name="control",
        forbidden=("Open the draft",),  # the link's text
        url_forbidden=("evil.example",),  # its host
        must_show=("text no reply holds",),
    )
    problems = run_case(corpus_server, case)
    expected = [
        "on the wire:",
        "inside a URL on the wire:",
        "shown on the page:",
        "shown inside a URL on the page:",
        "in an href or src:",
    ]
    if corpus_server.mode == "redact":
        expected.append("redact mode does not show the benign text")
    for start in expected:
        assert any(p.startswith(start) for p in problems), (start, problems)
