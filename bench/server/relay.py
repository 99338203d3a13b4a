"""The baseline: the least a WebSocket chat server can do, as the issue describes it.

The rule it keeps: no pseudonymization, no guard, no restore, no storage. On each
`user_message` it POSTs the text to the upstream with httpx, reads the SSE with `aiter_lines`,
`json.loads` each event and `send_text`s one `assistant_delta` per content chunk, then
`assistant_done`. It speaks just enough of holdback's protocol (`message_accepted`,
`assistant_start`, `error` with an `upstream_*` code) that one load generator drives both.
Whatever it costs per chunk is the limit of the stack (uvicorn, websockets, httpx, Starlette).

Run: `python -m server.relay --port P --upstream http://127.0.0.1:U/v1`.
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect


def build_app(upstream: str) -> Starlette:
    client: dict[str, httpx.AsyncClient] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(limits=limits, timeout=60.0) as http:
            client["http"] = http
            yield

    async def healthz(request: Any) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def reply(ws: WebSocket, conversation_id: str, text: str) -> None:
        message_id = uuid.uuid4().hex
        await ws.send_text(
            json.dumps(
                {
                    "type": "assistant_start",
                    "conversation_id": conversation_id,
                    "message_id": message_id,
                }
            )
        )
        body = {
            "model": "bench-model",
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": text}],
        }
        finish = None
        async with client["http"].stream(
            "POST", f"{upstream}/chat/completions", json=body
        ) as response:
            if response.status_code != 200:
                await response.aread()
                await ws.send_text(
                    json.dumps(
                        {
                            "type": "error",
                            "code": "upstream_error",
                            "message": f"upstream answered {response.status_code}",
                            "conversation_id": conversation_id,
                        }
                    )
                )
                return
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                for choice in chunk.get("choices") or ():
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        await ws.send_text(
                            json.dumps(
                                {
                                    "type": "assistant_delta",
                                    "conversation_id": conversation_id,
                                    "message_id": message_id,
                                    "channel": "content",
                                    "text": content,
                                }
                            )
                        )
                    finish = choice.get("finish_reason") or finish
        await ws.send_text(
            json.dumps(
                {
                    "type": "assistant_done",
                    "conversation_id": conversation_id,
                    "message_id": message_id,
                    "finish_reason": finish,
                    "status": "complete",
                }
            )
        )

    async def chat(ws: WebSocket) -> None:
        await ws.accept()
        try:
            while True:
                frame = json.loads(await ws.receive_text())
                if frame.get("type") != "user_message":
                    continue
                conversation_id = frame.get("conversation_id") or uuid.uuid4().hex
                await ws.send_text(
                    json.dumps(
                        {
                            "type": "message_accepted",
                            "conversation_id": conversation_id,
                            "message_id": uuid.uuid4().hex,
                            "masked": [],
                            "title": "",
                        }
                    )
                )
                try:
                    await reply(ws, conversation_id, frame.get("text", ""))
                except httpx.HTTPError as exc:
                    await ws.send_text(
                        json.dumps(
                            {
                                "type": "error",
                                "code": "upstream_protocol",
                                "message": type(exc).__name__,
                                "conversation_id": conversation_id,
                            }
                        )
                    )
        except WebSocketDisconnect:
            return

    return Starlette(
        routes=[Route("/healthz", healthz), WebSocketRoute("/ws", chat)], lifespan=lifespan
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="minimal WebSocket relay (the baseline)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:9/v1")
    args = parser.parse_args(argv)
    uvicorn.run(
        build_app(args.upstream.rstrip("/")),
        host="127.0.0.1",
        port=args.port,
        ws="websockets-sansio",
        log_level="warning",
        access_log=False,
        backlog=4096,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
