"""One reply watched by several viewers: a reply machine per reveal policy, frames per view.

The rules:
- Each distinct reveal policy among a reply's viewers gets a `ReplyMachine` of its own (its
  own guards and restorers), fed the same provider events in the same order; viewers whose
  policies are equal share it. The storage view (every value plain, `reveal.OWNER`) is always
  there: its outcome is what is stored and checkpointed, tokenized, whoever watches.
- A viewer's restorer restores each token to its value as the viewer's policy shows it, and
  its guard allows only the values the viewer may see plain: a value the model writes out is
  redacted for a viewer who may not see it, as any value not in the vault is.
- A view made after the reply began is first fed every event so far, so it has released
  exactly what it would have from the start (the filters are chunk-invariant); a viewer who
  joins late is sent the view's frames so far, from `assistant_start`, then the rest live.
- Each view numbers its frames of the message `seq` 1, 2, 3…; a viewer who resumes after
  frame `seq` n (a reload, a reconnect) is sent the view's frames after n, then the rest
  live: no gap, no duplicate. The same policy always makes the same frames (the machine is
  deterministic), so a viewer's numbers hold across connections.
- A frame goes only to the sinks of the view that made it. A sink that fails is dropped;
  the reply goes on. A connection is attached to a reply once: its sinks are told apart by
  the connection they send to (`connection_of`), so attaching it again (a resume, a watch
  of the reply it asked for) replaces its sink rather than adding a second one.
- The storage view decides when the reply ends (an end event, a block, a failure); views
  still streaming then are interrupted, and every view gets its own closing frames.

No asyncio here: the pump (`pipeline._ReplyPump`) feeds events and sends what comes back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, cast

from holdback.providers.events import Event
from holdback.reply import Frame, Outcome, ReplyMachine
from holdback.reply.frames import AssistantDelta, AssistantStart, EndedBy
from holdback.reveal import OWNER, RevealPolicy
from holdback.stream import ReplyFilter
from holdback.stream.projection import ProjectionMode
from holdback.vault import Vault

log = logging.getLogger("holdback.pipeline")

WireFrame = dict[str, Any]
Emit = Callable[[WireFrame], None]
# A reply filter for one view: its policy, the channel's projection, and whether restored
# values go into JSON strings.
ViewFilter = Callable[[RevealPolicy, ProjectionMode, bool], ReplyFilter]
MAX_VIEWS = 16  # distinct policies watching one reply; a viewer past it is refused


def connection_of(emit: Emit) -> object:
    """The connection an emit sends to: a connection's emits are bound methods of its one
    sender (`send`, `send_watched`), so they are told apart from other connections by it."""
    return getattr(emit, "__self__", emit)


class TooManyViewsError(RuntimeError):
    """A reply is already watched under `MAX_VIEWS` distinct policies."""


class View:
    """One policy's machine, what it has sent so far, and the connections it sends to."""

    def __init__(self, policy: RevealPolicy, machine: ReplyMachine | None) -> None:
        self.policy = policy
        self.machine = machine
        self.sent: list[WireFrame] = []
        self.sinks: list[Emit] = []

    def send(self, frames: Iterable[Frame]) -> int:
        """Send frames to every sink; returns the bytes of delta text among them."""
        released = 0
        for frame in frames:
            wire = frame.wire()
            wire["seq"] = len(self.sent) + 1  # this view's frames of the message, from 1
            self.sent.append(wire)
            if isinstance(frame, AssistantDelta):
                released += len(frame.text.encode())
            for sink in list(self.sinks):
                try:
                    sink(wire)
                except Exception:  # a broken connection must not stop the reply
                    log.warning("dropping frames for a connection that failed")
                    self.detach(sink)
        return released

    def detach(self, sink: Emit) -> None:
        """Stop sending to `sink`'s connection."""
        connection = connection_of(sink)
        self.sinks = [s for s in self.sinks if connection_of(s) is not connection]

    def sends_to(self, sink: Emit) -> bool:
        connection = connection_of(sink)
        return any(connection_of(s) is connection for s in self.sinks)


