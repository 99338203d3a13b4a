"""HTTP/1.1 requests on the client side, sans-I/O: a request head and its body, framed.

The rules it keeps: a request head is written exactly as given, or refused if any part of it
would be ambiguous (a line break or control character in a header, a method or header name
that is not a token, a target with spaces); a request body is framed as its headers declare
(chunked, or exactly its Content-Length) and must match what they declare. Errors never quote
the header values or body bytes they refuse.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from holdback.errors import HoldbackError
from holdback.providers.http11 import HEADER_VALUE_BAD, TOKEN

_TARGET = re.compile(rb"[\x21-\x7e]+")


class InvalidRequestHeadError(HoldbackError):
    """A request method, target or header cannot be written as HTTP/1.1 without ambiguity."""


class InvalidRequestBodyError(HoldbackError):
    """A request body does not match the framing its headers declare."""


def request_head(method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]]) -> bytes:
    """The request line and headers, ready to write. Headers are written as given."""
    if TOKEN.fullmatch(method) is None:
        raise InvalidRequestHeadError("the request method is not an HTTP token")
    if _TARGET.fullmatch(target) is None:
        raise InvalidRequestHeadError("the request target has spaces or control characters")
    parts = [method, b" ", target, b" HTTP/1.1\r\n"]
    for name, value in headers:
        if TOKEN.fullmatch(name) is None:
            raise InvalidRequestHeadError("a request header name is not an HTTP token")
        if HEADER_VALUE_BAD.search(value) is not None:
            raise InvalidRequestHeadError("a request header value has control characters")
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


class RequestBodyFramer:
    """A request body framed as its headers declare: chunked, or exactly its Content-Length
    (no body when neither is given)."""

    __slots__ = ("_chunked", "_limit", "_sent")

    def __init__(self, headers: Sequence[tuple[bytes, bytes]]) -> None:
        self._chunked = False
        self._limit: int | None = None
        self._sent = 0
        for name, value in headers:
            lower = name.lower()
            if lower == b"transfer-encoding":
                self._chunked = b"chunked" in value.lower()
            elif lower == b"content-length":
                if not value.isdigit():
                    raise InvalidRequestBodyError("the request's Content-Length is not a number")
                self._limit = int(value)
        if self._chunked:
            self._limit = None
        elif self._limit is None:
            self._limit = 0

    def frame(self, part: bytes) -> bytes:
        """The bytes to write for one non-empty part of the body."""
        self._sent += len(part)
        if self._limit is not None and self._sent > self._limit:
            raise InvalidRequestBodyError("request body is longer than its Content-Length")
        return b"%x\r\n%b\r\n" % (len(part), part) if self._chunked else part

    def end(self) -> bytes:
        """The bytes that end the body."""
        if self._limit is not None and self._sent < self._limit:
            raise InvalidRequestBodyError("request body is shorter than its Content-Length")
        return b"0\r\n\r\n" if self._chunked else b""
