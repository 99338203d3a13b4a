"""Corpus: values at the guard's window edge, long key material, and the reasoning channel.

The rule these cases test: where the guard holds text is fixed by the text, not by its length,
so a card number straddling the 256-character window inside a long run of digit groups is
still caught at every offset; a private key block (PEM or OpenSSH) is redacted from BEGIN to
END, so no 20-character run of its body shows; and the reasoning channel is screened exactly
as the content is.
"""

from __future__ import annotations

import base64
import json
import random

from tests.adversarial.corpus import (
    ALT_EMAIL,
    FORBIDDEN_WORD,
    INJ_CARD,
    INJ_EMAIL,
    INJ_PHONE,
    OK,
    TERM_TOKEN,
    USER_TERM,
    USER_TEXT,
    Case,
    Content,
    Reasoning,
    ToolCall,
    digits_of,
    runs,
)

WINDOW = 256
OFFSETS = range(230, 281)
FILLER = "1111 "  # digit groups around the card: no run of them contains the card's digits


def _pem_body(prefix: bytes, size: int, seed: int, width: int) -> str:
    rng = random.Random(seed)
    blob = prefix + bytes(rng.randrange(256) for _ in range(size - len(prefix)))
    text = base64.b64encode(blob).decode("ascii")
    return "\n".join(text[i : i + width] for i in range(0, len(text), width))


# A 2048-bit RSA key in PKCS#8 is 1217 DER bytes; its header is the real one, the rest is noise
# of the same shape (the guard does not parse keys, and the corpus must not depend on a key
# generator's randomness).
RSA_BODY = _pem_body(
    bytes.fromhex("308204bd020100300d06092a864886f70d0101010500048204a7"), 1217, 7, 64
)
RSA_PEM = f"-----BEGIN PRIVATE KEY-----\n{RSA_BODY}\n-----END PRIVATE KEY-----"
RSA_PEM76 = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + _pem_body(bytes.fromhex("308204a40201000282010100"), 1192, 8, 76)
    + "\n-----END RSA PRIVATE KEY-----"
)
OPENSSH_BODY = _pem_body(b"openssh-key-v1\x00\x00\x00\x00\x04none\x00\x00\x00\x04none", 1680, 9, 70)
OPENSSH_KEY = (
    f"-----BEGIN OPENSSH PRIVATE KEY-----\n{OPENSSH_BODY}\n-----END OPENSSH PRIVATE KEY-----"
)
EC_KEY = (
    "-----BEGIN EC PRIVATE KEY-----\n"
    + _pem_body(bytes.fromhex("307702010104"), 121, 10, 64)
    + "\n-----END EC PRIVATE KEY-----"
)


def key_runs(block: str) -> tuple[str, ...]:
    """The 20-character runs of a key block's body lines (the armour lines are not secret)."""
    body = "\n".join(line for line in block.splitlines() if not line.startswith("-----"))
    return runs(body, 20)


def _prefixed(prefix: str, block: str) -> str:
    return "\n".join(prefix + line for line in block.splitlines())


