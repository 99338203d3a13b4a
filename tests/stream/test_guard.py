"""The output guard: what it replaces, chunk invariance, minimal hold, window, modes, faults."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdback.detect import DetectorSet
from holdback.detect.base import Candidates
from holdback.errors import FilterFailedError
from holdback.stream import (
    Guard,
    GuardFailedError,
    ReplyBlockedError,
    forbidden_matcher,
    screen,
)

DETECTORS = DetectorSet.from_config({"client": ["Acme Holdings", "Globex"]})
FORBIDDEN = ["db01.corp.internal", "Project Nightjar", "hunter2"]


def make_guard(**kwargs: object) -> Guard:
    kwargs.setdefault("forbidden", forbidden_matcher(FORBIDDEN))
    return Guard(DETECTORS, **kwargs)  # type: ignore[arg-type]


def stream(text: str, cuts: list[int], **kwargs: object) -> str:
    guard = make_guard(**kwargs)
    out = []
    last = 0
    for cut in [*sorted(cuts), len(text)]:
        out.append(guard.feed(text[last:cut]))
        last = cut
    out.append(guard.flush())
    return "".join(out)


def one_shot(text: str, **kwargs: object) -> str:
    return screen(text, make_guard(**kwargs))


# One example per detector kind (and forbidden terms), each in a sentence.
KIND_EXAMPLES = {
    "email": "Write to bob.smith@evil-corp.com today.",
    "phone": "Call +1 (415) 555-2671 or 415.555.2671!",
    "credit_card": "Card 4111 1111 1111 1111, exp 12/29.",
    "iban": "Pay DE89 3704 0044 0532 0130 00 now.",
    "us_ssn": "SSN 219-09-9999.",
    "ip_address": "Hosts 10.0.0.1 and 2001:db8::1.",
    "secret": "Key sk-proj-AbCdEfGhIjKlMnOpQrSt1234 and postgres://a:pw9@db.x",
    "jwt": "Token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl ok",
    "client": "Ask Acme Holdings or GLOBEX.",
    "forbidden": "Deploy to DB01.corp.internal for project nightjar.",
}


@pytest.mark.parametrize("kind", sorted(KIND_EXAMPLES))
def test_each_kind_is_redacted(kind: str) -> None:
    out = one_shot(KIND_EXAMPLES[kind])
    label = "[redacted]" if kind == "forbidden" else f"[redacted {kind}]"
    assert label in out


def test_redaction_labels() -> None:
    text = "Mail bob@evil.com, host db01.corp.internal, <EMAIL_1> stays, <EMAIL_2> goes."
    assert one_shot(text, vault={"<EMAIL_1>": "sarah@acme.com"}) == (
        "Mail [redacted email], host [redacted], <EMAIL_1> stays, [redacted token] goes."
    )


@pytest.mark.parametrize(
    "spelling", ["<EMAIL_7>", "<email_7>", "&lt;EMAIL\\_7&gt;", "EMAIL_7", "Credit\\_Card_3"]
)
def test_tokens_the_model_made_up_are_redacted(spelling: str) -> None:
    vault = {"<EMAIL_1>": "sarah@acme.com"}
    text = f"Write to {spelling} and EMAIL_1, not MY_VAR_1."
    expected = "Write to [redacted token] and EMAIL_1, not MY_VAR_1."
    assert one_shot(text, vault=vault) == expected
    assert stream(text, list(range(1, len(text))), vault=vault) == expected


def test_values_of_the_conversation_vault_are_not_flagged() -> None:
    allowed = {("email", "sarah@acme.com")}
    out = one_shot("Both SARAH@acme.com and bob@evil.com", allowed=allowed)
    assert out == "Both SARAH@acme.com and [redacted email]"


def test_a_vault_value_is_shown_whole_not_cut_at_a_match_inside_it() -> None:
    vault = {"<EMAIL_1>": "ann.canary@example.org"}
    text = "Also ann.canary@example.org again, and not xann.canary@example.org."
    expected = "Also ann.canary@example.org again, and not [redacted email]."
    assert one_shot(text, vault=vault) == expected
    assert stream(text, list(range(1, len(text))), vault=vault) == expected
    # A match that reaches past the value still takes the value with it.
    glued = "see ann.canary@example.org.evil.io"
    assert one_shot(glued, vault=vault) == "see [redacted email]"


def test_forbidden_terms_are_found_through_evasion_and_inside_words() -> None:
    assert one_shot("see db01\u200b.corp.internal") == "see [redacted]"
    assert one_shot("xhunter2x") == "x[redacted]x"
    assert one_shot("ＨＵＮＴＥＲ２!") == "[redacted]!"


@pytest.mark.parametrize("kind", sorted(KIND_EXAMPLES))
def test_every_single_boundary_split(kind: str) -> None:
    text = KIND_EXAMPLES[kind]
    expected = one_shot(text)
    for cut in range(len(text) + 1):
        assert stream(text, [cut]) == expected, cut


@pytest.mark.parametrize("kind", sorted(KIND_EXAMPLES))
def test_one_character_feeds(kind: str) -> None:
    text = KIND_EXAMPLES[kind]
    assert stream(text, list(range(1, len(text)))) == one_shot(text)


def test_held_text_is_only_what_could_still_be_a_finding() -> None:
    guard = make_guard()
    assert guard.feed("Hello there, ") == "Hello there, "
    assert guard.pending == ""
    guard.feed("write to sarah@acme.co")
    assert guard.pending == "sarah@acme.co"  # complete, but could still grow
    assert guard.feed("m. Thanks") == "[redacted email]. "
    assert guard.pending == "Thanks"  # a word could still become an email address
    assert guard.flush() == "Thanks"


def test_a_reply_of_digits_never_stalls_past_the_window() -> None:
    guard = make_guard(window=32)
    released = ""
    for _ in range(200):
        released += guard.feed("1234567890")
        assert len(guard.pending) < 32 + 10
    # One candidate open far past the window is redacted, fail closed, under one label.
    assert released == "[redacted value]"
    assert guard.flush() == ""


def test_the_window_cut_is_chunk_invariant() -> None:
    text = "x " + "9" * 100 + " sarah@acme.com " + "1 " * 40 + "end"
    expected = one_shot(text, window=24)
    for cut in range(len(text) + 1):
        assert stream(text, [cut], window=24) == expected


def test_block_mode_stops_before_the_offending_text() -> None:
    guard = make_guard(mode="block")
    out = guard.feed("All good so far. Now bob@")
    with pytest.raises(ReplyBlockedError) as info:
        out += guard.feed("evil.com is the address")
    assert info.value.kinds == ["email"]
    assert "bob" not in out + info.value.safe_prefix
    assert (out + info.value.safe_prefix).startswith("All good so far. Now ")
    assert "evil" not in str(info.value)


class Exploding:
    kinds = ("boom",)

    def __init__(self) -> None:
        self.calls = 0

    def candidates(self, text: str, pos: int, endpos: int, *, partial: bool) -> Candidates:
        self.calls += 1
        if "trigger" in text:
            raise RuntimeError(f"bug while reading {text!r}")
        return Candidates([], endpos)


def test_a_failing_detector_fails_closed_and_leaks_nothing() -> None:
    guard = Guard(DetectorSet([Exploding()]))
    assert guard.feed("fine ") == "fine "
    with pytest.raises(GuardFailedError) as info:
        guard.feed("now the trigger secret-canary")
    assert "canary" not in str(info.value)
    assert isinstance(info.value, FilterFailedError)
    with pytest.raises(GuardFailedError):
        guard.feed("more text")
    with pytest.raises(GuardFailedError):
        guard.flush()


# -- Hypothesis -------------------------------------------------------------------------------

PIECES = st.sampled_from(
    [
        "sarah@acme.com",
        "Sarah@Acme.co.uk",
        "+1 (415) 555-2671",
        "415-555-2671",
        "4111 1111 1111 1111",
        "4111111111111111",
        "DE89 3704 0044 0532 0130 00",
        "219-09-9999",
        "10.0.0.1",
        "::1",
        "sk-proj-AbCdEfGhIjKlMnOpQrSt1234",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl",
        "postgres://a:pw9@db.x",
        "Acme Holdings",
        "db01.corp.internal",
        "hunter2",
        "<EMAIL_1>",
        "1.2.3",
        "2024-01-15",
    ]
)
FILLER = st.text(alphabet=" .,;:-@()+x9aZ\n\u200b\u00a0０", max_size=5)


@st.composite
def replies(draw: st.DrawFn) -> str:
    return "".join(draw(st.lists(st.one_of(FILLER, PIECES), max_size=10)))


@given(text=replies(), cuts=st.lists(st.integers(0, 200), max_size=8))
def test_chunk_invariance(text: str, cuts: list[int]) -> None:
    cuts = [c for c in cuts if c <= len(text)]
    assert stream(text, cuts) == one_shot(text)


@given(text=replies(), cuts=st.lists(st.integers(0, 200), max_size=8))
def test_chunk_invariance_with_a_small_window(text: str, cuts: list[int]) -> None:
    cuts = [c for c in cuts if c <= len(text)]
    assert stream(text, cuts, window=20) == one_shot(text, window=20)


@given(text=replies())
def test_one_character_feeds_property(text: str) -> None:
    assert stream(text, list(range(1, len(text)))) == one_shot(text)


# Values side by side with only a space between can merge into one run of digits; see the
# phone detector's note on runs. Models separate values with words or punctuation.
@given(
    pieces=st.lists(PIECES, max_size=8), seps=st.sampled_from([", ", " and ", " (", "; ", ":\n"])
)
def test_no_sensitive_piece_survives_screening(pieces: list[str], seps: str) -> None:
    out = one_shot(seps.join(pieces) + ".")
    for piece in pieces:
        if piece not in ("<EMAIL_1>", "1.2.3", "2024-01-15"):
            assert piece.lower() not in out.lower()


def test_the_guard_takes_the_vault_and_plain_term_lists() -> None:
    guard = Guard(vault={"<EMAIL_1>": "sarah@acme.com"}, forbidden=["Nightjar"])
    out = screen("sarah@acme.com, bob@evil.com and nightjar", guard)
    assert out == "sarah@acme.com, [redacted email] and [redacted]"


def test_bad_guard_settings_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="window"):
        Guard(window=4)
    with pytest.raises(ValueError, match="mode"):
        Guard(mode="shout")  # type: ignore[arg-type]


@pytest.mark.parametrize("tail", ["<EMAIL_", "<", "<em", "&lt;EMAIL\\_1", "&lt", "&l"])
def test_a_token_cut_off_by_the_end_of_the_reply_is_redacted(tail: str) -> None:
    vault = {"<EMAIL_1>": "sarah@acme.com"}
    text = f"Write to {tail}"
    # A trailing `_` is an emphasis marker to the renderer: it displays nothing of the token.
    expected = "Write to [redacted token]" + ("_" if tail.endswith("_") else "")
    assert one_shot(text, vault=vault) == expected
    assert stream(text, list(range(1, len(text))), vault=vault) == expected


def test_what_only_looks_like_a_token_start_mid_reply_is_left_alone() -> None:
    text = "if a < b and b &gt; c then <b>bold</b> & done"
    assert one_shot(text) == text
