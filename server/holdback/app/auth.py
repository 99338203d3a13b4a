"""Who is asking, and may they: sessions, API tokens, passwords and origins.

- `--auth none` has one local user and no login; it is only allowed on a loopback address.
- `--auth password`: a session cookie (`holdback_session`: HttpOnly, SameSite=Strict, Secure
  over HTTPS) from `POST /api/login`, or an API token as `Authorization: Bearer`.
- A WebSocket handshake, and every state-changing HTTP request, must come from the server's own
  origin or one on the allow-list; anything else is refused (cross-site WebSocket hijacking).
Passwords are stored as argon2id hashes only.

Logins hold up under abuse:
- argon2 runs on a bounded pool of worker threads, never on the event loop, and at most
  `login_queue` logins wait for it; past that a login gets 503 (`login_busy`).
- An unknown user name is checked against a dummy hash with the same parameters, so the
  answer takes as long as for a known name: timing does not tell which names exist.
- Failures are counted per account name and per client address (`LoginThrottle`): past
  `login_backoff_after` failures each attempt waits twice as long as the last (429 with
  `Retry-After`), and `login_lock_after` failures lock the account for `login_lock_time`.
  Unknown names are counted like known ones. One check at a time runs per account.
- A WebSocket is tied to the credential that opened it (`SocketRegistry`): logging out ends
  the sockets of that session, and every frame, and every `ws_recheck` seconds of silence,
  checks the credential again, so a revoked token, a disabled user or a removed user ends
  its sockets too (`holdback token revoke`, `holdback user disable`, from any process).
"""

from __future__ import annotations

import hashlib
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from starlette.requests import HTTPConnection

from holdback.app.pipeline import OffLoop
from holdback.app.settings import Settings, is_loopback
from holdback.store.records import User
from holdback.store.repository import Store

SESSION_COOKIE = "holdback_session"
_hasher = PasswordHasher()  # argon2id with the library's recommended parameters


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    if not password_hash:
        return False
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


class LoginBusyError(Exception):
    """More logins wait for a password check than the server queues."""


class PasswordChecker:
    """Password checks on at most `workers` threads, with at most `queue` logins in line."""

    def __init__(self, workers: int, queue: int) -> None:
        self._pool = OffLoop(workers)
        self._limit = queue
        self._pending = 0
        self._dummy: str | None = None

    async def prepare(self) -> None:
        """Make the dummy hash that unknown names are checked against (once, at start-up)."""
        if self._dummy is None:
            self._dummy = await self._pool.run(lambda: hash_password(secrets.token_urlsafe(24)))

    async def check(self, password_hash: str | None, password: str) -> bool:
        """Whether `password` matches; as slow for no hash (an unknown user) as for one."""
        if self._pending >= self._limit:
            raise LoginBusyError
        self._pending += 1
        try:
            await self.prepare()
            target = password_hash or self._dummy
            matched = await self._pool.run(lambda: verify_password(target, password))
            return matched and bool(password_hash)
        finally:
            self._pending -= 1


BACKOFF_CAP = 60.0  # seconds: the longest wait backoff alone asks for


@dataclass(slots=True)
class _Failures:
    count: int = 0
    last: float = 0.0  # when the last failure was counted
    until: float = 0.0  # no attempt is checked before this time
    checking: int = 0  # checks running now


