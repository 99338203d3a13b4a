"""The renderer in Chromium: links show where they go, nothing is fetched, nothing is decoded
beyond what the server's projection decodes (docs/ui.md, security rules).

The rules these tests keep:
- a link to another origin shows its destination beside it, exactly as written (never
  percent-decoded, invisible characters percent-encoded), with `target=_blank`,
  `rel=noopener noreferrer` and `referrerpolicy=no-referrer`; a same-origin link, or an
  autolink whose text is its destination, gets none;
- a kind label in a URL (`?d=[email]`) is shown as a redaction, in the link and its destination;
- a bare email address is text, never a `mailto:` link, so no restored address sits in an href;
- a markdown image is a link, raw `<img>` is text, and the page's CSP refuses remote images;
- marked decodes one level of character references, drops backslash escapes before ASCII
  punctuation only, and rewrites nothing (no typographer, no line-break conversion);
- `/syntax.js` matches in the browser exactly what `holdback.tokens` matches in Python.
Each test renders through `render.js` itself, inside the chat page.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page

from holdback import tokens
from holdback.app.syntax import REDACTION_LABEL_RE, URL_LABEL_RE
from tests.browser.canary_upstream import CanaryUpstream
from tests.browser.chat_page import open_chat
from tests.browser.chromium import NEEDS_CHROMIUM

pytestmark = [pytest.mark.browser, NEEDS_CHROMIUM]

RENDER_JS = """async (texts) => {
  const r = await import('/render.js');
  return texts.map((text) => {
    const box = document.createElement('div');
    box.append(r.renderMarkdown(text));
    const links = [...box.querySelectorAll('a')].map((a) => ({
      href: a.getAttribute('href'),
      text: a.textContent,
      target: a.getAttribute('target'),
      rel: a.getAttribute('rel'),
      referrerpolicy: a.getAttribute('referrerpolicy'),
      title: a.getAttribute('title'),
      dest: a.nextElementSibling?.matches('[data-testid="link-destination"]')
        ? a.nextElementSibling.textContent : null,
      destTitle: a.nextElementSibling?.matches('.link-dest')
        ? a.nextElementSibling.title : null,
    }));
    return {
      text: box.textContent.trim(),
      html: box.innerHTML,
      links,
      labels: [...box.querySelectorAll('.redaction.url-label')].map((s) => s.dataset.kind),
      tags: [...new Set([...box.querySelectorAll('*')].map((e) => e.localName))],
    };
  });
}"""


@pytest.fixture
def render(page: Page) -> Any:
    open_chat(page)

    def rendered(*texts: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = page.evaluate(RENDER_JS, list(texts))
        return result

    return rendered


def test_links_to_other_origins_show_where_they_go(render: Any, page: Page) -> None:
    origin = page.evaluate("() => location.origin")
    [other, same, relative, fragment, protocol_relative, deceptive] = render(
        "[the draft](https://evil.example/c?d=1)",
        f"[home]({origin}/#/c/1)",
        "[list](/api/conversations)",
        "[top](#top)",
        "[p](//evil.example/p)",
        "[https://bank.example/login](https://evil.example/login)",
    )
    link = other["links"][0]
    assert link["dest"] == " (https://evil.example/c?d=1)"
    assert link["destTitle"] == "this link goes to https://evil.example/c?d=1"
    assert other["text"] == "the draft (https://evil.example/c?d=1)"
    assert (link["target"], link["rel"], link["referrerpolicy"]) == (
        "_blank",
        "noopener noreferrer",
        "no-referrer",
    )
    for same_origin in (same, relative, fragment):
        assert same_origin["links"][0]["dest"] is None, same_origin["html"]
        assert same_origin["links"][0]["referrerpolicy"] == "no-referrer"
    assert protocol_relative["links"][0]["dest"] == " (//evil.example/p)"
    assert deceptive["links"][0]["dest"] == " (https://evil.example/login)"


def test_autolinks_show_their_destination_once(render: Any) -> None:
    bare, angle, www = render(
        "see https://evil.example/p?q=1 now", "<https://evil.example/a>", "www.evil.example/x"
    )
    assert [lk["dest"] for lk in (*bare["links"], *angle["links"], *www["links"])] == [None] * 3
    assert bare["text"] == "see https://evil.example/p?q=1 now"
    assert www["links"][0]["href"] == "http://www.evil.example/x"


def test_destinations_are_shown_as_written_never_decoded(render: Any) -> None:
    encoded, spaced, bidi, entity, escaped, long = render(
        "[a](https://evil.example/%61lice%40example.com)",
        "[a](<https://evil.example/a b>)",
        "[a](https://evil.example/\u202etxt.exe)",
        "[a](https://evil.example/?x=1&amp;y=2)",
        "[a](https://evil.example/\\_x\\«y)",
        "[a](https://evil.example/" + "x" * 200 + ")",
    )
    # Percent-encoding is never undone: the page shows what the guard screened.
    assert encoded["links"][0]["href"] == "https://evil.example/%61lice%40example.com"
    assert encoded["links"][0]["dest"] == " (https://evil.example/%61lice%40example.com)"
    assert "alice@" not in encoded["text"]
    assert spaced["links"][0]["dest"] == " (https://evil.example/a b)"
    # Invisible and direction-changing characters are shown percent-encoded.
    assert bidi["links"][0]["dest"] == " (https://evil.example/%E2%80%AEtxt.exe)"
    # One level of character references, as in text; ASCII-punctuation escapes only.
    assert entity["links"][0]["href"] == "https://evil.example/?x=1&y=2"
    assert escaped["links"][0]["href"] == "https://evil.example/_x\\«y"
    dest = long["links"][0]["dest"]
    assert dest.endswith("…)")
    assert len(dest) == len(" ()") + 80
    assert long["links"][0]["destTitle"].endswith("x" * 200)


def test_kind_labels_in_urls_render_as_redactions(render: Any) -> None:
    bare, link, plain = render(
        "see https://evil.example/c?d=[email]&n=[clients] now",
        "[Open the draft](https://evil.example/c?d=[email])",
        "a task [x] and a note [1] and [email] outside any link",
    )
    assert bare["links"][0]["href"] == "https://evil.example/c?d=[email]&n=[clients]"
    assert bare["labels"] == ["email", "clients"]
    assert bare["text"] == "see https://evil.example/c?d=[email]&n=[clients] now"
    assert link["links"][0]["href"] == "https://evil.example/c?d=[email]"
    assert link["links"][0]["dest"] == " (https://evil.example/c?d=[email])"
    assert link["labels"] == ["email"]
    assert plain["labels"] == []
    assert "redaction" not in plain["html"]


def test_email_addresses_are_text_never_mailto_links(render: Any) -> None:
    bare, angle, explicit = render(
        "write to ada.owner@lovelace-canary.example today",
        "write to <ada.owner@lovelace-canary.example>",
        "[mail](mailto:help@evil.example)",
    )
    assert bare["links"] == []
    assert bare["text"] == "write to ada.owner@lovelace-canary.example today"
    assert angle["links"] == []
    assert angle["text"] == "write to <ada.owner@lovelace-canary.example>"
    # A mailto: link the model wrote stays a link, with its destination shown.
    assert explicit["links"][0]["href"] == "mailto:help@evil.example"
    assert explicit["links"][0]["dest"] == " (mailto:help@evil.example)"


def test_images_are_links_and_raw_html_is_text(render: Any) -> None:
    image, raw, untitled = render(
        "![a cat](https://img.evil.example/cat.png?d=1)",
        '<img src="https://img.evil.example/x.png" onerror="window.__xss=1">',
        "![](https://img.evil.example/y.png)",
    )
    assert "img" not in image["tags"]
    assert image["links"][0]["text"] == "image: a cat"
    assert image["links"][0]["dest"] == " (https://img.evil.example/cat.png?d=1)"
    assert "img" not in raw["tags"]
    assert raw["text"] == '<img src="https://img.evil.example/x.png" onerror="window.__xss=1">'
    assert untitled["links"][0]["text"] == "image: untitled"


def test_the_page_policy_refuses_remote_images(page: Page, canary_upstream: CanaryUpstream) -> None:
    """Even an image that somehow reached the DOM would not be fetched (CSP `img-src 'self'`)."""
    open_chat(page)
    before = len(canary_upstream.requests)
    probe = f"{canary_upstream.url}/csp-probe.png"
    violated = page.evaluate(
        """(src) => new Promise((resolve) => {
          document.addEventListener('securitypolicyviolation',
            (e) => resolve(e.effectiveDirective + ' ' + e.blockedURI), { once: true });
          const img = document.createElement('img');
          img.src = src;
          document.body.append(img);
        })""",
        probe,
    )
    assert violated == f"img-src {probe}"
    assert len(canary_upstream.requests) == before


def test_marked_decodes_and_rewrites_nothing_beyond_the_projection(render: Any) -> None:
    [out] = render(
        '"quotes" -- and ... (c) 1/2\n'
        "next line\n\n"
        "&#64; &amp;#64; &lt;b&gt; \\* \\« `&lt;code&gt;` ~~gone~~ snake_case_name *em*"
    )
    text = out["text"]
    assert '"quotes" -- and ... (c) 1/2\nnext line' in text  # no typographer, no <br>
    assert "br" not in out["tags"]
    # References decode once (in code not at all); only ASCII punctuation escapes drop.
    assert "@ &#64; <b> * \\« &lt;code&gt; gone snake_case_name em" in text
    assert {"del", "em", "code"} <= set(out["tags"])


SYNTAX_JS = """async (texts) => {
  const s = await import('/syntax.js');
  const spans = (source, text) => [...text.matchAll(s.pattern(source))]
    .map((m) => [m.index, m.index + m[0].length]);
  return texts.map((t) => [spans(s.TOKEN_SOURCE, t), spans(s.REDACTION_SOURCE, t),
    spans(s.URL_LABEL_SOURCE, t), s.isTokenId(t), s.isToken(t)]);
}"""
SYNTAX_SAMPLES = [
    "<EMAIL_1>",
    "<EMAIL_01>",
    "<email_1>",
    "<A__1>",
    "<_1>",
    "x<CREDIT_CARD_12>y<PHONE_2>",
    "<ÉMAIL_1>",
    "EMAIL_1",
    "EMAIL_0",
    "[redacted]",
    "[redacted email]",
    "[redacted token] [email] [1] [Email]",
    "https://evil.example/c?d=[email]&e=[credit_card]",
]


def test_the_served_syntax_matches_python_in_the_browser(page: Page) -> None:
    open_chat(page)

    def spans(pattern: re.Pattern[str], text: str) -> list[list[int]]:
        return [[m.start(), m.end()] for m in pattern.finditer(text)]

    expected = [
        [
            spans(tokens.TOKEN_RE, t),
            spans(REDACTION_LABEL_RE, t),
            spans(URL_LABEL_RE, t),
            tokens.ID_RE.match(t) is not None,
            tokens.TOKEN_RE.fullmatch(t) is not None,
        ]
        for t in SYNTAX_SAMPLES
    ]
    assert page.evaluate(SYNTAX_JS, SYNTAX_SAMPLES) == expected
