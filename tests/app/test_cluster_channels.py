"""What processes on one PostgreSQL hear of each other (issue 20), in process: two `Cluster`s
on one throwaway database stand for two processes.

- A reply's frames are announced on its conversation's channel only: a listener on another
  conversation's channel hears nothing of it, and a process stops listening once it
  follows nothing of a conversation.
- One flush publishes the frames of every reply a process runs, each reply announced.
- Stop reaches the process that runs the reply on that process's own channel.
- Viewers asking for one remote reply at once share one lookup and one reply.

The oracle reads the database and the announcements with its own asyncpg connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from holdback.app.cluster import Cluster
from holdback.app.remote_replies import RemoteReplies
from holdback.store import Store, VaultKey
from tests.support.postgres import postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]
pytestmark = [pytest.mark.postgres, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(postgres_url, vault_key=VaultKey.generate(source="test"))
    try:
        yield opened
    finally:
        await opened.close()


class Heard:
    """Announcements on channels named by hand (not by the code under test)."""

    def __init__(self) -> None:
        self.payloads: dict[str, list[dict[str, Any]]] = {}
        self.event = asyncio.Event()

    def __call__(self, _conn: object, _pid: int, channel: str, payload: str) -> None:
        self.payloads.setdefault(channel, []).append(json.loads(payload))
        self.event.set()

    async def until(self, channel: str, count: int) -> list[dict[str, Any]]:
        async with asyncio.timeout(10):
            while len(self.payloads.get(channel, [])) < count:
                self.event.clear()
                await self.event.wait()
        return self.payloads[channel]


def dsn(store: Store) -> str:
    return store.target.listen_dsn()


class Collected:
    """A follower that keeps what it is given."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.got = asyncio.Event()

    @property
    def shown(self) -> int:
        return self.seen[-1] if self.seen else 1

    def release(self, numbered: list[tuple[int, Any]]) -> None:
        for seq, _ in numbered:
            if seq == self.shown + 1:
                self.seen.append(seq)
        self.got.set()


def delta(seq: int, conversation_id: str, message_id: str, text: str) -> dict[str, Any]:
    return {"type": "assistant_delta", "seq": seq, "conversation_id": conversation_id,
            "message_id": message_id, "channel": "content", "text": text}  # fmt: skip


async def test_frames_are_announced_on_their_conversation_only(store: Store) -> None:
    user = await store.ensure_local_user()
    x = await store.create_conversation(user.id)
    y = await store.create_conversation(user.id)
    a = Cluster(store, dsn(store), on_cancel=lambda _: None)
    await a.start()
    oracle = await asyncpg.connect(dsn(store))
    heard = Heard()
    try:
        channels = {
            "x": await oracle.fetchval("SELECT 'holdback_f_' || $1::text", _digest(x.id)),
            "y": await oracle.fetchval("SELECT 'holdback_f_' || $1::text", _digest(y.id)),
        }
        await oracle.add_listener(channels["x"], heard)
        # Two replies of one process, published by one flush.
        a.publish(x.id, "mx", [delta(2, x.id, "mx", "one")])
        a.publish(y.id, "my", [delta(2, y.id, "my", "two"), delta(3, y.id, "my", "three")])
        await a._flush()
        got = await heard.until(channels["x"], 1)
        assert got == [{"m": "mx", "s": 2}]
        rows = await oracle.fetch(
            "SELECT message_id, seq FROM reply_frames ORDER BY message_id, seq"
        )
        assert [(r["message_id"], r["seq"]) for r in rows] == [("mx", 2), ("my", 2), ("my", 3)]
        await asyncio.sleep(0)  # any stray announcement would have been delivered with x's
        assert set(heard.payloads) == {channels["x"]}
    finally:
        await oracle.close()
        await a.close()


