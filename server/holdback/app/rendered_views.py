"""The views of a reply rendered from one tokenized stream: one machine, one gate, and each
viewer's text rendered from what the gate released.

Used for a moderated reply (`moderation.gate.ModerationGate`) and for every reply on a
shared database (`moderation.gate.OpenGate`, `app/cluster.py`: other processes render the
same released frames for their own viewers).

The rules:
- The reply has one `ReplyMachine`, the storage view's (every value plain to its guard,
  like the owner's), emitting the text as it may be stored: screened and tokenized. The
  gate holds it window by window until each verdict (an open gate holds nothing); what it
  releases is what is stored, and the only text any viewer is shown.
- A viewer is shown the released text rendered under their policy: each token as its value,
  its masked form or its label (`reveal.RevealPolicy.index`), JSON-escaped in tool calls.
  Released text holds no value but as a token (the storage guard tokenized every vault
  value and redacted every other), so a rendering shows a viewer exactly what their level
  allows; windows never split a token.
- Frames are numbered per view as everywhere (`seq`); a view's frame n is the rendering of
  released frame n (the start is 1), so every process numbers a viewer's frames alike.
- Otherwise as `viewers.Views`: late viewers sent what their view sent so far, a failing
  sink dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from holdback.app.viewers import View, ViewFilter, ViewSet
from holdback.moderation.base import Verdict
from holdback.moderation.gate import Check, ModerationGate
from holdback.providers.events import Event
from holdback.reply import Frame, Outcome, ReplyMachine
from holdback.reply.frames import AssistantDelta, AssistantDone, AssistantStart, EndedBy
from holdback.reveal import OWNER, RevealPolicy
from holdback.stream.restorer import Restorer, json_escape
from holdback.tokens import TokenIndex

IndexFor = Callable[[RevealPolicy], TokenIndex]  # what a policy shows for each token


Publish = Callable[[list[dict[str, object]]], None]  # released frames, tokenized, numbered


class Rendering(ViewSet):
    """Views that show released, tokenized frames, each rendered under its view's policy."""

    conversation_id: str
    message_id: str
    _index_for: IndexFor
    _released: list[Frame]
    _indexes: dict[RevealPolicy, TokenIndex]
    storage: View
    publish: Publish | None = None

    def _made(self, policy: RevealPolicy) -> View:
        view = View(policy, None)
        view.send([AssistantStart(self.conversation_id, self.message_id)])
        view.send(self._render(policy, self._released))
        return view

    def _release(self, frames: list[Frame]) -> int:
        """Show released frames to every view; returns the bytes of text the storage view
        sent. Released frame n is every view's frame n + 1 (the start is frame 1)."""
        if not frames:
            return 0
        first = len(self._released) + 2
        self._released.extend(frames)
        if self.publish is not None:
            self.publish([{**f.wire(), "seq": first + i} for i, f in enumerate(frames)])
        sent = 0
        for policy, view in list(self._views.items()):
            count = view.send(self._render(policy, frames))
            if view is self.storage:
                sent = count
        return sent

    def _render(self, policy: RevealPolicy, frames: list[Frame]) -> list[Frame]:
        """Released frames as `policy` shows them: every token rendered at its level."""
        index = self._indexes.get(policy)
        if index is None:
            index = self._indexes[policy] = self._index_for(policy)
        out: list[Frame] = []
        for frame in frames:
            if isinstance(frame, AssistantDelta):
                escape = json_escape if frame.channel == "tool_call" else None
                restorer = Restorer(index, escape=escape)
                frame = replace(frame, text=restorer.feed(frame.text) + restorer.flush())
            out.append(frame)
        return out


