"""Realistic reply text and vaults for the benchmarks, generated from a fixed seed."""

from __future__ import annotations

import random

KINDS = ["EMAIL", "PHONE", "PERSON", "CLIENT", "CREDIT_CARD", "IBAN", "PROJECT", "IP_ADDRESS"]

SENTENCES = [
    "Thanks for the details; I have drafted the email to {t} and copied {t}.",
    "Here is a summary of the call with {t} about the renewal of the {t} contract.",
    "I could not verify the number {t}, so please double-check it before Friday.",
    "The invoice for {t} is attached; payment goes to {t} as agreed.",
    "Next steps:\n\n1. Call {t} on Monday.\n2. Send the deck to {t}.\n3. Update the CRM.",
    "| Name | Contact |\n|---|---|\n| {t} | {t} |\n",
    "In short, `{t}` should own the migration, and {t} reviews it.",
    "Note that the server at {t} will be rebooted tonight at 23:00 UTC (v1.2.3).",
    "Let me know if you want me to rewrite this in a more formal tone.",
    "Sure! Below is a Python snippet:\n\n```python\nprint('hello, world')\n```\n",
]


def make_vault(size: int, seed: int = 7) -> dict[str, str]:
    rng = random.Random(seed)
    vault: dict[str, str] = {}
    counters = dict.fromkeys(KINDS, 0)
    for _ in range(size):
        kind = rng.choice(KINDS)
        counters[kind] += 1
        vault[f"<{kind}_{counters[kind]}>"] = f"value-{kind.lower()}-{counters[kind]}"
    return vault


def make_reply(vault: dict[str, str], length: int = 20_000, seed: int = 11) -> str:
    rng = random.Random(seed)
    tokens = sorted(vault)[:50]
    parts: list[str] = []
    size = 0
    while size < length:
        sentence = rng.choice(SENTENCES)
        while "{t}" in sentence:
            sentence = sentence.replace("{t}", rng.choice(tokens), 1)
        parts.append(sentence + " ")
        size += len(sentence) + 1
    return "".join(parts)[:length]


def chunk(text: str, seed: int = 3, low: int = 1, high: int = 8) -> list[str]:
    rng = random.Random(seed)
    out: list[str] = []
    i = 0
    while i < len(text):
        n = rng.randint(low, high)
        out.append(text[i : i + n])
        i += n
    return out
