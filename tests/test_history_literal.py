"""Issue #13, item 5: what the user typed literally keeps its text forever.

A user who types a bare id (`EMAIL_1`, `email\\_1`, `Clients_2`) before that token exists must
not see it rewritten later, when a real value would have been given that id: the id is
*reserved* (never assigned) and stays in the masked text as typed, so restoring the stored
history gives back exactly what the user typed, however the vault grows afterwards.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdback.detect import DetectorSet
from holdback.pseudonymize import Pseudonymizer, pseudonymize
from holdback.store.records import StoredVault
from holdback.stream import restore
from holdback.tokens import bare_ids, find_typed_tokens
from holdback.vault import Vault, VaultConflictError, VaultEntry

SARAH = VaultEntry("<EMAIL_1>", "email", "sarah@acme.com", "sarah@acme.com")
CLIENTS = Pseudonymizer(DetectorSet.from_config({"clients": ["Acme Holdings", "Globex"]}))


def test_a_bare_id_typed_before_its_token_exists_is_never_rewritten() -> None:
    vault = Vault()
    first = "Call the client EMAIL_1 (or email\\_1, Email_1) in the report."
    masked_first, found = pseudonymize(first, vault)
    # The model sees the bare id as typed; nothing was replaced, the id is reserved.
    assert masked_first == first
    assert found == []
    assert vault.reserved == {"EMAIL_1"}

    masked_second, _ = pseudonymize("Her address is sarah@acme.com.", vault)
    assert masked_second == "Her address is <EMAIL_2>."
    assert dict(vault) == {"<EMAIL_2>": "sarah@acme.com"}
    # The history restores to what was typed, both messages.
    assert restore(masked_first, vault) == first
    assert restore(masked_second, vault) == "Her address is sarah@acme.com."
    # The model's reply may use the bare id: it restores to nothing, the real token to its value.
    assert restore("EMAIL_1 is <EMAIL_2>", vault.index()) == "EMAIL_1 is sarah@acme.com"


def test_dictionary_kinds_and_escaped_underscores_are_reserved_too() -> None:
    vault = Vault()
    first = "Clients\\_2 and clients_3 are placeholders"
    masked_first, _ = CLIENTS.pseudonymize(first, vault)
    assert masked_first == first
    masked, _ = CLIENTS.pseudonymize("Acme Holdings, Globex and acme holdings", vault)
    assert masked == "<CLIENTS_1>, <CLIENTS_4> and <CLIENTS_1>"
    assert restore(masked_first, vault) == first


def test_typed_tokens_become_literals_and_their_ids_are_reserved() -> None:
    vault = Vault()
    text = "is <EMAIL_1> or &lt;phone\\_1&gt; a token? LITERAL_1 is not"
    masked, found = pseudonymize(text, vault)
    assert [f.kind for f in found] == ["literal", "literal"]
    assert "<EMAIL_1>" not in masked
    assert "phone" not in masked
    assert vault.reserved == {"EMAIL_1", "PHONE_1", "LITERAL_1"}
    # The literal tokens themselves skip the reserved LITERAL_1.
    assert set(vault) == {"<LITERAL_2>", "<LITERAL_3>"}
    pseudonymize("sarah@acme.com, +1 415 555 2671", vault)
    assert {"<EMAIL_2>", "<PHONE_2>"} <= set(vault)
    assert restore(masked, vault) == text


def test_an_id_of_an_existing_token_is_neutralized_not_reserved() -> None:
    vault = Vault()
    pseudonymize("sarah@acme.com", vault)
    text = "so EMAIL_1 and EMAIL_2"
    masked, _ = pseudonymize(text, vault)
    assert masked == "so <LITERAL_1> and EMAIL_2"
    assert vault.reserved == {"EMAIL_2"}
    pseudonymize("bob@acme.com", vault)
    assert vault["<EMAIL_3>"] == "bob@acme.com"
    assert restore(masked, vault) == text


def test_ids_spelled_inside_a_value_are_not_reserved() -> None:
    # A value's text stays out of the vault's clear columns, reservations included.
    vault = Vault()
    masked, _ = pseudonymize("write to JOHN_1@acme.com", vault)
    assert masked == "write to <EMAIL_1>"
    assert vault.reserved == frozenset()


@pytest.mark.parametrize(
    "text",
    [
        "sarah@acme.com\\EMAIL_1",  # the user's `\\` is a word boundary
        "2001:db8::1Email_1",  # the address takes the `E`: `mail_1` is bare after the token
    ],
)
def test_an_id_next_to_a_value_is_reserved_as_the_masked_text_spells_it(text: str) -> None:
    # The token's `<` and `>` are word boundaries: an id can be bare in the masked text only.
    vault = Vault()
    masked, _ = pseudonymize(text, vault)
    spelled = bare_ids(masked) - set(vault.index().values)
    assert spelled
    assert spelled <= vault.reserved
    for ident in spelled:
        kind = ident.rsplit("_", 1)[0].lower()
        for i in range(5):
            vault.assign(kind, f"value {i}")
    assert restore(masked, vault) == text


def test_reserved_ids_are_not_tokens() -> None:
    vault = Vault([SARAH], reserved=["phone_2", "<EMAIL_2>"])
    assert vault.reserved == {"PHONE_2", "EMAIL_2"}
    assert dict(vault) == {"<EMAIL_1>": "sarah@acme.com"}
    assert len(vault) == 1
    assert "<EMAIL_2>" not in vault
    assert set(vault.index().values) == {"EMAIL_1"}
    vault.reserve("EMAIL_4")
    vault.reserve("EMAIL_4")  # twice is harmless
    assert [vault.assign("email", f"u{i}@x.io") for i in range(3)] == [
        "<EMAIL_3>",
        "<EMAIL_5>",
        "<EMAIL_6>",
    ]
    with pytest.raises(VaultConflictError):
        vault.reserve("EMAIL_1")  # a token cannot be reserved
    with pytest.raises(VaultConflictError):
        vault.add("<PHONE_2>", "phone", "+1 415 555 2671")  # a reserved id is never a token
    assert "sarah" not in repr(vault)
    assert "reserved" in repr(vault)


def test_a_stored_vault_brings_its_reservations() -> None:
    stored = StoredVault([SARAH], frozenset({"EMAIL_2"}))
    assert stored == {"<EMAIL_1>": "sarah@acme.com"}
    assert "sarah" not in repr(stored)
    vault = Vault(stored)
    assert vault.reserved == {"EMAIL_2"}
    assert vault.assign("email", "bob@acme.com") == "<EMAIL_3>"
    assert Vault(stored, reserved=()).reserved == frozenset()


def test_the_spellings_found_are_the_restorers() -> None:
    assert bare_ids("EMAIL_1 email\\_2 <Clients_3> &lt;a_4&gt; \\B_1 x.C_1") == {
        "EMAIL_1",
        "EMAIL_2",
        "CLIENTS_3",
        "A_4",
        "B_1",
        "C_1",
    }
    # A `\\` is a word boundary, so the id before it counts, and so does the whole run.
    assert bare_ids("EMAIL_1\\_2") == {"EMAIL_1", "EMAIL_1_2"}
    # Not on a word boundary, not an id, or not ASCII: nothing.
    assert bare_ids("9EMAIL_1 éEMAIL_1 EMAIL_1é _EMAIL_1 EMAIL_01 EMAIL_ ſ_1 \u212a_1") == set()
    assert [i for _, _, i in find_typed_tokens("<email\\_1> &LT;A_2&gt; <B_3&gt; <ſ_1> <C_0>")] == [
        "EMAIL_1",
        "A_2",
    ]


IDS = [
    "EMAIL_1",
    "email_2",
    "EMAIL\\_3",
    "Email_1",
    "PHONE_1",
    "phone\\_2",
    "LITERAL_1",
    "literal\\_2",
    "<EMAIL_4>",
    "&lt;phone_3&gt;",
    "CLIENTS_1",
    "Clients\\_2",
    "EMAIL_1\\_2",
    "\\EMAIL_5",
    "A_1",
]
VALUES = [
    "sarah@acme.com",
    "bob@example.org",
    "+1 (415) 555-2671",
    "Acme Holdings",
    "Globex",
]
FILLER = st.text(alphabet="ab Z09_<>&;\\.,@-é\n", max_size=5)
# Values stand apart, so each is always found whole (a variant spelling of a value would
# restore to the first spelling, by design); ids may touch anything.
TEXT = st.lists(
    st.one_of(FILLER, st.sampled_from(IDS), st.sampled_from([f" {v} " for v in VALUES])),
    max_size=8,
)
LATER = [
    ("email", [f"later{i}@example.com" for i in range(6)]),
    ("phone", [f"+1 415 555 26{i:02d}" for i in range(10, 16)]),
    ("literal", [f"typed {i}" for i in range(6)]),
    ("clients", [f"client {i}" for i in range(6)]),
    ("a", [f"thing {i}" for i in range(3)]),
]


@given(
    messages=st.lists(
        st.tuples(TEXT, st.sampled_from(["", " "])).map(lambda t: t[1].join(t[0])),
        min_size=1,
        max_size=3,
    ),
    later=st.lists(st.sampled_from(LATER), max_size=4),
)
def test_history_restores_as_typed_however_the_vault_grows(
    messages: list[str], later: list[tuple[str, list[str]]]
) -> None:
    vault = Vault()
    history = []
    for text in messages:
        masked, _ = CLIENTS.pseudonymize(text, vault)
        assert restore(masked, vault) == text
        history.append((text, masked))
    # Later values of every kind the texts spell ids of, and a later message with values.
    for kind, values in later:
        for value in values:
            vault.assign(kind, value)
    CLIENTS.pseudonymize("sarah@acme.com Globex bob@example.org", vault)
    assert not vault.reserved & set(vault.index().values)
    for text, masked in history:
        assert restore(masked, vault) == text
