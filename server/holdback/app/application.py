"""The Starlette application: routes, static UI, and the lifespan that builds the runtime.

On start it opens the store (which applies the migrations and checks the vault key), loads the
term lists (files given on the command line are saved to the store, encrypted, and every list in
the store is used) and the team's pattern sets and people lists, builds the detectors, one
provider per model (`--model`, the first the default), the chat service and its moderator
(`--moderation`, docs/moderation.md).
`holdback serve` builds that runtime itself before the server starts (`startup.py`) and hands
it over, so that the lifespan has nothing left that can fail.
Every response carries the security headers, and every request body is bounded in size and
time (`holdback.app.limits`). On shutdown, replies in flight get `shutdown_grace` seconds to
finish; the rest are stored as incomplete.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.routing import Mount, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from holdback.app import (
    admin_api,
    chat_settings_api,
    demo,
    export_api,
    health_api,
    http_api,
    models_api,
    search_api,
    syntax,
    team_detectors_api,
    term_reload,
    terms_api,
    uploads,
)
from holdback.app.auth import Authenticator
from holdback.app.cluster import Cluster
from holdback.app.limits import RequestLimits, SecurityHeaders
from holdback.app.pipeline import ChatService
from holdback.app.remote_replies import RemoteReplies
from holdback.app.runtime import Runtime
from holdback.app.sender import RAW_SEND
from holdback.app.settings import Settings
from holdback.app.term_reload import TermLists
from holdback.app.terms import kind_of, read_terms
from holdback.app.ws import chat_socket
from holdback.errors import describe
from holdback.moderation.calls import ModerationCalls
from holdback.moderation.registry import make_moderator
from holdback.providers.base import Provider
from holdback.providers.http import StreamSettings
from holdback.providers.registry import make_provider
from holdback.providers.transport import UpstreamClient, upstream_client
from holdback.store.crypto import load_vault_key
from holdback.store.locations import ensure_data_dir, resolve_data_dir, resolve_database_url
from holdback.store.repository import Store

log = logging.getLogger("holdback")


def web_dir(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    if env.get("HOLDBACK_WEB_DIR"):
        return Path(env["HOLDBACK_WEB_DIR"])
    return Path(__file__).resolve().parents[3] / "web"


async def build_runtime(settings: Settings, provider: Provider | None = None) -> Runtime:
    env = dict(settings.env)
    data_dir = ensure_data_dir(resolve_data_dir(settings.data_dir, env))
    url = resolve_database_url(settings.database_url, env, data_dir)
    key = load_vault_key(data_dir, env)
    store = await Store.open(
        url,
        vault_key=key,
        max_vault_entries=settings.max_vault_entries,
        synchronous=settings.sqlite_synchronous,
    )
    http: UpstreamClient | None = None
    moderation: ModerationCalls | None = None
    try:
        for path in settings.sensitive_terms:
            await store.save_term_list(
                f"sensitive:{kind_of(path)}", kind_of(path), "sensitive", read_terms(path)
            )
        for path in settings.forbidden_terms:
            await store.save_term_list(
                f"forbidden:{path.stem}", "forbidden", "forbidden", read_terms(path)
            )
        await store.close_unfinished()  # replies the last stop cut off (SQLite)
        version, detectors, forbidden = await term_reload.current(settings, store)
        # One provider per model, the default first; `provider` stands in for the default.
        models: dict[str, Provider] = {settings.model: provider} if provider is not None else {}
        to_build = [spec for spec in settings.models if spec not in models]
        if any(not spec.startswith("demo") for spec in to_build):
            # One connection pool for the process, shared by every model: a client per reply
            # would build a TLS context and open a connection for every reply
            # (providers/transport.py).
            http = upstream_client(max_keepalive=256)
        for spec in to_build:
            models[spec] = make_provider(
                spec,
                env=env,
                demo_chunk_delay=settings.demo_chunk_delay,
                client=http,
                settings=StreamSettings(limits=settings.upstream_limits),
            )
        service = ChatService(
            store,
            models[settings.model],
            detectors,
            forbidden=forbidden,
            guard_mode=settings.guard_mode,
            guard_window=settings.guard_window,
            phone_region=settings.phone_region,
            rate_limit_per_minute=settings.rate_limit_per_minute,
            models=models,
        )
        # Policy moderation (docs/moderation.md): an HTTP moderator shares the process's pool.
        if settings.moderation.startswith(("openai:", "http:")) and http is None:
            http = upstream_client(max_keepalive=256)
        moderator = make_moderator(
            settings.moderation, env, client=http, timeout=settings.moderation_timeout
        )
        if moderator is not None:
            moderation = ModerationCalls(
                moderator,
                timeout=settings.moderation_timeout,
                concurrency=settings.moderation_concurrency,
            )
            service.moderation = moderation
            service.moderation_window = settings.moderation_window
            service.moderate_input = settings.moderate_input
        # On PostgreSQL, several processes may share the store: replies are leased, their
        # frames published, and Stop reaches whoever runs them (app/cluster.py). Started by
        # the lifespan, in the server's own loop.
        if not store.target.is_sqlite:
            cluster = Cluster(
                store,
                store.target.listen_dsn(),
                on_cancel=service.cancel_here,
                lease_ttl=settings.lease_ttl,
            )
            service.cluster = cluster
            service.remote = RemoteReplies(store, cluster)
    except BaseException:
        if moderation is not None:
            await moderation.aclose()
        if http is not None:
            await http.aclose()
        await store.close()
        raise
    return Runtime(
        http=http,
        moderation=moderation,
        settings=settings,
        store=store,
        service=service,
        auth=Authenticator(settings, store),
        web_dir=web_dir(env),
        terms=TermLists(settings, store, service.use_terms, version=version),
    )


def create_app(
    settings: Settings, provider: Provider | None = None, *, runtime: Runtime | None = None
) -> Starlette:
    """The holdback app. Its lifespan builds the runtime (or takes `runtime`, built already by
    `holdback serve`, so that a failure to build it is said before the server starts);
    `provider` overrides the default model."""
    prebuilt = runtime

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        runtime = prebuilt if prebuilt is not None else await build_runtime(settings, provider)
        app.state.runtime = runtime
        if settings.auth == "password":
            await runtime.auth.passwords.prepare()
        if runtime.terms is not None:
            runtime.terms.start()
        cluster = runtime.service.cluster
        if cluster is not None:
            await cluster.start()
        log.info(
            "holdback is ready (model%s %s, auth %s)",
            "s" if len(settings.models) > 1 else "",
            ", ".join(settings.models),
            settings.auth,
        )
        try:
            yield
        finally:
            if runtime.terms is not None:
                await runtime.terms.stop()
            await runtime.service.shutdown(settings.shutdown_grace)
            if cluster is not None:
                await cluster.close()
            if runtime.moderation is not None:
                await runtime.moderation.aclose()
            if runtime.http is not None:
                await runtime.http.aclose()
            await runtime.store.close()

    routes = [
        *http_api.routes,
        *health_api.routes,
        *chat_settings_api.routes,
        *admin_api.routes,
        *terms_api.routes,
        *team_detectors_api.routes,
        *models_api.routes,
        *search_api.routes,
        *export_api.routes,
        *uploads.routes,
        WebSocketRoute("/ws", chat_socket),
        *demo.routes,
        syntax.route,
        Mount("/", app=StaticFiles(directory=web_dir(dict(settings.env)), html=True), name="web"),
    ]
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(ContainErrors),
        # Inside ContainErrors: its refusals are answers, not failures.
        Middleware(RequestLimits, settings=settings),
    ]
    return Starlette(routes=routes, lifespan=lifespan, middleware=middleware)


class ContainErrors:
    """An unexpected error becomes a bare 500 (or a closed socket) and one log line that names
    its type and place but not its message, which might quote data. Nothing is re-raised to
    the server, whose own traceback would print the message."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        started = False
        if scope["type"] == "websocket":
            scope[RAW_SEND] = send  # for frames once accepted (`sender.Sender`)

        async def watch(message: Message) -> None:
            nonlocal started
            if message["type"] in ("http.response.start", "websocket.accept", "websocket.close"):
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            log.error("%s %s failed: %s", scope["type"], scope.get("path", ""), describe(exc))
            if started:
                return
            if scope["type"] == "http":
                response = JSONResponse({"code": "internal", "message": "internal error"}, 500)
                await response(scope, receive, send)
            else:
                await send({"type": "websocket.close", "code": 1011})
