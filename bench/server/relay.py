"""The baselines: the least a WebSocket chat server can do, on two HTTP clients.

The rule it keeps: no pseudonymization, no guard, no restore, no storage. On each
`user_message` it POSTs the text to the upstream, reads the SSE line by line, decodes each
event and sends one `assistant_delta` per content chunk, then `assistant_done`. It speaks just
enough of holdback's protocol (`message_accepted`, `assistant_start`, `error` with an
`upstream_*` code) that one load generator drives all servers. Two clients are measured:

- `--client aiohttp` (`relay-aiohttp`, the strongest baseline): aiohttp's client, orjson for
  every decode and encode, one `send_text` per chunk;
- `--client httpx` (`relay`): httpx's default transport, `aiter_lines`, the standard `json`.

Whatever they cost per chunk is the limit of the stack (uvicorn, websockets, Starlette and the
client). Run: `python -m server.relay --port P --upstream http://127.0.0.1:U/v1 [--client C]`.
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

import aiohttp
import httpx
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

CLIENTS = ("httpx", "aiohttp")


class _Upstream(Protocol):
    """One streamed completion: the status, then the SSE lines (without line ends)."""

    def stream(self, body: dict[str, Any]) -> AbstractAsyncContextManager[_Response]: ...


class _Response(Protocol):
    status: int

    def lines(self) -> AsyncIterator[str]: ...


class _HttpxResponse:
    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self._response = response

    async def lines(self) -> AsyncIterator[str]:
        async for line in self._response.aiter_lines():
            yield line


class _HttpxUpstream:
    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self._client, self._url = client, url

    @asynccontextmanager
    async def stream(self, body: dict[str, Any]) -> AsyncIterator[_Response]:
        async with self._client.stream("POST", self._url, json=body) as response:
            yield _HttpxResponse(response)


class _AiohttpResponse:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.status = response.status
        self._response = response

    async def lines(self) -> AsyncIterator[str]:
        async for raw in self._response.content:
            yield raw.rstrip(b"\r\n").decode()


class _AiohttpUpstream:
    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self._session, self._url = session, url

    @asynccontextmanager
    async def stream(self, body: dict[str, Any]) -> AsyncIterator[_Response]:
        data = orjson.dumps(body)
        headers = {"Content-Type": "application/json"}
        async with self._session.post(self._url, data=data, headers=headers) as response:
            yield _AiohttpResponse(response)


def build_app(upstream: str, client: str = "httpx") -> Starlette:
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r}")
    url = f"{upstream}/chat/completions"
    holder: dict[str, _Upstream] = {}
    dumps: Callable[[Any], str]
    loads: Callable[[str], Any]
    if client == "aiohttp":
        dumps, loads = (lambda obj: orjson.dumps(obj).decode()), orjson.loads
        errors: tuple[type[Exception], ...] = (aiohttp.ClientError,)
    else:
        dumps, loads = json.dumps, json.loads
        errors = (httpx.HTTPError,)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if client == "aiohttp":
            connector = aiohttp.TCPConnector(limit=0)
            timeout = aiohttp.ClientTimeout(total=60.0)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                holder["up"] = _AiohttpUpstream(session, url)
                yield
        else:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
            async with httpx.AsyncClient(limits=limits, timeout=60.0) as http:
                holder["up"] = _HttpxUpstream(http, url)
                yield

    async def healthz(request: Any) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def reply(ws: WebSocket, conversation_id: str, text: str) -> None:
        message_id = uuid.uuid4().hex
        head = {"conversation_id": conversation_id, "message_id": message_id}
        await ws.send_text(dumps({"type": "assistant_start", **head}))
        body = {
            "model": "bench-model",
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": text}],
        }
        finish = None
        async with holder["up"].stream(body) as response:
            if response.status != 200:
                await ws.send_text(
                    dumps(
                        {
                            "type": "error",
                            "code": "upstream_error",
                            "message": f"upstream answered {response.status}",
                            "conversation_id": conversation_id,
                        }
                    )
                )
                return
            async for line in response.lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                chunk = loads(data)
                for choice in chunk.get("choices") or ():
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        await ws.send_text(
                            dumps(
                                {
                                    "type": "assistant_delta",
                                    **head,
                                    "channel": "content",
                                    "text": content,
                                }
                            )
                        )
                    finish = choice.get("finish_reason") or finish
        await ws.send_text(
            dumps({"type": "assistant_done", **head, "finish_reason": finish, "status": "complete"})
        )

    async def chat(ws: WebSocket) -> None:
        await ws.accept()
        try:
            while True:
                frame = loads(await ws.receive_text())
                if frame.get("type") != "user_message":
                    continue
                conversation_id = frame.get("conversation_id") or uuid.uuid4().hex
                await ws.send_text(
                    dumps(
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
                except errors as exc:
                    await ws.send_text(
                        dumps(
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
    parser = argparse.ArgumentParser(description="minimal WebSocket relay (the baselines)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:9/v1")
    parser.add_argument("--client", choices=CLIENTS, default="httpx")
    args = parser.parse_args(argv)
    uvicorn.run(
        build_app(args.upstream.rstrip("/"), args.client),
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
