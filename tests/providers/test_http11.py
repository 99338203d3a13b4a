"""The sans-I/O HTTP/1.1 response parser: every framing, read in every split, gives the same
head and body; anything ambiguous or cut short is an error that quotes none of the bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdback.providers.http11 import (
    MalformedResponseError,
    ResponseCutShortError,
    ResponseHead,
    ResponseHeadTooLargeError,
    ResponseParser,
)
from holdback.providers.http11_request import InvalidRequestHeadError, request_head

EVENTS = b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\ndata: [DONE]\n\n'

FIRST = EVENTS.index(b"\n\n") + 2
CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    b"%x;ext=1\r\n%b\r\n%X\r\n%b\r\n0\r\nx-trailer: yes\r\n\r\n"
    % (FIRST, EVENTS[:FIRST], len(EVENTS) - FIRST, EVENTS[FIRST:])
)
LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(EVENTS), EVENTS)
CLOSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n" + EVENTS
LF_ONLY = b"HTTP/1.1 200 OK\ntransfer-encoding: chunked\n\n5\nhello\n0\n\n"


def read_all(parser: ResponseParser) -> bytes:
    """The head, then every body byte until nothing more comes (errors propagate)."""
    assert parser.head() is not None
    body = b""
    while more := parser.body():
        body += more
    return body


def parse(pieces: list[bytes], *, eof: bool = True) -> tuple[ResponseHead, bytes, ResponseParser]:
    """Feed `pieces` one by one, reading whatever can be read after each."""
    parser = ResponseParser()
    head: ResponseHead | None = None
    body = b""
    for i, piece in enumerate(pieces):
        parser.feed(piece)
        if eof and i == len(pieces) - 1:
            parser.feed_eof()
        if head is None:
            head = parser.head()
        if head is not None:
            body += parser.body()
    if head is None:
        head = parser.head()
    assert head is not None
    while not parser.complete:
        more = parser.body()
        assert more
        body += more
    return head, body, parser


@pytest.mark.parametrize("raw", [CHUNKED, LENGTH, CLOSE], ids=["chunked", "length", "close"])
def test_every_single_split_and_one_byte_feeds_give_the_same_response(raw: bytes) -> None:
    whole_head, whole_body, _ = parse([raw])
    assert whole_body == EVENTS
    assert whole_head.status == 200
    assert whole_head.reason == b"OK"
    assert whole_head.http_version == b"HTTP/1.1"
    for i in range(1, len(raw)):
        assert parse([raw[:i], raw[i:]])[:2] == (whole_head, EVENTS), i
    assert parse([raw[i : i + 1] for i in range(len(raw))])[:2] == (whole_head, EVENTS)


@given(st.lists(st.integers(min_value=1, max_value=len(CHUNKED)), max_size=12))
def test_random_splits_of_a_chunked_response(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    pieces = [CHUNKED[a:b] for a, b in zip([0, *points], [*points, len(CHUNKED)], strict=True)]
    assert parse([p for p in pieces if p])[1] == EVENTS


def test_a_chunk_is_handed_out_before_it_is_whole() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n10\r\nabc")
    assert parser.head() is not None
    assert parser.body() == b"abc"
    parser.feed(b"defghijklmnop\r\n0\r\n\r\n")
    assert parser.body() == b"defghijklmnop"
    assert parser.complete
    assert parser.reusable


def test_headers_keep_their_spelling_and_order() -> None:
    head, _, _ = parse([b"HTTP/1.1 429 Too Many\r\nRetry-After:  2 \r\nX-A: 1\r\nx-a: 2\r\n\r\n"])
    assert head.headers == [(b"Retry-After", b"2"), (b"X-A", b"1"), (b"x-a", b"2")]
    assert head.reason == b"Too Many"


@pytest.mark.timeout(5)
def test_long_whitespace_in_a_header_or_trailer_is_read_in_linear_time() -> None:
    spaces = b" \t" * 30_000  # 60 KB: a backtracking pattern takes many seconds over this
    head, body, _ = parse(
        [
            b"HTTP/1.1 200 OK\r\nx-pad: \ta" + spaces + b"b \t\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
            b"2\r\nok\r\n0\r\nx-trailer: c" + spaces + b"d \r\n\r\n"
        ]
    )
    assert head.headers == [
        (b"x-pad", b"a" + spaces + b"b"),
        (b"transfer-encoding", b"chunked"),
    ]
    assert body == b"ok"


def test_an_obs_fold_is_read_as_one_space() -> None:
    # RFC 9112 §5.2: a user agent replaces each obs-fold with SP before interpreting the value.
    raw = (
        b"HTTP/1.1 200 OK\r\nX-Long: first\r\n   second \r\n\tthird\r\nx-b:\r\n folded-in\r\n"
        b"transfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nx-t: 1\r\n 2\r\n\r\n"
    )
    head, body, parser = parse([raw], eof=False)
    assert head.headers == [
        (b"X-Long", b"first second third"),
        (b"x-b", b"folded-in"),
        (b"transfer-encoding", b"chunked"),
    ]
    assert body == b"ok"
    assert parser.reusable


def test_lf_only_line_ends_are_read() -> None:
    assert parse([LF_ONLY])[1] == b"hello"


def test_a_status_line_without_a_reason_is_read() -> None:
    head, body, _ = parse([b"HTTP/1.1 204\r\n\r\n"])
    assert (head.status, head.reason, body) == (204, b"", b"")


def test_interim_responses_are_skipped() -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: x\r\n\r\n" + LENGTH
    head, body, _ = parse([raw])
    assert (head.status, body) == (200, EVENTS)


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 204 No Content\r\ncontent-length: 10\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n",
    ],
)
def test_204_and_304_have_no_body(raw: bytes) -> None:
    parser = ResponseParser()
    parser.feed(raw)
    assert parser.head() is not None
    assert parser.complete
    assert parser.reusable


def test_a_response_to_head_has_no_body() -> None:
    parser = ResponseParser(head_request=True)
    parser.feed(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")
    assert parser.head() is not None
    assert parser.complete
    assert parser.body() == b""


@pytest.mark.parametrize(
    ("raw", "reusable"),
    [
        (LENGTH, True),
        (CHUNKED, True),
        (LENGTH.replace(b"OK\r\n", b"OK\r\nConnection: close\r\n"), False),
        (LENGTH.replace(b"HTTP/1.1", b"HTTP/1.0"), False),
        (
            LENGTH.replace(b"HTTP/1.1", b"HTTP/1.0").replace(
                b"OK\r\n", b"OK\r\nconnection: Keep-Alive\r\n"
            ),
            True,
        ),
        (LENGTH + b"HTTP/1.1 200 OK\r\n", False),  # bytes nobody asked for
        (CHUNKED.replace(b"chunked\r\n", b"chunked\r\ncontent-length: 5\r\n"), False),
    ],
)
def test_when_the_connection_may_be_reused(raw: bytes, reusable: bool) -> None:
    _, body, parser = parse([raw], eof=False)
    assert body == EVENTS
    assert parser.reusable is reusable


def test_a_close_delimited_body_ends_at_the_close_and_is_not_reusable() -> None:
    parser = ResponseParser()
    parser.feed(CLOSE)
    assert parser.head() is not None
    assert parser.body() == EVENTS
    assert not parser.complete
    parser.feed_eof()
    assert parser.body() == b""
    assert parser.complete
    assert not parser.reusable


def test_a_close_delimited_body_cut_by_a_failure_is_an_error() -> None:
    parser = ResponseParser()
    parser.feed(CLOSE)
    assert parser.head() is not None
    parser.feed_eof(failed=True)  # a reset, not the peer's orderly close
    assert parser.body() == EVENTS  # what arrived before the failure is still handed out
    with pytest.raises(ResponseCutShortError):
        parser.body()
    assert not parser.complete


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n10\r\nabc",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n",
        b"HTTP/1.1 200",
        b"",
    ],
)
def test_a_close_before_the_end_is_a_cut(raw: bytes) -> None:
    parser = ResponseParser()
    parser.feed(raw)
    parser.feed_eof()
    with pytest.raises(ResponseCutShortError):
        read_all(parser)


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/2 200 OK\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"ICY 200 OK\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx y: space in the name\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n folded: value\r\n\r\n",  # a fold with no field to continue
        b"HTTP/1.1 200 OK\r\nx: a\x00b\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: -5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0x5\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcdef\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\nnot a trailer\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n folded: t\r\n\r\n",
    ],
)
def test_malformed_responses_are_errors(raw: bytes) -> None:
    parser = ResponseParser()
    parser.feed(raw)
    with pytest.raises(MalformedResponseError) as caught:
        read_all(parser)
    assert "\x00" not in str(caught.value)


def test_a_chunk_size_line_without_an_end_is_bounded() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"1" * 5000)
    assert parser.head() is not None
    with pytest.raises(MalformedResponseError):
        parser.body()


def test_a_head_over_the_limit_is_an_error_even_before_it_ends() -> None:
    parser = ResponseParser(max_head=1024)
    parser.feed(b"HTTP/1.1 200 OK\r\n")
    assert parser.head() is None
    parser.feed(b"x-big: " + b"a" * 1100)
    with pytest.raises(ResponseHeadTooLargeError, match="1024 bytes"):
        parser.head()
    whole = ResponseParser(max_head=1024)
    whole.feed(b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 1100 + b"\r\n\r\n")
    with pytest.raises(ResponseHeadTooLargeError):
        whole.head()


def test_endless_trailers_are_bounded() -> None:
    parser = ResponseParser(max_head=1024)
    parser.feed(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n")
    assert parser.head() is not None
    for _ in range(1024 // 57):  # 57-byte lines: 17 fit under the limit
        parser.feed(b"x-t: " + b"a" * 50 + b"\r\n")
        assert parser.body() == b""
    parser.feed(b"x-t: " + b"a" * 50 + b"\r\n")
    with pytest.raises(ResponseHeadTooLargeError):
        parser.body()


def test_request_head_is_written_as_given() -> None:
    head = request_head(b"POST", b"/v1/chat?x=1", [(b"Host", b"h:1"), (b"Content-Length", b"2")])
    assert head == b"POST /v1/chat?x=1 HTTP/1.1\r\nHost: h:1\r\nContent-Length: 2\r\n\r\n"


@pytest.mark.parametrize(
    ("method", "target", "headers"),
    [
        (b"GET /", b"/", []),
        (b"GET", b"/a b", []),
        (b"GET", b"/", [(b"x", b"a\r\nInjected: 1")]),
        (b"GET", b"/", [(b"bad name", b"v")]),
        (b"GET", b"/", [(b"x", b"a\x00")]),
    ],
)
def test_request_heads_that_would_be_ambiguous_are_refused(
    method: bytes, target: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    with pytest.raises(InvalidRequestHeadError):
        request_head(method, target, headers)
