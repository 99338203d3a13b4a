"""The adversarial corpus per reveal level: a restricted viewer watching the owner's reply is
never sent the owner's values, and is sent the same thing however the upstream cut the reply
(issue #17 over the corpus of issue #13).

The rule it keeps: for every case, the owner's reply is watched, over one WebSocket each, by a
viewer whose policy shows every kind of the corpus `masked` and by one who sees them at
`label` (the owner, `plain`, is the control). In the frames of either viewer the independent
oracle finds, in no decoded form, a value the owner typed (a span of `message_accepted` that
is not a `literal`), nor anything the case forbids, nor a value the case keeps out of URLs;
every field from a closed vocabulary stays in it and benign text still shows (redact mode).
Each view's transcript (its text per channel and tool call, tool names, errors, how it ended)
is the same with the reply in one piece and in random chunks.

Few cases of the corpus give the owner their own values back; most attack with values the
model injects, which every view redacts. So the disguise categories run once more with the
injected values typed by the owner first (`owned`): the owner is then shown the model's
spellings of them, and only the restricted viewers' guards stand between those spellings and
the viewers. A control case shows the three levels doing what `docs/policies.md` says, and the
oracle finding the owner's values where they are meant to be: the absence of a leak is not
the absence of a test.

One app (redact mode, password auth) and one scripted loopback upstream for the module; per
run a new conversation, shared with the group of both viewers, watched before the owner's
message is sent (a `watch` is not acknowledged, so a `watch` of an unknown conversation
follows it: its `not_found` tells the first was handled). Receives are bounded; nothing sleeps.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from holdback.providers.http import RetryPolicy, StreamSettings
from holdback.providers.registry import make_provider
from tests.adversarial import oracle
from tests.adversarial.cases import (
    ALT_EMAIL,
    CASES,
    EMAIL_TOKEN,
    INJ_CARD,
    INJ_EMAIL,
    INJ_PHONE,
    OK,
    TERM_TOKEN,
    USER_EMAIL,
    USER_TERM,
    USER_TEXT,
    Case,
    Chunking,
    Content,
    render,
    write_terms,
)
from tests.adversarial.test_server_corpus import (
    FRAME_LIMIT,
    RECEIVE_TIMEOUT,
    Frame,
    ScriptedUpstream,
    receive,
    vocabulary_problems,
    without_masked_tokens,
)
from tests.app.support import (
    TestClient,
    WebSocketTestSession,
    add_user,
    create_token,
    make_settings,
    running_app,
    send,
    store_op,
)

OWNER, MASKED, LABEL = "owner", "masked", "label"
VIEWERS = (MASKED, LABEL)  # user names, after the level each one is shown
# Every kind a value of the corpus can have: the detectors', and the term lists' labels.
KINDS = (
    "email",
    "phone",
    "credit_card",
    "iban",
    "us_ssn",
    "ip_address",
    "secret",
    "name",
    "clients",
    "internal",
)
# The corpus's injected values, typed by the owner (`owned`): every spelling of them the
# model writes is then the owner's own value, which the owner's guard lets through as the
# model wrote it, so only a restricted viewer's guard keeps the spelling from that viewer.
OWNED = (INJ_EMAIL, ALT_EMAIL, INJ_CARD, INJ_PHONE)
# The corpus's disguises: the forms a client decodes (JSON escapes, markdown and HTML
# entities, invisibles and look-alikes, odd neighbours).
OWNED_CATEGORIES = ("json_escapes", "markdown_entities", "invisible_lookalike", "neighbours")
LITERAL = "literal"  # text the user typed as a token: shown as typed, to everyone
SHARED_WITH = "watchers"  # the group of both viewers: one share per conversation
PASSWORD = "reveal-levels-password"
CHUNKED: Chunking = "random"


@dataclass
class Team:
    client: TestClient
    upstream: ScriptedUpstream
    tokens: dict[str, str]

    def bearer(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    tmp = tmp_path_factory.mktemp("reveal-levels")
    data = tmp / "data"
    tokens = {}
    for name in (OWNER, *VIEWERS):
        add_user(data, name, PASSWORD)
        tokens[name] = create_token(data, name)

    async def policies(store: Any) -> None:
        # Each viewer is in a group of their own naming every kind at their level (for
        # `label` that is also how a kind nobody names is shown), and in `SHARED_WITH`.
        await store.create_group(SHARED_WITH)
        for level in VIEWERS:
            await store.create_group(level)
            await store.add_member(level, level)
            await store.add_member(SHARED_WITH, level)
            for kind in KINDS:
                await store.set_level(level, kind, level)

    store_op(data, policies)
    sensitive, forbidden = write_terms(tmp / "terms")
    settings = make_settings(
        tmp,
        # A watched reply's frames go out within 5 ms (still coalesced), not 100: the corpus
        # is hundreds of replies.
        env={"HOLDBACK_RATE_LIMIT": "100000", "HOLDBACK_WATCH_INTERVAL": "0.005"},
        auth="password",
        sensitive_terms=[str(sensitive)],
        forbidden_terms=[str(forbidden)],
        guard_mode="redact",
    )
    upstream = ScriptedUpstream()
    upstream.start()
    provider = make_provider(
        "openai:test",
        env={"OPENAI_BASE_URL": upstream.url + "/v1", "OPENAI_API_KEY": "x"},
        settings=StreamSettings(stall_timeout=RECEIVE_TIMEOUT, retry=RetryPolicy(attempts=1)),
    )
    try:
        with running_app(settings, provider) as client:
            yield Team(client, upstream, tokens)
    finally:
        upstream.stop()


# -- one reply, three views -------------------------------------------------------------------


def frames_until_done(ws: WebSocketTestSession, *, owner: bool) -> list[Frame]:
    """A view's frames up to `assistant_done` (the owner's: also a pre-reply error)."""
    frames: list[Frame] = []
    for _ in range(FRAME_LIMIT):
        frame = receive(ws)
        frames.append(frame)
        if frame.get("type") == "assistant_done":
            return frames
        if owner and frame.get("type") == "error" and not frame.get("message_id"):
            return frames
    raise AssertionError("no assistant_done")


def watch(ws: WebSocketTestSession, conversation_id: str) -> None:
    """Watch the conversation; returns once the server has handled the `watch`."""
    send(ws, {"type": "watch", "conversation_id": conversation_id})
    send(ws, {"type": "watch", "conversation_id": "no-such-conversation"})
    answer = receive(ws)
    assert (answer.get("type"), answer.get("code")) == ("error", "not_found"), answer


def watched_reply(
    team: Team, sockets: dict[str, WebSocketTestSession], case: Case, chunking: Chunking
) -> dict[str, list[Frame]]:
    """The frames each of owner, masked and label receives for one reply of the case."""
    client = team.client
    made = client.post("/api/conversations", json={}, headers=team.bearer(OWNER))
    assert made.status_code == 201, made.text
    cid = made.json()["id"]
    shared = client.post(
        f"/api/conversations/{cid}/shares",
        json={"group": SHARED_WITH, "access": "read"},
        headers=team.bearer(OWNER),
    )
    assert shared.status_code == 201, shared.text
    for name in VIEWERS:
        watch(sockets[name], cid)
    team.upstream.wire = render(case.script, chunking, case.seed)
    send(sockets[OWNER], {"type": "user_message", "conversation_id": cid, "text": case.user_text})
    views = {OWNER: frames_until_done(sockets[OWNER], owner=True)}
    assert views[OWNER][-1].get("type") == "assistant_done", f"no reply: {views[OWNER][-1]}"
    for name in VIEWERS:
        views[name] = frames_until_done(sockets[name], owner=False)
    return views


@contextlib.contextmanager
def connected(team: Team) -> Iterator[dict[str, WebSocketTestSession]]:
    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(
                team.client.websocket_connect("/ws", headers=team.bearer(name))
            )
            for name in (OWNER, *VIEWERS)
        }


def owner_values(frames: list[Frame], case: Case) -> tuple[list[str], set[str]]:
    """The values the owner typed (their spans in `message_accepted`), and their kinds."""
    accepted = next((f for f in frames if f.get("type") == "message_accepted"), None)
    spans = accepted["masked"] if accepted else []
    values = [case.user_text[m["start"] : m["end"]] for m in spans if m["kind"] != LITERAL]
    return values, {m["kind"] for m in spans}


def transcript(frames: list[Frame]) -> tuple[list[tuple[Any, ...]], dict[Any, str]]:
    """What a view showed, whatever the chunking: every frame but the deltas, in order, and
    the whole text of each stream (a channel; a tool call, by its order, with its name).
    Ids minted per reply are left out. Streams are compared whole, not interleaved: how far a
    stream has been released when another one starts may depend on where chunks ended."""
    calls: dict[str, int] = {}
    events: list[tuple[Any, ...]] = []
    streams: dict[Any, str] = {}
    for frame in frames:
        kind = frame.get("type")
        if kind == "assistant_delta":
            channel = frame.get("channel")
            call = calls.setdefault(str(frame.get("call_id")), len(calls))
            stream = (channel, call if channel == "tool_call" else None, frame.get("name"))
            streams[stream] = streams.get(stream, "") + frame["text"]
        elif kind == "assistant_done":
            events.append((kind, frame.get("finish_reason"), frame.get("status")))
        elif kind == "error":
            events.append((kind, frame.get("code"), bool(frame.get("message_id"))))
        elif kind == "message_accepted":
            masked = [(m["start"], m["end"], m["kind"], m["token"]) for m in frame["masked"]]
            events.append((kind, masked, frame.get("title")))
        else:
            events.append((kind,))
    return events, streams


def problems_of(
    name: str, frames: list[Frame], case: Case, values: list[str], owner_message: str
) -> list[str]:
    """What is wrong with one view's frames of one reply."""
    problems = []
    if name == OWNER:  # the owner may see their own values, as the model spells them too
        forbidden = [v for v in case.forbidden if v not in values]
    else:
        forbidden = [*case.forbidden, *values]
    if leaked := oracle.find_leaks(without_masked_tokens(frames), forbidden):
        problems.append(f"on the wire: {leaked}")
    if in_urls := oracle.find_url_leaks(frames, case.url_forbidden):
        problems.append(f"inside a URL on the wire: {in_urls}")
    problems += vocabulary_problems(frames, case)
    benign = [s for s in case.must_show if name == OWNER or not oracle.leaks_in([s], values)]
    shown = oracle.leaks_in(oracle.decoded_views(frames), benign)
    if missing := [s for s in benign if s not in shown]:
        problems.append(f"redact mode dropped benign text {missing}")
    if name != OWNER:
        if [f.get("type") for f in frames[:1]] != ["assistant_start"]:
            problems.append(f"the first frame is {frames[:1]}")
        if {f.get("message_id") for f in frames} != {owner_message}:
            problems.append("frames of another message")
    return problems


