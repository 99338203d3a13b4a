"""`/api/admin/term-lists`: the team's sensitive and forbidden term lists, edited live.

The rules:
- Admins only, like every `/api/admin/…` route (`admin_common.admin_route`). A list is a
  name, a kind (its values are tokens `<KIND_N>`), a purpose (`sensitive`: pseudonymized;
  `forbidden`: never shown) and its terms, stored sealed like the vault
  (`Store.save_term_list`).
- A change holds for the next message at once on this server (`TermLists.reload`), and on
  others within seconds; a reply under way keeps the lists it started with.
- The admin trail names the list, never a term. Terms are shown only to admins, and only on
  the list's own route.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from holdback.app.admin_common import admin_route, bad, record, refusals
from holdback.app.http_api import _body, _runtime, problem
from holdback.store.records import TermList, User


def _summary(term_list: TermList) -> dict[str, Any]:
    return {
        "name": term_list.name,
        "kind": term_list.kind,
        "purpose": term_list.purpose,
        "terms": len(term_list.terms),
        "updated_at": term_list.updated_at.isoformat(),
    }


@admin_route
async def list_term_lists(request: Request, admin: User) -> Response:
    lists = await _runtime(request).store.load_term_lists()
    return JSONResponse({"term_lists": [_summary(t) for t in lists]})


@admin_route
async def get_term_list(request: Request, admin: User) -> Response:
    name = request.path_params["name"]
    for term_list in await _runtime(request).store.load_term_lists():
        if term_list.name == name:
            return JSONResponse({**_summary(term_list), "terms": list(term_list.terms)})
    return problem(404, "not_found", "no such term list")


@admin_route
async def put_term_list(request: Request, admin: User) -> Response:
    runtime = _runtime(request)
    name = request.path_params["name"]
    body = await _body(request)
    kind = body.get("kind") if body else None
    purpose = body.get("purpose") if body else None
    terms = body.get("terms") if body else None
    if (
        not isinstance(kind, str)
        or purpose not in ("sensitive", "forbidden")
        or not isinstance(terms, list)
        or not all(isinstance(t, str) for t in terms)
    ):
        return bad(
            "send JSON with 'kind' (a name such as clients), 'purpose' (sensitive or "
            "forbidden) and 'terms' (a list of strings)"
        )
    with refusals():
        await runtime.store.save_term_list(name, kind, purpose, terms)
    await record(runtime, admin, "terms.set", name)
    if runtime.terms is not None:
        await runtime.terms.reload()
    return JSONResponse({"name": name, "kind": kind, "purpose": purpose, "terms": len(terms)})


@admin_route
async def delete_term_list(request: Request, admin: User) -> Response:
    runtime = _runtime(request)
    name = request.path_params["name"]
    if not await runtime.store.delete_term_list(name):
        return problem(404, "not_found", "no such term list")
    await record(runtime, admin, "terms.delete", name)
    if runtime.terms is not None:
        await runtime.terms.reload()
    return Response(status_code=204)


routes = [
    Route("/api/admin/term-lists", list_term_lists, methods=["GET"]),
    Route("/api/admin/term-lists/{name}", get_term_list, methods=["GET"]),
    Route("/api/admin/term-lists/{name}", put_term_list, methods=["PUT"]),
    Route("/api/admin/term-lists/{name}", delete_term_list, methods=["DELETE"]),
]
