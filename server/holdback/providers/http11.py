"""HTTP/1.1 responses on the client side, sans-I/O: one response at a time in.

The rules it keeps:

- a response is read only as far as its framing says: chunked (trailers read and dropped),
  a Content-Length, or until the peer closes; a response to HEAD, a 204 and a 304 have no
  body whatever their headers say; interim 1xx responses are skipped;
- anything the framing rules cannot read unambiguously is an error, never a guess: a malformed
  status line, header or chunk line, disagreeing Content-Lengths, a transfer coding other than
  `chunked`, or a head over `max_head` bytes; the one repair is the one RFC 9112 §5.2 requires
  of a client: a folded header line (obs-fold) continues the field before it, joined by a space;
- reading a head costs time linear in its size, whatever bytes it holds;
- a body the peer cut short (closed before the framing said it ended) is an error; a body
  framed by the close itself ends at an orderly close only, never at a failed connection;
- the connection may carry another request only after a complete response that was framed
  by length or chunks, that did not ask to close, and after which nothing else arrived;
- `body()` hands out every body byte that has arrived, without waiting for a chunk to be
  whole, so a stream of small events is relayed as it comes.

Error messages describe the framing fault and never quote the bytes received. The request
side is `http11_request.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from holdback.errors import HoldbackError

MAX_HEAD = 64 * 1024
MAX_CHUNK_LINE = 4 * 1024

_HEAD_END = re.compile(rb"\n\r?\n")
_STATUS_LINE = re.compile(rb"HTTP/(1\.[01]) ([0-9]{3})(?: ([^\x00-\x08\x0a-\x1f\x7f]*))?")
HEADER_VALUE_BAD = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?\r?\n")
TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class ResponseViolationError(HoldbackError):
    """The upstream's response does not follow HTTP/1.1 framing."""


class MalformedResponseError(ResponseViolationError):
    """A status line, header, chunk line or framing header is not valid HTTP/1.1."""


class ResponseHeadTooLargeError(ResponseViolationError):
    """The status line and headers exceed the head limit."""


class ResponseCutShortError(ResponseViolationError):
    """The peer closed the connection before the response was complete."""


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """The final (non-1xx) response's status line and headers, names as the peer spelled them."""

    status: int
    reason: bytes
    http_version: bytes
    headers: list[tuple[bytes, bytes]]


# Parser states. Plain ints: the body path compares them once per chunk.
_HEAD, _LENGTH, _UNTIL_CLOSE, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _DONE = range(8)


def _field(line: bytes, what: str) -> tuple[bytes, bytes]:
    """A header or trailer line's name and value. Split, never matched as a whole: linear."""
    name, colon, value = line.partition(b":")
    if not colon or TOKEN.fullmatch(name) is None:
        raise MalformedResponseError(f"malformed {what} line")
    return name, _value(value, what)


def _value(raw: bytes, what: str) -> bytes:
    value = raw.strip(b" \t")
    if HEADER_VALUE_BAD.search(value) is not None:
        raise MalformedResponseError(f"control character in a {what} value")
    return value


