"""The system prompt: the one place that tells the model what vault tokens are.

The rule it keeps: every upstream model (and the demo model's behaviour) is told the same
thing, in the same words: tokens like `<EMAIL_1>` stand for real values it cannot see, and it
must write them back verbatim (same brackets, same case, same number) wherever it refers to
those values, including inside tool-call arguments. The restorer downstream turns them back
into the values; a paraphrased or re-numbered token cannot be restored.
"""

from __future__ import annotations

from collections.abc import Iterable

from holdback.tokens import make_token

_EXAMPLE = make_token("email", 1)
_EXAMPLE_2 = make_token("person", 2)

SYSTEM_PROMPT = (
    "You are a helpful assistant. Some values in this conversation were replaced by "
    f"placeholders written in angle brackets, such as {_EXAMPLE} or {_EXAMPLE_2}. Each "
    "placeholder stands for one real value (an email address, a name, a phone number, and so "
    "on) that you cannot see; the user sees the real value in its place. Treat a placeholder "
    "exactly like the value it stands for. Whenever you refer to that value, reuse the "
    f"placeholder verbatim: keep the angle brackets, the upper case and the number ({_EXAMPLE}, "
    f"never EMAIL_1, <email_1>, <EMAIL 1> or {make_token('email', 2)} for the same value). "
    "Do the same inside code, quotes and tool-call arguments. Never invent new placeholders, "
    "never guess what a placeholder hides, and never comment on the placeholders themselves."
)


def system_text(extra: Iterable[str] = ()) -> str:
    """The full system text: holdback's prompt first, then the request's own instructions."""
    parts = [SYSTEM_PROMPT, *(e for e in extra if e.strip())]
    return "\n\n".join(parts)
