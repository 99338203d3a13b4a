"""`GET /syntax.js`: the browser's token syntax is a translation of the server's, never a copy.

The rules these tests keep: the module's patterns are exactly the translations of
`holdback.tokens`' patterns (and of the guard-label patterns in `app/syntax.py`); the translation
refuses constructs whose meaning differs between Python and JavaScript; where Node.js is
installed, the generated JavaScript matches exactly what Python matches on thousands of strings;
the route is public (static assets hold no data), revalidated on every load, and the UI has no
token pattern of its own left.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from holdback import tokens
from holdback.app import syntax
from holdback.app.application import web_dir
from holdback.providers.demo import DemoProvider
from tests.app.support import TestClient, make_settings, running_app

EXPORT_RE = re.compile(r"^export const (?P<name>[A-Z_]+) = (?P<value>\".*\");$", re.MULTILINE)


def exported() -> dict[str, str]:
    return {m["name"]: json.loads(m["value"]) for m in EXPORT_RE.finditer(syntax.MODULE)}


def by_hand(pattern: re.Pattern[str]) -> str:
    """The translation, spelled out: Python's named groups in JS spelling, `\\Z` dropped."""
    return pattern.pattern.replace("(?P<", "(?<").removesuffix(r"\Z")


def test_the_token_pattern_is_tokens_token_re_translated() -> None:
    assert syntax.js_source(tokens.TOKEN_RE) == by_hand(tokens.TOKEN_RE)
    assert exported()["TOKEN_SOURCE"] == by_hand(tokens.TOKEN_RE)
    assert exported()["TOKEN_SOURCE"] == "<(?<kind>[A-Z][A-Z0-9_]*)_(?<n>[1-9][0-9]*)>"


def test_kind_and_id_patterns_are_translated_without_their_end_anchor() -> None:
    assert exported()["KIND_SOURCE"] == by_hand(tokens.KIND_RE) == "[A-Z][A-Z0-9_]*"
    assert exported()["ID_SOURCE"] == by_hand(tokens.ID_RE)


def test_the_label_patterns_are_translated_too() -> None:
    assert exported()["REDACTION_SOURCE"] == by_hand(syntax.REDACTION_LABEL_RE)
    assert exported()["URL_LABEL_SOURCE"] == by_hand(syntax.URL_LABEL_RE)
    for label in ("[redacted]", "[redacted email]", "[redacted token]", "[redacted credit_card]"):
        assert syntax.REDACTION_LABEL_RE.fullmatch(label), label
    for label in ("[email]", "[credit_card]", "[phone]"):
        assert syntax.URL_LABEL_RE.fullmatch(label), label
    assert not syntax.URL_LABEL_RE.fullmatch("[1]")
    assert not syntax.URL_LABEL_RE.fullmatch("[redacted email]")


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (r"a*?b+?c{2,}?d{3}e{1,4}", r"a*?b+?c{2,}?d{3}e{1,4}"),
        (r"(?P<x>a)(?P=x)(?:b)(?=c)(?!d)(?<=e)(?<!f)", r"(?<x>a)\k<x>(?:b)(?=c)(?!d)(?<=e)(?<!f)"),
        (r"^[\]a-z\-]\[\.\\x\Z", r"^[\]a-z\-]\[\.\\x$"),
        ("é[ä-ö]\U0001f600", r"\u00e9[\u00e4-\u00f6]\ud83d\ude00"),
        (r"\n\t", r"\n\t"),
    ],
)
def test_translatable_constructs(pattern: str, expected: str) -> None:
    assert syntax.js_source(re.compile(pattern)) == expected


@pytest.mark.parametrize(
    "pattern",
    [
        r"\w",  # Unicode word characters in Python, ASCII in JS
        r"\d",
        r"\s",
        r"\bx",
        r"a.b",  # `.` excludes different line ends
        r"a$",  # Python's `$` also matches before a final newline
        r"a*+",  # possessive in Python 3.11, a syntax error in JS
        r"(?>a)",  # atomic group
        r"a{,3}",  # 0..3 in Python, literal text in JS
        r"a{",
        r"(?i)a",  # Unicode case folding differs
        r"(?x)a",
        r"[a[b]",  # Python may one day read a nested set here
        "[\U0001f600]",  # two code units in a JS class
        r"(a)\1",
        r"x^",
    ],
)
def test_untranslatable_constructs_are_refused(pattern: str) -> None:
    with pytest.raises(syntax.UntranslatablePatternError):
        syntax.js_source(re.compile(pattern))


def test_flags_with_the_same_meaning_are_translated() -> None:
    assert syntax.js_flags(re.compile("a", re.IGNORECASE | re.ASCII)) == "i"
    assert syntax.js_flags(re.compile("a", re.DOTALL)) == "s"
    assert syntax.js_flags(tokens.TOKEN_RE) == ""


# -- the generated JavaScript, run ------------------------------------------------------------

