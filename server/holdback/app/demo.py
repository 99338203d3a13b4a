"""The leak demonstration's routes, and `verify`, the same runs judged without a browser.

The rule it keeps: what `/demo` shows is measured on the bytes that crossed the wire, and the
demonstration is admitted like the chat. `/demo/ws/{pipeline}` plays one scenario
(`demo_scenarios`) through one pipeline (`demo_pipelines`: three naive designs, or holdback's
real chain under this server's guard settings) and sends each frame as the chat's sender
encodes it; `verify` encodes the same frames the same way and judges them with the oracle that
shares no code with the pipelines (`demo_oracle`). The sockets are admitted as `/ws` is (Host,
Origin, credential); the page needs a sign-in when the server has logins, and the scenario
list answers only to the server's own address. Nothing here touches a conversation or the
store.
"""

from __future__ import annotations

import asyncio
from typing import Any, TextIO, cast

import orjson
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from holdback.app.demo_oracle import Verdict, judge
from holdback.app.demo_pipelines import PIPELINES, TITLES, Pipeline, run
from holdback.app.demo_scenarios import BY_ID, SCENARIOS, Scenario
from holdback.app.runtime import Runtime
from holdback.app.ws import admit
from holdback.reply.frames import ErrorFrame


def encoded(scenario: Scenario, pipeline: Pipeline, **guard: Any) -> list[list[str]]:
    """The frames of one run, step by step, as the socket sends them (`sender.encode`'s
    serializer)."""
    return [[orjson.dumps(f).decode() for f in step] for step in run(scenario, pipeline, **guard)]


def verdict(scenario: Scenario, pipeline: Pipeline, **guard: Any) -> Verdict:
    frames = [raw for step in encoded(scenario, pipeline, **guard) for raw in step]
    return judge(frames, scenario.secrets, list(scenario.vault))


def table() -> dict[str, dict[str, Verdict]]:
    """Every scenario through every pipeline: scenario id -> pipeline -> verdict."""
    return {s.id: {p: verdict(s, p) for p in PIPELINES} for s in SCENARIOS}


def verify(out: TextIO) -> int:
    """`holdback demo --verify`: print the table; 1 if holdback's side leaked anything."""
    results = table()
    width = max(len(s.id) for s in SCENARIOS) + 2
    cols = [max(len(p), 5) + 2 for p in PIPELINES]

    def row(first: str, cells: list[str]) -> str:
        return first.ljust(width) + "".join(c.rjust(w) for c, w in zip(cells, cols, strict=True))

    for heading, part in (
        ("Leaks (secrets the viewer saw, in any decoded form)", "leaks"),
        ("Corruption (token fragments shown; not leaks)", "corruption"),
    ):
        counts = {
            s.id: [len(getattr(results[s.id][p], part)) for p in PIPELINES] for s in SCENARIOS
        }
        print(heading, file=out)
        print(row("scenario", list(PIPELINES)), file=out)
        for s in SCENARIOS:
            print(row(s.id, [str(n) for n in counts[s.id]]), file=out)
        totals = [sum(counts[s.id][i] for s in SCENARIOS) for i in range(len(PIPELINES))]
        print(row("total", [str(n) for n in totals]), file=out)
        print(file=out)
    leaked = sum(len(results[s.id]["holdback"].leaks) for s in SCENARIOS)
    if leaked:
        print(f"FAIL: holdback's side leaked {leaked} time(s)", file=out)
        return 1
    print(f"OK: holdback's side leaked nothing in {len(SCENARIOS)} scenarios", file=out)
    return 0


async def _signed_in(request: Request) -> bool:
    """With logins, the demonstration is for signed-in users, like the chat."""
    runtime: Runtime = request.app.state.runtime
    return runtime.settings.auth == "none" or await runtime.auth.user(request) is not None


async def demo_page(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    if not await _signed_in(request):
        return RedirectResponse("/", status_code=303)  # the sign-in page
    return FileResponse(runtime.web_dir / "demo.html")


async def demo_scenarios(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    if not runtime.auth.host_allowed(request):
        return JSONResponse(
            {"code": "forbidden_host", "message": "this server answers only to its own address"},
            status_code=403,
        )
    if not await _signed_in(request):
        return JSONResponse({"code": "unauthorized", "message": "sign in first"}, status_code=401)
    return JSONResponse(
        {
            "pipelines": [{"id": p, "title": TITLES[p]} for p in PIPELINES],
            "scenarios": [s.wire() for s in SCENARIOS],
        }
    )


async def _error(websocket: WebSocket, detail: str) -> None:
    await websocket.send_text(
        orjson.dumps(ErrorFrame("unknown_type", detail=detail).wire()).decode()
    )


async def demo_socket(websocket: WebSocket) -> None:
    runtime: Runtime = websocket.app.state.runtime
    if await admit(websocket) is None:  # the same Host, Origin and credential rules as /ws
        return
    pipeline = cast(Pipeline, websocket.path_params["pipeline"])
    if pipeline not in PIPELINES:
        await websocket.close(code=1008)
        return
    await websocket.accept()
    delay = max(runtime.settings.demo_chunk_delay, 0.0)
    settings = runtime.settings
    guard = {
        "mode": settings.guard_mode,
        "window": settings.guard_window,
        "phone_region": settings.phone_region,
    }
    try:
        while True:
            try:
                async with asyncio.timeout(runtime.settings.ws_idle_timeout):
                    message = await websocket.receive_json()
            except TimeoutError:
                await websocket.close(code=1000, reason="idle")
                return
            if not isinstance(message, dict) or message.get("type") != "start":
                await _error(websocket, "send start")
                continue
            scenario = BY_ID.get(str(message.get("scenario", "split")))
            if scenario is None:
                await _error(websocket, "no such scenario")
                continue
            for step in encoded(scenario, pipeline, **guard):
                for raw in step:
                    await websocket.send_text(raw)
                await asyncio.sleep(delay)
    except (WebSocketDisconnect, ValueError):
        return


routes = [
    Route("/demo", demo_page),
    Route("/demo/scenarios", demo_scenarios),
    WebSocketRoute("/demo/ws/{pipeline}", demo_socket),
]
