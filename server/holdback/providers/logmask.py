"""URLs in log records are masked: no log line carries a URL's credentials or query.

The rule it keeps: whoever logs (holdback, aiohttp, httpx, asyncio, any library), a URL in
the message, its arguments or a logged exception's text is written with its userinfo as
`***@` and its query as `?***` (a fragment is dropped). An upstream base URL may carry a key
in either place (`https://user:key@host/`, `?api-key=...`), and a library that logs requests
would otherwise write it on every call.

It works at record creation (`logging.setLogRecordFactory`), so it covers every logger,
present and future, whatever handlers are configured. Installing it twice is harmless.
"""

from __future__ import annotations

import logging
import re
from typing import Any

_URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]{0,15}://)([^\s'\"<>`]+)")
_FORMATTER = logging.Formatter()


def mask_url(url: str) -> str:
    """`url` with its userinfo as `***@`, its query as `?***`, and no fragment."""
    return _URL.sub(_mask_match, url)


def _mask_match(match: re.Match[str]) -> str:
    scheme, rest = match.group(1), match.group(2)
    rest = rest.partition("#")[0]
    rest, question, _ = rest.partition("?")
    slash = rest.find("/")
    authority, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    at = authority.rfind("@")
    if at >= 0:
        authority = "***@" + authority[at + 1 :]
    masked = scheme + authority + path
    if question:
        masked += "?***"
    return masked


def mask_text(text: str) -> str:
    """Every URL in `text` masked (`mask_url`)."""
    if "://" not in text:
        return text
    return _URL.sub(_mask_match, text)


def _masked(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a record that cannot be formatted is left to logging's own handling
        return
    masked = mask_text(message)
    if masked != message:
        record.msg = masked
        record.args = None
    if record.exc_info and not record.exc_text:
        text = _FORMATTER.formatException(record.exc_info)
        masked_text = mask_text(text)
        if masked_text != text:
            record.exc_text = masked_text
    if record.stack_info:
        record.stack_info = mask_text(record.stack_info)


class _MaskingFactory:
    """A record factory that masks URLs in what the wrapped factory made."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record: logging.LogRecord = self.inner(*args, **kwargs)
        _masked(record)
        return record


def install_url_masking() -> None:
    """Mask URLs in every log record made from now on (idempotent)."""
    current = logging.getLogRecordFactory()
    if isinstance(current, _MaskingFactory):
        return
    logging.setLogRecordFactory(_MaskingFactory(current))
