"""Search queries on both engines: values by keyed hash, words by escaped LIKE, only in
conversations the viewer may read, newest first, and only the entries asked for opened."""

from __future__ import annotations

import pytest

from holdback.store import Store
from holdback.store import search as queries
from holdback.store.records import VaultItem

pytestmark = pytest.mark.anyio

EMAIL = "search.canary@example.org"


async def _setup(store: Store) -> tuple[str, str, str, str, str, str]:
    """ada's conversation (shared with grace's group), grace's own, linus's; their ids."""
    ada = await store.create_user("ada", None)
    grace = await store.create_user("grace", None)
    linus = await store.create_user("linus", None)
    await store.create_group("ops")
    await store.add_member("ops", "grace")
    mine = await store.create_conversation(ada.id, "plans")
    theirs = await store.create_conversation(grace.id, "notes")
    other = await store.create_conversation(linus.id, "secret")
    await store.share(mine.id, ada.id, group="ops", access="read")
    for conversation in (mine, theirs, other):
        await store.assign_tokens(conversation.id, [VaultItem("email", EMAIL, EMAIL)])
    await store.add_message(mine.id, "user", "Write to <EMAIL_1> about 100% of a_b")
    await store.add_message(mine.id, "assistant", "Noted: <EMAIL_1>.")
    await store.add_message(theirs.id, "user", "100x of axb, mail <EMAIL_1>")
    await store.add_message(other.id, "user", "<EMAIL_1> 100% a_b")
    return ada.id, grace.id, linus.id, mine.id, theirs.id, other.id


async def _scan(store: Store, viewer: str, patterns: list[queries.Pattern]) -> list[str]:
    seen: list[str] = []

    def take(batch: list[queries.Candidate]) -> bool:
        seen.extend(c.text for c in batch)
        return False

    read = await queries.scan(store, viewer, patterns, take, limit=100, batch=1)
    assert read == len(seen)
    return seen


async def test_values_are_found_by_hash_only_where_the_viewer_may_read(store: Store) -> None:
    ada, grace, linus, mine, theirs, other = await _setup(store)
    key = ("EMAIL", queries.value_hash(store, "EMAIL", EMAIL))
    wrong_label = ("PHONE", key[1])
    for viewer, expected in ((ada, {mine}), (grace, {mine, theirs}), (linus, {other})):
        found = await queries.find_values(store, viewer, [key, wrong_label])
        assert {f.conversation_id for f in found} == expected
        assert {(f.token, f.kind, f.key) for f in found} == {("<EMAIL_1>", "email", key)}
        owned = {f.conversation_id for f in found if f.owner_id == viewer}
        assert owned == (expected - {mine} if viewer == grace else expected)
    assert await queries.find_values(store, ada, []) == []
    other_value = ("EMAIL", queries.value_hash(store, "EMAIL", "nobody@example.org"))
    assert await queries.find_values(store, grace, [other_value]) == []


async def test_words_are_escaped_and_tokens_are_per_conversation(store: Store) -> None:
    ada, grace, _, mine, theirs, _ = await _setup(store)
    percent = queries.Pattern(words=("100%",))
    underscore = queries.Pattern(words=("A_B",))  # case folded, `_` not a wildcard
    assert await _scan(store, grace, [percent]) == ["Write to <EMAIL_1> about 100% of a_b"]
    assert await _scan(store, grace, [underscore]) == ["Write to <EMAIL_1> about 100% of a_b"]
    by_token = queries.Pattern(tokens={"<EMAIL_1>": {theirs}})
    assert await _scan(store, grace, [by_token]) == ["100x of axb, mail <EMAIL_1>"]
    # Newest first; every pattern must pass.
    both = queries.Pattern(tokens={"<EMAIL_1>": {mine, theirs}})
    assert await _scan(store, grace, [both]) == [
        "100x of axb, mail <EMAIL_1>",
        "Noted: <EMAIL_1>.",
        "Write to <EMAIL_1> about 100% of a_b",
    ]
    assert await _scan(store, grace, [both, percent]) == ["Write to <EMAIL_1> about 100% of a_b"]
    assert await _scan(store, grace, [queries.Pattern()]) == []
    assert len(await _scan(store, ada, [])) == 2  # no pattern: every message ada may read


async def test_scan_stops_when_taken_enough(store: Store) -> None:
    _, grace, *_ = await _setup(store)
    taken: list[int] = []

    def take(batch: list[queries.Candidate]) -> bool:
        taken.append(len(batch))
        return True

    assert await queries.scan(store, grace, [], take, limit=100, batch=2) == 2
    assert taken == [2]
    assert await queries.scan(store, grace, [], lambda b: False, limit=1) == 1


async def test_only_the_entries_asked_for_are_opened(store: Store) -> None:
    *_, mine, theirs, _ = await _setup(store)
    await store.assign_tokens(mine, [VaultItem("email", "two@example.org", "two@example.org")])
    opened = await queries.entries(store, {mine: {"<EMAIL_2>", "<PHONE_9>"}, theirs: set()})
    assert dict(opened[mine]) == {"<EMAIL_2>": "two@example.org"}
    assert dict(opened[theirs]) == {}


async def test_a_searchs_reveals_are_one_write(store: Store) -> None:
    _, grace, _, mine, theirs, _ = await _setup(store)
    items = [("<EMAIL_1>", "email", "masked"), ("<PHONE_1>", "phone", "label")]
    assert await queries.record(store, grace, [(mine, None, items), (theirs, None, [])]) == 1
    events = await store.list_reveal_events(viewer_id=grace)
    assert [(e.conversation_id, e.token, e.level) for e in events] == [
        (mine, "<EMAIL_1>", "masked")
    ]
    assert await queries.record(store, grace, []) == 0
