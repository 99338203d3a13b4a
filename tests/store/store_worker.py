"""A separate OS process that uses the store, for the multi-process tests.

Run as `python -m tests.store.store_worker URL CONVERSATION_ID SEED ROUNDS GO_FILE`, with the
vault key in HOLDBACK_VAULT_KEY. It waits until GO_FILE exists (so that several workers start
together), then in each round assigns tokens to a random sample of shared values and adds a
message, and prints what it got as JSON. With CONVERSATION_ID "-" it only opens the store
(which migrates the database) and exits.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path

from holdback.store import Store, VaultItem, VaultKey

EMAILS = [f"person{i}@example.org" for i in range(40)]
PHONES = [f"+1 555 01{i:02d}" for i in range(15)]


def shared_items() -> list[VaultItem]:
    return [VaultItem("email", v, v) for v in EMAILS] + [
        VaultItem("phone", v, v.replace(" ", "")) for v in PHONES
    ]


def wait_for(go: Path) -> None:
    deadline = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("the go file never appeared")
        time.sleep(0.005)


async def run(url: str, conversation_id: str, seed: int, rounds: int) -> dict[str, object]:
    key = VaultKey.parse(os.environ["HOLDBACK_VAULT_KEY"], source="HOLDBACK_VAULT_KEY")
    store = await Store.open(url, vault_key=key)
    try:
        if conversation_id == "-":
            return {"opened": True}
        rng = random.Random(seed)
        items = shared_items()
        assigned: list[list[str]] = []
        messages: list[str] = []
        for round_no in range(rounds):
            sample = rng.sample(items, rng.randint(1, 12))
            tokens = await store.assign_tokens(conversation_id, sample)
            assigned.extend([item.value, token] for item, token in zip(sample, tokens, strict=True))
            message = await store.add_message(
                conversation_id, "user", f"worker {seed} round {round_no}: {' '.join(tokens)}"
            )
            messages.append(message.id)
        return {"assigned": assigned, "messages": messages}
    finally:
        await store.close()


def main() -> None:
    url, conversation_id, seed, rounds, go = sys.argv[1:6]
    wait_for(Path(go))
    result = asyncio.run(run(url, conversation_id, int(seed), int(rounds)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
