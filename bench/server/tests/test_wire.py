"""The fake upstream's bytes: requests parse under any split, replies parse as OpenAI's do."""

from __future__ import annotations

import orjson
import pytest

from holdback.providers.events import End, TextDelta
from holdback.providers.openai_chat import OpenAIChatParser
from holdback.providers.sse import SSEDecoder
from server import wire

BODY = orjson.dumps(
    {
        "model": "m",
        "stream": True,
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second ref bkaaaaaaaaaa"},
        ],
    }
)
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
)


def test_two_pipelined_requests_parse_under_every_split() -> None:
    data = REQUEST + b"GET /log HTTP/1.1\r\nHost: x\r\n\r\n"
    for cut in range(len(data) + 1):
        parser = wire.RequestParser()
        got = parser.feed(data[:cut]) + parser.feed(data[cut:])
        assert [(r.method, r.path) for r in got] == [
            ("POST", "/v1/chat/completions"),
            ("GET", "/log"),
        ]
        assert got[0].body == BODY
        assert got[0].headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    "raw",
    [
        b"NONSENSE\r\n\r\n",
        b"GET / SPDY/3\r\n\r\n",
        b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: ten\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n",
    ],
)
def test_bad_requests_are_refused_clearly(raw: bytes) -> None:
    with pytest.raises(wire.BadRequestError):
        wire.RequestParser().feed(raw)


def test_endless_head_is_refused() -> None:
    with pytest.raises(wire.BadRequestError, match="too large"):
        wire.RequestParser().feed(b"GET / HTTP/1.1\r\n" + b"x: y\r\n" * 5000)


def test_last_user_text() -> None:
    assert wire.last_user_text(BODY) == "second ref bkaaaaaaaaaa"
    parts = orjson.dumps(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"text": "b"}]}]}
    )
    assert wire.last_user_text(parts) == "ab"
    for bad in (b"{", b"[]", b'{"messages": []}', b'{"messages": [{"role": "system"}]}'):
        with pytest.raises(wire.BadRequestError):
            wire.last_user_text(bad)


def _dechunk(data: bytes) -> bytes:
    out = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert data == b"\r\n"
            return out
        out += data[:size]
        assert data[size : size + 2] == b"\r\n"
        data = data[size + 2 :]


def test_stream_parses_with_holdbacks_own_openai_parser() -> None:
    pieces = ["Hel", "lo <EM", "AIL_1>", ' "quoted"\n', "é"]
    body = wire.chunked(wire.role_event("id1", 1))
    body += b"".join(wire.chunked(wire.content_event("id1", 1, p)) for p in pieces)
    body += wire.chunked(wire.closing_events("id1", 1, 10, len(pieces))) + wire.STREAM_END
    raw = _dechunk(body)
    decoder, parser = SSEDecoder(), OpenAIChatParser()
    events = [e for sse in decoder.feed(raw) for e in parser.feed(sse)]
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts == pieces
    end = events[-1]
    assert isinstance(end, End)
    assert end.finish_reason == "stop"
    assert end.usage is not None
    assert parser.done


def test_response_has_a_content_length() -> None:
    raw = wire.response(500, "Internal Server Error", wire.error_body("boom"))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 500 ")
    assert f"content-length: {len(body)}".encode() in head
    assert orjson.loads(body)["error"]["message"] == "boom"
