"""Documents: `POST /api/uploads`, and how a message carries the documents attached to it.

The rules:
- An upload is one file in a multipart form (field `file`), read to text in memory (never
  spooled to disk in the clear) within the bounds of `extract.py`, then stored sealed
  (`store/uploads.py`) until a message takes it. The answer says what will be masked (kinds,
  spans and provisional tokens, and a masked preview) but never sends an original value
  back: the name, which is the user's own, is the one exception.
- A message names its documents by id (`user_message`'s `attachments`); `take_attachments`
  gives back only the user's own live uploads, at most `MAX_ATTACHMENTS`, holding at most
  `MAX_ATTACHMENT_CHARS` together; anything else is refused whole with a wire code.
- `compose` is the one rule for the text the model reads: the typed text, then each
  document in a block that names its file. The composed text is pseudonymized exactly like
  typed text, names included, so a value in a document or its name reaches the model as a
  token and is stored tokenized. `attachments_meta` records, per document, only its id,
  size, media type, characters and the block fence: never a name or any text.

Where a document's text is in a composed message (`split_composed` is the rule in code):
each block is `"\\n\\n" + F + " document " + i + ": " + name + " " + F + "\\n"`, the text, then
`"\\n" + F + " end of document " + i + " " + F`, where `F` is `fence` `=` characters and `i`
counts from 1; the blocks are the last of the text (the first block follows the typed text;
with no typed text it starts the text, without the blank line). `F` is longer than any run of
`=` in the documents and their names, so no document can hold a marker line: the last N
header lines of a message (N attachments) are its documents' headers, in every view of it
(restored, masked, or as the model saw it), whatever the typed text holds.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from holdback.app.extract import (
    Extracted,
    UploadRefusedError,
    UploadTooLargeError,
    clean_name,
    extract,
)
from holdback.app.http_api import _runtime, _user, problem, refused
from holdback.app.limits import UPLOAD_PATH
from holdback.errors import HoldbackError, wire_message
from holdback.pseudonymize import LITERAL, Pseudonymizer
from holdback.store.errors import UserNotFoundError
from holdback.store.repository import Store
from holdback.store.uploads import TooManyUploadsError, Uploads
from holdback.vault import Vault

__all__ = [
    "Document",
    "attachments_meta",
    "compose",
    "forget_attachments",
    "routes",
    "split_composed",
    "take_attachments",
]

MAX_ATTACHMENTS = 10  # documents one message may carry
MAX_ATTACHMENT_CHARS = 500_000  # their characters together
MAX_READING = 4  # files being read at once, server-wide; more are refused (503)
PREVIEW_CHARS = 4_000  # of the masked text, in the upload's answer
MAX_SPANS = 1_000  # masked spans listed in the upload's answer (counts cover all)
_ID_RE = re.compile(r"[0-9a-f]{32}\Z")
_RUN_RE = re.compile(r"=+")


class AttachmentError(HoldbackError):
    """A message's attachments are refused; each subclass names why, with its wire code."""

    def __init__(self) -> None:
        super().__init__(wire_message(self.code))


class UnknownAttachmentError(AttachmentError):
    """An id that is not one of the user's live uploads (never made, expired, another's)."""

    code = "unknown_attachment"


class TooManyAttachmentsError(AttachmentError):
    code = "too_many_attachments"


class AttachmentsTooLongError(AttachmentError):
    code = "attachments_too_long"


@dataclass(frozen=True, slots=True)
class Document:
    """An attached document: its upload's id, the file's name and its extracted text."""

    id: str
    name: str
    text: str
    size: int = 0  # bytes of the file as uploaded
    media_type: str = "text/plain"

    def __repr__(self) -> str:  # never the name or the text: both may hold values
        return f"Document(id={self.id!r}, chars={len(self.text)})"


# -- the message ------------------------------------------------------------------------------


def fence_of(documents: Sequence[Document]) -> int:
    """How many `=` the markers of these documents' blocks have: more than any run of `=` in
    their names and texts (at least 3)."""
    longest = 0
    for d in documents:
        for piece in (d.name, d.text):
            if "=" in piece:
                longest = max(longest, max(len(m) for m in _RUN_RE.findall(piece)))
    return max(3, longest + 1)


