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
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from holdback.errors import StreamClosedError

_LINE_END = re.compile(r"\r\n|\r|\n")
_BOM = "\ufeff"


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
        "_buf",
        "_closed",
        "_data",
        "_decoder",
        "_event",
        "_last_id",
        "_skip_lf",
        "_started",
        "ended_mid_event",
        "retry",
    )

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""  # the current line, not yet ended
        self._skip_lf = False  # the last chunk ended with CR: a leading LF completes a CRLF
        self._started = False  # the BOM check has been made
        self._closed = False
        self._data: list[str] = []
        self._event = ""
        self._last_id: str | None = None
        self.retry: int | None = None
        self.ended_mid_event = False

    @property
    def last_event_id(self) -> str | None:
        """The last event id the stream set, if any."""
        return self._last_id

    def feed(self, chunk: bytes) -> list[SSEvent]:
        """Decode one chunk; return the events it completed."""
        if self._closed:
            raise StreamClosedError("the event-stream decoder was fed after flush()")
        text = self._decoder.decode(chunk)
        if not text:
            return []
        events: list[SSEvent] = []
        self._consume(text, events)
        return events

    def flush(self) -> list[SSEvent]:
        """End the stream: return the events still pending (see the module's leniency note)."""
        if self._closed:
            return []
        events: list[SSEvent] = []
        tail = self._decoder.decode(b"", final=True)
        if tail:
            self._consume(tail, events)
        self._closed = True
        line, self._buf = self._buf, ""
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
        if not lines:
            self._buf += rest
            return
        lines[0] = self._buf + lines[0]
        self._buf = rest
        for line in lines:
            self._line(line, events)

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
        self._event = ""
