"""The chat WebSocket (`/ws`): checks the handshake, validates frames, routes them, and sends.

The rule: bad input never crashes the server and never loses a stored message. Every bad frame
gets an `error` frame with a code and the connection stays usable, except a frame over the size
limit, after which the connection closes with 1009. The handshake is refused with HTTP 403 when
the origin is foreign or nobody is signed in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
from starlette.websockets import WebSocket

from holdback.app.pipeline import Reply
from holdback.app.runtime import Runtime
from holdback.app.sender import Frame, Sender
from holdback.errors import HoldbackError, describe
from holdback.reply.frames import ErrorFrame

log = logging.getLogger("holdback.ws")


def error_frame(code: str, detail: str | None = None, **extra: Any) -> Frame:
    """An error frame: the code, and our fixed message for it (or a server-made detail)."""
    return ErrorFrame(code, conversation_id=extra.get("conversation_id"), detail=detail).wire()


async def chat_socket(websocket: WebSocket) -> None:
    runtime: Runtime = websocket.app.state.runtime
    if not (runtime.auth.origin_allowed(websocket) and runtime.auth.host_allowed(websocket)):
        await websocket.close(code=1008)  # before accept: the handshake gets HTTP 403
        return
    user = await runtime.auth.user(websocket)
    if user is None:
        await websocket.close(code=1008)
        return
    await websocket.accept()
    sender = Sender(websocket, runtime.settings.send_queue_bytes)
    writer = asyncio.create_task(sender.run())
    watching: list[Reply] = []
    try:
        while not sender.closed:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            if message.get("bytes") is not None:
                sender.send(
                    error_frame("bad_frame", "binary frames are not accepted; send JSON text")
                )
                continue
            text = message.get("text") or ""
            if len(text.encode("utf-8", "surrogatepass")) > runtime.settings.max_frame_bytes:
                sender.send(
                    error_frame(
                        "frame_too_large",
                        f"frames are limited to {runtime.settings.max_frame_bytes} bytes",
                    )
                )
                await sender.drain()
                await websocket.close(code=1009)
                break
            reply = await _handle(runtime, user.id, text, sender)
            if reply is not None:
                watching.append(reply)
    except Exception as exc:
        log.error("chat socket failed: %s", describe(exc))
    finally:
        for reply in watching:
            reply.detach(sender.send)
        sender.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer, timeout=5)


async def _handle(runtime: Runtime, user_id: str, text: str, sender: Sender) -> Reply | None:
    try:
        frame = orjson.loads(text)
    except orjson.JSONDecodeError:
        sender.send(error_frame("bad_frame", "frames must be JSON text"))
        return None
    if not isinstance(frame, dict):
        sender.send(error_frame("bad_frame", "a frame must be a JSON object"))
        return None
    kind = frame.get("type")
    if kind is None:
        sender.send(error_frame("missing_field", "a frame needs a 'type'"))
        return None
    if kind not in ("user_message", "cancel"):
        sender.send(
            error_frame("unknown_type", "unknown frame type; expected user_message or cancel")
        )
        return None
    if "conversation_id" not in frame:
        sender.send(error_frame("missing_field", f"{kind} needs 'conversation_id'"))
        return None
    conversation_id = frame["conversation_id"]
    if not (conversation_id is None or isinstance(conversation_id, str)):
        sender.send(error_frame("bad_frame", "'conversation_id' must be a string or null"))
        return None
    service = runtime.service
    try:
        if kind == "cancel":
            if conversation_id is None:
                sender.send(error_frame("missing_field", "cancel needs a 'conversation_id'"))
                return None
            await service.cancel(user_id, conversation_id)
            return None
        body = frame.get("text")
        if body is None:
            sender.send(
                error_frame(
                    "missing_field", "user_message needs 'text'", conversation_id=conversation_id
                )
            )
            return None
        if not isinstance(body, str) or not body.strip() or "\x00" in body:
            sender.send(
                error_frame(
                    "bad_frame",
                    "'text' must be a non-empty string without NUL characters",
                    conversation_id=conversation_id,
                )
            )
            return None
        return await service.submit(user_id, conversation_id, body, sender.send)
    except HoldbackError as exc:
        # Each error carries its own wire code; its message is ours, never the exception's.
        if exc.code not in ("not_found", "busy", "rate_limited"):
            log.warning("a chat request failed: %s", type(exc).__name__)
        sender.send(error_frame(exc.code, conversation_id=conversation_id))
    return None
