"""What every `/api/admin/…` route shares: who may ask, how refusals read, what is recorded.

The rules:
- Only admins: a member is refused with 403 `forbidden`, someone not signed in with 401, as
  on every route (`http_api._user`: a disabled user's sessions and tokens name nobody).
  `admin_route` checks this before a handler sees the request.
- Every change an admin makes is recorded (`Store.record_admin`) with the admin, the action
  (`group.create`) and its target by name: a user, a group, a kind, a token's id. Never a
  password, a token's text or a value. Reads (lists, the preview, the audit) are not.
- Bad input is a 400 that changes nothing; an unknown user, group or token is a 404; a name
  taken, or a change that would leave no admin, a 409. Answers are our own sentences: a
  store error's message never reaches the client (`store_refusal`). Only the store calls a
  handler wraps in `refusals()` are answered so; any other error stays unexpected (a 500).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from holdback.app.http_api import _user, problem
from holdback.app.runtime import Runtime
from holdback.errors import wire_message
from holdback.store.errors import (
    GroupExistsError,
    GroupNotFoundError,
    InvalidRecordError,
    LastAdminError,
    RecordNotFoundError,
    StoreError,
    UserExistsError,
    UserNotFoundError,
)
from holdback.store.records import User

MAX_TARGET = 400  # `store.audit_log.MAX_TARGET_CHARS`

AdminHandler = Callable[[Request, User], Awaitable[Response]]


async def admin_of(request: Request) -> User | Response:
    """The admin asking, or the refusal for someone who is not one."""
    user = await _user(request)
    if isinstance(user, Response):
        return user
    if not user.is_admin:
        return problem(403, "forbidden", wire_message("forbidden"))
    return user


def bad(message: str) -> JSONResponse:
    return problem(400, "bad_request", message)


def store_refusal(exc: StoreError) -> JSONResponse:
    """A store refusal as our own sentence (its message is never passed on)."""
    if isinstance(exc, UserNotFoundError):
        return problem(404, "not_found", "no such user")
    if isinstance(exc, GroupNotFoundError):
        return problem(404, "not_found", "no such group")
    if isinstance(exc, RecordNotFoundError):
        return problem(404, "not_found", "no such API token")
    if isinstance(exc, UserExistsError):
        return problem(409, "exists", "a user of that name exists already")
    if isinstance(exc, GroupExistsError):
        return problem(409, "exists", "a group of that name exists already")
    if isinstance(exc, LastAdminError):
        return problem(
            409, "last_admin", "that is the last admin; make another user an admin first"
        )
    if isinstance(exc, InvalidRecordError):
        return bad("the request does not fit: check the names, kinds and levels it gives")
    raise exc


class Refused(Exception):
    """A store refusal on its way out of an `admin_route` handler, already answered."""

    def __init__(self, response: JSONResponse) -> None:
        super().__init__("refused")
        self.response = response


@contextmanager
def refusals() -> Iterator[None]:
    """Inside an `admin_route` handler: a store refusal here ends the request with its
    answer (`store_refusal`); one it does not know is raised as it was."""
    try:
        yield
    except StoreError as exc:
        raise Refused(store_refusal(exc)) from None


def admin_route(handler: AdminHandler) -> Callable[[Request], Awaitable[Response]]:
    """A route for admins only: `handler(request, admin)` runs once the asker is one."""

    @functools.wraps(handler)
    async def route(request: Request) -> Response:
        admin = await admin_of(request)
        if isinstance(admin, Response):
            return admin
        try:
            return await handler(request, admin)
        except Refused as refused:
            return refused.response

    return route


async def record(runtime: Runtime, admin: User, action: str, *names: str) -> None:
    """Record an admin's action on its targets, by name."""
    target = " ".join(names)
    if len(target) > MAX_TARGET:
        target = target[: MAX_TARGET - 1] + "…"
    await runtime.store.record_admin(admin.id, action, target)


def when(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None
