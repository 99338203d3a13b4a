"""The uvicorn server holdback runs, with the connection-level bounds uvicorn lacks or leaves open.

The rule: no connection can hold the server without sending a complete request head in time.
uvicorn's h11 protocol has no header-read timeout: its keep-alive timer is cancelled by any byte
that arrives, so a client that sends one header line every few seconds (slowloris), or nothing
at all, keeps its connection forever. `HeadTimeoutProtocol` gives every request head a deadline
of `header_timeout` seconds, counted from when the connection opens or the previous response
ends (the rest of an unread body included), and never extended by bytes that trickle in; a
client past it gets 408 (if it had begun a head) and the connection is closed. A head is also
bounded in size (`max_header_bytes`, 400 past it), and `max_connections` open connections
make further HTTP requests 503.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from holdback.app.settings import Settings

_TIMEOUT_BODY = b"the request head did not arrive in time\n"
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: " + str(len(_TIMEOUT_BODY)).encode() + b"\r\n"
    b"connection: close\r\n\r\n" + _TIMEOUT_BODY
)


class HeadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, with a deadline for every request head."""

    head_timeout: ClassVar[float] = 10.0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self._serving():  # a head has arrived; the app bounds the rest of the request
            self._disarm_head_timer()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._disarm_head_timer()
        super().handle_websocket_upgrade(event)

    def on_response_complete(self) -> None:
        # Armed before uvicorn looks at pipelined data, which disarms it if a head is there.
        if not self.transport.is_closing():
            self._arm_head_timer()
        super().on_response_complete()

    def _serving(self) -> bool:
        """A request has arrived whose response is not complete yet."""
        return self.cycle is not None and not self.cycle.response_complete

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._serving():
            return
        began, _closed = self.conn.trailing_data
        if began:
            self.transport.write(_TIMEOUT_RESPONSE)
        self.transport.close()


def protocol_for(settings: Settings) -> type[HeadTimeoutProtocol]:
    """The protocol class, with this server's head timeout."""
    return type(
        "HeadTimeoutProtocol",
        (HeadTimeoutProtocol,),
        {"head_timeout": settings.header_timeout, "__module__": __name__},
    )


def uvicorn_config(app: ASGIApp, settings: Settings, **extra: Any) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        http=protocol_for(settings),
        ws="websockets-sansio",
        # Room above the limit, so a frame just over it reaches the app, which answers with an
        # error frame before closing with 1009; far larger frames uvicorn refuses itself.
        ws_max_size=settings.max_frame_bytes * 2 + 4096,
        # No permessage-deflate: a compression context shared by the model's text (which a
        # prompt injection controls) and restored values makes frame sizes an oracle on the
        # values (CRIME, BREACH), and it costs CPU per frame per connection.
        ws_per_message_deflate=False,
        h11_max_incomplete_event_size=settings.max_header_bytes,
        limit_concurrency=settings.max_connections,
        lifespan="on",
        timeout_graceful_shutdown=int(settings.shutdown_grace) + 1,
        **extra,
    )
