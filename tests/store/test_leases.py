"""Reply leases and shared rate buckets, on SQLite and PostgreSQL.

The rules under test: one holder per conversation at a time, cluster-wide; a lapsed lease is
taken over and its reply closed (incomplete, `other`, ended by the server) exactly once,
whoever notices; a holder learns which leases it lost; a user's rate bucket never spends a
token twice, however many processes take at once. Races use two `Store`s on one database
(each its own engine and connections), so on PostgreSQL the writers really run at once.
A lease with no time to live (`ttl=0`) has lapsed by the next transaction: no test sleeps.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from holdback.store import Store, VaultKey
from holdback.store.leases import Lease, LeaseTaken, new_holder
from holdback.store.records import Message

pytestmark = pytest.mark.anyio


@pytest.fixture
async def other(database_url: str, vault_key: VaultKey, store: Store) -> AsyncIterator[Store]:
    """A second store on the same database: another process, as far as the database knows."""
    opened = await Store.open(database_url, vault_key=vault_key, migrate=False)
    try:
        yield opened
    finally:
        await opened.close()


async def reply_in_flight(store: Store) -> tuple[str, str]:
    """A new conversation with a user message and its reply's placeholder, unfinished."""
    user = await store.ensure_local_user()
    conversation_id = store.new_conversation_id()
    turn = await store.begin_reply(conversation_id, "hello", create_for=user.id)
    return conversation_id, turn.assistant.id


async def message(store: Store, conversation_id: str, message_id: str) -> Message:
    return next(m for m in await store.list_messages(conversation_id) if m.id == message_id)


def assert_closed_by_server(found: Message) -> None:
    assert found.status == "incomplete"
    assert found.finish_reason == "other"
    assert found.meta["ended_by"] == "server"


async def test_one_holder_at_a_time(store: Store) -> None:
    chat = store.new_conversation_id()
    assert await store.acquire_lease(chat, None, "a", ttl=60) == LeaseTaken(True, None)
    assert await store.acquire_lease(chat, "m-b", "b", ttl=60) == LeaseTaken(False, None)
    lease = await store.lease_of(chat)
    assert lease is not None
    assert (lease.holder, lease.message_id, lease.expired) == ("a", None, False)
    assert lease.expires_at.tzinfo is not None

    # Its holder takes it again to name the reply; a later None keeps the name.
    assert (await store.acquire_lease(chat, "m-a", "a", ttl=60)).ok
    assert (await store.acquire_lease(chat, None, "a", ttl=60)).ok
    named = await store.lease_of(chat)
    assert named == Lease(chat, "a", "m-a", named.expires_at, False)  # type: ignore[union-attr]
    assert named.expires_at >= lease.expires_at  # type: ignore[union-attr]

    assert await store.renew_leases("a", [chat], ttl=60) == []
    assert await store.renew_leases("b", [chat], ttl=60) == [chat]
    await store.release_lease(chat, "b")  # not b's: nothing happens
    assert (await store.lease_of(chat)) is not None
    await store.release_lease(chat, "a")
    assert await store.lease_of(chat) is None
    assert await store.renew_leases("a", [chat], ttl=60) == [chat]
    assert (await store.acquire_lease(chat, "", "b", ttl=60)).ok
    assert (await store.lease_of(chat)).message_id is None  # type: ignore[union-attr]


async def test_renew_reports_exactly_the_leases_lost(store: Store) -> None:
    mine = [store.new_conversation_id() for _ in range(3)]
    theirs = store.new_conversation_id()
    for chat in mine:
        assert (await store.acquire_lease(chat, None, "a", ttl=60)).ok
    assert (await store.acquire_lease(theirs, None, "b", ttl=60)).ok
    await store.release_lease(mine[1], "a")
    gone = store.new_conversation_id()
    asked = [mine[2], theirs, mine[1], mine[0], gone, theirs]
    assert await store.renew_leases("a", asked, ttl=60) == [theirs, mine[1], gone]
    assert await store.renew_leases("a", [], ttl=60) == []
    before = (await store.lease_of(mine[0])).expires_at  # type: ignore[union-attr]
    assert await store.renew_leases("a", [mine[0]], ttl=3600) == []
    after = (await store.lease_of(mine[0])).expires_at  # type: ignore[union-attr]
    assert after - before > timedelta(minutes=55)


