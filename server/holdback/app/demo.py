"""The leak demonstration: one scripted reply, replayed through two pipelines side by side.

`/demo/ws/naive` replaces whole tokens chunk by chunk, as a naive proxy would, so every token
the stream splits (`<EMAIL_` + `1>`) reaches the wire as fragments, and the values the model
made up on its own go out unscreened. `/demo/ws/holdback` runs the same chunks through the real
filter chain, through the same `ReplyMachine` every real reply goes out of. The naive pipeline
exists only here, behind its own routes: nothing else can select it, and it never touches a
real conversation or the store. Its sockets are admitted like `/ws`: the Host, the Origin and
the credential are checked (and the script's JSON answers only to the server's own address).
"""

from __future__ import annotations

import asyncio
import random

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from holdback.app.runtime import Runtime
from holdback.app.sender import encode
from holdback.app.ws import admit
from holdback.detect import default_detectors
from holdback.providers.events import End, TextDelta
from holdback.reply.frames import AssistantDelta, AssistantDone, ErrorFrame, Frame
from holdback.reply.machine import ReplyMachine
from holdback.stream import Guard, ReplyFilter, Restorer, forbidden_matcher
from holdback.stream.projection import ProjectionMode
from holdback.stream.restorer import json_escape

VAULT = {
    "<EMAIL_1>": "sarah.connor@cyberdyne.example",
    "<PHONE_1>": "+1 (415) 555-2671",
    "<CLIENT_1>": "Acme Holdings",
    "<IBAN_1>": "DE89 3704 0044 0532 0130 00",
}
FORBIDDEN = ["db01.corp.internal"]
REPLY = (
    "Sure. I'll email <EMAIL_1> today and call <PHONE_1> tomorrow morning.\n\n"
    "The <CLIENT_1> renewal looks fine; the refund goes to <IBAN_1>. "
    "I'll also loop in bob.smith@evil.example, who looks after db01.corp.internal."
)


def script_chunks(seed: int = 7) -> list[str]:
    """The reply in chunks of 1–6 characters, as a model streams it, splitting the tokens."""
    rng = random.Random(seed)
    chunks: list[str] = []
    i = 0
    while i < len(REPLY):
        n = rng.randint(1, 6)
        chunks.append(REPLY[i : i + n])
        i += n
    return chunks


class NaiveReplacer:
    """Per-chunk replacement: the broken design the demo exists to show. Demo use only."""

    def feed(self, chunk: str) -> str:
        for token, value in VAULT.items():
            chunk = chunk.replace(token, value)
        return chunk

    def flush(self) -> str:
        return ""


def holdback_filter(
    projection: ProjectionMode = "markdown", json_values: bool = False
) -> ReplyFilter:
    guard = Guard(
        default_detectors(),
        forbidden=forbidden_matcher(FORBIDDEN),
        vault=VAULT,
        projection=projection,
    )
    return ReplyFilter(guard, Restorer(VAULT, escape=json_escape if json_values else None))


def _naive_frames(message_id: str) -> list[list[Frame]]:
    naive = NaiveReplacer()
    frames: list[list[Frame]] = []
    for chunk in script_chunks():
        text = naive.feed(chunk)
        frames.append([AssistantDelta("demo", message_id, "content", text)] if text else [])
    frames.append([AssistantDone("demo", message_id, "stop", "complete")])
    return frames


def _holdback_frames(message_id: str) -> list[list[Frame]]:
    machine = ReplyMachine("demo", message_id, holdback_filter)
    frames = [machine.receive(TextDelta("content", chunk)) for chunk in script_chunks()]
    frames.append([*machine.receive(End("stop", None)), *machine.done(stored=True)])
    return frames


async def _signed_in(request: Request) -> bool:
    """With logins, the demonstration is for signed-in users, like the chat."""
    runtime: Runtime = request.app.state.runtime
    return runtime.settings.auth == "none" or await runtime.auth.user(request) is not None


async def demo_page(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    if not await _signed_in(request):
        return RedirectResponse("/", status_code=303)  # the sign-in page
    return FileResponse(runtime.web_dir / "demo.html")


async def demo_script(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    if not runtime.auth.host_allowed(request):
        return JSONResponse(
            {"code": "forbidden_host", "message": "this server answers only to its own address"},
            status_code=403,
        )
    if not await _signed_in(request):
        return JSONResponse({"code": "unauthorized", "message": "sign in first"}, status_code=401)
    return JSONResponse({"tokens": list(VAULT), "values": list(VAULT.values())})


async def _replay(websocket: WebSocket, naive: bool) -> None:
    runtime: Runtime = websocket.app.state.runtime
    if await admit(websocket) is None:  # the same Host, Origin and credential rules as /ws
        return
    await websocket.accept()
    delay = max(runtime.settings.demo_chunk_delay, 0.0)
    try:
        while True:
            try:
                async with asyncio.timeout(runtime.settings.ws_idle_timeout):
                    message = await websocket.receive_json()
            except TimeoutError:
                await websocket.close(code=1000, reason="idle")
                return
            if not isinstance(message, dict) or message.get("type") != "start":
                await websocket.send_text(
                    encode(ErrorFrame("unknown_type", detail="send start").wire())
                )
                continue
            message_id = "demo-naive" if naive else "demo-holdback"
            steps = _naive_frames(message_id) if naive else _holdback_frames(message_id)
            for step in steps:
                for frame in step:
                    await websocket.send_text(encode(frame.wire()))
                await asyncio.sleep(delay)
    except (WebSocketDisconnect, ValueError):
        return


async def naive_socket(websocket: WebSocket) -> None:
    await _replay(websocket, naive=True)


async def holdback_socket(websocket: WebSocket) -> None:
    await _replay(websocket, naive=False)


routes = [
    Route("/demo", demo_page),
    Route("/demo/script", demo_script),
    WebSocketRoute("/demo/ws/naive", naive_socket),
    WebSocketRoute("/demo/ws/holdback", holdback_socket),
]
