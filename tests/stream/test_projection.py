"""The decoded projection: what it decodes, how offsets map back, and chunk invariance."""

from __future__ import annotations

import html
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdback.stream.projection import Projector, project


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("ann&#64;example.org", "ann@example.org"),
        ("ann&#x40;example.org", "ann@example.org"),
        ("ann&commat;example.org", "ann@example.org"),
        ("ann@example\\.org", "ann@example.org"),
        ("**ann**@example.org", "ann@example.org"),
        ("_ann@example.org_", "ann@example.org"),
        ("`ann`@example.org", "ann@example.org"),
        ("pro**ject**", "project"),
        ("~~pro~~ject", "project"),
        ("snake_case_name", "snake_case_name"),  # intraword underscores stay
        ("a__b", "a__b"),
        ("&amp;#64;", "&#64;"),  # one level, as the browser decodes
        ("&#64", "&#64"),  # marked escapes an `&` without `;`: shown as typed
        ("&nosuchentity;", "&nosuchentity;"),
        ("back\\slash \\q", "back\\slash \\q"),  # only before ASCII punctuation
        ("4556&#32;7375", "4556 7375"),
        # The renderer reads an invisible character as a word character: the `_` shows.
        ("ghp\u200b_key", "ghp\u200b_key"),
        ("ghp_\u200bkey", "ghp_\u200bkey"),
    ],
)
def test_markdown_projection(raw: str, shown: str) -> None:
    assert project(raw) == shown


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ('{"to": "ann\\u0040example.org"}', '{"to": "ann@example.org"}'),
        ('"a\\"b\\\\c\\/d\\n"', '"a"b\\c/d\n"'),
        ('"\\ud83d\\ude00"', '"\U0001f600"'),
        ('"\\ud83d x"', '"\ufffd x"'),  # a lone surrogate shows as a replacement character
        ('"\\u00"', '"\\u00"'),
    ],
)
def test_json_projection(raw: str, shown: str) -> None:
    assert project(raw, "json") == shown


def _spans(raw: str, mode: str) -> list[tuple[str, str]]:
    p = Projector(mode)  # type: ignore[arg-type]
    p.extend(raw, final=True)
    return [(ch, raw[lo:hi]) for ch, lo, hi in zip(p.text, p.lo, p.hi, strict=True)]


def test_each_projected_character_maps_to_the_raw_text_that_shows_it() -> None:
    assert _spans("a&#64;\\.*b", "markdown") == [
        ("a", "a"),
        ("@", "&#64;"),
        (".", "\\."),
        ("b", "b"),
    ]
    assert _spans('"\\u0040"', "json") == [('"', '"'), ("@", "\\u0040"), ('"', '"')]


RAW = st.text(alphabet="a1@._*`~\\&#x4;0amp-lt \n", max_size=40) | st.sampled_from(
    ["ann&#64;example.org", "**a**_b_", "&commat;", "x\\_y", "__init__", "&#x1F600;"]
)


def _streamed(raw: str, cuts: list[int], mode: str) -> tuple[str, list[int], list[int]]:
    p = Projector(mode)  # type: ignore[arg-type]
    last = 0
    for cut in [*sorted(c for c in cuts if c <= len(raw)), len(raw)]:
        p.extend(raw[last:cut])
        last = cut
        # Nothing past the open tail is projected, and the tail is a bounded escape.
        assert len(p.open_tail) <= 40
    p.extend("", final=True)
    return p.text, p.lo, p.hi


@given(raw=RAW, cuts=st.lists(st.integers(0, 40), max_size=6))
def test_markdown_projection_is_chunk_invariant(raw: str, cuts: list[int]) -> None:
    assert _streamed(raw, cuts, "markdown") == _streamed(raw, [], "markdown")


@given(value=st.text(max_size=12), cuts=st.lists(st.integers(0, 60), max_size=6))
def test_json_projection_decodes_what_json_encodes(value: str, cuts: list[int]) -> None:
    raw = json.dumps(value)  # ASCII escapes, surrogate pairs included
    text, _, _ = _streamed(raw, cuts, "json")
    expected = json.loads(raw)
    assert text == '"' + expected + '"'


ENTITY_TEXT = st.lists(
    st.sampled_from(
        ["ab", " ", "4", "&#64;", "&amp;", "&lt;", "&#x41;", "&copy;", "&copyx;", "&no;"]
    ),
    max_size=8,
).map("".join)


@given(raw=ENTITY_TEXT)
def test_terminated_entities_decode_as_the_html_parser_does(raw: str) -> None:
    # ... and a run of spaces shows as one, as the renderer collapses it.
    assert project(raw) == re.sub(" {2,}", " ", html.unescape(raw))


def test_release_keeps_markers_with_the_released_part() -> None:
    p = Projector("markdown")
    p.extend("**ab** cd")
    assert p.text == "ab cd"
    cut = p.release(2)  # "ab": the closing `**` goes with it
    assert cut == 6
    assert p.raw == " cd"