async def test_an_expired_lease_is_taken_over_and_its_reply_closed(store: Store) -> None:
    chat, reply = await reply_in_flight(store)
    assert (await store.acquire_lease(chat, reply, "a", ttl=0)).ok
    assert (await store.lease_of(chat)).expired  # type: ignore[union-attr]

    taken = await store.acquire_lease(chat, None, "b", ttl=60)
    assert taken == LeaseTaken(True, reply)
    assert_closed_by_server(await message(store, chat, reply))
    lease = await store.lease_of(chat)
    assert lease is not None
    assert (lease.holder, lease.message_id, lease.expired) == ("b", None, False)
    # a is told it lost the lease, and cannot take it back while b's is live.
    assert await store.renew_leases("a", [chat], ttl=60) == [chat]
    assert not (await store.acquire_lease(chat, reply, "a", ttl=60)).ok


async def test_a_holder_renewing_late_keeps_a_lease_nobody_took(store: Store) -> None:
    chat = store.new_conversation_id()
    assert (await store.acquire_lease(chat, "m", "a", ttl=0)).ok
    assert await store.renew_leases("a", [chat], ttl=60) == []
    assert not (await store.lease_of(chat)).expired  # type: ignore[union-attr]
    assert not (await store.acquire_lease(chat, None, "b", ttl=60)).ok


async def test_close_expired_leases_marks_unfinished_replies_once(store: Store) -> None:
    chat, reply = await reply_in_flight(store)
    finished_chat, finished = await reply_in_flight(store)
    live_chat, live = await reply_in_flight(store)
    assert (await store.acquire_lease(chat, reply, "a", ttl=0)).ok
    assert (await store.acquire_lease(finished_chat, finished, "a", ttl=0)).ok
    assert (await store.acquire_lease(live_chat, live, "a", ttl=3600)).ok
    await store.finish_reply(
        finished_chat, finished, text="done", parts={}, status="complete", finish_reason="stop"
    )

    assert await store.close_expired_leases() == [(chat, reply)]
    assert_closed_by_server(await message(store, chat, reply))
    done = await message(store, finished_chat, finished)
    assert (done.status, done.finish_reason, done.text) == ("complete", "stop", "done")
    assert "ended_by" not in done.meta
    assert await store.lease_of(chat) is None
    assert await store.lease_of(finished_chat) is None
    assert (await store.lease_of(live_chat)).holder == "a"  # type: ignore[union-attr]

    assert await store.close_expired_leases() == []  # idempotent
    later = datetime.now(UTC) + timedelta(hours=2)
    assert await store.close_expired_leases(now=later) == [(live_chat, live)]
    assert await store.close_expired_leases(now=later) == []
    assert await store.renew_leases("a", [chat, finished_chat, live_chat], ttl=60) == [
        chat,
        finished_chat,
        live_chat,
    ]


async def test_a_lease_that_named_no_reply_closes_its_unfinished_replies(store: Store) -> None:
    chat = store.new_conversation_id()
    assert (await store.acquire_lease(chat, None, "a", ttl=0)).ok
    # The holder stored its placeholder, then died before naming it in the lease.
    user = await store.ensure_local_user()
    reply = (await store.begin_reply(chat, "hello", create_for=user.id)).assistant.id
    assert await store.close_expired_leases() == [(chat, reply)]
    assert_closed_by_server(await message(store, chat, reply))


async def race(on: Store, chat: str, holder: str, results: list[tuple[str, LeaseTaken]]) -> None:
    results.append((holder, await on.acquire_lease(chat, None, holder, ttl=60)))


async def test_two_stores_racing_for_a_lease_give_it_to_one(store: Store, other: Store) -> None:
    for _ in range(5):
        chat = store.new_conversation_id()
        results: list[tuple[str, LeaseTaken]] = []
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for n in range(16):
                    tg.start_soon(race, store if n % 2 else other, chat, f"h{n}", results)
        winners = [holder for holder, taken in results if taken.ok]
        assert len(results) == 16
        assert len(winners) == 1
        assert (await other.lease_of(chat)).holder == winners[0]  # type: ignore[union-attr]


