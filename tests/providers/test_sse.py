"""The event-stream decoder: WHATWG interpretation rules, its end-of-stream leniency, and
chunk invariance (any split of the bytes decodes to the same events)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdback.errors import StreamClosedError
from holdback.providers.sse import SSEDecoder, SSEvent


def decode(*chunks: bytes) -> list[SSEvent]:
    decoder = SSEDecoder()
    out: list[SSEvent] = []
    for chunk in chunks:
        out += decoder.feed(chunk)
    return out + decoder.flush()


def test_data_event_and_default_type() -> None:
    assert decode(b"data: hello\n\n") == [SSEvent("message", "hello")]


def test_multi_line_data_is_joined_with_lf() -> None:
    assert decode(b"data: a\ndata:b\ndata:  c\n\n") == [SSEvent("message", "a\nb\n c")]


def test_event_type_and_reset_between_events() -> None:
    events = decode(b"event: ping\ndata: 1\n\ndata: 2\n\n")
    assert events == [SSEvent("ping", "1"), SSEvent("message", "2")]


def test_id_persists_across_events_and_nul_ids_are_ignored() -> None:
    events = decode(b"id: 7\ndata: a\n\ndata: b\n\nid: x\x00y\ndata: c\n\nid\ndata: d\n\n")
    assert [e.id for e in events] == ["7", "7", "7", ""]


def test_retry_takes_only_ascii_digits() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b"retry: 1500\ndata: a\n\nretry: 12a\ndata: b\n\nretry: \xc2\xb2\n\n")
    assert [e.retry for e in events] == [1500, 1500]
    assert decoder.retry == 1500


def test_comments_unknown_fields_and_colonless_lines() -> None:
    stream = b": keep-alive\nfoo: bar\ndata\n\n:\n\ndata:x\n\n"
    # `data` without a colon is a data line with an empty value: it dispatches "".
    assert decode(stream) == [SSEvent("message", ""), SSEvent("message", "x")]


def test_only_one_leading_space_is_dropped() -> None:
    assert decode(b"data:   x \n\n") == [SSEvent("message", "  x ")]


def test_blank_lines_without_data_dispatch_nothing() -> None:
    assert decode(b"\n\n\nevent: lonely\n\n\r\n") == []


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(eol: bytes) -> None:
    stream = b"event: e" + eol + b"data: 1" + eol + b"data: 2" + eol + eol + b"data: 3" + eol + eol
    assert decode(stream) == [SSEvent("e", "1\n2"), SSEvent("message", "3")]


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    # Were the LF taken for a second line end, "a" and "b" would be two events.
    assert decode(b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n") == [SSEvent("message", "a\nb")]


def test_cr_ends_a_line_at_once() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == [SSEvent("message", "a")]
    assert decoder.feed(b"\ndata: b\n\n") == [SSEvent("message", "b")]


def test_utf8_split_inside_a_sequence() -> None:
    raw = "data: é€😀\n\n".encode()
    assert decode(*[raw[i : i + 1] for i in range(len(raw))]) == [SSEvent("message", "é€😀")]


def test_invalid_utf8_becomes_replacement_characters() -> None:
    assert decode(b"data: a\xffb\n\n") == [SSEvent("message", "a\ufffdb")]
    # A sequence cut by the end of the stream is replaced too.
    assert decode(b"data: a\xe2\x82") == [SSEvent("message", "a\ufffd")]


def test_leading_bom_is_dropped_once() -> None:
    bom = "\ufeff".encode()
    assert decode(bom + b"data: a\n\n") == [SSEvent("message", "a")]
    assert decode(bom[:1], bom[1:2], bom[2:] + b"data: a\n\n") == [SSEvent("message", "a")]
    # Only at the very start: a second BOM is part of the first line's field name.
    assert decode(bom + bom + b"data: a\n\n") == []
    assert decode(b"data: " + bom + b"a\n\n") == [SSEvent("message", "\ufeffa")]


def test_flush_dispatches_an_event_missing_its_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'event: error\ndata: {"x": 1}\n') == []
    assert decoder.flush() == [SSEvent("error", '{"x": 1}')]
    assert decoder.ended_mid_event


def test_flush_takes_a_final_line_without_line_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: b") == [SSEvent("message", "a")]
    assert decoder.flush() == [SSEvent("message", "b")]
    assert decoder.ended_mid_event


def test_clean_end_is_not_mid_event() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: a\n\n")
    assert decoder.flush() == []
    assert not decoder.ended_mid_event


def test_no_feeding_after_flush() -> None:
    decoder = SSEDecoder()
    decoder.flush()
    assert decoder.flush() == []
    with pytest.raises(StreamClosedError):
        decoder.feed(b"data: a\n\n")


# A grammar of event-stream fragments that exercises every rule, mixed with arbitrary bytes.
_FRAGMENTS = st.sampled_from(
    [
        b"data",
        b"data:",
        b"data: ",
        b"event: ",
        b"id: ",
        b"retry: ",
        b"retry: 42",
        b": comment",
        b"\n",
        b"\r",
        b"\r\n",
        b"\n\n",
        b"\xef\xbb\xbf",
        "é€😀".encode(),
        b"\xe2\x82",
        b"x",
        b"\x00",
        b'{"a": 1}',
    ]
)
_STREAMS = st.lists(st.one_of(_FRAGMENTS, st.binary(max_size=6)), max_size=40).map(b"".join)


@given(data=st.data(), stream=_STREAMS)
def test_any_rechunking_gives_the_same_events(data: st.DataObject, stream: bytes) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(0, len(stream)), max_size=12)))
    bounds = [0, *cuts, len(stream)]
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    assert decode(*chunks) == decode(stream)


_NAMES = st.text(st.characters(blacklist_characters="\r\n\x00", codec="utf-8"), max_size=8)
_LINES = st.lists(
    st.text(st.characters(blacklist_characters="\r\n", codec="utf-8"), max_size=10),
    min_size=1,
    max_size=3,
)


@given(
    data=st.data(),
    events=st.lists(st.tuples(_NAMES, _LINES, st.one_of(st.none(), _NAMES)), max_size=6),
)
def test_encoded_events_decode_back(
    data: st.DataObject, events: list[tuple[str, list[str], str | None]]
) -> None:
    """Events written with any mix of line ends, in any chunks, decode to themselves."""
    text = ""

    def eol() -> str:
        # After a lone CR, an LF would merge with it into one CRLF: a writer must not do that.
        choices = ["\r\n", "\r"] if text.endswith("\r") else ["\n", "\r\n", "\r"]
        return data.draw(st.sampled_from(choices))

    expected: list[SSEvent] = []
    last_id: str | None = None
    for name, lines, ident in events:
        if ident is not None:
            text += f"id: {ident}" + eol()
            last_id = ident
        if name:
            text += f"event: {name}" + eol()
        for line in lines:
            text += f"data: {line}" + eol()
        text += eol()
        expected.append(SSEvent(name or "message", "\n".join(lines), last_id))
    raw = text.encode()
    cuts = sorted(data.draw(st.sets(st.integers(0, len(raw)), max_size=8)))
    bounds = [0, *cuts, len(raw)]
    assert decode(*[raw[a:b] for a, b in itertools.pairwise(bounds)]) == expected