class Pair:
    """Two processes (A and B) on one store, and a conversation; A records Stop requests."""

    def __init__(self, store: Store, conversation_id: str) -> None:
        self.store, self.x = store, conversation_id
        self.cancelled: list[str] = []
        self.stopped = asyncio.Event()
        self.a = Cluster(store, dsn(store), on_cancel=self._cancel)
        self.b = Cluster(store, dsn(store), on_cancel=lambda _: pytest.fail("b runs nothing"))

    def _cancel(self, conversation_id: str) -> None:
        self.cancelled.append(conversation_id)
        self.stopped.set()


@pytest.fixture
async def pair(store: Store) -> AsyncIterator[Pair]:
    user = await store.ensure_local_user()
    made = Pair(store, (await store.create_conversation(user.id)).id)
    await made.a.start()
    await made.b.start()
    try:
        yield made
    finally:
        await made.a.close()
        await made.b.close()


async def test_a_follower_hears_new_frames_and_the_channel_is_left_after(pair: Pair) -> None:
    a, b, x = pair.a, pair.b, pair.x
    follower = Collected()
    a.publish(x, "m1", [delta(2, x, "m1", "early")])
    await a._flush()
    await b.follow(x, "m1", follower)
    assert follower.seen == [2]  # read from the table
    follower.got.clear()
    a.publish(x, "m1", [delta(3, x, "m1", "late")])
    await a._flush()
    await until_seen(follower, [2, 3])
    assert b._listening  # listening while it follows
    b.unfollow(x, "m1", follower)
    async with asyncio.timeout(10):
        await asyncio.gather(*b._reads)  # the change of listener it started
    assert not b._listening


async def until_seen(follower: Collected, seqs: list[int]) -> None:
    async with asyncio.timeout(20):
        while follower.seen != seqs:
            await follower.got.wait()
            follower.got.clear()


async def test_a_lost_listener_listens_again_and_misses_nothing(pair: Pair) -> None:
    a, b, x = pair.a, pair.b, pair.x
    follower = Collected()
    a.publish(x, "m1", [delta(2, x, "m1", "before")])
    await a._flush()
    await b.follow(x, "m1", follower)
    assert b._listener is not None
    lost = b._listener.get_server_pid()
    oracle = await asyncpg.connect(dsn(pair.store))
    try:
        assert await oracle.fetchval("SELECT pg_terminate_backend($1)", lost)
    finally:
        await oracle.close()
    a.publish(x, "m1", [delta(3, x, "m1", "while it was gone")])
    await a._flush()
    await until_seen(follower, [2, 3])  # read again from the table once listening again
    a.publish(x, "m1", [delta(4, x, "m1", "after")])
    await a._flush()
    await until_seen(follower, [2, 3, 4])  # announced on the new connection
    assert b._listener is not None
    assert b._listener.get_server_pid() != lost


async def test_stop_reaches_the_holder_on_its_own_channel(pair: Pair) -> None:
    assert await pair.a.acquire(pair.x, "m1")
    assert await pair.b.request_cancel(pair.x)
    async with asyncio.timeout(10):
        await pair.stopped.wait()
    assert pair.cancelled == [pair.x]


async def test_viewers_asking_at_once_share_one_remote_reply(pair: Pair) -> None:
    a, x = pair.a, pair.x
    assert await a.acquire(x, "m1")
    start = {"type": "assistant_start", "seq": 1, "conversation_id": x, "message_id": "m1"}
    a.publish(x, "m1", [start, delta(2, x, "m1", "hello")])
    await a._flush()
    remote = RemoteReplies(pair.store, pair.b)
    replies = await asyncio.gather(*(remote.reply(x, "m1") for _ in range(8)))
    assert replies[0] is not None
    assert all(r is replies[0] for r in replies)
    assert len(pair.b._followers["m1"]) == 1
    assert await remote.reply("another-conversation", "m1") is None


def _digest(name: str) -> str:
    """The channel's digest, computed here the way the contract states it (BLAKE2b, 12
    bytes, hex), independently of `reply_frames`."""
    return hashlib.blake2b(name.encode(), digest_size=12).hexdigest()
