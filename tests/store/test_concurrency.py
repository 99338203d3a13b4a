"""Concurrent writers: no duplicate tokens, no lost messages, across tasks and processes."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import anyio
import pytest
from sqlalchemy import text

from holdback.store import Store, VaultItem, VaultKey
from holdback.store.engine import create_engine, parse_database_url
from holdback.store.vault import seal_entry
from holdback.tokens import parse_id, token_id
from tests.store.store_worker import shared_items

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[2]


def check_assignments(pairs: Iterable[tuple[str, str]], vault: dict[str, str]) -> None:
    """One token per value, one value per token, numbering dense per kind, vault agrees."""
    token_of: dict[str, str] = {}
    value_of: dict[str, str] = {}
    for value, token in pairs:
        assert token_of.setdefault(value, token) == token, f"{value} got two tokens"
        assert value_of.setdefault(token, value) == value, f"{token} stands for two values"
    numbers: dict[str, list[int]] = defaultdict(list)
    for token in vault:
        kind, n = parse_id(token_id(token))
        numbers[kind].append(n)
    for kind, seen in numbers.items():
        assert sorted(seen) == list(range(1, len(seen) + 1)), f"{kind} numbering has gaps"
    assert {token: vault[token] for token in value_of} == value_of
    assert len(vault) == len(set(vault.values()))


async def new_conversation(store: Store) -> str:
    user = await store.ensure_local_user()
    return (await store.create_conversation(user.id)).id


async def test_concurrent_tasks_never_duplicate_tokens(store: Store) -> None:
    chat = await new_conversation(store)
    items = shared_items()
    results: list[tuple[str, str]] = []

    async def writer(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(4):
            sample = rng.sample(items, rng.randint(1, 15))
            tokens = await store.assign_tokens(chat, sample)
            results.extend(zip((i.value for i in sample), tokens, strict=True))

    async with anyio.create_task_group() as tg:
        for seed in range(16):
            tg.start_soon(writer, seed)
    vault = await store.load_vault(chat)
    check_assignments(results, vault)
    assert set(vault.values()) == {value for value, _ in results}


async def test_concurrent_messages_are_all_kept_in_a_stable_order(store: Store) -> None:
    chat = await new_conversation(store)

    async def writer(name: str) -> None:
        for i in range(8):
            await store.add_message(chat, "user", f"{name}-{i}")

    async with anyio.create_task_group() as tg:
        for name in ("tab-a", "tab-b", "tab-c", "tab-d"):
            tg.start_soon(writer, name)
    messages = await store.list_messages(chat)
    assert [m.seq for m in messages] == list(range(1, 33))
    assert sorted(m.text for m in messages) == sorted(
        f"{name}-{i}" for name in ("tab-a", "tab-b", "tab-c", "tab-d") for i in range(8)
    )
    # Each writer's own messages appear in the order it wrote them.
    for name in ("tab-a", "tab-b", "tab-c", "tab-d"):
        mine = [m.text for m in messages if m.text.startswith(name)]
        assert mine == [f"{name}-{i}" for i in range(8)]
    assert await store.list_messages(chat) == messages


async def test_concurrent_local_user_creation_yields_one_user(store: Store) -> None:
    users = []

    async def create() -> None:
        users.append(await store.ensure_local_user())

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(create)
    assert len({u.id for u in users}) == 1


@pytest.mark.postgres
@pytest.mark.parametrize("engine_name", ["postgres"], indirect=True)
async def test_a_writer_that_slips_past_the_lock_causes_a_retry_not_a_duplicate(
    store: Store, database_url: str, vault_key: VaultKey, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="holdback.store.database")
    chat = await new_conversation(store)
    intruder = create_engine(parse_database_url(database_url))
    async with intruder.connect() as conn:
        # An uncommitted <EMAIL_1> inserted without the conversation lock: the store's insert
        # of its own <EMAIL_1> waits on it, fails when it commits, and must retry.
        trans = await conn.begin()
        await conn.execute(
            text(
                "INSERT INTO vault_entries (conversation_id, token, kind, number, value_hash,"
                " value_ciphertext, created_at) VALUES (:c, '<EMAIL_1>', 'EMAIL', 1, :h, :v, now())"
            ),
            {
                "c": chat,
                "h": vault_key.value_hash("EMAIL", "first@x.io"),
                "v": seal_entry(vault_key, chat, "first@x.io", "first@x.io"),
            },
        )
        async with anyio.create_task_group() as tg:
            results: list[list[str]] = []

            async def assign() -> None:
                item = VaultItem("email", "second@x.io", "second@x.io")
                results.append(await store.assign_tokens(chat, [item]))

            tg.start_soon(assign)
            await anyio.sleep(0.5)  # the store is now blocked on the intruder's row
            await trans.commit()
    await intruder.dispose()
    assert results == [["<EMAIL_2>"]]
    assert "assigning vault tokens collided with a concurrent writer" in caplog.text
    assert await store.load_vault(chat) == {"<EMAIL_1>": "first@x.io", "<EMAIL_2>": "second@x.io"}


def start_workers(
    url: str, conversation: str, key: VaultKey, go: Path, count: int, rounds: int
) -> list[subprocess.Popen[str]]:
    env = {**os.environ, "HOLDBACK_VAULT_KEY": key.encode()}
    return [
        subprocess.Popen(
            [sys.executable, "-m", "tests.store.store_worker", url, conversation, str(seed),
             str(rounds), str(go)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(count)
    ]  # fmt: skip


def collect(workers: list[subprocess.Popen[str]]) -> list[dict[str, object]]:
    outputs = []
    for worker in workers:
        out, err = worker.communicate(timeout=240)
        assert worker.returncode == 0, err
        outputs.append(json.loads(out))
    return outputs


@pytest.mark.slow
async def test_two_processes_share_one_conversation(
    store: Store, database_url: str, vault_key: VaultKey, tmp_path: Path
) -> None:
    chat = await new_conversation(store)
    go = tmp_path / "go"
    workers = start_workers(database_url, chat, vault_key, go, count=2, rounds=25)
    go.touch()
    outputs = await anyio.to_thread.run_sync(collect, workers)
    pairs = [(v, t) for out in outputs for v, t in out["assigned"]]  # type: ignore[attr-defined]
    vault = await store.load_vault(chat)
    check_assignments(pairs, vault)
    messages = await store.list_messages(chat)
    written = {m for out in outputs for m in out["messages"]}  # type: ignore[attr-defined]
    assert len(written) == 50
    assert {m.id for m in messages} == written
    assert [m.seq for m in messages] == list(range(1, 51))


@pytest.mark.slow
async def test_processes_migrating_a_fresh_database_at_once_all_succeed(
    database_url: str, vault_key: VaultKey, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    workers = start_workers(database_url, "-", vault_key, go, count=3, rounds=0)
    go.touch()
    outputs = await anyio.to_thread.run_sync(collect, workers)
    assert outputs == [{"opened": True}] * 3
    store = await Store.open(database_url, vault_key=vault_key, migrate=False)
    await store.close()
