"""The admin API (`/api/admin/...`) and the audit trail (`/api/audit`): the map of its routes.

The rules:
- Every route here is for admins only and records every change it makes, by name, never a
  password, a token's text or a value (`admin_common`: the check, the record, and refusals
  as our own sentences).
- Each resource keeps its own rules in its module: users and API tokens (`admin_users`),
  groups and their members (`admin_groups`), reveal policies, never-restored kinds and the
  preview (`admin_policies`), the trail as JSON or CSV (`audit_api`); term lists are
  `terms_api`, pattern sets and people lists `team_detectors_api`.
- The routes are tried in this order; `application.py` mounts `routes` as a whole.
"""

from __future__ import annotations

from starlette.routing import Route

from holdback.app import admin_groups, admin_policies, admin_users, audit_api

routes = [
    Route("/api/admin/users", admin_users.list_users, methods=["GET"]),
    Route("/api/admin/users", admin_users.add_user, methods=["POST"]),
    Route("/api/admin/users/{name}/disable", admin_users.disable_user, methods=["POST"]),
    Route("/api/admin/users/{name}/enable", admin_users.enable_user, methods=["POST"]),
    Route("/api/admin/users/{name}/role", admin_users.set_role, methods=["POST"]),
    Route("/api/admin/users/{name}/password", admin_users.set_password, methods=["POST"]),
    Route("/api/admin/users/{name}", admin_users.delete_user, methods=["DELETE"]),
    Route("/api/admin/groups", admin_groups.list_groups, methods=["GET"]),
    Route("/api/admin/groups", admin_groups.create_group, methods=["POST"]),
    Route("/api/admin/groups/{name}", admin_groups.rename_group, methods=["PATCH"]),
    Route("/api/admin/groups/{name}", admin_groups.delete_group, methods=["DELETE"]),
    Route("/api/admin/groups/{name}/members/{user}", admin_groups.add_member, methods=["POST"]),
    Route(
        "/api/admin/groups/{name}/members/{user}", admin_groups.remove_member, methods=["DELETE"]
    ),
    Route("/api/admin/tokens", admin_users.list_tokens, methods=["GET"]),
    Route("/api/admin/tokens", admin_users.create_token, methods=["POST"]),
    Route("/api/admin/tokens/{id}/revoke", admin_users.revoke_token, methods=["POST"]),
    Route("/api/admin/policies", admin_policies.list_policies, methods=["GET"]),
    Route("/api/admin/policies/preview", admin_policies.preview_policy, methods=["POST"]),
    Route("/api/admin/policies/{scope}/{kind}", admin_policies.set_policy, methods=["PUT"]),
    Route("/api/admin/policies/{scope}/{kind}", admin_policies.clear_policy, methods=["DELETE"]),
    Route("/api/admin/never-restore", admin_policies.never_restore, methods=["POST"]),
    Route("/api/admin/never-restore/{kind}", admin_policies.allow_restore, methods=["DELETE"]),
    Route("/api/audit", audit_api.audit, methods=["GET"]),
]