async def test_racing_for_an_expired_lease_closes_its_reply_once(
    store: Store, other: Store
) -> None:
    chat, reply = await reply_in_flight(store)
    assert (await store.acquire_lease(chat, reply, "dead", ttl=0)).ok
    results: list[LeaseTaken] = []

    async def take(on: Store, holder: str) -> None:
        results.append(await on.acquire_lease(chat, None, holder, ttl=60))

    async def sweep(on: Store) -> None:
        swept.extend(await on.close_expired_leases())

    swept: list[tuple[str, str]] = []
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for n in range(12):
                tg.start_soon(take, store if n % 2 else other, f"h{n}")
            tg.start_soon(sweep, store)
            tg.start_soon(sweep, other)
    # Whoever noticed first closed it: one taker (reporting it) or one sweeper, never two.
    reported = [t.expired_message_id for t in results if t.expired_message_id] + [
        m for _, m in swept
    ]
    assert reported == [reply]
    assert sum(t.ok for t in results) == 1
    assert_closed_by_server(await message(other, chat, reply))


async def test_two_stores_sweeping_at_once_close_each_reply_once(
    store: Store, other: Store
) -> None:
    expected = set()
    for _ in range(12):
        chat, reply = await reply_in_flight(store)
        assert (await store.acquire_lease(chat, reply, "dead", ttl=0)).ok
        expected.add((chat, reply))
    swept: list[tuple[str, str]] = []

    async def sweep(on: Store) -> None:
        swept.extend(await on.close_expired_leases())

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for n in range(6):
                tg.start_soon(sweep, store if n % 2 else other)
    assert sorted(swept) == sorted(expected)
    for chat, reply in expected:
        assert_closed_by_server(await message(other, chat, reply))
        assert await store.lease_of(chat) is None


async def test_rate_bucket_counts_exactly_under_concurrent_takes(
    store: Store, other: Store
) -> None:
    user, neighbour = (await store.ensure_local_user()).id, "someone-else"
    start = datetime.now(UTC)
    results: list[bool] = []

    async def take(on: Store, at: datetime) -> None:
        results.append(await on.take_rate_token(user, 7, now=at))

    async def burst(at: datetime, takes: int = 30) -> int:
        results.clear()
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for n in range(takes):
                    tg.start_soon(take, store if n % 2 else other, at)
        assert len(results) == takes
        return sum(results)

    assert await burst(start) == 7  # a full bucket, then nothing
    assert await burst(start + timedelta(seconds=8)) == 0  # 8 s refill 0.93 of a token
    assert await burst(start + timedelta(seconds=9)) == 1  # 9 s: 1.05
    assert await burst(start + timedelta(hours=1)) == 7  # refilled, but never past capacity
    assert await burst(start + timedelta(seconds=30)) == 0  # an earlier clock adds nothing
    assert await other.take_rate_token(neighbour, 7, now=start)  # each user their own bucket


async def test_rate_bucket_by_the_database_clock(store: Store, other: Store) -> None:
    results: list[bool] = []

    async def take(on: Store) -> None:
        results.append(await on.take_rate_token("burst", 5))

    with anyio.fail_after(10):  # one token refills in 12 s: none can come back in time
        async with anyio.create_task_group() as tg:
            for n in range(40):
                tg.start_soon(take, store if n % 2 else other)
    assert sum(results) == 5
    assert len(results) == 40


async def test_bad_arguments_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="holder"):
        await store.acquire_lease("c", None, "", ttl=1)
    with pytest.raises(ValueError, match="holder"):
        await store.renew_leases("x" * 301, ["c"], ttl=1)
    for ttl in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="time to live"):
            await store.acquire_lease("c", None, "a", ttl=ttl)
    with pytest.raises(ValueError, match="token a minute"):
        await store.take_rate_token("u", 0)
    assert await store.lease_of("c") is None


def test_a_holder_names_the_host_the_process_and_a_random_part() -> None:
    host, pid, part = new_holder().rsplit(":", 2)
    assert (host, pid) == (socket.gethostname(), str(os.getpid()))
    assert len(part) == 12
    assert new_holder() != new_holder()
