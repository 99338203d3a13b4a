"""The restorer's two guarantees, chunk invariance and minimal hold-back, and its forms."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdback.errors import InvalidTokenError, StreamClosedError
from holdback.stream import Restorer, restore
from holdback.tokens import TokenIndex

from .reference import all_forms, expected_pending, reference_restore, spellings

VAULT = {
    "<EMAIL_1>": "sarah@acme.com",
    "<EMAIL_12>": "bob@example.org",
    "<PHONE_1>": "+1 415 555 2671",
    "<CREDIT_CARD_12>": "4111 1111 1111 1111",
    "<A_1>": "ALPHA",
    "<A_1_2>": "A-ONE-TWO",
}


def stream(text: str, cuts: list[int], vault: dict[str, str] = VAULT) -> tuple[str, Restorer]:
    restorer = Restorer(vault)
    out = []
    last = 0
    for cut in [*sorted(cuts), len(text)]:
        out.append(restorer.feed(text[last:cut]))
        last = cut
    out.append(restorer.flush())
    return "".join(out), restorer


# -- the forms models write ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Email <EMAIL_1> today", "Email sarah@acme.com today"),
        ("Email <email_1> today", "Email sarah@acme.com today"),
        ("Email EMAIL_1 today", "Email sarah@acme.com today"),
        ("Email email_1.", "Email sarah@acme.com."),
        ("Email Email_1, please", "Email sarah@acme.com, please"),
        ("Email &lt;EMAIL_1&gt; today", "Email sarah@acme.com today"),
        ("Email &LT;email_1&Gt; today", "Email sarah@acme.com today"),
        ("Email EMAIL\\_1 today", "Email sarah@acme.com today"),
        ("Email <EMAIL\\_1> today", "Email sarah@acme.com today"),
        ("Card CREDIT\\_CARD_12!", "Card 4111 1111 1111 1111!"),
        ("Card &lt;credit\\_card\\_12&gt;", "Card 4111 1111 1111 1111"),
        ("(EMAIL_1)", "(sarah@acme.com)"),
        ("EMAIL_1", "sarah@acme.com"),
        # Bare ids only on word boundaries.
        ("MY_EMAIL_10X", "MY_EMAIL_10X"),
        ("xEMAIL_1", "xEMAIL_1"),
        ("EMAIL_1x", "EMAIL_1x"),
        ("EMAIL_1é", "EMAIL_1é"),
        # The longest match wins; tokens not in the vault stay as they are.
        ("<EMAIL_12>", "bob@example.org"),
        ("<EMAIL_123>", "<EMAIL_123>"),
        ("EMAIL_123", "EMAIL_123"),
        ("<EMAIL_2>", "<EMAIL_2>"),
        ("<A_1_2>", "A-ONE-TWO"),
        ("A_1_2 A_1", "A-ONE-TWO ALPHA"),
        ("A_1\\_2", "A-ONE-TWO"),
        ("A_1\\x", "ALPHA\\x"),
        # Mixed brackets are not a form; the bare id inside still is.
        ("<EMAIL_1&gt;", "<sarah@acme.com&gt;"),
        ("&lt;EMAIL_1>", "&lt;sarah@acme.com>"),
        ("<EMAIL_1 >", "<sarah@acme.com >"),
        ("<<EMAIL_1>>", "<sarah@acme.com>"),
        ("&&lt;EMAIL_1&gt;&", "&sarah@acme.com&"),
        # Lookalike letters that are not ASCII never pass for an id.
        ("<\u212aIND_1>", "<\u212aIND_1>"),
        ("", ""),
    ],
)
def test_forms(text: str, expected: str) -> None:
    assert restore(text, VAULT) == expected
    assert reference_restore(text, VAULT) == expected
    assert Restorer.restore(text, VAULT) == expected


def test_vault_keys_may_be_bare_ids() -> None:
    assert restore("to <EMAIL_1>", {"EMAIL_1": "x@y.z"}) == "to x@y.z"


def test_a_bad_vault_key_is_refused_without_echoing_the_value() -> None:
    with pytest.raises(InvalidTokenError) as info:
        Restorer({"<email_01>": "secret-value"})
    assert "secret-value" not in str(info.value)


def test_empty_vault_passes_everything_through_at_once() -> None:
    restorer = Restorer({})
    assert restorer.feed("<EMAIL_") == "<EMAIL_"
    assert restorer.pending == ""


def test_feed_after_flush_is_an_error() -> None:
    restorer = Restorer(VAULT)
    restorer.feed("x")
    restorer.flush()
    with pytest.raises(StreamClosedError):
        restorer.feed("y")
    assert restorer.flush() == ""


def test_escape_applies_to_restored_values_only() -> None:
    vault = {"<NAME_1>": 'He said "hi"\\'}
    restorer = Restorer(vault, escape=lambda v: json.dumps(v)[1:-1])
    args = '{"to": "<NAME_1>", "note": "a \\"quote\\""}'
    out = restorer.feed(args) + restorer.flush()
    assert json.loads(out) == {"to": 'He said "hi"\\', "note": 'a "quote"'}


def test_a_megabyte_without_tokens_passes_straight_through() -> None:
    text = ("The quick brown fox jumps over the lazy dog; E-mail me at noon. " * 16_500)[:1_000_000]
    restorer = Restorer(VAULT)
    out = restorer.feed(text)
    assert out == text
    assert restorer.pending == ""


def test_pending_holds_exactly_what_could_still_be_a_form() -> None:
    restorer = Restorer(VAULT)
    assert restorer.feed("Write to <EMA") == "Write to "
    assert restorer.pending == "<EMA"
    assert restorer.feed("IL_1") == ""
    assert restorer.pending == "<EMAIL_1"
    assert restorer.feed("2") == ""
    assert restorer.feed("> ok") == "bob@example.org ok"
    assert restorer.feed(" <PH") == " "
    assert restorer.feed("X") == "<PHX"  # no vault id starts with PHX
    assert restorer.feed(" EMAIL_1") == " "
    assert restorer.pending == "EMAIL_1"  # the next character decides the word boundary
    assert restorer.feed(".") == "sarah@acme.com."
    assert restorer.feed(" &l") == " "
    assert restorer.pending == "&l"
    assert restorer.flush() == "&l"


# -- exhaustive splits -----------------------------------------------------------------

EXAMPLES = [
    "Hi <EMAIL_1>, call <PHONE_1> or write &lt;email\\_12&gt; (EMAIL_1).",
    "<<EMAIL_1<EMAIL_12><EMAIL_123>EMAIL_1\\_2 A_1_2 A_1\\_2>",
    "&lt;&lt;A_1&gt;&gt; &amp; &lt;credit\\_CARD_12&gt;&g",
    "MY_EMAIL_10X EMAIL_12 email_1\u0301 😀EMAIL_1😀 <A_1",
    "trailing EMAIL_1",
    "trailing &lt;EMAIL_1&g",
]


@pytest.mark.parametrize("text", EXAMPLES)
def test_every_single_split_and_one_char_feeds(text: str) -> None:
    expected = reference_restore(text, VAULT)
    assert restore(text, VAULT) == expected
    for cut in range(len(text) + 1):
        assert stream(text, [cut])[0] == expected
    assert stream(text, list(range(1, len(text))))[0] == expected


@pytest.mark.parametrize("text", EXAMPLES)
def test_every_pair_of_splits(text: str) -> None:
    expected = reference_restore(text, VAULT)
    for a in range(len(text) + 1):
        for b in range(a, len(text) + 1, 3):
            assert stream(text, [a, b])[0] == expected


# -- properties ------------------------------------------------------------------------

kinds = st.sampled_from(["EMAIL", "PHONE", "CREDIT_CARD", "A", "A_1", "X9"])
ids = st.builds(lambda k, n: f"{k}_{n}", kinds, st.integers(1, 13))
vaults = st.dictionaries(
    ids.map(lambda i: f"<{i}>"),
    st.text(alphabet="ab<>_&1 é", max_size=6),
    max_size=6,
)
FILLER = "ab Z09_<>&;\\é😀\u0301\n"
near_misses = st.sampled_from(
    [
        "<",
        ">",
        "&lt;",
        "&gt;",
        "&l",
        "&",
        "_",
        "\\_",
        "<EMAIL_",
        "EMAIL_12",
        "EMAIL_01",
        "<EMAIL_1",
        "_1>",
        "A_1_",
        "<a_",
        "lt;",
        "EMAIL",
        "&lt;EMAIL_1&g",
    ]
)


@st.composite
def token_forms(draw: st.DrawFn, vault: dict[str, str]) -> str:
    if not vault:
        return draw(near_misses)
    ident = draw(st.sampled_from(sorted(vault)))[1:-1]
    spelled = draw(st.sampled_from(spellings(ident)))
    spelled = "".join(c.lower() if draw(st.booleans()) else c for c in spelled)
    opener, closer = draw(
        st.sampled_from([("<", ">"), ("&lt;", "&gt;"), ("", ""), ("&LT;", "&gt;")])
    )
    return opener + spelled + closer


@st.composite
def texts_with_vault(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    vault = draw(vaults)
    pieces = draw(
        st.lists(
            st.one_of(st.text(alphabet=FILLER, max_size=5), near_misses, token_forms(vault)),
            max_size=12,
        )
    )
    return "".join(pieces), vault


@st.composite
def splits(draw: st.DrawFn, text: str) -> list[int]:
    return draw(st.lists(st.integers(0, len(text)), max_size=8))


@given(data=st.data(), case=texts_with_vault())
def test_chunk_invariance(data: st.DataObject, case: tuple[str, dict[str, str]]) -> None:
    text, vault = case
    cuts = data.draw(splits(text))
    assert stream(text, cuts, vault)[0] == restore(text, vault)


@given(case=texts_with_vault())
def test_fast_restorer_matches_the_brute_force_reference(
    case: tuple[str, dict[str, str]],
) -> None:
    text, vault = case
    assert restore(text, vault) == reference_restore(text, vault)


@given(data=st.data(), case=texts_with_vault())
def test_pending_is_the_longest_tail_that_could_still_become_a_form(
    data: st.DataObject, case: tuple[str, dict[str, str]]
) -> None:
    text, vault = case
    forms = all_forms(vault)
    longest = max((len(f) for f, _, _ in forms), default=0)
    restorer = Restorer(vault)
    last = 0
    for cut in [*sorted(data.draw(splits(text))), len(text)]:
        restorer.feed(text[last:cut])
        last = cut
        assert restorer.pending == expected_pending(text[:cut], forms)
        assert len(restorer.pending) <= longest
        assert len(restorer.pending) <= TokenIndex(vault).max_form_len


@given(case=texts_with_vault())
def test_one_character_feeds(case: tuple[str, dict[str, str]]) -> None:
    text, vault = case
    assert stream(text, list(range(1, len(text))), vault)[0] == restore(text, vault)
