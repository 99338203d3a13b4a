"""The shared script: keys, messages, replies, chunks, plans and offsets."""

from __future__ import annotations

from collections import Counter

import pytest

from server import script


def test_letters_are_fixed_width_and_distinct() -> None:
    seen = {script.letters(n, 3) for n in range(26**3)}
    assert len(seen) == 26**3
    assert all(len(s) == 3 and s.isalpha() and s.islower() for s in seen)
    with pytest.raises(script.ScriptError):
        script.letters(26**3, 3)


def test_user_message_carries_its_key_and_values() -> None:
    key = script.stream_key(3, 41, 7)
    text = script.user_message(41, key)
    assert script.find_key(text) == key
    assert "@acme-mail.com" in text
    assert "+1 415 555" in text


def test_holdback_masks_the_values_but_not_the_key() -> None:
    from holdback.pseudonymize import pseudonymize
    from holdback.vault import Vault

    key = script.stream_key(1, 2, 3)
    masked, found = pseudonymize(script.user_message(2, key), Vault())
    assert script.find_key(masked) == key
    assert script.find_tokens(masked) == ("<EMAIL_1>", "<PHONE_1>")
    assert len(found) == 2


def test_reply_is_deterministic_and_mentions_the_tokens() -> None:
    tokens = ("<EMAIL_3>", "<PHONE_9>")
    a = script.reply_text("bkaaaaabaaac", tokens, 400)
    assert a == script.reply_text("bkaaaaabaaac", tokens, 400)
    assert a != script.reply_text("bkaaaaabaaad", tokens, 400)
    assert len(a) >= 400
    assert a.count("<EMAIL_3>") + a.count("<PHONE_9>") >= 3
    assert set(script.find_tokens(a)) <= set(tokens)


def test_reply_without_tokens_uses_the_default_ones() -> None:
    text = script.reply_text("bkqqqqqqqqqq", (), 300)
    assert set(script.find_tokens(text)) <= set(script.DEFAULT_TOKENS)
    assert script.find_tokens(text)


@pytest.mark.parametrize("length", [1, 2, 5, 6, 7, 100, 401])
def test_chunk_sizes_add_up_and_stay_in_bounds(length: int) -> None:
    sizes = script.chunk_sizes("bkabcdefghij", length)
    assert sum(sizes) == length
    assert all(1 <= s <= 6 for s in sizes)


def test_split_refuses_sizes_that_do_not_add_up() -> None:
    assert script.split("abcdef", [2, 4]) == ["ab", "cdef"]
    with pytest.raises(script.ScriptError):
        script.split("abcdef", [2, 3])


def test_tokens_get_split_across_chunks() -> None:
    split_tokens = 0
    for conn in range(20):
        key = script.stream_key(0, conn, 0)
        text = script.reply_text(key, script.DEFAULT_TOKENS, 400)
        pieces = script.split(text, script.chunk_sizes(key, len(text)))
        split_tokens += sum(1 for p in pieces if "<" in p and ">" not in p.split("<")[-1])
    assert split_tokens > 20


def test_plan_is_shared_and_roughly_at_the_rate() -> None:
    kinds = Counter(script.plan_for(5, script.stream_key(0, c, 0)).kind for c in range(4000))
    assert script.plan_for(None, "bkaaaaaaaaaa").kind == "normal"
    assert script.plan_for(5, "bkaaaaaaaaab") == script.plan_for(5, "bkaaaaaaaaab")
    for kind in script.DISTURBANCES:
        assert 100 <= kinds[kind] <= 220, kinds
    plans = [script.plan_for(5, script.stream_key(0, c, 1)) for c in range(500)]
    assert all(3 <= p.at <= 40 for p in plans if p.kind != "normal")


def test_restore_offsets_map_inside_a_token_to_its_start() -> None:
    text = "ab <EMAIL_1> cd"
    restored, offsets = script.restore_offsets(text, {"<EMAIL_1>": "x@y.z"})
    assert restored == "ab x@y.z cd"
    assert len(offsets) == len(text) + 1
    assert offsets[3] == 3  # the token's start
    assert offsets[7] == 3  # inside the token: nothing of it can be shown yet
    assert offsets[12] == 8  # just after the token: the whole value
    assert offsets[len(text)] == len(restored)


def test_restore_offsets_leave_unknown_tokens_alone() -> None:
    restored, offsets = script.restore_offsets("<PHONE_1>!", {})
    assert restored == "<PHONE_1>!"
    assert offsets == list(range(11))


@pytest.mark.parametrize(
    ("text", "leaks"),
    [
        ("I will write to x@y.com today.", 0),
        ("I will write to <EMAIL_1> today.", 1),
        ("try <PHO", 1),
        ("then EMAIL_1 and &lt;PHONE_1&gt;", 2),
        ("ends with <", 1),
        ("a < b and email me", 0),
    ],
)
def test_leak_pattern(text: str, leaks: int) -> None:
    assert len(script.LEAK_RE.findall(text)) == leaks


def test_script_text_itself_never_looks_like_a_leak() -> None:
    for conn in range(50):
        key = script.stream_key(0, conn, 0)
        text = script.reply_text(key, ("<EMAIL_1>", "<PHONE_1>"), 400)
        clean = text.replace("<EMAIL_1>", "a@b.com").replace("<PHONE_1>", "+1 415 555 0100")
        assert not script.LEAK_RE.search(clean)