# Pieces that make near-misses of every pattern when strung together at random.
PIECES = tuple(
    [
        "<",
        ">",
        "[",
        "]",
        "_",
        "\\_",
        " ",
        "E",
        "EMAIL",
        "email",
        "K",
        "ſ",
        "1",
        "0",
        "12",
        "a",
        "&lt;",
        "&gt;",
        "[redacted",
        "redacted",
        " email",
        " credit_card",
        "-",
        "É",
        "x",
        "<EMAIL_1>",
        "<CLIENTS_",
        "_12>",
        "EMAIL_1",
        "A_01",
        "[email]",
        "[redacted email]",
    ]
)
FIXED_SAMPLES = [
    "<EMAIL_1>",
    "<EMAIL_01>",
    "<EMAIL_0>",
    "<email_1>",
    "<A_1>",
    "<A__1>",
    "<_1>",
    "<1_1>",
    "<CREDIT_CARD_12>",
    "x<EMAIL_1>y<PHONE_2>z",
    "<<EMAIL_1>>",
    "<ÉMAIL_1>",
    "<EMAİL_1>",
    "[redacted]",
    "[redacted email]",
    "[redacted credit_card]",
    "[redacted token]",
    "[redactedemail]",
    "[email]",
    "[Email]",
    "[1]",
    "[x]",
    "[credit_card]",
    "https://evil.example/c?d=[email]&e=[phone]",
    "EMAIL_1",
    "EMAIL_1\n",
    "CREDIT_CARD_12",
    "K_1",
    "EMAIL",
    "EMAIL_",
]


def samples() -> list[str]:
    rng = random.Random(13)
    made = ["".join(rng.choices(PIECES, k=rng.randint(0, 12))) for _ in range(4000)]
    return FIXED_SAMPLES + made


def python_answers(texts: list[str]) -> list[dict[str, object]]:
    def spans(pattern: re.Pattern[str], text: str) -> list[list[int]]:
        return [[m.start(), m.end()] for m in pattern.finditer(text)]

    return [
        {
            "token": spans(tokens.TOKEN_RE, t),
            "redaction": spans(syntax.REDACTION_LABEL_RE, t),
            "url_label": spans(syntax.URL_LABEL_RE, t),
            "is_id": tokens.ID_RE.match(t) is not None,
            "is_token": tokens.TOKEN_RE.fullmatch(t) is not None,
            "is_kind": tokens.KIND_RE.match(t) is not None,
        }
        for t in texts
    ]


DRIVER = """
import * as s from './syntax.mjs';
import { readFileSync } from 'node:fs';
const spans = (source, text) => [...text.matchAll(s.pattern(source))]
  .map((m) => [m.index, m.index + m[0].length]);
const texts = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const kind = new RegExp(`^(?:${s.KIND_SOURCE})$`);
process.stdout.write(JSON.stringify(texts.map((t) => ({
  token: spans(s.TOKEN_SOURCE, t),
  redaction: spans(s.REDACTION_SOURCE, t),
  url_label: spans(s.URL_LABEL_SOURCE, t),
  is_id: s.isTokenId(t),
  is_token: s.isToken(t),
  is_kind: kind.test(t),
}))));
"""


@pytest.fixture
def node() -> str:
    found = shutil.which("node") or shutil.which("nodejs")
    if found is None:
        pytest.skip("running the generated module needs Node.js (the browser tests run it too)")
    return found


def test_the_generated_module_matches_what_python_matches(node: str, tmp_path: Path) -> None:
    (tmp_path / "syntax.mjs").write_text(syntax.MODULE, "utf-8")
    (tmp_path / "driver.mjs").write_text(DRIVER, "utf-8")
    texts = samples()
    (tmp_path / "texts.json").write_text(json.dumps(texts), "utf-8")
    result = subprocess.run(
        [node, str(tmp_path / "driver.mjs"), str(tmp_path / "texts.json")],
        capture_output=True,
        check=True,
        timeout=60,
    )
    answers = json.loads(result.stdout)
    expected = python_answers(texts)
    mismatches = [(t, a, e) for t, a, e in zip(texts, answers, expected, strict=True) if a != e]
    assert not mismatches, mismatches[:5]
    for key in ("token", "redaction", "url_label", "is_id", "is_token", "is_kind"):
        assert sum(bool(e[key]) for e in expected) >= 10, key  # the samples exercise each


# -- the route --------------------------------------------------------------------------------


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path, auth="password"), DemoProvider(chunk_delay=0)) as c:
        yield c


def test_the_module_is_public_and_revalidated(client: TestClient) -> None:
    assert client.get("/api/session").json() == {"auth": "password", "user": None}
    response = client.get("/syntax.js")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.text == syntax.MODULE
    etag = response.headers["etag"]
    again = client.get("/syntax.js", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.headers["etag"] == etag
    assert again.content == b""
    assert client.get("/syntax.js", headers={"If-None-Match": '"stale"'}).status_code == 200
    assert client.head("/syntax.js").status_code == 200


def test_the_ui_has_no_token_syntax_of_its_own() -> None:
    web = web_dir({})
    render = (web / "render.js").read_text("utf-8")
    assert "from '/syntax.js'" in render
    for path in web.glob("*.js"):
        text = path.read_text("utf-8")
        assert "[A-Z][A-Z0-9_]*" not in text, path.name
        assert "redacted(?:" not in text, path.name
