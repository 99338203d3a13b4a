"""The moderation workload: the fake moderator as a real process, the prose replies, the
figures and verdicts on synthetic logs, and a tiny real run."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import server_load

from server import (
    driver,
    moderation,
    moderation_figures,
    moderation_report,
    moderation_run,
    script,
)

MS = 1_000_000


# The fake moderator, a real process.


@pytest.fixture
def fake(tmp_path: Path) -> Any:
    moderator = moderation_run.FakeModerator(30.0, tmp_path)
    yield moderator
    moderator.stop()


def _body(text: str = "Hi <EMAIL_1>. ") -> dict[str, str]:
    return {"text": text, "channel": "content", "conversation_id": "c1"}


@pytest.mark.server
def test_the_fake_moderator_allows_after_its_latency_and_logs_each_call(fake: Any) -> None:
    with httpx.Client(timeout=10) as http:
        started = time.monotonic_ns()
        answer = http.post(fake.url, json=_body())
        took = time.monotonic_ns() - started
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("application/json")
        assert answer.json() == {"action": "allow"}
        assert took >= 30 * MS  # never sooner than its latency
        log = fake.take_log()
    assert log["counts"] == {"requests": 1, "bad_requests": 0}
    assert log["latency_ms"] == 30.0
    (call,) = log["requests"]
    assert call["answered_ns"] - call["received_ns"] >= 30 * MS
    assert (call["text"], call["channel"], call["conversation_id"]) == (
        "Hi <EMAIL_1>. ",
        "content",
        "c1",
    )
    assert fake.take_log()["requests"] == []  # handed over, then forgotten


@pytest.mark.server
@pytest.mark.parametrize(
    "body",
    [
        {"text": "x", "channel": "content"},  # a key missing
        {**_body(), "extra": 1},  # a key too many
        {**_body(), "channel": "system"},
        {**_body(), "text": 3},
        ["not", "an", "object"],
    ],
)
def test_the_fake_moderator_refuses_what_breaks_the_contract(fake: Any, body: Any) -> None:
    with httpx.Client(timeout=10) as http:
        assert http.post(fake.url, json=body).status_code == 400
        plain = http.post(fake.url, content=b"{}", headers={"content-type": "text/plain"})
        assert plain.status_code == 400
    log = fake.take_log()
    assert log["counts"] == {"requests": 2, "bad_requests": 2}
    assert log["requests"] == []


@pytest.mark.server
@pytest.mark.anyio
async def test_the_fake_moderator_answers_calls_at_once_not_one_after_another(fake: Any) -> None:
    import anyio

    async with httpx.AsyncClient(timeout=10) as http:

        async def ask(i: int) -> None:
            assert (await http.post(fake.url, json=_body(f"Window {i}. "))).status_code == 200

        async with anyio.create_task_group() as group:
            for i in range(4):
                group.start_soon(ask, i)
    calls = fake.take_log()["requests"]
    assert len(calls) == 4
    # Every call was read before the first was answered: none waited behind another.
    assert max(c["received_ns"] for c in calls) < min(c["answered_ns"] for c in calls)


# The replies, the rounds.


def test_prose_replies_are_sentences_of_a_real_length_each_its_own() -> None:
    tokens = ("<EMAIL_1>", "<PHONE_1>")
    text = script.prose_text("bkaaaabaaaa", tokens, 800)
    assert text == script.prose_text("bkaaaabaaaa", tokens, 800)
    assert 800 <= len(text) < 1000
    assert not set(":;\n") & set(text)  # one sentence, one window
    ends = moderation_figures.sentence_ends(text)
    lengths = [b - a for a, b in zip([0, *ends], ends, strict=False)]
    assert all(40 <= n <= 200 for n in lengths), lengths
    assert "<EMAIL_1>" in text or "<PHONE_1>" in text  # tokens keep their case
    assert not re.search(r"<(email|phone)_1>", text)
    other = script.prose_text("bkaaaabaaab", tokens, 800)
    pieces = {s.strip() for s in re.split(r"(?<=[.?]) ", text)}
    assert not pieces & {s.strip() for s in re.split(r"(?<=[.?]) ", other)}  # no cache hit


def test_sentence_ends_need_whitespace_or_the_end() -> None:
    assert moderation_figures.sentence_ends("Pi is 3.14 or so. Yes? Done") == [17, 22, 27]
    assert moderation_figures.sentence_ends("One. Two.") == [4, 9]
    assert moderation_figures.sentence_ends("") == []


def test_every_mode_gets_the_same_keys_in_a_turning_order() -> None:
    modes = ["off", "http-50ms", "http-200ms"]
    assert moderation.order(modes, 0) == modes
    assert moderation.order(modes, 1) == ["http-50ms", "http-200ms", "off"]
    assert moderation.order(modes, 3) == modes
    assert moderation.key_of(0, 1) == moderation.key_of(0, 1) != moderation.key_of(1, 1)
    assert script.find_key(script.user_message(1, moderation.key_of(19, 15))) is not None
    assert moderation.key_of(-1, 0) != moderation.key_of(0, 0)


# Figures on synthetic logs: one reply, three sentences, 50 ms a chunk.

TEXT = "One. Two <EMAIL_1>. End."  # sentences end at 4, 19 and 24
SIZES = [4, 6, 9, 4, 1]  # "One." " Two <" "EMAIL_1>." " End" "."
VALUES = {"<EMAIL_1>": "a@b.co"}
RESTORED = "One. Two a@b.co. End."
KEY = "bkzzaaaaaaa"


def _stream(t0: int) -> dict[str, Any]:
    sent = [t0 + i * 50 * MS for i in range(len(SIZES))]
    return {"key": KEY, "start_ns": t0 - 50 * MS, "text": TEXT, "sizes": SIZES,
            "sent_ns": sent, "end_ns": t0 + 250 * MS}  # fmt: skip


def _round(mode: str, t0: int, frames: list[tuple[int, int]], cpu_s: float) -> dict[str, Any]:
    record = {
        "key": KEY,
        "conn": 0,
        "outcome": "done:complete",
        "conversation_id": f"c-{mode}",
        "values": VALUES,
        "sent_ns": t0 - 100 * MS,
        "first_ns": frames[0][0],
        "frames_ns": [t for t, _ in frames],
        "frames_cum": [c for _, c in frames],
        "text": RESTORED,
    }
    return {"mode": mode, "round": 0, "start_ns": t0 - 200 * MS, "end_ns": t0 + 400 * MS,
            "cpu_s": cpu_s, "records": [record]}  # fmt: skip


def _run(lag_ms: int, calls: list[str] | None = None) -> dict[str, Any]:
    off_t0, mod_t0 = 10_000 * MS, 20_000 * MS
    # Off: each chunk's releasable text 1 ms after it was sent (the token waits for its end).
    off = [(off_t0 + i * 50 * MS + MS, c) for i, c in enumerate([4, 9, 16, 20, 21])]
    # Moderated: each window `lag_ms` after the chunk (or the end) that closed it.
    closes = [(50, 5), (150, 17), (250, 21)]
    mod = [(mod_t0 + (at + lag_ms) * MS, c) for at, c in closes]
    data = {
        "modes": ["off", "http-50ms"],
        "conversations": 1,
        "rounds": [_round("off", off_t0, off, 0.05), _round("http-50ms", mod_t0, mod, 0.06)],
    }
    texts = calls if calls is not None else ["One. ", "Two <EMAIL_1>. ", "End."]
    log = [
        {
            "conversation_id": "c-http-50ms",
            "text": t,
            "received_ns": i * 100 * MS,
            "answered_ns": i * 100 * MS + 50 * MS,
        }
        for i, t in enumerate(texts)
    ]
    result = moderation_figures.figures(
        data, [_stream(off_t0), _stream(mod_t0)], {"http-50ms": log},
        {"off": None, "http-50ms": 50.0},
    )  # fmt: skip
    return dict(result, server="holdback", rounds=1, rate=20.0, bad_requests={"http-50ms": 0})


def test_figures_pair_each_sentence_with_itself_unmoderated() -> None:
    result = _run(60)
    off, mod = result["rows"]
    assert (off["whole"], mod["whole"], off["sentences"], mod["undelivered"]) == (1, 1, 3, 0)
    assert off["delay_p50_ms"] == pytest.approx(1.0)
    # Each sentence: 50 ms for the character after it (or the end), 60 ms for the verdict.
    assert (mod["delay_p50_ms"], mod["delay_p99_ms"]) == pytest.approx((110.0, 110.0))
    assert mod["added_p99_ms"] == pytest.approx(109.0)
    assert mod["close_p99_ms"] == pytest.approx(60.0)
    assert mod["beyond_p99_ms"] == pytest.approx(59.0)  # the 50 ms wait taken off
    assert mod["waited"] == pytest.approx(1.0)  # every sentence waited for a later chunk
    assert mod["wait_when_waited_p50_ms"] == pytest.approx(50.0)
    assert (off["frames_per_reply"], mod["frames_per_reply"]) == (5, 3)
    assert (off["ttft_p50_ms"], mod["ttft_extra_p50_ms"]) == pytest.approx((101.0, 109.0))
    assert mod["first_sentence_p50_ms"] == pytest.approx(50.0)
    assert (off["cpu_per_chunk_ms"], mod["cpu_per_chunk_ms"]) == pytest.approx((10.0, 12.0))
    assert mod["cpu_vs_off"] == pytest.approx(1.2)
    assert mod["extra_cpu_per_call_ms"] == pytest.approx(10.0 / 3)
    assert (mod["calls_per_reply"], mod["sentences_per_reply"]) == (3.0, 3.0)
    assert mod["moderator_p50_ms"] == pytest.approx(50.0)
    assert (mod["clear"], mod["foreign"]) == (0, 0)


@pytest.mark.parametrize(("lag_ms", "met"), [(60, False), (20, True)])
def test_the_target_is_judged_from_the_terminator_chunk(lag_ms: int, met: bool) -> None:
    # At 20 ms the first sentence's added delay is 50 + 20 - 1 = 69 ms: within 75.
    result = _run(lag_ms)
    (found, ok), (checked, clean) = moderation_report.checks(result)
    assert ok is met, found
    assert "beyond the wait for the next character p99" in found
    assert clean, checked
    text = moderation_report.moderation_report([result])
    assert "| http, 50 ms | 3 |" in text
    assert "#### holdback: targets" in text
    rendered = server_load.render("## H", {"turns": [], "burst": [], "moderation": [result]})
    assert "### Moderation latency" in rendered


def test_a_window_sent_in_clear_or_not_from_the_reply_is_not_met() -> None:
    result = _run(20, calls=["One. ", "Two a@b.co. ", "End."])
    mod = result["rows"][1]
    assert (mod["clear"], mod["foreign"]) == (1, 1)
    (_, _), (found, clean) = moderation_report.checks(result)
    assert not clean
    assert "1 windows in clear, 1 not in the text" in found


def test_a_moderated_mode_without_calls_is_not_met() -> None:
    result = _run(20, calls=[])
    (_, _), (found, clean) = moderation_report.checks(result)
    assert not clean
    assert "no moderator call in http, 50 ms" in found


# A tiny real run.


def _moderation_served() -> bool:
    if not driver.holdback_available():
        return False
    done = subprocess.run(
        [str(driver.VENV_BIN / "holdback"), "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return "--moderation" in done.stdout


@pytest.mark.server
@pytest.mark.slow
def test_a_tiny_real_run(tmp_path: Path) -> None:
    if not _moderation_served():
        pytest.skip("holdback serve has no --moderation in this checkout")
    settings = driver.Settings(work=tmp_path, mod_chars=160, rate=40.0)
    upstream = driver.Upstream(settings, chars=settings.mod_chars, style="prose")
    try:
        result = moderation_run.measure("holdback", (20.0,), 1, 2, 1, upstream, settings)
    finally:
        upstream.stop()
    off, mod = result["rows"]
    assert (off["mode"], mod["mode"]) == ("off", "http-20ms")
    assert off["whole"] == mod["whole"] == 2, (off["outcomes"], mod["outcomes"])
    assert off["calls"] == 0
    assert mod["calls_per_reply"] == mod["sentences_per_reply"] > 0  # one call per sentence
    assert (mod["clear"], mod["foreign"], mod["undelivered"]) == (0, 0, 0)
    assert mod["moderator_p50_ms"] >= 20.0
    assert mod["added_p50_ms"] >= 15.0  # the verdict is waited for
    assert result["bad_requests"] == {"http-20ms": 0}
    assert not list(tmp_path.glob("moderation-*.json"))
    assert "#### holdback: targets" in moderation_report.moderation_report([result])
