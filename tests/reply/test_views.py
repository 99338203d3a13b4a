"""One reply, several viewers: a machine per reveal policy, frames only to their view's sinks,
late viewers brought up to date, and a restricted viewer never sent the owner's values."""

from __future__ import annotations

from typing import Any

from holdback.app.viewers import Views, view_vault
from holdback.detect import default_detectors
from holdback.providers.events import End, TextDelta, Usage
from holdback.reveal import OWNER, RevealPolicy
from holdback.stream import Guard, ReplyFilter, Restorer
from holdback.stream.projection import ProjectionMode
from holdback.vault import Vault

DETECTORS = default_detectors()
EMAIL = "ann.canary@example.org"
PHONE = "+1 415 555 0156"
LABELS = RevealPolicy.of({}, "label")
MASKED = RevealPolicy.of({"email": "masked"}, "label")


def vault() -> Vault:
    v = Vault()
    v.assign("email", EMAIL)
    v.assign("phone", PHONE)
    return v


def views(v: Vault) -> Views:
    entries = v.entries()

    def make(policy: RevealPolicy, projection: ProjectionMode, json_values: bool) -> ReplyFilter:
        return ReplyFilter(
            Guard(DETECTORS, vault=view_vault(v, policy), projection=projection),
            Restorer(OWNER.index(entries) if policy == OWNER else policy.index(entries)),
        )

    return Views("c1", "m1", make, call_prefix="call_t")


class Sink:
    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    def __call__(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)

    def text(self) -> str:
        return "".join(f["text"] for f in self.frames if f["type"] == "assistant_delta")

    def types(self) -> list[str]:
        return [f["type"] for f in self.frames]


REPLY = ["Write to <EM", "AIL_1> or call ", "<PHONE_1", ">. Also ", EMAIL, " again. Done."]


def run(vs: Views, pieces: list[str]) -> None:
    for piece in pieces:
        vs.receive(TextDelta("content", piece))
    vs.receive(End("stop", Usage(1, 2)))
    vs.interrupt()
    vs.done(stored=True)


def test_each_viewer_gets_the_reply_under_their_own_policy() -> None:
    vs = views(vault())
    owner, labels, masked = Sink(), Sink(), Sink()
    vs.attach(owner, OWNER)
    vs.attach(labels, LABELS)
    vs.attach(masked, MASKED)
    run(vs, REPLY)
    assert owner.text() == f"Write to {EMAIL} or call {PHONE}. Also {EMAIL} again. Done."
    # The model wrote the address out: shown to the owner, redacted for the others.
    assert labels.text() == (
        "Write to [email address] or call [phone number]. Also [redacted email] again. Done."
    )
    assert masked.text() == (
        "Write to a\u2022\u2022\u2022@example.org or call [phone number]. "
        "Also [redacted email] again. Done."
    )
    for restricted in (labels, masked):
        raw = repr(restricted.frames)
        assert EMAIL not in raw
        assert PHONE not in raw
        assert restricted.types()[0] == "assistant_start"
        assert restricted.types()[-1] == "assistant_done"
    assert vs.policies == [OWNER, LABELS, MASKED]
    # What is stored is the storage view's outcome: tokenized.
    outcome = vs.outcome()
    assert outcome.text == "Write to <EMAIL_1> or call <PHONE_1>. Also <EMAIL_1> again. Done."


def test_a_late_viewer_gets_everything_from_the_start() -> None:
    early, late = views(vault()), views(vault())
    from_start = Sink()
    early.attach(from_start, LABELS)
    run(early, REPLY)
    joined = Sink()
    for i, piece in enumerate(REPLY):
        if i == 3:
            late.attach(joined, LABELS)  # its view is made now, mid-reply
        late.receive(TextDelta("content", piece))
    late.receive(End("stop", None))
    late.interrupt()
    late.done(stored=True)
    assert joined.text() == from_start.text()
    assert joined.types()[0] == "assistant_start"
    assert [f["type"] for f in joined.frames if f["type"] != "assistant_delta"] == [
        f["type"] for f in from_start.frames if f["type"] != "assistant_delta"
    ]
    # And one who comes after the end still reads the whole reply, then its end.
    after = Sink()
    late.attach(after, MASKED)
    assert after.types()[0] == "assistant_start"
    assert after.types()[-1] == "assistant_done"
    assert EMAIL not in after.text()


def test_equal_policies_share_a_view_and_a_failing_sink_is_dropped() -> None:
    vs = views(vault())
    a, b = Sink(), Sink()
    vs.attach(a, RevealPolicy.of({"email": "label"}, "label"))
    vs.attach(b, RevealPolicy.of({}, "label"))  # the same policy, written otherwise

    def broken(frame: dict[str, Any]) -> None:
        raise ConnectionResetError

    vs.attach(broken, LABELS)
    run(vs, REPLY)
    assert a.frames == b.frames
    assert len(vs.policies) == 2  # the storage view and the one policy
    vs.detach(a)
    assert a not in vs.view(LABELS).sinks
