"""The soak: minutes of moderate load with faults mixed in, then an audit of what was stored.

The rule it keeps: every disturbance is planned (`script.plan_for`, shared by the upstream and
the generator), so every error frame has an expected cause or is counted as unexpected. After
the load, every user message the server accepted is looked up over the HTTP API, with the
reply that followed it; RSS is sampled every 10 s and its slope after warm-up must be flat.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from . import analysis, driver, procs, script

SAMPLE_S = 10.0
WARMUP_S = 120.0
FLAT_MB_PER_MIN = 1.0
EXPECTED_ERRORS = {"upstream_500": "upstream_error", "upstream_cut": "upstream_protocol"}


def slope_per_min(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute (0 for < 2 points)."""
    if len(points) < 2:
        return 0.0
    mx = sum(p[0] for p in points) / len(points)
    my = sum(p[1] for p in points) / len(points)
    var = sum((p[0] - mx) ** 2 for p in points)
    if var == 0:
        return 0.0
    cov = sum((p[0] - mx) * (p[1] - my) for p in points)
    return cov / var * 60.0


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def audit(
    base: str, rounds: Sequence[Mapping[str, Any]], conversations: Mapping[str, Any]
) -> dict[str, Any]:
    """Check every accepted user message, and the reply after it, against the store."""
    found: dict[str, Any] = {}
    listed = {c["id"] for c in conversations.get("conversations", ())}
    wanted = {r["conversation_id"] for r in rounds if r.get("user_message_id")}
    for cid in sorted(wanted):
        if cid in listed:
            found[cid] = _get(f"{base}/api/conversations/{cid}")
    user_ok = reply_ok = replies_expected = text_mismatch = 0
    statuses: Counter[str] = Counter()
    missing: list[str] = []
    for r in rounds:
        if not r.get("user_message_id"):
            continue
        messages = found.get(r["conversation_id"], {}).get("messages", [])
        by_id = {m["id"]: (i, m) for i, m in enumerate(messages)}
        user = by_id.get(r["user_message_id"])
        if user is not None and user[1]["role"] == "user" and user[1]["text"] == r["text_sent"]:
            user_ok += 1
        else:
            missing.append(f"user message of {r['key']}")
            continue
        replies_expected += 1
        reply = by_id.get(r["message_id"]) if r.get("message_id") else None
        if reply is None:
            following = messages[user[0] + 1 : user[0] + 2]
            reply = (user[0] + 1, following[0]) if following else None
        if reply is None or reply[1]["role"] != "assistant":
            missing.append(f"reply to {r['key']}")
            continue
        reply_ok += 1
        statuses[str(reply[1].get("status"))] += 1
        if r["outcome"] == "done:complete" and reply[1]["text"] != r.get("text"):
            text_mismatch += 1
    return {
        "stored_user_ok": user_ok,
        "stored_reply_ok": reply_ok,
        "replies_expected": replies_expected,
        "stored_status": dict(statuses),
        "stored_text_mismatch": text_mismatch,
        "missing": missing[:20],
        "conversations_checked": len(found),
    }


