"""Corpus: the upstream's own fields (error bodies, finish reasons, tool names and ids).

The rule these cases test: the upstream API is semi-trusted, so every field it fills is
untrusted text; error frames carry a code and a fixed server message, finish reasons map onto
a closed vocabulary, tool-call ids are the server's own, and a tool name outside
`[A-Za-z0-9_.-]{1,64}` or holding a value is replaced.
"""

from __future__ import annotations

import json

from tests.adversarial.corpus import (
    ALT_EMAIL,
    EMAIL_TOKEN,
    FORBIDDEN_HOST,
    FORBIDDEN_WORD,
    INJ_CARD,
    INJ_EMAIL,
    INJ_PHONE,
    OK,
    USER_TEXT,
    Case,
    Content,
    ErrorEvent,
    Finish,
    HttpError,
    ToolCall,
    digits_of,
)

CARD_DIGITS = digits_of(INJ_CARD)
VALUES = (INJ_EMAIL, INJ_CARD, INJ_PHONE, FORBIDDEN_HOST)


def _error_body(message: str, kind: str = "invalid_request_error", code: object = None) -> str:
    return json.dumps({"error": {"message": message, "type": kind, "code": code}})


def _fields() -> list[Case]:
    cases: list[Case] = []
    http = [
        ("http500_email", 500, _error_body(f"cannot deliver to {INJ_EMAIL}", "server_error")),
        ("http400_card", 400, _error_body(f"card {INJ_CARD} was declined")),
        ("http401_phone", 401, _error_body(f"call {INJ_PHONE} to unlock", "authentication_error")),
        ("http404_forbidden_host", 404, _error_body(f"model lives on {FORBIDDEN_HOST}")),
        ("http429_string_error", 429, json.dumps({"error": f"quota of {INJ_EMAIL} exhausted"})),
        ("http422_detail", 422, json.dumps({"detail": f"bad field: {INJ_CARD}"})),
        ("http400_type_digits", 400, _error_body("bad", kind=f"card_{CARD_DIGITS}")),
        ("http400_code_digits", 400, _error_body("bad", code=CARD_DIGITS)),
        ("http403_code_word", 403, _error_body("no", code=FORBIDDEN_WORD)),
    ]
    for name, status, body in http:
        cases.append(Case(name, "fields", (HttpError(status, body),), (*VALUES, FORBIDDEN_WORD)))
    cases.append(
        Case(
            "http502_plain_text",
            "fields",
            (HttpError(502, f"Bad gateway for {INJ_EMAIL}\n", "text/plain"),),
            VALUES,
        )
    )
    cases.append(
        Case(
            "http500_html_body",
            "fields",
            (HttpError(500, f"<p>no such user: <b>{ALT_EMAIL}</b></p>", "text/html"),),
            (ALT_EMAIL,),
        )
    )
    cases.append(
        Case(
            "http200_json_error_body",
            "fields",
            (HttpError(200, _error_body(f"oops for {INJ_EMAIL}", "server_error")),),
            VALUES,
        )
    )
    cases.append(
        Case(
            "sse_error_event_plain_text",
            "fields",
            (Content(OK), ErrorEvent(f"upstream broke on {INJ_CARD}", sse_event=True)),
            VALUES,
            must_show=(OK,),
        )
    )
    mid = [
        ("midstream_error_email", _error_body(f"moderation hit {INJ_EMAIL}", "server_error")),
        ("midstream_error_card", _error_body(f"tool failed for {INJ_CARD}")),
        ("midstream_error_string", json.dumps({"error": f"backend {FORBIDDEN_HOST} down"})),
        ("midstream_error_code_digits", _error_body("x", code=CARD_DIGITS)),
    ]
    for name, body in mid:
        cases.append(Case(name, "fields", (Content(OK), ErrorEvent(body)), VALUES, must_show=(OK,)))
    cases.append(
        Case(
            "sse_error_event_phone",
            "fields",
            (Content(OK), ErrorEvent(_error_body(f"ring {INJ_PHONE}"), sse_event=True)),
            VALUES,
            must_show=(OK,),
        )
    )
    cases.append(
        Case(
            "first_event_error_email",
            "fields",
            (ErrorEvent(_error_body(f"rejected {INJ_EMAIL}", "server_error")),),
            VALUES,
        )
    )
    finishes = [
        ("finish_reason_email", f"stop {INJ_EMAIL}"),
        ("finish_reason_card", INJ_CARD),
        ("finish_reason_forbidden_host", FORBIDDEN_HOST),
        ("finish_reason_invented_token", "<EMAIL_9>"),
        ("finish_reason_markup", f"<img src=x onerror=alert(1)>{ALT_EMAIL}"),
    ]
    for name, reason in finishes:
        cases.append(
            Case(
                name,
                "fields",
                (Content(OK), Finish(reason)),
                (*VALUES, ALT_EMAIL, "<EMAIL_9>"),
                must_show=(OK,),
            )
        )
    ids = [
        ("tool_id_email", INJ_EMAIL),
        ("tool_id_card", INJ_CARD),
        ("tool_id_card_digits", f"call_{CARD_DIGITS}"),
        ("tool_id_phone", INJ_PHONE),
        ("tool_id_user_token", EMAIL_TOKEN),
    ]
    for name, upstream_id in ids:
        cases.append(
            Case(
                name,
                "fields",
                (Content(OK), ToolCall(upstream_id, "lookup", '{"q": "weather"}')),
                (*VALUES, EMAIL_TOKEN),
                user_text=USER_TEXT,
                must_show=(OK,),
            )
        )
    cases.append(
        Case(
            "tool_name_card",
            "fields",
            (ToolCall("call_a1", f"pay_{CARD_DIGITS}", "{}"),),
            VALUES,
        )
    )
    cases.append(Case("tool_name_email", "fields", (ToolCall("call_a2", INJ_EMAIL, "{}"),), VALUES))
    return cases