def run_case(
    team: Team, case: Case, typed: tuple[str, ...] = ()
) -> dict[str, dict[str, list[Frame]]]:
    """The case one-shot and chunked, each reply watched; every problem, then the frames.
    `typed`: values the owner's message must have had masked (those of an owned case)."""
    runs: dict[str, dict[str, list[Frame]]] = {}
    problems: list[str] = []
    with connected(team) as sockets:
        for chunking in ("one", CHUNKED):
            views = runs[chunking] = watched_reply(team, sockets, case, chunking)
            values, kinds = owner_values(views[OWNER], case)
            if unknown := kinds - {*KINDS, LITERAL}:
                problems.append(f"[{chunking}] kinds no viewer's policy names: {unknown}")
            if unmasked := [v for v in typed if v not in values]:
                problems.append(f"[{chunking}] the owner's {unmasked} were not masked")
            reply_id = views[OWNER][-1].get("message_id")
            for name, frames in views.items():
                for problem in problems_of(name, frames, case, values, str(reply_id)):
                    problems.append(f"[{name}, {chunking}] {problem}")
    for name in (OWNER, *VIEWERS):
        one, chunked = (transcript(runs[c][name]) for c in ("one", CHUNKED))
        if one != chunked:
            problems.append(f"[{name}] one-shot {one!r}\n  != {CHUNKED} {chunked!r}")
    assert not problems, "\n".join([case.name, *problems])
    return runs