class ResponseParser:
    """One response, fed bytes as they arrive. `head()` first, then `body()` until `complete`."""

    __slots__ = (
        "_buf",
        "_eof",
        "_failed",
        "_head_request",
        "_max_head",
        "_remaining",
        "_scanned",
        "_state",
        "_trailer_bytes",
        "keep_alive",
        "received_any",
    )

    def __init__(self, *, head_request: bool = False, max_head: int = MAX_HEAD) -> None:
        # Usually the buffer is the very bytes object that arrived (no copy); it becomes a
        # bytearray only while pieces accumulate, so appending stays linear.
        self._buf: bytes | bytearray = b""
        self._eof = False
        self._failed = False
        self._head_request = head_request
        self._max_head = max_head
        self._remaining = 0
        self._scanned = 0
        self._state = _HEAD
        self._trailer_bytes = 0
        self.keep_alive = False
        self.received_any = False

    # Input.

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.received_any = True
        buf = self._buf
        if not buf:
            self._buf = data
        elif isinstance(buf, bytearray):
            buf += data
        else:
            self._buf = bytearray(buf) + data

    def feed_eof(self, *, failed: bool = False) -> None:
        """No more bytes. `failed`: the connection broke (a reset), which ends no body."""
        self._eof = True
        self._failed = self._failed or failed

    @property
    def buffered(self) -> int:
        """Bytes received and not handed out yet."""
        return len(self._buf)

    @property
    def complete(self) -> bool:
        return self._state == _DONE

    @property
    def framed(self) -> bool:
        """Whether the body's end is marked by its framing (length or chunks), not by a close."""
        return self._state not in (_HEAD, _UNTIL_CLOSE)

    @property
    def length_left(self) -> int:
        """Body bytes a Content-Length still promises (0 for other framings)."""
        return self._remaining if self._state == _LENGTH else 0

    @property
    def reusable(self) -> bool:
        """Whether the connection may carry another request after this response."""
        return self._state == _DONE and self.keep_alive and not self._buf and not self._eof

    # The head.

    def head(self) -> ResponseHead | None:
        """The final response head once it has arrived, else None (feed more)."""
        while self._state == _HEAD:
            buf = self._buf
            found = _HEAD_END.search(buf, max(self._scanned - 2, 0))
            if found is None:
                if len(buf) > self._max_head:
                    raise ResponseHeadTooLargeError(f"response head exceeds {self._max_head} bytes")
                if self._eof:
                    raise ResponseCutShortError(
                        "connection closed before a response head arrived"
                        if not buf
                        else "connection closed in the middle of the response head"
                    )
                self._scanned = len(buf)
                return None
            if found.start() > self._max_head:
                raise ResponseHeadTooLargeError(f"response head exceeds {self._max_head} bytes")
            raw = bytes(buf[: found.start()])
            self._buf = buf[found.end() :]
            self._scanned = 0
            head = self._parse_head(raw)
            if head is not None:
                return head
        raise RuntimeError("head() called after the head was read")

    def _parse_head(self, raw: bytes) -> ResponseHead | None:
        lines = raw.split(b"\n")
        status_line = lines[0].removesuffix(b"\r")
        match = _STATUS_LINE.fullmatch(status_line)
        if match is None:
            raise MalformedResponseError("malformed status line")
        version, code, reason = match.group(1), int(match.group(2)), match.group(3) or b""
        headers: list[tuple[bytes, bytes]] = []
        for line in lines[1:]:
            line = line.removesuffix(b"\r")
            if line[:1] in (b" ", b"\t") and headers:  # obs-fold: one space
                name, value = headers[-1]
                headers[-1] = (name, b" ".join(v for v in (value, _value(line, "header")) if v))
            else:
                headers.append(_field(line, "header"))
        if code < 200:
            if code == 101:
                raise MalformedResponseError("101 Switching Protocols without an upgrade request")
            if code < 100:
                raise MalformedResponseError("status code below 100")
            return None  # interim: the final response follows on the same connection
        self._frame(version, code, headers)
        return ResponseHead(code, reason, b"HTTP/" + version, headers)

    def _frame(self, version: bytes, code: int, headers: list[tuple[bytes, bytes]]) -> None:
        connection: set[bytes] = set()
        codings: list[bytes] = []
        lengths: set[bytes] = set()
        for name, value in headers:
            lower = name.lower()
            if lower == b"connection":
                connection.update(t.strip().lower() for t in value.split(b","))
            elif lower == b"transfer-encoding":
                codings += (t.strip().lower() for t in value.split(b",") if t.strip())
            elif lower == b"content-length":
                lengths.update(t.strip() for t in value.split(b","))
        if version == b"1.1":
            self.keep_alive = b"close" not in connection
        else:
            self.keep_alive = b"keep-alive" in connection and b"close" not in connection
        if self._head_request or code in (204, 304):
            self._state = _DONE
            return
        if codings:
            if codings != [b"chunked"]:
                raise MalformedResponseError("unsupported transfer-encoding")
            if lengths:
                # Both framings at once: read by chunks, but never trust this connection again.
                self.keep_alive = False
            self._state = _CHUNK_SIZE
            return
        if lengths:
            if len(lengths) != 1:
                raise MalformedResponseError("conflicting Content-Length values")
            (length,) = lengths
            if not length.isdigit() or len(length) > 18:
                raise MalformedResponseError("invalid Content-Length")
            self._remaining = int(length)
            self._state = _LENGTH if self._remaining else _DONE
            return
        self.keep_alive = False  # the close is the framing
        self._state = _UNTIL_CLOSE

    # The body.

    def body(self) -> bytes:
        """Every body byte that can be handed out now (b"" when none: feed more or done)."""
        if not self._buf and not self._eof:
            return b""  # nothing new arrived: no state can change
        state = self._state
        if state >= _CHUNK_SIZE:
            if state == _DONE:
                return b""
            return self._chunked()
        buf = self._buf
        if state == _LENGTH:
            if not buf:
                if self._eof:
                    raise ResponseCutShortError("connection closed before the body's end")
                return b""
            remaining = self._remaining
            if len(buf) <= remaining:
                data = bytes(buf)
                self._buf = b""
            else:
                data = bytes(buf[:remaining])
                self._buf = buf[remaining:]
            self._remaining = remaining = remaining - len(data)
            if not remaining:
                self._state = _DONE
            return data
        if state == _UNTIL_CLOSE:
            if not buf and self._failed:
                raise ResponseCutShortError("connection failed before the body's end")
            data = bytes(buf)
            self._buf = b""
            if self._eof and not self._failed:
                self._state = _DONE
            return data
        raise RuntimeError("body() called before the head was read")

    def _chunked(self) -> bytes:
        buf = self._buf
        end = len(buf)
        pos = 0
        state = self._state
        pieces: list[bytes] = []
        while pos < end:
            if state == _CHUNK_SIZE:
                match = _CHUNK_LINE.match(buf, pos)
                if match is None:
                    newline = buf.find(b"\n", pos, pos + MAX_CHUNK_LINE)
                    if newline >= 0 or end - pos >= MAX_CHUNK_LINE:
                        raise MalformedResponseError("malformed chunk size line")
                    break
                pos = match.end()
                size = int(match.group(1), 16)
                if size:
                    self._remaining = size
                    state = _CHUNK_DATA
                else:
                    state = _TRAILERS
            elif state == _CHUNK_DATA:
                stop = pos + self._remaining
                if stop <= end:
                    pieces.append(bytes(buf[pos:stop]))
                    pos = stop
                    state = _CHUNK_END
                else:
                    pieces.append(bytes(buf[pos:]))
                    self._remaining -= end - pos
                    pos = end
            elif state == _CHUNK_END:
                first = buf[pos]
                if first == 10:  # LF alone, as lenient peers send it
                    pos += 1
                elif first != 13:
                    raise MalformedResponseError("chunk data longer than its size line says")
                elif pos + 1 == end:
                    break
                elif buf[pos + 1] != 10:
                    raise MalformedResponseError("chunk data longer than its size line says")
                else:
                    pos += 2
                state = _CHUNK_SIZE
            elif state == _TRAILERS:
                newline = buf.find(b"\n", pos)
                if newline < 0:
                    if self._trailer_bytes + end - pos > self._max_head:
                        raise ResponseHeadTooLargeError("response trailers exceed the head limit")
                    break
                line = bytes(buf[pos:newline]).removesuffix(b"\r")
                folds = line[:1] in (b" ", b"\t") and self._trailer_bytes > 0  # obs-fold
                self._trailer_bytes += newline + 1 - pos
                pos = newline + 1
                if not line:
                    state = _DONE
                    break
                if folds:
                    _value(line, "trailer")
                else:
                    _field(line, "trailer")
                if self._trailer_bytes > self._max_head:
                    raise ResponseHeadTooLargeError("response trailers exceed the head limit")
            else:  # _DONE
                break
        self._state = state
        if pos:
            self._buf = buf[pos:] if pos < end else b""
        if not pieces:
            if self._eof and state != _DONE:
                raise ResponseCutShortError("connection closed before the last chunk")
            return b""
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)