def _tool_names() -> list[Case]:
    names = [
        ("name_fullwidth_card", "pay_" + "".join(chr(ord(c) + 0xFEE0) for c in CARD_DIGITS), ()),
        ("name_card_spaced", f"pay {INJ_CARD}", ()),
        ("name_phone", f"dial{INJ_PHONE}", ()),
        ("name_forbidden_host", FORBIDDEN_HOST, ()),
        ("name_forbidden_word", FORBIDDEN_WORD, ()),
        ("name_user_token", EMAIL_TOKEN, (EMAIL_TOKEN,)),
        ("name_invented_token", "<EMAIL_9>", ("<EMAIL_9>",)),
        ("name_entity_email", ALT_EMAIL.replace("@", "&#64;"), (ALT_EMAIL,)),
        ("name_zero_width_email", INJ_EMAIL.replace(".", ".\u200b"), ()),
        ("name_fullwidth_email", "ｉｎｔｒｕｄｅｒ.canary＠injected-leak.example", ()),
        ("name_overlong", "a" * 300, ()),
        ("name_spaces_newline", "get weather\nnow", ()),
        ("name_html", "<img src=x onerror=alert(1)>", ()),
        ("name_bidi_override", "lookup\u202etxt.exe", ()),
        ("name_path", "../../etc/passwd", ()),
        ("name_emoji", "lookup_\U0001f600", ()),
        ("name_empty", "", ()),
    ]
    cases = []
    for name, tool, extra in names:
        cases.append(
            Case(
                f"tool_{name}",
                "tool_names",
                (Content(OK), ToolCall(f"call_{name}", tool, '{"city": "Paris"}')),
                (*VALUES, ALT_EMAIL, FORBIDDEN_WORD, *extra),
                user_text=USER_TEXT if EMAIL_TOKEN in extra else "Hi there",
                must_show=(OK,),
            )
        )
    return cases


CASES: list[Case] = _fields() + _tool_names()
