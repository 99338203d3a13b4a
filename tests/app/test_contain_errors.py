"""Unexpected errors: a bare 500 and a log line that never quotes the exception's message."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from holdback.app.application import ContainErrors
from holdback.errors import describe

CANARY = "canary.grace@hopper-canary.example"


async def boom(request: Request) -> Response:
    raise ValueError(f"could not parse {CANARY}")


def test_an_unexpected_error_is_a_500_whose_log_line_has_no_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Starlette(routes=[Route("/boom", boom)], middleware=[Middleware(ContainErrors)])
    with TestClient(app) as client:
        response = client.get("/boom")
    assert response.status_code == 500
    assert CANARY not in response.text
    assert "ValueError" in caplog.text
    assert CANARY not in caplog.text


def test_describe_names_type_and_place_only() -> None:
    try:
        raise KeyError(CANARY)
    except KeyError as exc:
        text = describe(exc)
    assert text.startswith("builtins.KeyError at ")
    assert CANARY not in text
