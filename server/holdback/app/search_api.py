"""`GET /api/search?q=…`: the messages a user may read that hold what they asked for, each
as a snippet restored for them.

The rules:
- Only conversations the user owns or that are shared with them are searched; each snippet
  is restored under the policy the user reads that conversation with (`views.Reader`: the
  owner's, or their own as a viewer of it), exactly as `GET /api/conversations/{id}` would
  show those words.
- A value is found by the vault's keyed hash, never by decrypting: the query, and each value
  the detectors find in it, is normalized per kind exactly as the vault normalizes it (the
  pseudonymizer's detectors and phone region), hashed, and matched against the vault
  entries; their tokens lead to the messages. A value matches only where the user is shown
  it plain: a hit on a value they see masked or as a label would confirm more than the label
  shows, so it finds nothing, exactly as a value nobody holds.
- Other words match the stored, tokenized text case-insensitively, but never inside a token:
  a match that takes in any character of a token is none, so `EMAIL` or `EMAIL_1` finds only
  what a user wrote, never where a value stands. Every term of the query must match (AND).
- A snippet is a window of the stored text around the first hit, cut at whitespace and never
  inside a token, then restored: only the vault entries of the tokens in the window are
  decrypted. A snippet that shows a value plain or masked is a reveal and is recorded on the
  trail (one transaction per search), as a read is.
- A word that is the value of a conversation the user may read, though not shown to them,
  is matched here rather than by the database (its text never becomes a query parameter,
  which a driver's debug log would show); what it finds is the same.
- Bounded: the query (`MAX_QUERY_CHARS`, `MAX_TERMS`), the messages read and checked (the
  newest `MAX_SCANNED` that pass the database's filter) and the results (`MAX_RESULTS`).
  Nothing of the query is logged.
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from holdback.app.http_api import _runtime, _user, problem
from holdback.app.runtime import Runtime
from holdback.app.views import Reader
from holdback.detect import DetectorSet
from holdback.errors import InvalidTokenError
from holdback.reveal import LITERAL, RevealPolicy
from holdback.store import search as queries
from holdback.stream import restore
from holdback.stream.guard import FORBIDDEN
from holdback.tokens import BARE_ID_RE, TOKEN_RE, bare_ids, kind_label
from holdback.vault import Vault

MAX_QUERY_CHARS = 200
MAX_TERMS = 8
MAX_RESULTS = 50
MAX_SCANNED = 10_000  # messages read and checked, newest first
BEFORE, AFTER = 60, 100  # stored characters of context around a hit
_SNAP = 24  # how far a window's edge moves to reach whitespace
_REACH = 120  # a token (100 characters at most, `store.vault`) and its spellings' extras
_NOT_VALUES = frozenset({LITERAL, "token"})  # kinds that are no one's value
_EDGE_PUNCTUATION = "\"'`.,;:!?()[]{}<>“”‘’«»…"


class Term:
    """What one term of a query matches: a text (never inside a token), or a token of a
    value the user is shown plain, in the conversations where it stands for that value.

    `local` words are matched here only, never sent to the database: they are values of
    conversations the user may read (by hash), though not shown to them.
    """

    def __init__(
        self,
        words: tuple[str, ...] = (),
        tokens: dict[str, set[str]] | None = None,
        *,
        local: bool = False,
    ) -> None:
        self.words = words
        self.tokens = tokens or {}  # token -> the conversations where it is this value
        self.local = local
        self._patterns = [re.compile(re.escape(w), re.IGNORECASE) for w in words]

    def pattern(self) -> queries.Pattern | None:
        """The database's filter for this term (None: it filters nothing)."""
        if self.local:
            return None
        # Letters beyond ASCII may not fold in SQL (SQLite): their usual cases are asked for.
        spelled = {f for w in self.words for f in (w, w.lower(), w.upper(), w.capitalize())}
        return queries.Pattern(tuple(sorted(spelled)), self.tokens)

    def hit(self, conversation_id: str, text: str) -> tuple[int, int] | None:
        """The first span of `text` this term matches, if any."""
        spans = []
        for token, conversations in self.tokens.items():
            at = text.find(token) if conversation_id in conversations else -1
            if at >= 0:
                spans.append((at, at + len(token)))
        for pattern in self._patterns:
            found = _outside_tokens(pattern, text)
            if found is not None:
                spans.append(found)
        return min(spans) if spans else None


