"""Fault classification and the sanitizer that keeps upstream text short and harmless."""

from __future__ import annotations

import pytest

from holdback.providers.faults import (
    code_for_kind,
    code_for_status,
    describe_error_payload,
    error_from_status,
    sanitize,
)
from holdback.providers.http import InvalidStreamSettingError, RetryPolicy, StreamSettings


def test_sanitize_redacts_keys_and_secrets() -> None:
    text = (
        "Incorrect API key provided: sk-proj-AbCdEf123456. "
        "Token abcdefghijklmnopqrstuvwxyz0123456789 hunter2"
    )
    clean = sanitize(text, secrets=["hunter2"])
    assert "sk-proj" not in clean
    assert "abcdefghijklmnop" not in clean
    assert "hunter2" not in clean
    assert clean.count("[redacted]") == 3


def test_sanitize_flattens_and_truncates() -> None:
    clean = sanitize("line one\r\n\tline\x00two \u2028" + "x " * 200)
    assert clean.startswith("line one line two x x")
    assert len(clean) == 120
    assert clean.endswith("…")


@pytest.mark.parametrize(
    ("payload", "described"),
    [
        ({"error": {"type": "invalid_request_error", "code": "model_not_found", "message": "m"}},
         ("model_not_found", "m")),
        ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
         ("overloaded_error", "Overloaded")),
        ({"error": "model 'x' not found"}, (None, "model 'x' not found")),
        ({"detail": "Not Found"}, (None, "Not Found")),
        ({"type": "error", "code": "rate_limit_exceeded", "message": "slow"},
         ("rate_limit_exceeded", "slow")),
        ({"error": {"type": "free text with spaces is not a type", "message": "m"}}, (None, "m")),
        (["not", "an", "object"], (None, None)),
    ],
)  # fmt: skip
def test_error_payload_shapes(payload: object, described: tuple[str | None, str | None]) -> None:
    assert describe_error_payload(payload) == described


def test_codes() -> None:
    assert code_for_status(401) == ("upstream_auth", False)
    assert code_for_status(403) == ("upstream_auth", False)
    assert code_for_status(429) == ("upstream_rate_limited", True)
    assert code_for_status(500) == ("upstream_error", True)
    assert code_for_status(529) == ("upstream_error", True)
    assert code_for_status(404) == ("upstream_error", False)
    assert code_for_kind("insufficient_quota") == ("upstream_rate_limited", False)
    assert code_for_kind(None) == ("upstream_error", False)


def test_error_from_status_without_body() -> None:
    error = error_from_status("openai", 500, b"")
    assert error.message == "openai: upstream returned 500"
    assert error.retryable


def test_stream_settings_are_validated() -> None:
    with pytest.raises(InvalidStreamSettingError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(InvalidStreamSettingError, match="delays"):
        RetryPolicy(base_delay=2, max_delay=1)
    with pytest.raises(InvalidStreamSettingError, match="timeouts"):
        StreamSettings(stall_timeout=0)
    with pytest.raises(InvalidStreamSettingError, match="timeouts"):
        StreamSettings(connect_timeout=float("nan"))
    assert RetryPolicy().delay(1) == 0.5
    assert RetryPolicy().delay(3) == 2.0
    assert RetryPolicy().delay(10) == 8.0
    assert RetryPolicy().delay(1, retry_after=30) == 8.0
