"""Three `holdback serve` processes on one throwaway PostgreSQL (issue 20).

A reply started through A is watched live through B and stopped through C; one
conversation sent to A and B at once gets exactly one reply and one `busy`; a `kill -9` of A
mid-reply leaves a reply marked incomplete within the lease time, and the conversation
takes new messages; a reply A finished is resumed through B with no gap; the rate limit and
a revoked token hold on every process. A watcher on B under a restricted policy never sees
a value it hides, and no canary is anywhere in the database (published frames included).
The oracle is plain substring search.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.app.support import (
    EchoUpstream,
    ServerProcess,
    echo_upstream,
    process_env,
    run_holdback,
)

pytestmark = [pytest.mark.postgres, pytest.mark.server, pytest.mark.anyio]

EMAIL = "cluster.canary@example.org"
PHONE = "+1 415 555 0164"
LEASE_TTL = 3.0
Frame = dict[str, Any]


class Team:
    def __init__(self, root: Path, url: str, upstream: EchoUpstream) -> None:
        self.root, self.url = root, url
        self.shared = {
            "HOLDBACK_DATABASE_URL": url,
            "HOLDBACK_VAULT_KEY": secrets.token_urlsafe(32),
            "HOLDBACK_AUTH": "password",
            "HOLDBACK_MODEL": "openai:test",
            "OPENAI_BASE_URL": upstream.url + "/v1",
            "OPENAI_API_KEY": "x",
            "HOLDBACK_LEASE_TTL": str(LEASE_TTL),
            "HOLDBACK_RATE_LIMIT": "30",
            "HOLDBACK_WATCH_INTERVAL": "0.01",
        }
        self.tokens: dict[str, str] = {}

    def env(self, name: str, **extra: str) -> dict[str, str]:
        env = {**self.shared, "HOLDBACK_DATA_DIR": str(self.root / name / "data"), **extra}
        return process_env(self.root / name, env)

    def cli(self, *argv: str, stdin: str = "") -> str:
        done = run_holdback([*argv, "--database-url", self.url], self.env("cli"), stdin=stdin)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def bearer(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}


@pytest.fixture
def upstream() -> Iterator[EchoUpstream]:
    with echo_upstream(chunk_delay=0.03, low=3, high=6) as server:
        yield server


@pytest.fixture
def team(tmp_path: Path, postgres_url: str, upstream: EchoUpstream) -> Team:
    made = Team(tmp_path, postgres_url, upstream)
    for name in ("alice", "bob"):
        made.cli("user", "add", name, stdin=f"{name}'s long password\n")
        made.tokens[name] = made.cli("token", "create", name).strip()
    made.cli("group", "add", "viewers")
    made.cli("group", "member", "add", "viewers", "bob")
    made.cli("policy", "set", "viewers", "email", "masked")
    return made


@contextlib.asynccontextmanager
async def three(team: Team, tmp_path: Path) -> AsyncIterator[list[ServerProcess]]:
    with (
        ServerProcess(tmp_path / "a.log", team.env("a")) as a,
        ServerProcess(tmp_path / "b.log", team.env("b")) as b,
        ServerProcess(tmp_path / "c.log", team.env("c")) as c,
    ):
        yield [a, b, c]


async def send(ws: ClientConnection, frame: Frame) -> None:
    await ws.send(json.dumps(frame))


async def recv(ws: ClientConnection, wait: float = 20) -> Frame:
    with anyio.fail_after(wait):
        frame: Frame = json.loads(await ws.recv())
    return frame


async def until_done(ws: ClientConnection, wait: float = 30) -> list[Frame]:
    frames: list[Frame] = []
    with anyio.fail_after(wait):
        while not frames or frames[-1].get("type") != "assistant_done":
            frames.append(json.loads(await ws.recv()))
    return frames


def text_of(frames: list[Frame]) -> str:
    return "".join(f["text"] for f in frames if f.get("type") == "assistant_delta")


async def share_with_bob(server: ServerProcess, team: Team, conversation_id: str) -> None:
    async with httpx.AsyncClient(base_url=server.base, headers=team.bearer("alice")) as http:
        made = await http.post(
            f"/api/conversations/{conversation_id}/shares",
            json={"user": "bob", "access": "read"},
            headers={"Origin": server.base},
        )
        assert made.status_code == 201, made.text


async def stored(server: ServerProcess, team: Team, conversation_id: str) -> Frame:
    async with httpx.AsyncClient(base_url=server.base, headers=team.bearer("alice")) as http:
        body: Frame = (await http.get(f"/api/conversations/{conversation_id}")).json()
        return body


async def canaries_in_database(url: str) -> list[str]:
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        tables = [r[0] for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE "
                                                  "schemaname = 'public'")]  # fmt: skip
        found = []
        for table in tables:
            rows = await conn.fetch(f'SELECT * FROM "{table}"')
            text = repr([tuple(r) for r in rows])
            found += [f"{table}:{c}" for c in (EMAIL, PHONE, "cluster.canary") if c in text]
        return found
    finally:
        await conn.close()


async def test_watched_on_b_stopped_on_c(team: Team, tmp_path: Path) -> None:
    text = f"Write to {EMAIL} and call {PHONE}. " * 12
    async with three(team, tmp_path) as (a, b, c):  # noqa: SIM117 - the servers first
        async with (
            connect(a.ws_url, additional_headers=team.bearer("alice")) as owner,
            connect(b.ws_url, additional_headers=team.bearer("bob")) as viewer,
            connect(c.ws_url, additional_headers=team.bearer("alice")) as stopper,
        ):
            await send(owner, {"type": "user_message", "conversation_id": None, "text": text})
            accepted = await recv(owner)
            chat = accepted["conversation_id"]
            await share_with_bob(a, team, chat)
            first = [await recv(owner) for _ in range(6)]
            await send(viewer, {"type": "watch", "conversation_id": chat})
            watched = [await recv(viewer) for _ in range(3)]
            assert watched[0]["type"] == "assistant_start"
            assert watched[0]["seq"] == 1
            await send(stopper, {"type": "cancel", "conversation_id": chat})
            mine = first + await until_done(owner)
            seen = watched + await until_done(viewer)
    assert mine[-1]["ended_by"] == "user"
    assert seen[-1]["type"] == "assistant_done"
    assert seen[-1]["ended_by"] == "user"
    raw = json.dumps(seen)
    assert EMAIL not in raw
    assert "cluster.canary" not in raw
    masked = "c\u2022\u2022\u2022@example.org"  # bob: e-mail masked, phone as a label
    assert masked in text_of(seen)
    assert EMAIL in text_of(mine)
    assert text_of(mine).replace(EMAIL, masked).replace(PHONE, "[phone number]") == text_of(seen)
    assert await canaries_in_database(team.url) == []


async def test_one_reply_per_conversation_across_processes(team: Team, tmp_path: Path) -> None:
    async with three(team, tmp_path) as (a, b, _c):
        async with (
            connect(a.ws_url, additional_headers=team.bearer("alice")) as on_a,
            connect(b.ws_url, additional_headers=team.bearer("alice")) as on_b,
        ):
            await send(on_a, {"type": "user_message", "conversation_id": None, "text": "hi"})
            chat = (await recv(on_a))["conversation_id"]
            await until_done(on_a)
            message = {"type": "user_message", "conversation_id": chat, "text": "slow " * 40}
            await asyncio.gather(send(on_a, message), send(on_b, message))
            answers = [await recv(on_a), await recv(on_b)]
            kinds = sorted((f["type"], f.get("code")) for f in answers)
            assert kinds == [("error", "busy"), ("message_accepted", None)]
            winner = on_a if answers[0]["type"] == "message_accepted" else on_b
            await until_done(winner)
        body = await stored(a, team, chat)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"] * 2


async def test_a_killed_process_leaves_an_incomplete_reply_and_a_free_conversation(
    team: Team, tmp_path: Path
) -> None:
    async with three(team, tmp_path) as (a, b, _c):
        async with connect(a.ws_url, additional_headers=team.bearer("alice")) as on_a:
            await send(on_a, {"type": "user_message", "conversation_id": None,
                              "text": "slow " * 200})  # fmt: skip
            chat = (await recv(on_a))["conversation_id"]
            await recv(on_a)
            assert a.proc is not None
            os.kill(a.proc.pid, signal.SIGKILL)
        a.proc.wait(timeout=10)
        async with connect(b.ws_url, additional_headers=team.bearer("alice")) as on_b:
            with anyio.fail_after(LEASE_TTL * 4 + 10):
                while True:
                    await send(on_b, {"type": "user_message", "conversation_id": chat,
                                      "text": "are you there?"})  # fmt: skip
                    answer = await recv(on_b)
                    if answer["type"] == "message_accepted":
                        break
                    assert answer["code"] == "busy"
                    await anyio.sleep(0.5)
            assert (await until_done(on_b))[-1]["status"] == "complete"
        body = await stored(b, team, chat)
    cut = body["messages"][1]
    assert (cut["status"], cut["ended_by"]) == ("incomplete", "server")


async def test_resume_through_b_after_a_finished(team: Team, tmp_path: Path) -> None:
    text = f"Mail {EMAIL} soon. " * 8
    async with three(team, tmp_path) as (a, b, _c):
        async with connect(a.ws_url, additional_headers=team.bearer("alice")) as on_a:
            await send(on_a, {"type": "user_message", "conversation_id": None, "text": text})
            chat = (await recv(on_a))["conversation_id"]
            mine = await until_done(on_a)
        async with connect(b.ws_url, additional_headers=team.bearer("alice")) as on_b:
            await send(on_b, {"type": "resume", "conversation_id": chat,
                              "message_id": mine[-1]["message_id"], "after_seq": 3})  # fmt: skip
            rest = await until_done(on_b)
    assert rest[0]["seq"] > 3
    assert text_of([f for f in mine if f["seq"] <= 3]) + text_of(rest) == text


async def test_rate_limit_and_a_revoke_hold_on_every_process(team: Team, tmp_path: Path) -> None:
    team.shared["HOLDBACK_RATE_LIMIT"] = "3"
    async with three(team, tmp_path) as servers:
        answers = []
        for server in [*servers, servers[0]]:
            async with connect(server.ws_url, additional_headers=team.bearer("alice")) as ws:
                await send(ws, {"type": "user_message", "conversation_id": None, "text": "hi"})
                answer = await recv(ws)
                answers.append(answer.get("code") or answer["type"])
                if answer["type"] == "message_accepted":
                    await until_done(ws)
        assert answers == ["message_accepted"] * 3 + ["rate_limited"]
        listed = team.cli("token", "list", "--user", "alice")
        token_id = listed.splitlines()[1].split()[0]  # under the header: alice's one token
        team.cli("token", "revoke", token_id)
        for server in servers:
            async with httpx.AsyncClient(base_url=server.base) as http:
                refused = await http.get("/api/conversations", headers=team.bearer("alice"))
            assert refused.status_code == 401
