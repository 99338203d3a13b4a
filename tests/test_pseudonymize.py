"""Pseudonymization: same value same token, round trip, neutralized look-alike tokens."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdback.detect import DetectorSet
from holdback.pseudonymize import Pseudonymizer, pseudonymize
from holdback.stream import restore
from holdback.vault import Vault, VaultConflictError, VaultEntry

SARAH = VaultEntry("<EMAIL_1>", "email", "sarah@acme.com", "sarah@acme.com")


def test_values_become_tokens_numbered_per_kind() -> None:
    vault = Vault()
    masked, found = pseudonymize(
        "Email sarah@acme.com and bob@example.org, call 415-555-2671.", vault
    )
    assert masked == "Email <EMAIL_1> and <EMAIL_2>, call <PHONE_1>."
    assert [(f.kind, f.token) for f in found] == [
        ("email", "<EMAIL_1>"),
        ("email", "<EMAIL_2>"),
        ("phone", "<PHONE_1>"),
    ]
    assert dict(vault) == {
        "<EMAIL_1>": "sarah@acme.com",
        "<EMAIL_2>": "bob@example.org",
        "<PHONE_1>": "415-555-2671",
    }


def test_the_same_value_gets_the_same_token_across_messages() -> None:
    vault = Vault()
    pseudonymize("Email sarah@acme.com", vault)
    masked, _ = pseudonymize("Again: SARAH@ACME.COM, card 4111-1111-1111-1111", vault)
    assert masked == "Again: <EMAIL_1>, card <CREDIT_CARD_1>"
    masked, _ = pseudonymize("card 4111 1111 1111 1111 and +1 415 555 2671", vault)
    assert masked == "card <CREDIT_CARD_1> and <PHONE_1>"
    masked, _ = pseudonymize("phone (415) 555-2671", vault)
    assert masked == "phone <PHONE_1>"


def test_a_variant_spelling_restores_to_the_first_spelling() -> None:
    vault = Vault()
    pseudonymize("sarah@acme.com", vault)
    masked, _ = pseudonymize("Sarah@Acme.com", vault)
    assert restore(masked, vault) == "sarah@acme.com"


def test_typed_tokens_are_neutralized_and_restore_as_typed() -> None:
    vault = Vault()
    pseudonymize("mail sarah@acme.com", vault)
    text = "Is <EMAIL_1> the same as EMAIL_1, email\\_1 or &lt;email_1&gt;? Not <EMAIL_2>."
    masked, found = pseudonymize(text, vault)
    assert "EMAIL_1" not in masked.replace("<EMAIL_1>", "")
    assert "<EMAIL_1>" not in masked
    assert {f.kind for f in found} == {"literal"}
    assert restore(masked, vault) == text


def test_a_bare_id_typed_with_a_new_value_is_reserved_before_the_value_gets_a_token() -> None:
    vault = Vault()
    text = "my address is sarah@acme.com; call it EMAIL_1 from now on"
    masked, _ = pseudonymize(text, vault)
    assert masked == "my address is <EMAIL_2>; call it EMAIL_1 from now on"
    assert vault.reserved == {"EMAIL_1"}
    assert restore(masked, vault) == text


def test_dictionary_kinds_become_token_kinds() -> None:
    p = Pseudonymizer(DetectorSet.from_config({"clients": ["Acme Holdings"]}))
    vault = Vault()
    masked, _ = p.pseudonymize("Ask acme holdings about ACME HOLDINGS.", vault)
    assert masked == "Ask <CLIENTS_1> about <CLIENTS_1>."


def test_analyze_asks_for_tokens_without_touching_the_vault() -> None:
    p = Pseudonymizer()
    vault = Vault([SARAH])
    analysis = p.analyze("sarah@acme.com and bob@example.org", vault)
    assert not analysis.complete
    assert [(m.kind, m.value) for m in analysis.missing] == [("email", "bob@example.org")]
    assert len(vault) == 1
    vault.add("<EMAIL_7>", "email", "bob@example.org")  # as assigned by the store
    analysis = p.analyze("sarah@acme.com and bob@example.org", vault)
    assert analysis.masked_text == "<EMAIL_1> and <EMAIL_7>"


def test_a_vault_never_gives_one_token_two_values() -> None:
    vault = Vault([SARAH])
    with pytest.raises(VaultConflictError) as info:
        vault.add("<EMAIL_1>", "email", "other@acme.com")
    assert "other@acme.com" not in str(info.value)
    with pytest.raises(VaultConflictError):
        vault.add("<EMAIL_2>", "email", "SARAH@acme.com")
    assert "sarah" not in repr(vault) + repr(vault.entries())


VALUES = [
    "sarah@acme.com",
    "bob.smith@example.org",
    "+1 (415) 555-2671",
    "4111 1111 1111 1111",
    "DE89 3704 0044 0532 0130 00",
    "219-09-9999",
    "10.0.0.1",
    "sk-proj-AbCdEfGhIjKlMnOpQrSt1234",
    "<EMAIL_1>",
    "EMAIL_1",
    "&lt;phone_1&gt;",
    "LITERAL_1",
    "<LITERAL_2>",
]
FILLER = st.text(alphabet="ab Z09_<>&;\\.,@-é😀\u0301\n", max_size=6)


@given(
    messages=st.lists(
        st.lists(st.one_of(FILLER, st.sampled_from(VALUES)), max_size=8).map(" ".join),
        min_size=1,
        max_size=3,
    )
)
def test_round_trip_and_no_value_left_in_the_masked_text(messages: list[str]) -> None:
    vault = Vault()
    for text in messages:
        masked, found = pseudonymize(text, vault)
        assert restore(masked, vault) == text
        for f in found:
            if f.kind != "literal":
                assert f.value not in masked
        assert all(text[f.start : f.end] == f.value for f in found)


@given(text=st.text(max_size=60))
def test_round_trip_on_any_text(text: str) -> None:
    vault = Vault([SARAH, VaultEntry("<A_1>", "a", "x", "x")])
    masked, _ = pseudonymize(text, vault)
    assert restore(masked, vault) == text