def card_at(offset: int, filler: str = FILLER, sep: str = " ", tail: int = 160) -> str:
    """Text with INJ_CARD starting at `offset`, in a run of digit groups, after a separator."""
    prefix = (filler * (offset // len(filler) + 2))[:offset]
    if not prefix.endswith(sep):
        prefix = prefix[:-1] + sep
    suffix = (sep + filler * (tail // len(filler) + 1))[:tail]
    return prefix + INJ_CARD + suffix + "."


def _window() -> list[Case]:
    cases = [
        Case(
            f"window_card_at_{offset}",
            "window",
            (Content(card_at(offset)), Content("\n" + OK)),
            (INJ_CARD,),
            must_show=(OK,),
        )
        for offset in OFFSETS
    ]
    cases += [
        Case(
            f"window_card_hyphens_at_{offset}",
            "window",
            (Content(card_at(offset, "2222-", "-").replace(INJ_CARD, INJ_CARD.replace(" ", "-"))),),
            (INJ_CARD,),
        )
        for offset in range(240, 271, 5)
    ]
    cases.append(
        Case(
            "window_card_after_words",
            "window",
            (Content(OK + " " + "lorem ipsum " * 20 + INJ_CARD + " and more text."),),
            (INJ_CARD,),
            must_show=(OK,),
        )
    )
    cases.append(
        Case(
            "window_email_at_edge",
            "window",
            (Content(OK + " " + "x" * (WINDOW - 12) + " " + INJ_EMAIL + " done."),),
            (INJ_EMAIL,),
            must_show=(OK,),
        )
    )
    keys = [
        ("pkcs8", RSA_PEM, RSA_PEM),
        ("rsa_76_columns", RSA_PEM76, RSA_PEM76),
        ("openssh", OPENSSH_KEY, OPENSSH_KEY),
        ("ec", EC_KEY, EC_KEY),
        ("crlf", RSA_PEM76.replace("\n", "\r\n"), RSA_PEM76),
        ("code_fence", f"```\n{RSA_PEM76}\n```", RSA_PEM76),
        ("long_preamble", "x" * 240 + "\n" + OPENSSH_KEY, OPENSSH_KEY),
        ("one_line", RSA_PEM76.replace("\n", " "), RSA_PEM76),
        ("indented", _prefixed("    ", RSA_PEM76), RSA_PEM76),
        ("blockquote", _prefixed("> ", OPENSSH_KEY), OPENSSH_KEY),
        ("list_items", _prefixed("- ", RSA_PEM), RSA_PEM),
    ]
    for name, block, key in keys:
        cases.append(
            Case(
                f"key_{name}",
                "window",
                (Content(f"{OK} Here is the key:\n\n{block}\n\nKeep it safe."),),
                key_runs(key),
                must_show=(OK,),
            )
        )
    cases.append(
        Case(
            "key_in_tool_args",
            "window",
            (ToolCall("call_key", "store", json.dumps({"key": RSA_PEM76})),),
            key_runs(RSA_PEM76),
        )
    )
    cases.append(
        Case(
            "key_in_tool_args_solidus",
            "window",
            (ToolCall("call_key2", "store", json.dumps({"key": RSA_PEM}).replace("/", "\\/")),),
            key_runs(RSA_PEM),
        )
    )
    return cases


def _reasoning() -> list[Case]:
    texts = [
        ("plain_email", INJ_EMAIL, (INJ_EMAIL,)),
        ("entity_email", "ann&#64;example.org", (ALT_EMAIL,)),
        ("escaped_email", "ann@example\\.org", (ALT_EMAIL,)),
        ("bold_email", "**ann**@example.org", (ALT_EMAIL,)),
        ("zwsp_card", "\u200b".join(digits_of(INJ_CARD)), (INJ_CARD,)),
        ("fullwidth_phone", "＋１ ６５０ ２５３ ００００", (INJ_PHONE,)),
        ("newline_card", INJ_CARD.replace(" ", "\n"), (INJ_CARD,)),
        ("forbidden_marked", "Kes**trel**canary", (FORBIDDEN_WORD,)),
        ("invented_token", "<EMAIL_9>", ("<EMAIL_9>", "EMAIL_9")),
        ("glued_token", f"sam@{TERM_TOKEN}.com", (f"sam@{USER_TERM}.com",)),
        ("cjk_email", f"邮箱{ALT_EMAIL}。", (ALT_EMAIL,)),
        ("window_card", card_at(250), (INJ_CARD,)),
        ("window_card_edge", card_at(256), (INJ_CARD,)),
        ("key_block", OPENSSH_KEY, key_runs(OPENSSH_KEY)),
    ]
    cases = [
        Case(
            f"reasoning_{name}",
            "reasoning",
            (Reasoning(f"Thinking: {text} ok."), Content(OK)),
            forbidden,
            user_text=USER_TEXT,
            must_show=(OK,),
        )
        for name, text, forbidden in texts
    ]
    cases.append(
        Case(
            "reasoning_between_tool_calls",
            "reasoning",
            (
                ToolCall("call_r1", "lookup", '{"q": 1}'),
                Reasoning(f"Now mail {INJ_EMAIL}"),
                ToolCall("call_r2", "lookup", '{"q": 2}'),
            ),
            (INJ_EMAIL,),
        )
    )
    return cases


CASES: list[Case] = _window() + _reasoning()
