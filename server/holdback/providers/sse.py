"""A sans-I/O decoder for `text/event-stream` bodies (server-sent events).

The rule it keeps: the events decoded from a byte stream do not depend on how the bytes were
split into chunks. It follows the WHATWG HTML "event stream interpretation" rules:

- the body is UTF-8; one leading BOM is dropped, and invalid bytes become U+FFFD. A sequence
  split across chunks is joined before decoding, never replaced;
- lines end with CRLF, LF or CR. A CR at the end of a chunk ends its line at once, and an LF
  that opens the next chunk is then the rest of that CRLF, not an empty line;
- a line starting with `:` is a comment; `field:value` drops one space after the colon; a
  line with no colon is a field with an empty value; unknown fields are ignored;
- `data` lines are joined with LF; `event` names the event (`message` by default); `id` sets
  the last event id (kept across events, ignored if it holds NUL); `retry` sets the
  reconnection time when it is all ASCII digits;
- an empty line dispatches the event, unless no `data` line was seen since the last dispatch.

One deliberate leniency, at the end of the stream only: `flush()` treats a final line without
a line end as a complete line and dispatches an event that lacks only its closing blank line.
Captured streams and some servers end that way, and the adapters parse every payload as JSON,
so a stream cut inside a payload still fails loudly there instead of being silently dropped
here. `ended_mid_event` tells whether the stream ended without its closing blank line.

Bounds: a line longer than `max_line` characters (without its line end) fails with
`SSELineTooLongError` as soon as its length passes the limit, before its end arrives; an
event whose data (its `data` lines joined by LF) passes `max_event` characters fails with
`SSEEventTooLargeError`. The chunk that crosses a bound still returns the events completed
before it, and sets `failure`; the decoder then takes nothing more (`feed` raises `failure`).
Decoding costs time linear in the bytes fed, however they are split: a line's pieces are kept
in a list and joined once, when the line ends.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from holdback.errors import (
    SSEEventTooLargeError,
    SSELineTooLongError,
    StreamClosedError,
    UpstreamTooLargeError,
)
from holdback.providers.limits import UpstreamLimits

_LINE_END = re.compile(r"\r\n|\r|\n")
_BOM = "\ufeff"
_DEFAULTS = UpstreamLimits()


@dataclass(frozen=True, slots=True)
class SSEvent:
    """One dispatched server-sent event."""

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Turns the bytes of an event stream, fed in any chunks, into `SSEvent`s."""

    __slots__ = (
        "_closed",
        "_data",
        "_data_chars",
        "_decoder",
        "_event",
        "_last_id",
        "_max_event",
        "_max_line",
        "_pending",
        "_pending_chars",
        "_skip_lf",
        "_started",
        "ended_mid_event",
        "failure",
        "retry",
    )

    def __init__(
        self,
        *,
        max_line: int = _DEFAULTS.max_line_chars,
        max_event: int = _DEFAULTS.max_event_chars,
    ) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._max_line = max_line
        self._max_event = max_event
        self._pending: list[str] = []  # the pieces of the current line, not yet ended
        self._pending_chars = 0
        self._skip_lf = False  # the last chunk ended with CR: a leading LF completes a CRLF
        self._started = False  # the BOM check has been made
        self._closed = False
        self._data: list[str] = []
        self._data_chars = 0  # the current event's data, joined
        self._event = ""
        self._last_id: str | None = None
        self.retry: int | None = None
        self.ended_mid_event = False
        self.failure: UpstreamTooLargeError | None = None

    @property
    def last_event_id(self) -> str | None:
        """The last event id the stream set, if any."""
        return self._last_id

    def feed(self, chunk: bytes) -> list[SSEvent]:
        """Decode one chunk; return the events it completed."""
        if self.failure is not None:
            raise self.failure
        if self._closed:
            raise StreamClosedError("the event-stream decoder was fed after flush()")
        text = self._decoder.decode(chunk)
        if not text:
            return []
        events: list[SSEvent] = []
        try:
            self._consume(text, events)
        except UpstreamTooLargeError as exc:
            self.failure = exc
        return events

    def flush(self) -> list[SSEvent]:
        """End the stream: return the events still pending (see the module's leniency note)."""
        if self.failure is not None:
            raise self.failure
        if self._closed:
            return []
        events: list[SSEvent] = []
        tail = self._decoder.decode(b"", final=True)
        if tail:
            try:
                self._consume(tail, events)
            except UpstreamTooLargeError as exc:
                self.failure = exc
                return events
        self._closed = True
        line = "".join(self._pending)
        self._pending = []
        self._pending_chars = 0
        self.ended_mid_event = bool(line) or bool(self._data) or bool(self._event)
        if line:
            self._line(line, events)
        self._dispatch(events)
        return events

    def _consume(self, text: str, events: list[SSEvent]) -> None:
        if not self._started:
            self._started = True
            if text[0] == _BOM:
                text = text[1:]
        if self._skip_lf:
            self._skip_lf = False
            if text[:1] == "\n":
                text = text[1:]
        if "\r" in text:
            self._skip_lf = text[-1] == "\r"
            lines = _LINE_END.split(text)
        else:
            lines = text.split("\n")
        # The last piece has no line end yet; it waits for the next chunk.
        rest = lines.pop()
        if lines:
            if self._pending:
                self._pending.append(lines[0])
                lines[0] = "".join(self._pending)
                self._pending = []
                self._pending_chars = 0
            limit = self._max_line
            for line in lines:
                if len(line) > limit:
                    raise SSELineTooLongError(f"an event-stream line exceeds {limit} characters")
                self._line(line, events)
        if rest:
            self._pending.append(rest)
            self._pending_chars += len(rest)
            if self._pending_chars > self._max_line:
                raise SSELineTooLongError(
                    f"an event-stream line exceeds {self._max_line} characters"
                )

    def _line(self, line: str, events: list[SSEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line[0] == ":":
            return
        colon = line.find(":")
        if colon < 0:
            name, value = line, ""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == " ":
                value = value[1:]
        if name == "data":
            self._data_chars += len(value) + (1 if self._data else 0)
            if self._data_chars > self._max_event:
                raise SSEEventTooLargeError(
                    f"an event-stream event exceeds {self._max_event} characters"
                )
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = int(value)

    def _dispatch(self, events: list[SSEvent]) -> None:
        if not self._data:
            self._event = ""
            return
        events.append(
            SSEvent(
                event=self._event or "message",
                data="\n".join(self._data),
                id=self._last_id,
                retry=self.retry,
            )
        )
        self._data = []
        self._data_chars = 0
        self._event = ""