def compose(typed: str, documents: Sequence[Document]) -> str:
    """The user message as the model will read it: the typed text, then each document in a
    block that names its file (the module's docstring gives the exact rule)."""
    if not documents:
        return typed
    fence = "=" * fence_of(documents)
    blocks = [
        f"{fence} document {i}: {d.name} {fence}\n{d.text}\n{fence} end of document {i} {fence}"
        for i, d in enumerate(documents, 1)
    ]
    return (f"{typed}\n\n" if typed else "") + "\n\n".join(blocks)


def attachments_meta(documents: Sequence[Document]) -> list[dict[str, Any]]:
    """What the stored message records of its documents: ids and sizes, never a name or text
    (the name is in the composed text, pseudonymized with it)."""
    fence = fence_of(documents)
    return [
        {
            "id": d.id,
            "index": i,
            "size": d.size,
            "chars": len(d.text),
            "media_type": d.media_type,
            "fence": fence,
        }
        for i, d in enumerate(documents, 1)
    ]


def split_composed(text: str, fence: int, count: int) -> tuple[str, list[tuple[str, str]]]:
    """A composed message back into its typed text and its `count` documents, each as
    `(name, text)`, in any view of the message; `ValueError` if it does not hold them."""
    if count == 0:
        return text, []
    mark = "=" * fence
    headers = list(re.finditer(rf"(?m)^{mark} document (\d+): (.*) {mark}\n", text))[-count:]
    if len(headers) != count:
        raise ValueError("the text does not hold that many documents")
    documents: list[tuple[str, str]] = []
    for n, header in enumerate(headers):
        end_mark = f"\n{mark} end of document {header.group(1)} {mark}"
        stop = headers[n + 1].start() - 2 if n + 1 < count else len(text)
        end = text.rfind(end_mark, header.end(), stop)
        if end < 0:
            raise ValueError("a document's block is not closed")
        documents.append((header.group(2), text[header.end() : end]))
    start = headers[0].start()
    typed = text[: start - 2] if start >= 2 and text[start - 2 : start] == "\n\n" else ""
    return typed, documents


async def take_attachments(
    store: Store,
    user_id: str,
    ids: Sequence[str],
    *,
    max_count: int = MAX_ATTACHMENTS,
    max_chars: int = MAX_ATTACHMENT_CHARS,
) -> list[Document]:
    """The user's documents for a message, in the order named (an id named twice counts once).

    Refused whole: more than `max_count` (`TooManyAttachmentsError`); an id that is not one
    of the user's live uploads (`UnknownAttachmentError`); more than `max_chars` characters
    together (`AttachmentsTooLongError`). Taken uploads stay for a short grace, so a message
    refused after this may be sent again; `forget_attachments` once it is stored."""
    if isinstance(ids, str):
        raise UnknownAttachmentError
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return []
    if len(wanted) > max_count:
        raise TooManyAttachmentsError
    if not all(isinstance(i, str) and _ID_RE.match(i) for i in wanted):
        raise UnknownAttachmentError
    found = await Uploads(store).take(user_id, wanted)
    if len(found) != len(wanted):
        raise UnknownAttachmentError
    documents = [
        Document(u.id, u.name, u.text, size=u.size, media_type=u.media_type)
        for u in (found[i] for i in wanted)
    ]
    if sum(len(d.text) for d in documents) > max_chars:
        raise AttachmentsTooLongError
    return documents


async def forget_attachments(store: Store, user_id: str, ids: Sequence[str]) -> None:
    """Delete the user's uploads among `ids` at once (their message is stored: its text is
    the only copy from now on, tokenized)."""
    await Uploads(store).discard(user_id, [i for i in ids if isinstance(i, str)])


# -- the route --------------------------------------------------------------------------------


class _InMemoryParser(MultiPartParser):
    # The body is bounded by `body_limit`, so the file never rolls over to a temporary file
    # on disk, where it would lie in the clear.
    spool_max_size = 80 * 1024 * 1024


_reading = threading.BoundedSemaphore(MAX_READING)


