"""The moderation gate: a reply's screened, tokenized frames in; the same frames out, each
window of text only once its verdict allows it.

The rules:
- The gate sits after the guard and the restorer of the reply's storage view: it reads the
  text as it may be stored, tokenized (`ReplyMachine(tokenized=True)`), cuts each channel's
  text (content, reasoning, each tool call's arguments) into sentence windows
  (`windows.Windows`) and asks for one verdict per window (`checks`). Viewers are shown the
  released text rendered under their own policy (`viewers.Views`): no text reaches anyone
  before its window is allowed, and a window goes to a moderator tokenized, as it would be
  stored.
- Frames keep their order: a frame (the start, an error, the end) waits behind every window
  before it; the text of a window still open when the reply ends, or when any other frame
  comes, is a window of its own (the end of the stream overrides the hold).
- `allow` releases the window as it was; `withhold` releases `[withheld by policy: <c>]` in
  its place and goes on; `block` releases nothing more: the reply ends `blocked`
  (`content_filter`), with an error frame `moderation_blocked` naming the category. A
  failure (`fail`) releases nothing more of what waits: an error frame `moderation_failed`,
  and the reply ends `incomplete` (`error`). Never "probably fine".
- What the gate released is what is stored (`stored`), so the history reads as it streamed.
- A category reaches a client only as the moderator's closed shape allows (`CATEGORY_RE`)
  and only if the guard finds nothing in it (`screen_category`); otherwise it reads `policy`.

No asyncio here: the pump asks the moderator for each check and hands the verdict back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from holdback.moderation.base import ALLOW, Channel, Verdict
from holdback.moderation.windows import DEFAULT_BOUND, Windows
from holdback.reply.frames import AssistantDelta, AssistantDone, ErrorFrame, Frame

Key = tuple[str, str | None]  # (channel, call id)
UNNAMED = "policy"  # a category the gate will not show


def withheld(category: str) -> str:
    """The one spelling of a withheld window."""
    return f"[withheld by policy: {category}]"


@dataclass(frozen=True, slots=True)
class Check:
    """A window to moderate: `text` is tokenized, without the window's trailing whitespace
    (which says nothing to a policy). A `prefetch` asks about a window that may be about to
    close, so its verdict is ready (a moderator's cache) when it does; it decides nothing."""

    id: int
    channel: Channel
    text: str
    prefetch: bool = False


@dataclass(slots=True)
class _Window:
    check: Check
    key: Key
    template: AssistantDelta  # its frame, but for the text
    text: str  # as released if allowed
    verdict: Verdict | None = None


class ModerationGate:
    def __init__(
        self,
        conversation_id: str,
        message_id: str,
        *,
        bound: int = DEFAULT_BOUND,
        screen_category: Callable[[str], bool] = lambda _: True,
    ) -> None:
        self.conversation_id = conversation_id
        self.message_id = message_id
        self._bound = bound
        self._screen = screen_category
        self._open: dict[Key, tuple[Windows, AssistantDelta]] = {}
        self._queue: list[Frame | _Window] = []
        self._new: list[Check] = []
        self._next = 1
        self._stored: dict[Key, list[str]] = {}
        self._asked_ahead: dict[Key, str] = {}  # the last tentative window asked about
        self.blocked: str | None = None  # the category of a block
        self.failed = False

    @property
    def stopped(self) -> bool:
        """A verdict or a failure ended the reply: nothing more is released."""
        return self.blocked is not None or self.failed

    @property
    def waiting(self) -> int:
        """Windows asked about and not yet decided."""
        return sum(1 for item in self._queue if isinstance(item, _Window) and not item.verdict)

    def feed(self, frames: list[Frame]) -> list[Frame]:
        """Frames from the storage view's machine; returns those released now."""
        out: list[Frame] = []
        for frame in frames:
            if self.stopped:  # only the end goes out now, as the gate ends it
                if isinstance(frame, AssistantDone):
                    out.append(self.ending(frame))
                continue
            if isinstance(frame, AssistantDelta):
                self._text(frame)
            else:
                self._close_open()
                self._queue.append(frame)
            out.extend(self._release())
        return out

    def checks(self) -> list[Check]:
        """The windows to moderate since the last call, in order."""
        new, self._new = self._new, []
        return new

    def decide(self, check_id: int, verdict: Verdict) -> list[Frame]:
        """A window's verdict; returns the frames released by it."""
        for item in self._queue:
            if isinstance(item, _Window) and item.check.id == check_id:
                item.verdict = verdict
                break
        return self._release()

    def fail(self) -> list[Frame]:
        """A moderator failed: what waits is dropped, and nothing but the end follows."""
        if self.stopped:
            return []
        self.failed = True
        self._drop_waiting()
        return [ErrorFrame("moderation_failed", self.conversation_id, self.message_id)]

    def close(self) -> None:
        """The reply's text has ended: each window still open is a window of its own."""
        self._close_open()

    def abandon(self) -> list[Frame]:
        """The reply stops (Stop, a shutdown): what is undecided is never shown, the rest
        goes out."""
        self._drop_waiting()
        return self._release()

    def stored(self, key: Key) -> str:
        """What was released of one channel, tokenized, as it is stored."""
        return "".join(self._stored.get(key, ()))

    def ending(self, done: AssistantDone) -> AssistantDone:
        """The reply's last frame as the gate ends it."""
        if self.blocked is not None:
            return replace(done, finish_reason="content_filter", status="blocked")
        if self.failed:
            return replace(done, finish_reason="error", status="incomplete")
        return done

    # -- internals -------------------------------------------------------------------------

    def _text(self, frame: AssistantDelta) -> None:
        key: Key = (frame.channel, frame.call_id)
        opened = self._open.get(key)
        if opened is None:
            opened = self._open[key] = (Windows(self._bound), replace(frame, text=""))
        for text in opened[0].feed(frame.text):
            self._window(key, opened[1], text)
        ahead = opened[0].tentative
        if ahead is not None and self._asked_ahead.get(key) != ahead:
            self._asked_ahead[key] = ahead
            self._new.append(Check(0, frame.channel, ahead, prefetch=True))

    def _close_open(self) -> None:
        for key, (windows, template) in self._open.items():
            rest = windows.flush()
            if rest:
                self._window(key, template, rest)

    def _window(self, key: Key, template: AssistantDelta, text: str) -> None:
        check = Check(self._next, template.channel, text.rstrip())
        self._next += 1
        window = _Window(check, key, template, text)
        if check.text:
            self._new.append(check)
        else:  # only whitespace: nothing a policy could object to
            window.verdict = ALLOW
        self._queue.append(window)

    def _release(self) -> list[Frame]:
        out: list[Frame] = []
        while self._queue and not self.stopped:
            head = self._queue[0]
            if isinstance(head, _Window):
                if head.verdict is None:
                    break
                self._queue.pop(0)
                out.extend(self._decided(head))
            else:
                self._queue.pop(0)
                out.append(self.ending(head) if isinstance(head, AssistantDone) else head)
        if self.stopped:  # what waited behind the verdict goes; the end still goes out
            out.extend(self.ending(i) for i in self._queue if isinstance(i, AssistantDone))
            self._queue.clear()
        return out

    def _decided(self, window: _Window) -> list[Frame]:
        verdict = window.verdict
        assert verdict is not None
        category = verdict.category or UNNAMED
        if not self._screen(category):
            category = UNNAMED
        if verdict.action == "allow":
            return self._emit(window, window.text)
        if verdict.action == "withhold":
            return self._emit(window, withheld(category))
        self.blocked = category
        self._drop_waiting()
        return [
            ErrorFrame(
                "moderation_blocked", self.conversation_id, self.message_id, category=category
            )
        ]

    def _emit(self, window: _Window, text: str) -> list[Frame]:
        self._stored.setdefault(window.key, []).append(text)
        return [replace(window.template, text=text)]

    def _drop_waiting(self) -> None:
        self._queue = [item for item in self._queue if not isinstance(item, _Window)]
        self._new.clear()
        for windows, _ in self._open.values():
            windows.flush()


class OpenGate(ModerationGate):
    """No moderation: every frame goes out as it comes, and what went out is stored. The
    views of a reply on a shared database use it (`app/cluster.py`): every process renders
    the same tokenized frames, so a viewer's frames are numbered alike wherever they watch."""

    def _text(self, frame: AssistantDelta) -> None:
        key: Key = (frame.channel, frame.call_id)
        self._stored.setdefault(key, []).append(frame.text)
        self._queue.append(frame)
