"""The cluster workload: its figures on synthetic rounds, and a tiny real run of two processes.

The real run starts a throwaway PostgreSQL and two `holdback serve` processes on it (and one
on SQLite), sends a round of four conversations spread over both (and four to the third),
and has one reply on A watched by one viewer on B; it checks what the rig counts (replies
per process, chunks, every clock), not speed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import server_load

from server import cluster, cluster_load, cluster_report, driver, fanout, pg, script, watchers

VALUES = {"<EMAIL_1>": "user.aab@acme-mail.com", "<PHONE_1>": "+1 415 555 0101"}
MODEL = "Write to <EMAIL_1> today. Call <PHONE_1> or <EMAIL_1> again."


def _conversation(key: str, process: int) -> dict[str, Any]:
    restored, _ = script.restore_offsets(MODEL, VALUES)
    return {
        "key": key,
        "process": process,
        "outcome": "done:complete",
        "text": restored,
        "values": VALUES,
        "connect_ns": 0,
        "accepted_ns": 10_000_000,
        "first_ns": 20_000_000,
        "done_ns": 1_000_000_000,
    }


def test_throughput_figures_sum_the_processes_and_divide_by_chunks() -> None:
    rounds = [
        {
            "round": r,
            "seconds": 2.0,
            "cpu": {
                "a": 1.0,
                "b": 0.5,
                "postgres": 0.3,
                "clients": 0.2,
                "upstream": 0.1,
                "machine": 3.0,
            },
            "records": [_conversation(f"k{r}{i}", i % 2) for i in range(4)],
        }
        for r in range(2)
    ]
    streams = [
        {"key": f"k{r}{i}", "text": MODEL, "sent_ns": [1] * 10} for r in range(2) for i in range(4)
    ]
    result = cluster.throughput_figures(rounds, streams, 2)
    assert result["replies_per_s"] == 2.0  # 4 replies in 2 s
    assert result["complete"] == 8
    assert result["mismatches"] == 0
    assert result["replies_by_process"] == [4, 4]
    assert math.isclose(result["per_chunk_ms"]["servers"], 3.0 / 80 * 1e3)
    assert math.isclose(result["per_reply_ms"]["postgres"], 0.6 / 8 * 1e3)
    assert math.isclose(result["share_pct"]["a"], 50.0)
    assert math.isclose(result["share_pct"]["machine"], 150.0)
    result.update(engine="postgresql", processes=2, cores=2, n=4, chars=85, rate=20.0)
    one = dict(result, processes=1, replies_per_s=1.0)
    table = cluster_report.throughput_table([one, result])
    assert "| 2 on PostgreSQL | 2.0 (2.0-2.0) | 2.00× |" in table
    assert "| 50 %, 25 % | 75 % | 15 % |" in cluster_report.machine_table([result])
    text = cluster_report.reading([one, result])
    assert "2 processes give 2.00× the replies per second of one" in text
    assert "Arithmetic, not a measurement" in text
    # 3.0 s busy in 4 s, 2.1 s of it measured: the rest ran beside them, and it is said.
    assert math.isclose(result["share_pct"]["other"], 45.0)
    assert "45 % of it other work: **not a quiet machine**" in text


def _fan_round(k: int, where: str, r: int, a_ms: float, b_ms: float) -> dict[str, Any]:
    restored, _ = script.restore_offsets(MODEL, VALUES)
    records: list[dict[str, Any]] = [
        {"role": "owner", "outcome": "done:complete", "text": restored, "frames": 10}
    ]
    forms = {
        "watch-a": ("u***@acme-mail.com", VALUES["<PHONE_1>"]),
        "watch-b": ("[email address]", "**** 01"),
        "watch-c": ("[email address]", "[phone number]"),
    }
    for i in range(k):
        email, phone = forms[watchers.group_of(i)]
        text = MODEL.replace("<EMAIL_1>", email).replace("<PHONE_1>", phone)
        records.append(
            {
                "role": "viewer",
                "viewer": i,
                "outcome": "done:complete",
                "text": text,
                "frames": 5,
                "seen": [],
            }
        )
    return {
        "k": k,
        "where": where,
        "round": r,
        "key": f"f{k}{where}{r}",
        "values": VALUES,
        "seconds": 5.0,
        "records": records,
        "cpu": {"a": a_ms / 1e3, "b": b_ms / 1e3, "postgres": 0.01},
    }


def test_fanout_figures_are_read_on_the_watchers_process() -> None:
    # One reply costs A 80 ms; a viewer on B costs B 2 ms (B idles at 1 ms), on A 1.5 ms.
    rounds = []
    for r in range(3):
        rounds.append(_fan_round(0, "remote", r, 80.0, 1.0))
        for k in (1, 3, 5, 20):
            rounds.append(_fan_round(k, "remote", r, 80.0, 1.0 + 2.0 * k))
            rounds.append(_fan_round(k, "local", r, 80.0 + 1.5 * k, 1.0))
    streams = [{"key": rnd["key"], "text": MODEL} for rnd in rounds]
    result = fanout.figures({"rounds": rounds}, streams)
    rows = {(row["where"], row["k"]): row for row in result["rows"]}
    assert result["reply_ms"] == 80.0
    assert math.isclose(rows["remote", 20]["extra_ms"], 2.0)
    assert math.isclose(rows["remote", 20]["per_frame_ms"], 2.0 / 5)
    assert math.isclose(rows["remote", 20]["past_ms"], 2.0)
    assert math.isclose(rows["remote", 5]["a_extra_ms"], 0.0)
    assert math.isclose(rows["local", 5]["extra_ms"], 1.5)
    assert math.isclose(rows["local", 5]["extra_of_reply"], 1.5 / 80)
    assert rows["remote", 20]["whole"] == 63 == rows["remote", 20]["records"]  # 21 x 3 rounds
    assert rows["remote", 20]["hidden_seen"] == 0
    result.update(chunks_per_reply=30.0, rate=20.0)
    table = cluster_report.fanout_table(result)
    assert "| 20 | B | 3 | 100.0 | 80.0 ms | 41.0 ms |" in table


def test_rounds_with_work_beside_them_are_left_out_for_every_configuration() -> None:
    def rnd(machine: float) -> dict[str, Any]:  # 2 s, 1.0 s measured
        return {
            "seconds": 2.0,
            "cpu": {"a": 0.6, "postgres": 0.3, "clients": 0.1, "machine": machine},
        }

    # Round 2 of the second configuration had 1.0 s of other work beside it (50 %).
    one, two = [rnd(1.1), rnd(1.1), rnd(1.1)], [rnd(1.1), rnd(1.1), rnd(2.0)]
    assert cluster.quiet_rounds([one, two], 3) == ([0, 1], True)
    # When most rounds were busy, all are used, and the report is to say so.
    assert cluster.quiet_rounds([[rnd(2.0), rnd(2.0), rnd(1.1)]], 3) == ([0, 1, 2], False)
    assert math.isclose(cluster_load.beside(rnd(2.0)["cpu"], 2.0), 50.0)


def test_fanout_leaves_out_a_busy_round() -> None:
    rounds = [_fan_round(k, "remote", r, 80.0, 1.0 + 2.0 * k) for r in range(3) for k in (0, 5)]
    for rnd in rounds:
        rnd["cpu"]["machine"] = sum(rnd["cpu"].values())  # nothing beside them
    rounds[-1]["cpu"]["machine"] += 4.0  # K = 5, round 3: 4 s of other work in 5 s
    result = fanout.figures({"rounds": rounds}, [{"key": r["key"], "text": MODEL} for r in rounds])
    rows = {(row["where"], row["k"]): row for row in result["rows"]}
    assert result["quiet"]
    assert result["left_out"] == [
        {"k": 5, "where": "remote", "round": 2, "other_pct": pytest.approx(80.0)}
    ]
    assert rows["remote", 5]["rounds"] == 2
    assert math.isclose(rows["remote", 5]["extra_ms"], 2.0)
    assert "1 rounds left out" in cluster_report._fan_left(result)


def _have_postgres() -> bool:
    return pg._support().find_bindir() is not None


@pytest.mark.server
@pytest.mark.postgres
@pytest.mark.slow
def test_a_tiny_real_run_of_two_processes(tmp_path: Path) -> None:
    if not driver.holdback_available() or not _have_postgres():
        pytest.skip("holdback serve or PostgreSQL is not available on this machine")
    settings = driver.Settings(work=tmp_path, burst_chars=40, watch_chars=40, rate=40.0)
    options = {
        "n": 4,
        "rounds": 1,
        "sqlite": True,
        "fan_ks": (1,),
        "fan_rounds": 1,
        "fan_where": ("remote",),
        "fan_stagger": (0.0,),
    }
    result = cluster.measure("holdback", (2,), options, settings, 1)
    embedded, load = result["throughput"]  # the two configurations took turns
    assert (embedded["engine"], embedded["processes"]) == ("sqlite", 1)
    assert embedded["complete"] == 4, embedded["outcomes"]
    assert "postgres" not in embedded["per_chunk_ms"]
    assert (load["engine"], load["processes"]) == ("postgresql", 2)
    assert load["complete"] == 4, load["outcomes"]
    assert load["mismatches"] == 0
    assert load["leaks"] == 0
    assert load["replies_by_process"] == [2, 2]  # round-robin over the two
    assert load["per_chunk_ms"]["servers"] > 0
    assert load["per_chunk_ms"]["postgres"] > 0  # the database's clock was read
    assert load["share_pct"]["a"] > 0
    assert load["share_pct"]["b"] > 0
    (fan,) = result["fanout"]
    rows = {(row["where"], row["k"]): row for row in fan["rows"]}
    assert set(rows) == {("remote", 0), ("remote", 1)}
    assert rows["remote", 1]["whole"] == rows["remote", 1]["records"] == 2
    assert rows["remote", 1]["hidden_seen"] == 0
    assert rows["remote", 1]["viewer_frames"] > 0
    assert not fan["failures"]
    assert not list(tmp_path.glob("tokens-*"))
    rendered = server_load.render("## H", {"cluster": [result]})
    assert "#### holdback: fan-out to another process" in rendered
    assert "#### holdback: replies per second" in rendered
