"""Who is asking, and may they: sessions, API tokens, passwords and origins.

- `--auth none` has one local user and no login; it is only allowed on a loopback address.
- `--auth password`: a session cookie (`holdback_session`: HttpOnly, SameSite=Strict, Secure
  over HTTPS) from `POST /api/login`, or an API token as `Authorization: Bearer`.
- A WebSocket handshake, and every state-changing HTTP request, must come from the server's own
  origin or one on the allow-list; anything else is refused (cross-site WebSocket hijacking).
Passwords are stored as argon2id hashes only.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from starlette.requests import HTTPConnection

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


class Authenticator:
    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self._local: User | None = None

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
