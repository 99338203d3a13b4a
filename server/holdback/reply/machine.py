"""One reply as a sans-I/O machine: provider events in, typed frames out. The one outbound door.

The rule it keeps: nothing reaches a client about a reply except through `ReplyMachine`, and
every string it puts in a frame is screened, server-made or from a closed vocabulary
(`holdback.reply.frames`). Model text goes through one reply filter per channel key (content,
reasoning, and each tool call's arguments), so a held fragment never crosses channels; a tool
call's id is minted here and its name is screened; upstream error text and finish reasons are
never copied, only mapped to our codes and words.

The state is explicit and lives here only:

    streaming --End--------------------------------> ending --done()--> done
        |  \\--StreamError / interrupt() / fail()--> ending
        |--a filter blocked (block mode)------------> blocked --done()--> done
        \\--a filter failed--------------------------> failed --done()--> done

`receive()`, `interrupt()` and `fail()` return the frames to send now; once the reply has ended
(`ended`), `outcome()` says what to store and `done(stored=...)` gives the closing frames, which
the pump sends after its store write. No asyncio, no provider or web types.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from holdback.errors import FilterFailedError, HoldbackError
from holdback.providers.events import (
    End,
    Event,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from holdback.reply.frames import (
    REPLACED_TOOL_NAME,
    TOOL_NAME,
    AssistantDelta,
    AssistantDone,
    AssistantStart,
    EndedBy,
    ErrorFrame,
    FinishReason,
    Frame,
    Status,
    WireChannel,
    finish_reason,
)
from holdback.stream import ReplyBlockedError, ReplyFilter
from holdback.stream.projection import ProjectionMode

_SEPARATORS = re.compile(r"[_.-]")
MAX_TOOL_CALLS = 64  # per reply; calls beyond it are dropped, never shown

# Makes a fresh reply filter for a channel: its projection, and whether restored values go into
# JSON strings (tool-call arguments).
FilterFactory = Callable[[ProjectionMode, bool], ReplyFilter]


class ReplyState(Enum):
    STREAMING = "streaming"
    ENDING = "ending"  # the reply is over; waiting for the store before `done()`
    BLOCKED = "blocked"
    FAILED = "failed"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the store keeps of a reply: screened, tokenized text, and how it ended."""

    text: str
    parts: dict[str, str]
    status: Status
    finish_reason: FinishReason
    redacted: Counter[str]
    blocked: Counter[str]
    ended_by: EndedBy | None = None


@dataclass(slots=True)
class _Call:
    call_id: str  # ours
    name: str  # screened
    filter: ReplyFilter
    done: bool = False


@dataclass(slots=True)
class _Ending:
    status: Status
    reason: FinishReason
    errors: list[str] = field(default_factory=list)