class LoginThrottle:
    """Failed logins per account name and per client address, and the wait they impose.

    Records are forgotten `lock_time` seconds after their last failure; at most `capacity` of
    each kind are kept (the least recently failed go first), so a spray of names or addresses
    cannot grow memory without bound.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        capacity: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backoff_after = settings.login_backoff_after
        self.backoff = settings.login_backoff
        self.lock_after = settings.login_lock_after
        self.lock_time = settings.login_lock_time
        self.address_checks = settings.hash_workers
        self.capacity = capacity
        self.clock = clock
        self._accounts: OrderedDict[str, _Failures] = OrderedDict()
        self._addresses: OrderedDict[str, _Failures] = OrderedDict()

    def wait(self, account: str, address: str) -> float:
        """Seconds before an attempt for `account` from `address` may be checked (0: now)."""
        now = self.clock()
        mine = self._get(self._accounts, account.casefold(), now)
        theirs = self._get(self._addresses, address, now)
        wait = max(mine.until - now, theirs.until - now, 0.0)
        if wait == 0 and (mine.checking >= 1 or theirs.checking >= self.address_checks):
            return 1.0  # one check at a time per account, a few per address
        return wait

    def begin(self, account: str, address: str) -> float:
        """`wait`, and when it is 0 the attempt is counted as running: call `end` after it."""
        wait = self.wait(account, address)
        if wait == 0:
            now = self.clock()
            self._get(self._accounts, account.casefold(), now).checking += 1
            self._get(self._addresses, address, now).checking += 1
        return wait

    def end(self, account: str, address: str, *, matched: bool | None) -> None:
        """An attempt is over: the password `matched`, or not, or was not checked (None)."""
        now = self.clock()
        for table, key, lock in (
            (self._accounts, account.casefold(), True),
            (self._addresses, address, False),
        ):
            record = self._get(table, key, now)
            record.checking = max(0, record.checking - 1)
            if matched is None:
                continue
            if matched:
                if lock:  # the account's own password ends its backoff
                    record.count = 0
                    record.until = 0.0
                continue
            record.count += 1
            record.last = now
            record.until = now + self._wait(record.count, lock)
            table.move_to_end(key)
            while len(table) > self.capacity:
                table.popitem(last=False)

    def _wait(self, failures: int, lock: bool) -> float:
        if lock and failures >= self.lock_after:
            return self.lock_time
        if failures < self.backoff_after:
            return 0.0
        steps = min(failures - self.backoff_after, 32)
        return min(self.backoff * 2.0**steps, max(BACKOFF_CAP, self.backoff))

    def _get(self, table: OrderedDict[str, _Failures], key: str, now: float) -> _Failures:
        record = table.get(key)
        if record is None:
            record = table[key] = _Failures()
            while len(table) > self.capacity:
                table.popitem(last=False)
        elif record.count and now - record.last > self.lock_time and now >= record.until:
            record.count = 0
        return record


def retry_after(seconds: float) -> str:
    """A `Retry-After` value: whole seconds, at least one."""
    return str(max(1, math.ceil(seconds)))


def credential_key(conn: HTTPConnection) -> str | None:
    """Which credential a request or handshake presents (a hash, never the secret)."""
    header = conn.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return "token:" + hashlib.sha256(header[7:].strip().encode()).hexdigest()
    secret = conn.cookies.get(SESSION_COOKIE)
    if secret:
        return session_key(secret)
    return None


def session_key(secret: str) -> str:
    return "session:" + hashlib.sha256(secret.encode()).hexdigest()


class SocketRegistry:
    """The open WebSockets of each credential, so ending a credential ends its sockets."""

    def __init__(self) -> None:
        self._ends: dict[str, set[Callable[[], None]]] = {}

    def add(self, key: str, end: Callable[[], None]) -> None:
        self._ends.setdefault(key, set()).add(end)

    def remove(self, key: str, end: Callable[[], None]) -> None:
        ends = self._ends.get(key)
        if ends is not None:
            ends.discard(end)
            if not ends:
                del self._ends[key]

    def end(self, key: str) -> int:
        """End every socket of a credential; returns how many there were."""
        ends = self._ends.pop(key, set())
        for end in ends:
            end()
        return len(ends)


class Authenticator:
    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self._local: User | None = None
        self.passwords = PasswordChecker(settings.hash_workers, settings.login_queue)
        self.throttle = LoginThrottle(settings)
        self.sockets = SocketRegistry()

    async def user(self, conn: HTTPConnection) -> User | None:
        """The user behind a request or handshake, or None."""
        if self.settings.auth == "none":
            if self._local is None:
                self._local = await self.store.ensure_local_user()
            return self._local
        header = conn.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return await self.store.user_for_api_token(header[7:].strip())
        secret = conn.cookies.get(SESSION_COOKIE)
        if secret:
            return await self.store.user_for_session(secret)
        return None

    def origin_allowed(self, conn: HTTPConnection) -> bool:
        """Same origin (scheme, host and port), or on the allow-list.

        Clients that send no Origin are not browsers, and cannot carry a victim's cookies.
        """
        origin = conn.headers.get("origin")
        if origin is None:
            return True
        if origin.rstrip("/") in self.settings.allowed_origins:
            return True
        parts = urlsplit(origin)
        host = conn.headers.get("host", "")
        if not parts.netloc or parts.netloc.lower() != host.lower():
            return False
        return parts.scheme == _http_scheme(conn)

    def host_allowed(self, conn: HTTPConnection) -> bool:
        """Without logins, only requests addressed to this machine by name are served.

        That stops DNS rebinding: a foreign site whose name resolves to 127.0.0.1 is still
        asked for under its own name, and refused.
        """
        if self.settings.auth != "none":
            return True
        host = conn.headers.get("host", "")
        name = urlsplit(f"//{host}").hostname or ""
        if name in ("localhost", self.settings.host.strip("[]").lower()) or is_loopback(name):
            return True
        if name in self.settings.allowed_hosts:
            return True
        return any(urlsplit(o).hostname == name for o in self.settings.allowed_origins)


def _http_scheme(conn: HTTPConnection) -> str:
    forwarded = conn.headers.get("x-forwarded-proto")
    if forwarded in ("http", "https"):
        return forwarded
    return {"ws": "http", "wss": "https"}.get(conn.url.scheme, conn.url.scheme)


def cookie_settings(conn: HTTPConnection) -> Mapping[str, object]:
    secure = conn.url.scheme in ("https", "wss") or conn.headers.get("x-forwarded-proto") == "https"
    return {"httponly": True, "samesite": "strict", "secure": secure, "path": "/"}
