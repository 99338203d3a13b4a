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


async def test_a_follower_hears_new_frames_and_the_channel_is_left_after(store: Store) -> None:
    user = await store.ensure_local_user()
    x = await store.create_conversation(user.id)
    a = Cluster(store, dsn(store), on_cancel=lambda _: None)
    b = Cluster(store, dsn(store), on_cancel=lambda _: None)
    await a.start()
    await b.start()
    try:
        follower = Collected()
        a.publish(x.id, "m1", [delta(2, x.id, "m1", "early")])
        await a._flush()
        await b.follow(x.id, "m1", follower)
        assert follower.seen == [2]  # read from the table
        follower.got.clear()
        a.publish(x.id, "m1", [delta(3, x.id, "m1", "late")])
        await a._flush()
        async with asyncio.timeout(10):
            while follower.seen != [2, 3]:
                await follower.got.wait()
                follower.got.clear()
        assert b._listening  # listening while it follows
        b.unfollow(x.id, "m1", follower)
        async with asyncio.timeout(10):
            await asyncio.gather(*b._reads)  # the change of listener it started
        assert not b._listening
    finally:
        await a.close()
        await b.close()


async def test_stop_reaches_the_holder_on_its_own_channel(store: Store) -> None:
    user = await store.ensure_local_user()
    x = await store.create_conversation(user.id)
    cancelled: list[str] = []
    done = asyncio.Event()

    def on_cancel(conversation_id: str) -> None:
        cancelled.append(conversation_id)
        done.set()

    a = Cluster(store, dsn(store), on_cancel=on_cancel)
    b = Cluster(store, dsn(store), on_cancel=lambda _: pytest.fail("b runs nothing"))
    await a.start()
    await b.start()
    try:
        assert await a.acquire(x.id, "m1")
        assert await b.request_cancel(x.id)
        async with asyncio.timeout(10):
            await done.wait()
        assert cancelled == [x.id]
    finally:
        await a.close()
        await b.close()


async def test_viewers_asking_at_once_share_one_remote_reply(store: Store) -> None:
    user = await store.ensure_local_user()
    x = await store.create_conversation(user.id)
    a = Cluster(store, dsn(store), on_cancel=lambda _: None)
    b = Cluster(store, dsn(store), on_cancel=lambda _: None)
    await a.start()
    await b.start()
    try:
        assert await a.acquire(x.id, "m1")
        start = {"type": "assistant_start", "seq": 1, "conversation_id": x.id,
                 "message_id": "m1"}  # fmt: skip
        a.publish(x.id, "m1", [start, delta(2, x.id, "m1", "hello")])
        await a._flush()
        remote = RemoteReplies(store, b)
        replies = await asyncio.gather(*(remote.reply(x.id, "m1") for _ in range(8)))
        assert replies[0] is not None
        assert all(r is replies[0] for r in replies)
        assert len(b._followers["m1"]) == 1
        assert await remote.reply(y_id := "other", "m1") is None, y_id
    finally:
        await a.close()
        await b.close()


def _digest(name: str) -> str:
    """The channel's digest, computed here the way the contract states it (BLAKE2b, 12
    bytes, hex), independently of `reply_frames`."""
    return hashlib.blake2b(name.encode(), digest_size=12).hexdigest()