def run(
    settings: driver.Settings, minutes: float, n: int, seed: int, kind: str = "holdback"
) -> dict[str, Any]:
    upstream = driver.Upstream(settings, fault_seed=seed)
    generator: procs.Child | None = None
    server: procs.Child | None = None
    samples: list[tuple[float, float]] = []
    try:
        server, port = driver.start_server(kind, upstream, settings, "soak")
        base = f"http://127.0.0.1:{port}"
        start = time.monotonic_ns() + int(0.5e9)
        stop = start + int(minutes * 60e9)
        deadline = stop + int((settings.reply_seconds * 2 + 20) * 1e9)
        out = settings.work / "gen-soak.json"
        argv = driver.generator_argv(
            port,
            n,
            1,
            (start, start, stop, deadline),
            settings,
            out,
            fault_seed=seed,
            keep_frames=False,
        )
        generator = procs.Child("gen-soak", argv, settings.work)
        cpu0 = [procs.cpu_seconds(c.pid) for c in (server, upstream.child, generator)]
        t0 = time.monotonic_ns()
        next_sample = t0
        while time.monotonic_ns() < stop and generator.alive():
            if not server.alive():
                raise procs.ProcessFailedError(f"holdback died during the soak:\n{server.tail()}")
            if time.monotonic_ns() >= next_sample:
                samples.append(((time.monotonic_ns() - t0) / 1e9, procs.rss_bytes(server.pid)))
                next_sample += int(SAMPLE_S * 1e9)
            time.sleep(0.2)
        cpu1 = [procs.cpu_seconds(c.pid) for c in (server, upstream.child, generator)]
        seconds = (time.monotonic_ns() - t0) / 1e9
        generator.wait(timeout=(deadline - time.monotonic_ns()) / 1e9 + 20)
        gen = json.loads(out.read_text())
        rounds = gen["rounds"]
        for r in rounds:
            r["text_sent"] = _sent_text(r)
        stored = audit(base, rounds, _get(f"{base}/api/conversations"))
        log = upstream.take_log()
    finally:
        if generator is not None:
            generator.stop()
        if server is not None:
            server.stop(grace=15.0)
        upstream.stop()
    return summarize(
        minutes,
        n,
        rounds,
        stored,
        samples,
        log,
        [(b - a) / seconds * 100 for a, b in zip(cpu0, cpu1, strict=True)],
        gen,
    )


def _sent_text(r: Mapping[str, Any]) -> str:
    return script.user_message(r["conn"], r["key"])


def summarize(
    minutes: float,
    n: int,
    rounds: Sequence[Mapping[str, Any]],
    stored: Mapping[str, Any],
    samples: Sequence[tuple[float, float]],
    log: Mapping[str, Any],
    cpu_pct: Sequence[float],
    gen: Mapping[str, Any],
) -> dict[str, Any]:
    planned = Counter(r["plan"] for r in rounds)
    outcomes = Counter(r["outcome"] for r in rounds)
    errors: Counter[str] = Counter()
    unexpected = missing = 0
    for r in rounds:
        code = r["outcome"].removeprefix("error:") if r["outcome"].startswith("error:") else None
        if code is not None:
            errors[code] += 1
        expected = EXPECTED_ERRORS.get(r["plan"])
        if code is not None and code != expected:
            unexpected += 1
        if expected is not None and code is None:
            missing += 1
    late = [(t, b / 2**20) for t, b in samples if t >= WARMUP_S] or [
        (t, b / 2**20) for t, b in samples
    ]
    slope = slope_per_min(late)
    leaks = sum(analysis.count_leaks(r.get("text", "")) for r in rounds)
    accepted = sum(1 for r in rounds if r.get("user_message_id"))
    result: dict[str, Any] = {
        "minutes": minutes,
        "n": n,
        "rounds": len(rounds),
        "accepted": accepted,
        "planned": dict(planned),
        "outcomes": dict(outcomes),
        "errors": dict(errors),
        "unexpected_errors": unexpected,
        "missing_errors": missing,
        "leaks": leaks,
        "generator_failures": gen.get("failures", {}),
        "upstream_counts": log.get("counts", {}),
        "server_cpu_pct": cpu_pct[0],
        "upstream_cpu_pct": cpu_pct[1],
        "generator_cpu_pct": cpu_pct[2],
        "rss": {
            "samples_mb": [b / 2**20 for _, b in samples],
            "first_mb": late[0][1] if late else 0.0,
            "last_mb": late[-1][1] if late else 0.0,
            "slope_mb_per_min": slope,
            "flat_limit_mb_per_min": FLAT_MB_PER_MIN,
            "flat": slope < FLAT_MB_PER_MIN,
        },
    }
    result.update(stored)
    result["passed"] = bool(
        result["rss"]["flat"]
        and unexpected == 0
        and missing == 0
        and leaks == 0
        and stored["stored_user_ok"] == accepted
        and stored["stored_reply_ok"] == stored["replies_expected"]
        and stored["stored_text_mismatch"] == 0
    )
    return result