class RemoteViews(Rendering):
    """A reply another process runs, shown to this process's viewers from the frames it
    published (`app/cluster.py`), in order, each once."""

    def __init__(self, conversation_id: str, message_id: str, index_for: IndexFor) -> None:
        self.conversation_id = conversation_id
        self.message_id = message_id
        self._index_for = index_for
        self._released = []
        self._views = {}
        self._indexes = {}
        self.ended = False
        self.on_end: Callable[[], None] | None = None  # once its `assistant_done` is shown
        self.storage = self.view(OWNER)

    @property
    def released(self) -> list[Frame]:
        """What was published of the reply so far, tokenized."""
        return list(self._released)

    @property
    def shown(self) -> int:
        """The number of the last released frame shown (the start is 1)."""
        return len(self._released) + 1

    def release(self, numbered: list[tuple[int, Frame]]) -> None:
        """Frames as published with their numbers: those after `shown`, in order; a gap stops
        the run (the rest is read again from the store)."""
        for seq, frame in numbered:
            if self.ended or seq <= self.shown:
                continue
            if seq != self.shown + 1:
                return
            self._release([frame])
            if isinstance(frame, AssistantDone):
                self.ended = True
                if self.on_end is not None:
                    self.on_end()


class RenderedViews(Rendering):
    def __init__(
        self,
        conversation_id: str,
        message_id: str,
        make_filter: ViewFilter,
        index_for: IndexFor,
        gate: ModerationGate,
        *,
        call_prefix: str,
    ) -> None:
        self.conversation_id = conversation_id
        self.message_id = message_id
        self.gate = gate
        self._index_for = index_for
        self._machine = ReplyMachine(
            conversation_id,
            message_id,
            lambda projection, json_values: make_filter(OWNER, projection, json_values),
            call_prefix=call_prefix,
            tokenized=True,
        )
        self._released: list[Frame] = []  # by the gate, tokenized
        self._views: dict[RevealPolicy, View] = {}
        self._indexes: dict[RevealPolicy, TokenIndex] = {}
        self.storage = self.view(OWNER)

    @property
    def ended(self) -> bool:
        return self._machine.ended or self.gate.stopped

    # -- the reply -------------------------------------------------------------------------

    def receive(self, event: Event) -> int:
        """Feed the machine and the gate; returns the bytes of text released now."""
        if self.ended:
            return 0
        released = self._release(self.gate.feed(self._machine.receive(event)))
        if self._machine.ended:
            self.gate.close()  # the end of the stream overrides the hold
        return released

    def checks(self) -> list[Check]:
        return self.gate.checks()

    def decide(self, check_id: int, verdict: Verdict) -> int:
        return self._release(self.gate.decide(check_id, verdict))

    def moderation_failed(self) -> None:
        self._release(self.gate.fail())

    def interrupt(self, ended_by: EndedBy | None = None) -> None:
        self._release(self.gate.feed(self._machine.interrupt(ended_by)))
        self.gate.close()

    def fail(self, code: str) -> None:
        self._release(self.gate.feed(self._machine.fail(code)))
        self.gate.close()

    def abandon(self) -> None:
        """Stop waiting for verdicts: what is undecided is never shown."""
        self._release(self.gate.abandon())

    def done(self, *, stored: bool) -> None:
        self._release(self.gate.feed(self._machine.done(stored=stored)))

    def outcome(self) -> Outcome:
        """The machine's outcome with the text the gate released, and its ending."""
        outcome = self._machine.outcome()
        gate = self.gate
        parts = dict(outcome.parts)
        if "reasoning" in parts:
            parts["reasoning"] = gate.stored(("reasoning", None))
        if "tool_calls" in parts:
            calls = json.loads(parts["tool_calls"])
            for call in calls:
                call["arguments"] = gate.stored(("tool_call", call["call_id"]))
            parts["tool_calls"] = json.dumps(calls)
        status, reason = outcome.status, outcome.finish_reason
        if gate.blocked is not None:
            status, reason = "blocked", "content_filter"
        elif gate.failed:
            status, reason = "incomplete", "error"
        return replace(
            outcome,
            text=gate.stored(("content", None)),
            parts=parts,
            status=status,
            finish_reason=reason,
        )