class ViewSet:
    """The views of one reply by policy, and the connections attached to them; how each
    view makes its frames is the subclass's (`_made`)."""

    conversation_id: str
    message_id: str
    _views: dict[RevealPolicy, View]

    @property
    def policies(self) -> list[RevealPolicy]:
        return list(self._views)

    def view(self, policy: RevealPolicy) -> View:
        """The view of `policy`, made (and brought up to now) if there was none."""
        found = self._views.get(policy)
        if found is not None:
            return found
        if len(self._views) >= MAX_VIEWS:
            raise TooManyViewsError(f"a reply is watched under at most {MAX_VIEWS} policies")
        view = self._views[policy] = self._made(policy)
        return view

    def _made(self, policy: RevealPolicy) -> View:
        raise NotImplementedError

    def attach(self, sink: Emit, policy: RevealPolicy, after_seq: int = 0) -> View:
        """Send `sink` what the policy's view has sent so far after frame `after_seq`, then
        everything it sends. A connection attached already is attached again, from
        `after_seq`, through `sink` alone."""
        view = self.view(policy)
        self.detach(sink)
        try:
            for wire in view.sent[max(after_seq, 0) :]:
                sink(wire)
        except Exception:  # a connection that fails now is not attached
            log.warning("dropping frames for a connection that failed")
            return view
        view.sinks.append(sink)
        return view

    def detach(self, sink: Emit) -> None:
        for view in self._views.values():
            view.detach(sink)

    def sends_to(self, sink: Emit) -> bool:
        """Whether `sink`'s connection is attached to a view."""
        return any(view.sends_to(sink) for view in self._views.values())


class Views(ViewSet):
    """The views of one reply. `receive(event)` feeds them all; `attach` adds a viewer."""

    def __init__(
        self,
        conversation_id: str,
        message_id: str,
        make_filter: ViewFilter,
        *,
        call_prefix: str,
    ) -> None:
        self.conversation_id = conversation_id
        self.message_id = message_id
        self._make_filter = make_filter
        self._call_prefix = call_prefix
        self._events: list[Event] = []
        self._views: dict[RevealPolicy, View] = {}
        self._closing: list[tuple[str, object]] = []  # what ended the reply, replayed too
        self.storage = self.view(OWNER)

    @property
    def ended(self) -> bool:
        return self._machine(self.storage).ended

    def _made(self, policy: RevealPolicy) -> View:
        machine = ReplyMachine(
            self.conversation_id,
            self.message_id,
            lambda projection, json_values: self._make_filter(policy, projection, json_values),
            call_prefix=self._call_prefix,
        )
        view = View(policy, machine)
        view.send([AssistantStart(self.conversation_id, self.message_id)])
        for event in self._events:
            view.send(machine.receive(event))
        for step, argument in self._closing:
            view.send(self._close(machine, step, argument))
        return view

    def receive(self, event: Event) -> int:
        """Feed every view; returns the bytes of text the storage view released."""
        if self.ended:
            return 0
        self._events.append(event)
        released = 0
        for view in list(self._views.values()):
            sent = view.send(self._machine(view).receive(event))
            if view is self.storage:
                released = sent
        if self.ended:
            self._end("interrupt", None)
        return released

    def interrupt(self, ended_by: EndedBy | None = None) -> None:
        self._end("interrupt", ended_by)

    def fail(self, code: str) -> None:
        self._end("fail", code)

    def done(self, *, stored: bool) -> None:
        self._end("done", stored)

    def outcome(self) -> Outcome:
        return self._machine(self.storage).outcome()

    def _end(self, step: str, argument: object) -> None:
        self._closing.append((step, argument))
        for view in list(self._views.values()):
            view.send(self._close(self._machine(view), step, argument))

    @staticmethod
    def _machine(view: View) -> ReplyMachine:
        assert view.machine is not None  # every view of an unmoderated reply has one
        return view.machine

    @staticmethod
    def _close(machine: ReplyMachine, step: str, argument: object) -> list[Frame]:
        if step == "interrupt":
            return machine.interrupt(cast("EndedBy | None", argument))
        if step == "fail":
            return machine.fail(str(argument))
        return machine.done(stored=bool(argument))


def view_vault(vault: Vault, policy: RevealPolicy) -> Vault:
    """The values a viewer's guard may let through as they are: those shown plain."""
    if policy.plain:
        return vault
    return Vault(
        (e for e in vault.entries() if policy.level(e.kind) == "plain"), reserved=vault.reserved
    )