def _outside_tokens(pattern: re.Pattern[str], text: str) -> tuple[int, int] | None:
    """The first match of `pattern` in `text` that takes in no character of a token."""
    found = pattern.search(text)
    while found is not None:
        lo, hi = found.span()
        # A token is at most `_REACH` characters: one that overlaps the match starts here.
        base = max(0, lo - _REACH)
        near = TOKEN_RE.finditer(text, base, hi + _REACH)
        if not any(m.start() < hi and lo < m.end() for m in near):
            return lo, hi
        found = pattern.search(text, lo + 1)
    return None


def shown_plain(policy: RevealPolicy, kind: str) -> bool:
    """Whether a viewer under `policy` reads values of `kind` as they are (as `Reader` does:
    forbidden terms are never restored to anyone but a plain reader)."""
    if kind == FORBIDDEN:
        return policy.plain
    return kind not in _NOT_VALUES and (policy.plain or policy.level(kind) == "plain")


def _hash(
    runtime: Runtime, detectors: DetectorSet, kind: str, value: str
) -> tuple[str, bytes] | None:
    """The vault's key for `value` read as a `kind`: its label and keyed hash."""
    if kind in _NOT_VALUES:
        return None
    try:
        label = kind_label(kind)
        normalized = detectors.normalize(kind, value, phone_region=runtime.service.phone_region)
    except (InvalidTokenError, ValueError):
        return None
    if not normalized:
        return None
    return label, queries.value_hash(runtime.store, label, normalized)


def _words(text: str) -> list[str]:
    found: dict[str, str] = {}
    for raw in text.split():
        word = raw.strip(_EDGE_PUNCTUATION)
        if word:
            found.setdefault(word.casefold(), word)
    return list(found.values())


class TooManyTermsError(Exception):
    """A query of more than `MAX_TERMS` words and values."""


async def plan(
    runtime: Runtime, viewer_id: str, query: str, policies: dict[bool, RevealPolicy]
) -> list[Term]:
    """The terms of a query, every one of which a message must match.

    The whole query, each value the detectors find in it and each other word are read as a
    value of every kind and hashed. If the whole query is a value the user is shown plain,
    it is the one term. Else each value found is a term (its tokens), and each word is one:
    its tokens if it is a value the user is shown plain, else its text (`local` if it is a
    value they are not shown, so that it never reaches the database in the clear).
    """
    detectors = runtime.service.pseudonymizer.detectors
    findings = detectors.detect(query)
    rest, last = [], 0
    for f in findings:
        rest.append(query[last : f.start])
        last = f.end
    rest.append(query[last:])
    words = _words(" ".join(rest))
    if len(findings) + len(words) > MAX_TERMS:
        raise TooManyTermsError

    def keys(text: str) -> set[tuple[str, bytes]]:
        return {h for kind in detectors.kinds if (h := _hash(runtime, detectors, kind, text))}

    whole = keys(query)
    of_findings = [
        {h} if (h := _hash(runtime, detectors, f.kind, f.value)) else set() for f in findings
    ]
    of_words = [keys(w) for w in words]
    # The whole query first, then the values found, then the words (the bound keeps the first).
    asked = [h for group in (whole, *of_findings, *of_words) for h in sorted(group)]
    found = await queries.find_values(runtime.store, viewer_id, asked)
    # A value counts only where it is shown plain: elsewhere it is as if nobody held it.
    visible = [f for f in found if shown_plain(policies[f.owner_id == viewer_id], f.kind)]

    def tokens_of(wanted: set[tuple[str, bytes]]) -> dict[str, set[str]]:
        tokens: dict[str, set[str]] = {}
        for f in visible:
            if f.key in wanted:
                tokens.setdefault(f.token, set()).add(f.conversation_id)
        return tokens

    if tokens_of(whole):
        return [Term(tokens=tokens_of(whole))]
    held = {f.key for f in found}
    terms = [Term(tokens=tokens_of(k)) for k in of_findings]
    for word, k in zip(words, of_words, strict=True):
        tokens = tokens_of(k)
        terms.append(Term(tokens=tokens) if tokens else Term((word,), local=bool(k & held)))
    return terms


