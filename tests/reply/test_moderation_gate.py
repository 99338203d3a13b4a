"""The moderation stage, with no event loop: sentence windows fixed by the text, the gate
releasing a window only once its verdict allows it, every viewer's text rendered from what
was released, and the same result for every split of the model's reply.

The moderator is a deterministic function of the window's text; what the stage hands it is
checked to be tokenized (no value of the vault in it).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from holdback.app.rendered_views import RenderedViews
from holdback.app.viewers import view_vault
from holdback.detect import default_detectors
from holdback.moderation.base import Verdict
from holdback.moderation.gate import ModerationGate, withheld
from holdback.moderation.windows import Windows
from holdback.providers.events import End, TextDelta, Usage
from holdback.reveal import OWNER, RevealPolicy
from holdback.stream import Guard, ReplyFilter, Restorer
from holdback.stream.projection import ProjectionMode
from holdback.vault import Vault

DETECTORS = default_detectors()
EMAIL = "ann.gate-canary@example.org"
PHONE = "+1 415 555 0190"
LABELS = RevealPolicy.of({}, "label")
REPLY = (
    "Write to <EMAIL_1> today. The plan is secret-plan: move fast; then call <PHONE_1>.\n"
    f"Also {EMAIL} again! This sentence mentions forbidden-topic and goes. Done"
)


def vault() -> Vault:
    v = Vault()
    v.assign("email", EMAIL)
    v.assign("phone", PHONE)
    return v


def verdict_for(text: str) -> Verdict:
    if "forbidden-topic" in text:
        return Verdict("withhold", "topic")
    if "explode" in text:
        return Verdict("block", "violence")
    return Verdict("allow")


class Sink:
    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    def __call__(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)

    def text(self) -> str:
        return "".join(f["text"] for f in self.frames if f["type"] == "assistant_delta")


def moderated(v: Vault, screen: Any = lambda c: True) -> RenderedViews:
    entries = v.entries()

    def make(policy: RevealPolicy, projection: ProjectionMode, json_values: bool) -> ReplyFilter:
        return ReplyFilter(
            Guard(DETECTORS, vault=view_vault(v, policy), projection=projection),
            Restorer(OWNER.index(entries) if policy == OWNER else policy.index(entries)),
        )

    def index_for(policy: RevealPolicy) -> Any:
        return OWNER.index(entries) if policy == OWNER else policy.index(entries)

    gate = ModerationGate("c1", "m1", bound=200, screen_category=screen)
    return RenderedViews("c1", "m1", make, index_for, gate, call_prefix="call_t")


def run(views: RenderedViews, pieces: list[str], asked: list[str]) -> None:
    """Feed the reply; answer every window as soon as it is asked, in reverse order of asking
    within a batch (verdicts may come back in any order)."""

    def answer() -> None:
        checks = views.checks()
        for check in reversed(checks):
            asked.append(check.text)
            views.decide(check.id, verdict_for(check.text))

    for piece in pieces:
        views.receive(TextDelta("content", piece))
        answer()
    views.receive(End("stop", Usage(1, 2)))
    answer()
    views.interrupt()
    answer()
    views.done(stored=True)


def test_windows_end_at_sentences_and_bounds() -> None:
    w = Windows(200)
    assert w.feed("One. Two! Three? Four; five: six") == [
        "One. ",
        "Two! ",
        "Three? ",
        "Four; ",
        "five: ",
    ]
    assert w.feed(" seven\nend") == ["six seven\n"]
    assert w.flush() == "end"
    long = "word " * 100
    cut = Windows(200).feed(long + "x")
    assert cut[0] == "word " * 40
    token = "a" * 195 + " <EMAIL_1>" + "b" * 300
    first = Windows(200).feed(token)[0]
    assert first == "a" * 195 + " "  # the token goes whole to the next window


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_windows_are_fixed_by_the_text(data: st.DataObject) -> None:
    text = data.draw(st.text(alphabet="ab .!\n<>EMAIL_1", max_size=900))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=12)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]

    def windows(parts: list[str]) -> list[str]:
        w = Windows(200)
        out = [x for p in parts for x in w.feed(p)]
        return [*out, w.flush()]

    assert windows(pieces) == windows([text])
    assert "".join(windows([text])) == text


def test_only_allowed_windows_reach_viewers_and_the_store() -> None:
    views = moderated(vault())
    owner, labels = Sink(), Sink()
    views.attach(owner, OWNER)
    views.attach(labels, LABELS)
    asked: list[str] = []
    run(views, [REPLY[i : i + 7] for i in range(0, len(REPLY), 7)], asked)
    shown = owner.text()
    assert "forbidden-topic" not in shown
    assert withheld("topic") in shown
    assert shown.startswith(f"Write to {EMAIL} today. ")
    assert f"call {PHONE}." in shown
    assert "[email address]" in labels.text()
    assert EMAIL not in labels.text()
    assert PHONE not in labels.text()
    # The moderator only ever got tokenized text; what is stored is what was released.
    assert all(EMAIL not in t and PHONE not in t for t in asked)
    assert any("<EMAIL_1>" in t for t in asked)
    outcome = views.outcome()
    assert outcome.status == "complete"
    assert withheld("topic") in outcome.text
    assert EMAIL not in outcome.text
    assert owner.frames[-1]["type"] == "assistant_done"


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_every_split_gives_the_one_shot_result(data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(REPLY)), max_size=15)))
    pieces = [REPLY[a:b] for a, b in zip([0, *cuts], [*cuts, len(REPLY)], strict=True)]

    def shown(parts: list[str]) -> tuple[str, str, str]:
        views = moderated(vault())
        owner, labels = Sink(), Sink()
        views.attach(owner, OWNER)
        views.attach(labels, LABELS)
        run(views, parts, [])
        return owner.text(), labels.text(), views.outcome().text

    assert shown(pieces) == shown([REPLY])


def test_nothing_is_shown_while_a_verdict_waits() -> None:
    views = moderated(vault())
    owner = Sink()
    views.attach(owner, OWNER)
    views.receive(TextDelta("content", "First sentence. Second one"))
    assert owner.text() == ""  # asked, not yet answered
    (check,) = views.checks()
    assert check.text == "First sentence."  # asked without its trailing whitespace
    views.decide(check.id, Verdict("allow"))
    assert owner.text() == "First sentence. "


def test_a_window_about_to_close_is_asked_about_ahead() -> None:
    views = moderated(vault())
    views.receive(TextDelta("content", "Is it done?"))
    # Released up to its terminator: whether the window ends there waits for the next
    # character, but the window it would be is asked about now.
    assert [(c.text, c.prefetch) for c in views.checks()] == [("Is it done?", True)]
    views.receive(TextDelta("content", " Then"))
    # The space closed it: asked for real, by the same text (a moderator's cache answers).
    assert [(c.text, c.prefetch) for c in views.checks()] == [("Is it done?", False)]
    views.receive(TextDelta("content", " stop!"))
    views.receive(TextDelta("content", "Really"))  # "stop!" was not an end after all
    assert [(c.text, c.prefetch) for c in views.checks()] == [("Then stop!", True)]


def test_a_block_stops_the_reply_and_names_a_screened_category() -> None:
    views = moderated(vault(), screen=lambda c: c != "leaky")
    owner = Sink()
    views.attach(owner, OWNER)
    views.receive(TextDelta("content", "Fine. How to explode a thing. More text. "))
    for check in views.checks():
        verdict = verdict_for(check.text)
        views.decide(check.id, verdict)
    views.receive(TextDelta("content", "Never shown. "))
    views.interrupt()
    views.done(stored=True)
    types = [f["type"] for f in owner.frames]
    assert owner.text() == "Fine. "
    error = next(f for f in owner.frames if f["type"] == "error")
    assert (error["code"], error["category"]) == ("moderation_blocked", "violence")
    done = owner.frames[-1]
    assert (done["status"], done["finish_reason"]) == ("blocked", "content_filter")
    assert types.count("assistant_done") == 1
    assert views.outcome().status == "blocked"
    assert views.outcome().text == "Fine. "
    # A category the guard would not show is shown as `policy`.
    views = moderated(vault(), screen=lambda c: c != "leaky")
    views.receive(TextDelta("content", "Hidden. "))
    (check,) = views.checks()
    sink = Sink()
    views.attach(sink, OWNER)
    views.decide(check.id, Verdict("withhold", "leaky"))
    assert sink.text() == withheld("policy")


def test_a_failure_releases_nothing_unverified() -> None:
    views = moderated(vault())
    owner = Sink()
    views.attach(owner, OWNER)
    views.receive(TextDelta("content", "Checked. Unchecked text. "))
    first, _ = views.checks()
    views.decide(first.id, Verdict("allow"))
    views.moderation_failed()
    views.interrupt()
    views.done(stored=True)
    assert owner.text() == "Checked. "
    assert [f.get("code") for f in owner.frames if f["type"] == "error"] == ["moderation_failed"]
    assert (owner.frames[-1]["status"], owner.frames[-1]["finish_reason"]) == (
        "incomplete",
        "error",
    )
    assert views.outcome().text == "Checked. "


def test_a_stop_drops_what_waits() -> None:
    views = moderated(vault())
    owner = Sink()
    views.attach(owner, OWNER)
    views.receive(TextDelta("content", "Waiting sentence. "))
    views.interrupt("user")
    views.abandon()
    views.done(stored=True)
    assert owner.text() == ""
    assert owner.frames[-1]["type"] == "assistant_done"
