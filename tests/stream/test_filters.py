"""The reply filter (guard -> restorer) keeps both guarantees, and fails closed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdback.detect import DetectorSet
from holdback.detect.base import Candidates
from holdback.errors import FilterFailedError
from holdback.stream import Guard, ReplyFilter, Restorer, forbidden_matcher

VAULT = {"<EMAIL_1>": "sarah@acme.com", "<PHONE_1>": '+1 "415" \\ 555', "<CLIENT_1>": "Acme"}
DETECTORS = DetectorSet.from_config()


def make_filter(escape: bool = False) -> ReplyFilter:
    guard = Guard(DETECTORS, forbidden=forbidden_matcher(["nightjar"]), vault=VAULT)
    restorer = Restorer(VAULT, escape=(lambda v: json.dumps(v)[1:-1]) if escape else None)
    return ReplyFilter(guard, restorer)


def run(text: str, cuts: list[int], escape: bool = False) -> tuple[str, ReplyFilter]:
    f = make_filter(escape)
    out, last = [], 0
    for cut in [*sorted(c for c in cuts if c <= len(text)), len(text)]:
        out.append(f.feed(text[last:cut]))
        last = cut
    out.append(f.flush())
    return "".join(out), f


def test_guard_then_restore() -> None:
    text = "Write to <EMAIL_1> (not bob@evil.com) about Nightjar; call <PHONE_1>."
    out, f = run(text, [])
    assert (
        out
        == 'Write to sarah@acme.com (not [redacted email]) about [redacted]; call +1 "415" \\ 555.'
    )
    # What may be stored is the screened, still tokenized text.
    assert (
        f.screened == "Write to <EMAIL_1> (not [redacted email]) about [redacted]; call <PHONE_1>."
    )


def test_tool_call_arguments_stay_valid_json_after_restoring() -> None:
    args = '{"to": "<EMAIL_1>", "phone": "<PHONE_1>", "cc": "bob@evil.com"}'
    out, _ = run(args, list(range(1, len(args))), escape=True)
    assert json.loads(out) == {
        "to": "sarah@acme.com",
        "phone": '+1 "415" \\ 555',
        "cc": "[redacted email]",
    }


PIECES = st.sampled_from(
    [
        "<EMAIL_1>",
        "<email_1>",
        "EMAIL_1",
        "&lt;PHONE_1&gt;",
        "CLIENT\\_1",
        "bob@evil.com",
        "415-555-2671",
        "nightjar",
        "sarah@acme.com",
        "<EMAIL_",
        "4111 1111 1111 1111",
    ]
)
FILLER = st.text(alphabet=" .,;:<>_&\\@-x9aZ\n", max_size=5)


@given(
    pieces=st.lists(st.one_of(FILLER, PIECES), max_size=10),
    cuts=st.lists(st.integers(0, 150), max_size=8),
)
def test_the_composition_is_chunk_invariant(pieces: list[str], cuts: list[int]) -> None:
    text = "".join(pieces)
    assert run(text, cuts)[0] == run(text, [])[0]


@given(pieces=st.lists(st.one_of(FILLER, PIECES), max_size=10))
def test_one_character_feeds_and_what_is_held(pieces: list[str]) -> None:
    text = "".join(pieces)
    f = make_filter()
    out = []
    for i, ch in enumerate(text):
        out.append(f.feed(ch))
        # What the pair holds: the guard's hold of restored text, then the restorer's tail of
        # the input.
        assert text[: i + 1].endswith(f.restorer.pending)
        assert f.pending == f.guard.pending + f.restorer.pending  # type: ignore[union-attr]
        assert len(f.restorer.pending) <= Restorer(VAULT)._index.max_form_len
    out.append(f.flush())
    assert "".join(out) == run(text, [])[0]


class Faulty:
    kinds = ("boom",)

    def candidates(self, text: str, pos: int, endpos: int, *, partial: bool) -> Candidates:
        if "boom" in text:
            raise RuntimeError(text)
        return Candidates([], endpos)


def test_a_failure_anywhere_stops_the_reply_with_no_raw_text_after() -> None:
    f = ReplyFilter(Guard(DetectorSet([Faulty()]), vault=VAULT), Restorer(VAULT))
    assert f.feed("fine <EMAIL_1> ") == "fine sarah@acme.com "
    with pytest.raises(FilterFailedError):
        f.feed("boom sarah-canary")
    for call in (lambda: f.feed("more"), f.flush):
        with pytest.raises(FilterFailedError):
            call()


def test_a_failing_restorer_value_escaper_also_fails_closed() -> None:
    def broken(value: str) -> str:
        raise UnicodeError(value)

    f = ReplyFilter(None, Restorer(VAULT, escape=broken))
    with pytest.raises(FilterFailedError) as info:
        f.feed("to <EMAIL_1>")
    assert "sarah" not in str(info.value)