def _crossing(text: str, at: int) -> tuple[int, int] | None:
    """The token, or run a spelled id could be read in, that `at` falls strictly inside."""
    for pattern in (TOKEN_RE, BARE_ID_RE):
        for m in pattern.finditer(text, max(0, at - _REACH), at + _REACH):
            if m.start() < at < m.end():
                return m.span()
    return None


def window(text: str, start: int, end: int) -> tuple[int, int]:
    """A window of `text` around the hit `start:end`: cut at whitespace where there is some
    near the edge, and never inside a token or a spelling of one (the edge moves out of it,
    leaving it out). The hit itself is always whole."""
    lo, hi = max(0, start - BEFORE), min(len(text), end + AFTER)
    if lo > 0:
        gap = next((i for i in range(lo, min(start, lo + _SNAP)) if text[i].isspace()), None)
        lo = gap + 1 if gap is not None else lo
    if hi < len(text):
        edge = range(hi - 1, max(end, hi - _SNAP) - 1, -1)
        gap = next((i for i in edge if text[i].isspace()), None)
        hi = gap if gap is not None else hi
    cut = _crossing(text, lo)
    if cut is not None:
        lo = min(cut[1], start)
    cut = _crossing(text, hi)
    if cut is not None:
        hi = max(cut[0], end)
    return lo, hi


def snippet_tokens(piece: str) -> set[str]:
    """Every token a restorer could restore in `piece`: exact tokens and spelled ids."""
    found = {m.group() for m in TOKEN_RE.finditer(piece)}
    return found | {f"<{ident}>" for ident in bare_ids(piece)}


async def search(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    query = request.query_params.get("q", "").strip()
    if not query:
        return problem(400, "bad_request", "send a search in 'q'")
    if len(query) > MAX_QUERY_CHARS:
        return problem(400, "bad_request", f"a search is at most {MAX_QUERY_CHARS} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in query):
        return problem(400, "bad_request", "a search cannot contain control characters")
    runtime = _runtime(request)
    store = runtime.store
    rules = await runtime.service._rules()
    policies = {
        True: rules.for_viewer(owner=True),
        False: rules.for_viewer(owner=False, groups=await store.groups_of(user.id)),
    }
    try:
        terms = await plan(runtime, user.id, query, policies)
    except TooManyTermsError:
        return problem(400, "bad_request", f"a search has at most {MAX_TERMS} words")
    if not terms:  # nothing but punctuation
        return _answer([])
    patterns = [p for t in terms if (p := t.pattern()) is not None]
    hits: list[tuple[queries.Candidate, int, int]] = []

    def take(batch: list[queries.Candidate]) -> bool:
        for candidate in batch:
            spans = [t.hit(candidate.conversation_id, candidate.text) for t in terms]
            if all(spans):
                lo, hi = window(candidate.text, *min(s for s in spans if s is not None))
                hits.append((candidate, lo, hi))
                if len(hits) == MAX_RESULTS:
                    return True
        return False

    await queries.scan(store, user.id, patterns, take, limit=MAX_SCANNED)
    wanted: dict[str, set[str]] = {}
    for candidate, lo, hi in hits:
        wanted.setdefault(candidate.conversation_id, set()).update(
            snippet_tokens(candidate.text[lo:hi])
        )
    opened = await queries.entries(store, wanted)
    owned = {c.conversation_id: c.owner_id == user.id for c, _, _ in hits}
    readers = {
        cid: Reader(Vault(stored), policies[owned[cid]], track=True)
        for cid, stored in opened.items()
    }
    results: list[dict[str, str]] = []
    shown = []
    for candidate, lo, hi in hits:
        reader = readers[candidate.conversation_id]
        piece = candidate.text[lo:hi]
        reader.note(piece)
        text = " ".join(restore(piece, reader.index).split())
        text = ("…" if lo > 0 else "") + text + ("…" if hi < len(candidate.text) else "")
        shown.append((candidate.conversation_id, candidate.message_id, reader.revealed()))
        results.append(
            {
                "conversation_id": candidate.conversation_id,
                "message_id": candidate.message_id,
                "snippet": text,
            }
        )
    await queries.record(store, user.id, shown)
    return _answer(results)


def _answer(results: list[dict[str, str]]) -> Response:
    return JSONResponse({"results": results}, headers={"Cache-Control": "no-store"})


routes = [Route("/api/search", search, methods=["GET"])]