class ReplyMachine:
    """The frames of one assistant reply, from the provider's events."""

    def __init__(
        self,
        conversation_id: str,
        message_id: str,
        make_filter: FilterFactory,
        *,
        call_prefix: str = "call",
        tokenized: bool = False,
    ) -> None:
        self.conversation_id = conversation_id
        # Frames carry the text as stored (tokenized), not as shown: for a moderated reply,
        # whose viewers are shown the gate's released text (`moderation.gate`).
        self.tokenized = tokenized
        self.message_id = message_id
        self._make_filter = make_filter
        self._call_prefix = call_prefix
        self.state = ReplyState.STREAMING
        self._channels: dict[str, ReplyFilter] = {}
        self._calls: dict[str, _Call] = {}  # by the upstream's id, which is only a key
        self._ending: _Ending | None = None
        self._ended_by: EndedBy | None = None
        self._blocked: Counter[str] = Counter()

    @property
    def ended(self) -> bool:
        return self.state is not ReplyState.STREAMING

    def start(self) -> Frame:
        return AssistantStart(self.conversation_id, self.message_id)

    # -- events ----------------------------------------------------------------------------

    def receive(self, event: Event) -> list[Frame]:
        """One provider event; the frames it produces."""
        if self.ended:
            return []
        out: list[Frame] = []
        try:
            if isinstance(event, TextDelta):
                self._text(event.channel, self._channel(event.channel).feed(event.text), out)
            elif isinstance(event, ToolCallStart):
                self._start_call(event)
            elif isinstance(event, ToolCallDelta):
                call = self._calls.get(event.call_id)
                if call is not None and not call.done:
                    self._tool_text(call, call.filter.feed(event.arguments), out)
            elif isinstance(event, ToolCallEnd):
                call = self._calls.get(event.call_id)
                if call is not None and not call.done:
                    call.done = True
                    self._tool_text(call, call.filter.flush(), out)
            elif isinstance(event, End):
                self._end(out, "complete", finish_reason(event.finish_reason), [])
            elif isinstance(event, StreamError):
                self._end(out, "incomplete", "error", [event.code])
        except ReplyBlockedError as blocked:
            self._block(blocked, out)
        except HoldbackError:
            self._fail(out)
        return out

    def interrupt(self, ended_by: EndedBy | None = None) -> list[Frame]:
        """The reply stops early: `ended_by` its user or the server, or (None) the stream
        ended without a word."""
        if self.ended:
            return []
        self._ended_by = ended_by
        out: list[Frame] = []
        try:
            self._end(out, "incomplete", "other", [])
        except ReplyBlockedError as blocked:
            self._block(blocked, out)
        except HoldbackError:
            self._fail(out)
        return out

    def fail(self, code: str = "internal") -> list[Frame]:
        """Something outside the filters failed: stop with `code`, no held text released."""
        if self.ended:
            return []
        self.state = ReplyState.FAILED
        self._ending = _Ending("incomplete", "error", [code])
        return [self._error(code)]

    # -- the end ---------------------------------------------------------------------------

    def outcome(self) -> Outcome:
        ending = self._ending or _Ending("incomplete", "other")
        content = self._channels.get("content")
        parts = {name: f.screened for name, f in self._channels.items() if name != "content"}
        if self._calls:
            parts["tool_calls"] = json.dumps(
                [
                    {"call_id": c.call_id, "name": c.name, "arguments": c.filter.screened}
                    for c in self._calls.values()
                ]
            )
        redacted: Counter[str] = Counter()
        for f in [*self._channels.values(), *(c.filter for c in self._calls.values())]:
            if f.guard is not None:
                redacted.update(f.guard.redacted)
        return Outcome(
            text=content.screened if content is not None else "",
            parts=parts,
            status=ending.status,
            finish_reason=ending.reason,
            redacted=redacted,
            blocked=Counter(self._blocked),
            ended_by=self._ended_by,
        )

    def done(self, *, stored: bool) -> list[Frame]:
        """The closing frames, once the pump has tried to store the outcome."""
        if self.state is ReplyState.STREAMING:
            self.interrupt()
        if self.state is ReplyState.DONE:
            return []
        ending = self._ending or _Ending("incomplete", "other")
        out: list[Frame] = []
        status, reason = ending.status, ending.reason
        if not stored:
            out.append(self._error("storage_failed"))
            status, reason = "incomplete", "error"
        self.state = ReplyState.DONE
        out.append(
            AssistantDone(self.conversation_id, self.message_id, reason, status, self._ended_by)
        )
        return out

    # -- internals -------------------------------------------------------------------------

    def _channel(self, name: str) -> ReplyFilter:
        f = self._channels.get(name)
        if f is None:
            f = self._channels[name] = self._make_filter("markdown", False)
        return f

    def _start_call(self, event: ToolCallStart) -> None:
        if event.call_id in self._calls or len(self._calls) >= MAX_TOOL_CALLS:
            return
        call_id = f"{self._call_prefix}_{len(self._calls) + 1}"
        self._calls[event.call_id] = _Call(
            call_id, self._screen_name(event.name), self._make_filter("json", True)
        )

    def _screen_name(self, name: str) -> str:
        """A tool name as shown: screened, and within `TOOL_NAME`; else a fixed one.

        A name is an identifier, so it is screened as written, with its separators read as
        spaces (`pay_4556737586899855` holds a card number), and from after each separator on
        (`x_ghp_...` holds a key). A name that holds anything, a vault value included, is not
        shown. In block mode a finding in the name blocks the reply, as anywhere else.
        """
        if not TOOL_NAME.fullmatch(name):
            return REPLACED_TOOL_NAME
        spellings = [name, _SEPARATORS.sub(" ", name)]
        spellings += [name[m.end() :] for m in _SEPARATORS.finditer(name) if m.end() < len(name)]
        for spelling in spellings:
            screen = self._make_filter("plain", False)
            try:
                shown = screen.feed(spelling) + screen.flush()
            except FilterFailedError:  # the name is not shown, whatever it held
                return REPLACED_TOOL_NAME
            if shown != spelling or screen.screened != spelling:
                return REPLACED_TOOL_NAME
        return name

    def _text(self, channel: str, text: str, out: list[Frame]) -> None:
        if self.tokenized:
            text = self._channels[channel].take_stored()
        if text:
            wire: WireChannel = "reasoning" if channel == "reasoning" else "content"
            out.append(AssistantDelta(self.conversation_id, self.message_id, wire, text))

    def _tool_text(self, call: _Call, text: str, out: list[Frame]) -> None:
        if self.tokenized:
            text = call.filter.take_stored()
        if text:
            out.append(
                AssistantDelta(
                    self.conversation_id,
                    self.message_id,
                    "tool_call",
                    text,
                    call_id=call.call_id,
                    name=call.name,
                )
            )

    def _flush_all(self, out: list[Frame]) -> None:
        for name, f in self._channels.items():
            self._text(name, f.flush(), out)
        for call in self._calls.values():
            if not call.done:
                call.done = True
                self._tool_text(call, call.filter.flush(), out)

    def _end(
        self, out: list[Frame], status: Status, reason: FinishReason, errors: list[str]
    ) -> None:
        """Release what is held (screened as final), then end as told."""
        self._flush_all(out)
        self.state = ReplyState.ENDING
        self._ending = _Ending(status, reason, errors)
        out.extend(self._error(code) for code in errors)

    def _block(self, blocked: ReplyBlockedError, out: list[Frame]) -> None:
        """Block mode: the safe prefix of the blocked channel goes out, then nothing more."""
        for name, f in self._channels.items():
            if f.guard is not None and f.guard.blocked:
                self._text(name, blocked.safe_prefix, out)
        for call in self._calls.values():
            if call.filter.guard is not None and call.filter.guard.blocked:
                self._tool_text(call, blocked.safe_prefix, out)
        self._blocked.update(blocked.kinds)
        self.state = ReplyState.BLOCKED
        self._ending = _Ending("blocked", "content_filter", ["blocked"])
        out.append(self._error("blocked"))

    def _fail(self, out: list[Frame]) -> None:
        self.state = ReplyState.FAILED
        self._ending = _Ending("incomplete", "error", [FilterFailedError.code])
        out.append(self._error(FilterFailedError.code))

    def _error(self, code: str) -> ErrorFrame:
        return ErrorFrame(code, self.conversation_id, self.message_id)
