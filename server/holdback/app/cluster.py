"""What one process shares with the others on one PostgreSQL: who runs each reply, its
frames, and the requests to stop it.

The rules:
- One reply per conversation, cluster-wide: a process runs a reply only while it holds the
  conversation's lease (`Store.acquire_lease`), renewed every `lease_ttl / 3` seconds. A
  process that dies stops renewing; whichever process notices the lease expired first marks
  the reply incomplete (`ended_by` server) and the conversation takes messages again.
- The process running a reply publishes what its gate released, tokenized and numbered
  (`store/reply_frames.py`): every `FLUSH_EVERY` seconds, all its replies' new frames in one
  transaction, each reply's announced by `NOTIFY` on its conversation's channel, which only
  processes with a viewer of that conversation listen to. Another process shows them to
  its own viewers, rendered under each one's policy by itself
  (`rendered_views.RemoteViews`); it reads what it missed by number from the table, so a
  late or reconnecting viewer gets no gap and no duplicate.
- Stop pressed on any process reaches the process that runs the reply (`NOTIFY` on that
  process's own control channel, named by the lease's holder); the conversation's access
  is checked where the request arrives, as for a local reply.
- A listening connection that is lost (a PostgreSQL restart, a dropped connection) is
  opened again, with backoff, on every channel it was on, and each reply followed here is
  read again from its last shown number: what was announced meanwhile is not lost, only late.
- No original value in a payload, a row or a log line: frames are tokenized, payloads are
  ids and numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import pathlib
import secrets
import socket
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import asyncpg

from holdback.errors import describe
from holdback.reply.frames import Frame, frame_of
from holdback.store.reply_frames import control_channel, frames_channel
from holdback.store.repository import Store

log = logging.getLogger("holdback.cluster")
FLUSH_EVERY = 0.05  # seconds between batches of published frames
RELISTEN_FIRST, RELISTEN_LAST = 0.5, 10.0  # seconds between tries to listen again
LEASE_TTL = 15.0

Numbered = list[tuple[int, Frame]]


class Follower(Protocol):
    """Shows a reply run elsewhere: `shown` is the number of the last frame it showed."""

    @property
    def shown(self) -> int: ...

    def release(self, numbered: Numbered) -> None: ...


class Cluster:
    def __init__(
        self,
        store: Store,
        dsn: str,
        *,
        on_cancel: Callable[[str], None],
        lease_ttl: float = LEASE_TTL,
    ) -> None:
        self.store = store
        self.holder = f"{_machine()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.lease_ttl = lease_ttl
        self._dsn = dsn
        self._on_cancel = on_cancel
        self._listener: asyncpg.Connection | None = None
        self._held: set[str] = set()  # conversations whose lease this process holds
        self._outbox: dict[tuple[str, str], list[tuple[int, str]]] = {}
        self._followers: dict[str, list[Follower]] = {}  # by message id
        self._watched: dict[str, set[str]] = {}  # conversation id -> followed message ids
        self._listening: set[str] = set()  # frame channels the listener is on
        self._listen_lock = asyncio.Lock()  # one listener command at a time
        self._tasks: list[asyncio.Task[None]] = []
        self._reads: set[asyncio.Task[None]] = set()
        self._closing = False
        self._relistening: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._connect_listener()
        self._tasks = [
            asyncio.create_task(self._flushing(), name="cluster-flush"),
            asyncio.create_task(self._keeping_leases(), name="cluster-leases"),
        ]

    async def close(self) -> None:
        self._closing = True
        relistening = [self._relistening] if self._relistening is not None else []
        tasks = [*self._tasks, *self._reads, *relistening]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await self._flush()
        for conversation_id in list(self._held):
            with contextlib.suppress(Exception):
                await self.store.release_lease(conversation_id, self.holder)
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()

    # -- leases ----------------------------------------------------------------------------

    async def acquire(self, conversation_id: str, message_id: str = "") -> bool:
        """Hold the conversation's lease (again, with the reply's message id); False if
        another process's is live. An expired one is closed first."""
        taken = await self.store.acquire_lease(
            conversation_id, message_id, self.holder, self.lease_ttl
        )
        if not taken.ok:
            lease = await self.store.lease_of(conversation_id)
            if lease is None or not _dead_here(lease.holder):
                return False
            # Its holder was a process on this machine that is gone (a restart after a
            # crash): its lease lapses now, and is taken over with its reply closed.
            await self.store.renew_leases(lease.holder, [conversation_id], 0.0)
            taken = await self.store.acquire_lease(
                conversation_id, message_id, self.holder, self.lease_ttl
            )
            if not taken.ok:
                return False
        self._held.add(conversation_id)
        return True

    async def release(self, conversation_id: str) -> None:
        self._held.discard(conversation_id)
        await self._flush()
        await self.store.release_lease(conversation_id, self.holder)

    async def running_elsewhere(self, conversation_id: str) -> str | None:
        """The message id of the conversation's reply in flight on another process, if any."""
        lease = await self.store.lease_of(conversation_id)
        if lease is None or lease.expired or lease.holder == self.holder or not lease.message_id:
            return None
        if _dead_here(lease.holder):
            return None
        return str(lease.message_id)

    async def _keeping_leases(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            try:
                if self._held:
                    lost = await self.store.renew_leases(
                        self.holder, sorted(self._held), self.lease_ttl
                    )
                    for conversation_id in lost:
                        log.warning("a reply's lease was lost; it is stopped")
                        self._held.discard(conversation_id)
                        self._on_cancel(conversation_id)
                await self.store.close_expired_leases()
                await self.store.forget_frames()  # those of replies long finished
            except Exception as exc:  # the next round tries again
                log.warning("keeping leases failed: %s", describe(exc))

    # -- frames out ------------------------------------------------------------------------

    def publish(self, conversation_id: str, message_id: str, wires: list[dict[str, Any]]) -> None:
        box = self._outbox.setdefault((conversation_id, message_id), [])
        box += [(int(w["seq"]), json.dumps(w, ensure_ascii=False)) for w in wires]

    async def _flushing(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_EVERY)
            try:
                await self._flush()
            except Exception as exc:
                log.warning("publishing frames failed: %s", describe(exc))

    async def _flush(self) -> None:
        outbox, self._outbox = self._outbox, {}
        if outbox:
            await self.store.publish_frames(outbox)

    # -- frames in -------------------------------------------------------------------------

    async def follow(
        self, conversation_id: str, message_id: str, follower: Follower, after: int = 0
    ) -> None:
        """Deliver the reply's published frames after number `after`, then each new batch.
        The conversation's channel is listened to before the first read, so no batch falls
        between the two."""
        self._followers.setdefault(message_id, []).append(follower)
        self._watched.setdefault(conversation_id, set()).add(message_id)
        await self._listen(conversation_id)
        await self._read(message_id, follower, after)

    def unfollow(self, conversation_id: str, message_id: str, follower: Follower) -> None:
        followers = self._followers.get(message_id, [])
        if follower in followers:
            followers.remove(follower)
        if followers:
            return
        self._followers.pop(message_id, None)
        watched = self._watched.get(conversation_id, set())
        watched.discard(message_id)
        if not watched:
            self._watched.pop(conversation_id, None)
            self._spawn(self._listen(conversation_id))

    async def _listen(self, conversation_id: str) -> None:
        """Listen to the conversation's channel while a reply of it is followed, not after.
        Without a listening connection, the one opened again listens to it."""
        channel = frames_channel(conversation_id)
        async with self._listen_lock:
            wanted = conversation_id in self._watched
            if self._listener is None or wanted == (channel in self._listening):
                return
            try:
                if wanted:
                    await self._listener.add_listener(channel, self._heard_frames)
                    self._listening.add(channel)
                else:
                    self._listening.discard(channel)
                    await self._listener.remove_listener(channel, self._heard_frames)
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                log.warning("listening for a reply's frames failed: %s", describe(exc))

    async def _connect_listener(self) -> None:
        """Open the listening connection, on this process's control channel and every frame
        channel a followed reply needs."""
        conn = await asyncpg.connect(self._dsn)
        try:
            await conn.add_listener(control_channel(self.holder), self._heard_control)
            channels = {frames_channel(c) for c in self._watched}
            for channel in sorted(channels):
                await conn.add_listener(channel, self._heard_frames)
        except BaseException:
            with contextlib.suppress(Exception):
                await conn.close()
            raise
        conn.add_termination_listener(self._listener_lost)
        self._listener, self._listening = conn, channels

    def _listener_lost(self, _conn: object) -> None:
        if self._closing or self._relistening is not None:
            return
        self._listener = None
        self._listening = set()
        log.warning("the connection listening for other processes was lost; opening it again")
        self._relistening = asyncio.get_running_loop().create_task(self._relisten())

    async def _relisten(self) -> None:
        delay = RELISTEN_FIRST
        try:
            while not self._closing:
                try:
                    async with self._listen_lock:
                        await self._connect_listener()
                except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                    log.warning("listening again failed: %s", describe(exc))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RELISTEN_LAST)
                    continue
                # What was announced while nobody listened is in the table.
                for message_id, followers in list(self._followers.items()):
                    for follower in list(followers):
                        self._spawn(self._read(message_id, follower, follower.shown))
                return
        finally:
            self._relistening = None

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(_logged(work))
        self._reads.add(task)
        task.add_done_callback(self._reads.discard)

    async def _read(self, message_id: str, follower: Follower, after: int) -> None:
        rows = await self.store.frames_after(message_id, after)
        numbered: Numbered = []
        for seq, text in rows:
            frame = frame_of(json.loads(text))
            if frame is not None:
                numbered.append((seq, frame))
        if numbered:
            follower.release(numbered)

    def _heard_frames(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            message_id = str(json.loads(payload)["m"])
        except (ValueError, KeyError, TypeError):
            return
        for follower in list(self._followers.get(message_id, [])):
            self._spawn(self._read(message_id, follower, follower.shown))

    # -- stop ------------------------------------------------------------------------------

    async def request_cancel(self, conversation_id: str) -> bool:
        lease = await self.store.lease_of(conversation_id)
        if lease is None or lease.expired:
            return False
        payload = json.dumps({"cancel": conversation_id, "holder": lease.holder})
        await self.store.notify(control_channel(lease.holder), payload)
        return True

    def _heard_control(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            request = json.loads(payload)
            conversation_id, holder = str(request["cancel"]), str(request["holder"])
        except (ValueError, KeyError, TypeError):
            return
        if holder == self.holder:
            self._on_cancel(conversation_id)


async def _logged(work: Coroutine[Any, Any, None]) -> None:
    """A read or listener change the next announcement or follow mends: logged, not raised."""
    try:
        await work
    except Exception as exc:
        log.warning("following a reply failed: %s", describe(exc))


@functools.cache
def _machine() -> str:
    """This machine and process namespace: the host name, the kernel's boot id and the pid
    namespace, so that a holder's pid is only ever checked where it means that process."""
    boot = ""
    with contextlib.suppress(OSError):
        boot = pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    namespace = ""
    with contextlib.suppress(OSError):
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    return f"{socket.gethostname()[:40]}/{boot}/{namespace}"


def _dead_here(holder: str) -> bool:
    """Whether a lease's holder was a process of this machine and namespace that is gone."""
    parts = holder.rsplit(":", 2)  # machine, pid, random (`Cluster.holder`)
    if len(parts) != 3 or parts[0] != _machine() or not parts[1].isdigit():
        return False
    pid_text = parts[1]
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False
