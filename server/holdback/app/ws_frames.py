"""What a client may send on `/ws`: each frame type, its fields checked, routed to the service.

The rules:
- A frame is a JSON object with a `type` of `FRAMES`; each field it names is checked for its
  type before anything runs, and a frame that fails gets one `error` frame (`missing_field`,
  `bad_frame`, `unknown_type`) and changes nothing.
- Text a user sends is a non-empty string without NUL characters.
- A reply's frames go to this connection at once if it asked for the reply (`user_message`,
  `edit`, `regenerate`, `continue`); frames of replies it watches (`watch`, `resume`) may
  wait up to the watch interval to go out together (`sender.Sender.send_watched`).
- A refusal names its code only; its message is ours (`errors.WIRE_ERRORS`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson

from holdback.app.pipeline import AFTER_LEAF, ChatService, Reply
from holdback.app.sender import Frame, Sender
from holdback.app.uploads import attachments_meta, compose, forget_attachments, take_attachments
from holdback.errors import HoldbackError
from holdback.reply.frames import ErrorFrame

log = logging.getLogger("holdback.ws")

_Check = Callable[[Any], bool]


def _string(value: Any) -> bool:
    return isinstance(value, str)


def _id(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 64


def _optional_id(value: Any) -> bool:
    return value is None or _id(value)


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and "\x00" not in value


def _any_text(value: Any) -> bool:
    return isinstance(value, str) and "\x00" not in value


def _ids(value: Any) -> bool:
    return isinstance(value, list) and len(value) <= 64 and all(_id(v) for v in value)


def _seq(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31


def _model(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 200


_WHAT: dict[_Check, str] = {
    _string: "a string",
    _id: "an id (a string)",
    _optional_id: "a string or null",
    _text: "a non-empty string without NUL characters",
    _any_text: "a string without NUL characters (it may be empty with attachments)",
    _ids: "a list of upload ids (POST /api/uploads)",
    _seq: "a non-negative integer",
    _model: "a model id (GET /api/models)",
}

# type -> {field: (required, check)}; a null field is a missing one, but where it may be null
# (`user_message`'s `conversation_id`: a new conversation; `parent_id`: a new first message).
FRAMES: dict[str, dict[str, tuple[bool, _Check]]] = {
    "user_message": {
        "conversation_id": (True, _optional_id),
        "text": (True, _any_text),
        "model": (False, _model),
        "parent_id": (False, _optional_id),
        "attachments": (False, _ids),
    },
    "edit": {
        "message_id": (True, _id),
        "text": (True, _any_text),
        "model": (False, _model),
        "attachments": (False, _ids),
    },
    "regenerate": {"message_id": (True, _id), "model": (False, _model)},
    "continue": {"message_id": (True, _id)},
    "cancel": {"conversation_id": (True, _id)},
    "watch": {"conversation_id": (True, _id)},
    "resume": {
        "conversation_id": (True, _id),
        "message_id": (True, _id),
        "after_seq": (True, _seq),
    },
}
WATCHING = ("watch", "resume")  # frames after which the socket is not idle-closed


def error_frame(code: str, detail: str | None = None, **extra: Any) -> Frame:
    """An error frame: the code, and our fixed message for it (or a server-made detail)."""
    return ErrorFrame(
        code,
        conversation_id=extra.get("conversation_id"),
        message_id=extra.get("message_id"),
        detail=detail,
        category=extra.get("category"),
    ).wire()


def parse(text: str) -> tuple[dict[str, Any] | None, Frame | None]:
    """The frame, checked, or the error frame that answers it."""
    try:
        frame = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None, error_frame("bad_frame", "frames must be JSON text")
    if not isinstance(frame, dict):
        return None, error_frame("bad_frame", "a frame must be a JSON object")
    kind = frame.get("type")
    if kind is None:
        return None, error_frame("missing_field", "a frame needs a 'type'")
    fields = FRAMES.get(kind) if isinstance(kind, str) else None
    if fields is None:
        return None, error_frame(
            "unknown_type", "unknown frame type; expected " + ", ".join(FRAMES)
        )
    about = {k: frame[k] for k in ("conversation_id", "message_id") if _id(frame.get(k))}
    for name, (required, check) in fields.items():
        if name not in frame or (frame[name] is None and check is not _optional_id):
            if required:
                return None, error_frame("missing_field", f"{kind} needs '{name}'", **about)
            continue
        if not check(frame[name]):
            return None, error_frame("bad_frame", f"'{name}' must be {_WHAT[check]}", **about)
    if "text" in fields and not _text(frame["text"]) and not frame.get("attachments"):
        return None, error_frame("bad_frame", f"'text' must be {_WHAT[_text]}", **about)
    return frame, None


async def route(
    service: ChatService, user_id: str, frame: dict[str, Any], sender: Sender
) -> Reply | None:
    """Run a checked frame; returns the reply it started or joined, if any."""
    kind = frame["type"]
    conversation_id = frame.get("conversation_id")
    try:
        if kind in ("user_message", "edit"):
            ids = frame.get("attachments") or []
            documents = await take_attachments(service.store, user_id, ids)
            text = compose(frame["text"], documents)
            meta = {"attachments": attachments_meta(documents)} if documents else None
            if kind == "edit":
                reply = await service.edit(
                    user_id,
                    frame["message_id"],
                    text,
                    sender.send,
                    model=frame.get("model"),
                    meta=meta,
                )
            else:
                reply = await service.submit(
                    user_id,
                    conversation_id,
                    text,
                    sender.send,
                    parent=frame.get("parent_id", AFTER_LEAF),
                    model=frame.get("model"),
                    meta=meta,
                )
            if documents:  # the message is stored: its text is their only copy now
                await forget_attachments(service.store, user_id, ids)
            return reply
        if kind == "regenerate":
            return await service.regenerate(
                user_id, frame["message_id"], sender.send, model=frame.get("model")
            )
        if kind == "continue":
            return await service.continue_reply(user_id, frame["message_id"], sender.send)
        if kind == "watch":
            return await service.watch(user_id, frame["conversation_id"], sender.send_watched)
        if kind == "resume":
            return await service.resume(
                user_id,
                frame["conversation_id"],
                frame["message_id"],
                frame["after_seq"],
                sender.send_watched,
            )
        await service.cancel(user_id, frame["conversation_id"])
    except HoldbackError as exc:
        # Each error carries its own wire code; its message is ours, never the exception's.
        if exc.code not in ("not_found", "busy", "rate_limited", "too_many_watchers"):
            log.warning("a chat request failed: %s", type(exc).__name__)
        about = {"conversation_id": conversation_id, "message_id": frame.get("message_id")}
        sender.send(error_frame(exc.code, category=getattr(exc, "category", None), **about))
    return None