def summary(pseudonymizer: Pseudonymizer, text: str) -> dict[str, Any]:
    """What an upload's text will have masked, without its values: for each value its kind,
    its span in the extracted text (`start`, `end`), its provisional token (numbered in this
    document alone; the conversation assigns the final one) and where that token is in the
    masked preview (`at`, None past the preview); counts per kind cover every value."""
    masked_text, masked = pseudonymizer.pseudonymize(text, Vault())
    cut = min(len(masked_text), PREVIEW_CHARS)
    placed: list[tuple[int, Any]] = []
    shift = 0
    for m in masked:
        at = m.start + shift
        shift += len(m.token) - (m.end - m.start)
        if at < cut < at + len(m.token):
            cut = at + len(m.token)  # never half a token
        placed.append((at, m))
    spans: list[dict[str, Any]] = []
    counts: Counter[str] = Counter()
    tokens: set[str] = set()
    for at, m in placed:
        if m.kind == LITERAL:
            continue  # a token-like spelling of the user's, kept as typed: not a value
        counts[m.kind] += 1
        tokens.add(m.token)
        if len(spans) < MAX_SPANS:
            shown = at + len(m.token) <= cut
            spans.append(
                {"kind": m.kind, "start": m.start, "end": m.end, "token": m.token,
                 "at": at if shown else None}
            )  # fmt: skip
    return {
        "chars": len(text),
        "masked": spans,
        "counts": dict(counts),
        "values": len(tokens),
        "preview": masked_text[:cut],
        "preview_complete": cut == len(masked_text),
    }


def _read(
    data: bytes, name: str, media_type: str | None, max_chars: int, pseudonymizer: Pseudonymizer
) -> tuple[Extracted, dict[str, Any]]:
    try:
        extracted = extract(data, name, media_type, max_chars=max_chars)
        return extracted, summary(pseudonymizer, extracted.text)
    finally:
        _reading.release()


async def create_upload(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    runtime = _runtime(request)
    settings = runtime.settings
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        return problem(400, "bad_upload", wire_message("bad_upload"))
    parser = _InMemoryParser(
        request.headers, request.stream(), max_files=1, max_fields=8, max_part_size=4096
    )
    try:
        form = await parser.parse()
    except MultiPartException:
        return problem(400, "bad_upload", wire_message("bad_upload"))
    try:
        file = form.get("file")
        if not isinstance(file, UploadFile):
            return problem(400, "bad_upload", wire_message("bad_upload"))
        data = await file.read()
        name, media_type = clean_name(file.filename), file.content_type
    finally:
        await form.close()
    if len(data) > settings.max_upload_bytes:
        return _refused(UploadTooLargeError("over the upload limit"), settings.max_upload_bytes)
    if not _reading.acquire(blocking=False):
        response = problem(503, "upload_busy", wire_message("upload_busy"))
        response.headers["Retry-After"] = "1"
        return response
    try:
        extracted, found = await asyncio.to_thread(
            _read, data, name, media_type, settings.max_upload_chars, runtime.service.pseudonymizer
        )
    except UploadRefusedError as exc:
        return _refused(exc, settings.max_upload_chars if exc.status == 413 else None)
    try:
        upload_id = await Uploads(runtime.store).add(
            user.id, name, extracted.text, size=len(data), media_type=extracted.media_type
        )
    except TooManyUploadsError as exc:
        return refused(429, exc)
    except UserNotFoundError:
        return problem(401, "unauthorized", "sign in first")
    body = {"id": upload_id, "name": name, "size": len(data), "media_type": extracted.media_type}
    return JSONResponse({**body, **found}, status_code=201)


def _refused(exc: UploadRefusedError, limit: int | None) -> Response:
    body: dict[str, Any] = {"code": exc.code, "message": wire_message(exc.code)}
    if limit is not None:
        body["limit"] = limit
    return JSONResponse(body, status_code=exc.status)


async def delete_upload(request: Request) -> Response:
    """A pending upload the user no longer wants to send (the attachment removed)."""
    user = await _user(request)
    if isinstance(user, Response):
        return user
    upload_id = request.path_params["id"]
    if _ID_RE.match(upload_id) and await Uploads(_runtime(request).store).discard(
        user.id, [upload_id]
    ):
        return Response(status_code=204)
    return problem(404, "not_found", "no such upload")


routes = [
    Route(UPLOAD_PATH, create_upload, methods=["POST"]),
    Route(UPLOAD_PATH + "/{id}", delete_upload, methods=["DELETE"]),
]