# -- the tests --------------------------------------------------------------------------------


def shown_text(frames: list[Frame]) -> str:
    return "".join(
        f["text"]
        for f in frames
        if f.get("type") == "assistant_delta" and f.get("channel") == "content"
    )


def test_each_level_shows_the_owners_values_as_its_policy_says(team: Team) -> None:
    """The control: the values restored plain, masked and labelled, and the oracle finding
    the owner's values in the owner's frames only."""
    reply = f"{OK} Write to {EMAIL_TOKEN} about {TERM_TOKEN}, or to {USER_EMAIL}."
    case = Case("control", "control", (Content(reply),), (), user_text=USER_TEXT)
    runs = run_case(team, case)
    for views in runs.values():
        mail, term = "a\u2022\u2022\u2022@lovelace-canary.example", "Z\u2022\u2022\u2022"
        assert shown_text(views[OWNER]) == reply.replace(EMAIL_TOKEN, USER_EMAIL).replace(
            TERM_TOKEN, USER_TERM
        )
        # A value the model writes out is not one the restorer produced: a viewer who may
        # not see it plain has it redacted.
        expected = f"{OK} Write to {{}} about {{}}, or to [redacted email]."
        assert shown_text(views[MASKED]) == expected.format(mail, term)
        assert shown_text(views[LABEL]) == expected.format("[email address]", "[clients]")
        values = [USER_EMAIL, USER_TERM]
        assert oracle.find_leaks(without_masked_tokens(views[OWNER]), values) == values
        assert all(oracle.find_leaks(views[name], values) == [] for name in VIEWERS)


def owned(case: Case) -> Case:
    """The case with the corpus's injected values typed by the owner first."""
    mine = f" Mine: {INJ_EMAIL}, {ALT_EMAIL}, card {INJ_CARD}, call {INJ_PHONE}."
    return dataclasses.replace(case, name=f"{case.name}.owned", user_text=case.user_text + mine)


OWNED_CASES = [owned(c) for c in CASES if c.category in OWNED_CATEGORIES]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(team: Team, case: Case) -> None:
    run_case(team, case)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", OWNED_CASES, ids=[c.name for c in OWNED_CASES])
def test_owned_case(team: Team, case: Case) -> None:
    """The disguises aimed at values the owner may see: still none reaches a viewer."""
    run_case(team, case, typed=OWNED)
