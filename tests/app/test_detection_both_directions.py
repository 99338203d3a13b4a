"""Detection that survives real text, in both directions (issue 14): for every format and every
evasion class, the upstream is never sent the value, and the wire never shows it.

The rule it keeps: a value spelled the evasive way (markdown around it, a glued label, a
neighbour in another script, odd separators, lower case, invisible characters, look-alikes,
combining marks and ligatures, broken spacing inside a term, national phone formats, secrets
with no digit in their body, forbidden terms, HTML entities, Unicode and punycode e-mail) is
caught wherever it comes from:

- user -> model: the user types it; the request body the upstream received, and the stored
  model view of the conversation (the next turn's history), do not show it;
- model -> user: the model makes it up (it is not in the conversation's vault) and streams it
  in chunks of 1-3 characters or in one piece; no frame the client receives, the concatenated
  text of the reply, and the stored reply (owner and model views), do not show it.

"Show" is judged by `both_directions_oracle`, which decodes on its own. One app and one real
loopback upstream serve the whole module; every run opens a new conversation, so no value is
ever in the vault of the run that checks it. Receives are bounded by a timeout. A leak known
today is a strict xfail in its direction only, with the leak as its reason: fixing it turns the
run red until the mark is removed.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from holdback.providers.http import RetryPolicy, StreamSettings
from holdback.providers.registry import make_provider
from tests.app import both_directions_oracle as oracle
from tests.app.support import (
    TestClient,
    WebSocketTestSession,
    luhn_valid,
    make_settings,
    openai_sse,
    running_app,
)
from tests.providers.fakeserver import FakeUpstream, RecordedRequest, Reply, split_random

Frame = dict[str, Any]

RECEIVE_TIMEOUT = 20.0
FRAME_LIMIT = 20_000

# -- the values -------------------------------------------------------------------------------

CARD = "4000 0566 5566 5556"  # Luhn-valid
CARD_DIGITS = "4000056655665556"
MASTERCARD = "5105 1051 0510 5100"  # Luhn-valid
AMEX = "3782 822463 10005"  # Luhn-valid
SSN = "536-22-8147"  # area, group and serial all allowed by the SSA rules
IBAN_DE = "DE89 3704 0044 0532 0130 00"
IBAN_GB = "GB82 WEST 1234 5698 7654 32"
IBAN_NL = "NL91 ABNA 0417 1643 00"
EMAIL = "ann@example.org"
BERLIN = "30 1234 5678"  # +49 30 1234 5678: the national significant number, as digits
BERLIN_2 = "30 1234 5679"
LONDON = "20 7946 0958"  # +44 20 7946 0958
LONDON_2 = "20 7946 0959"
MANCHESTER = "161 496 0000"  # 0161 496 0000

CLIENT = "Zyxwcanary Holdings"  # a sensitive term (kind `clients`)
CLIENT_FI = "Greenfield Maritime"  # a sensitive term with `fi` in it
FORBIDDEN = "Operation Bluefinch"  # a forbidden term, with `fi` in it
FORBIDDEN_HOST = "db01.vaultcanary.internal"

# Keys of the issuers' lengths; the first six have no digit in their body.
GHP = "ghp_gNSWPHprVqsUeQCtDRzzXhqouwZqxZOOHjkJ"
GHO = "gho_QQrkaPehMvbfrnyzLCMgPRhLLOOxlgVFGRmr"
GHS = "ghs_" + GHP[4:]
GHU = "ghu_" + GHO[4:]
GITHUB_PAT = (
    "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"
)
SK_LIVE = "sk_live_LGsHZwqhcjXmaoqGqlpnMRvs"
SK_TEST = "sk_test_" + SK_LIVE[8:]
SK_SVCACCT = "sk-svcacct-UWxcJMVYWkGP_mxFypyIJXuFNcpPBEXvfqZgimdSjnqFCiIy"
WHSEC = "whsec_dYgqTxIBAiCofjZUljbQoPQwMQJTcKAD"
RK_LIVE = "rk_live_rEuexdRPPIgeBhdPkeaYRtci"
RK_TEST = "rk_test_" + RK_LIVE[8:]
SLACK = "xoxb-2462186374-8531902746-yLjaCDYFTHbsfrpsRLPGaJYp"
SLACK_USER = "xoxp-2462186374-8531902746-1234567890-abcdefABCDEF1234567890abcdefABCD"
AWS = "AKIAXALDDMMOJLXKAIEJ"
AWS_SESSION = "ASIA" + AWS[4:]
GOOGLE = "AIzaKZXTtnHL_CbPeCvKyYMBqRWAmYbyTEpy-Hh"
ANTHROPIC = "sk-ant-api03-" + SK_SVCACCT[11:] + "AA"
SK_PROJ = "sk-proj-Wo-pmqepYfDQJdbmRZRMPsXBDoVeOeTTlTxDSmygMxEnWRwvFI_tdlNODi-rEtId"

NUMBER_FRAGMENT = 7  # seven digits of a number in a row still give most of it away
SECRET_FRAGMENT = 16


@dataclass(frozen=True)
class Case:
    """One evasive spelling: `spelled` is written in a sentence; no form of `values` may show.

    `user_leaks` / `model_leaks`: a known leak in that direction (the test is a strict xfail
    with that reason, so it fails again once the leak is fixed and the mark must go)."""

    klass: str
    name: str
    spelled: str
    values: tuple[str, ...]
    fragment: int = 0
    user_leaks: str = ""
    model_leaks: str = ""

    @property
    def id(self) -> str:
        return f"{self.klass}-{self.name}"


def number(klass: str, name: str, spelled: str, *values: str) -> Case:
    return Case(klass, name, spelled, values, NUMBER_FRAGMENT)


def secret(klass: str, name: str, spelled: str, value: str) -> Case:
    return Case(klass, name, spelled, (value,), SECRET_FRAGMENT)


def text(klass: str, name: str, spelled: str, *values: str) -> Case:
    return Case(klass, name, spelled, values)


def leaks(case: Case, *, user: str = "", model: str = "") -> Case:
    """`case`, with the leaks it is known to have (see `Case`)."""
    return replace(case, user_leaks=user, model_leaks=model)


def spread(value: str, mark: str, every: int = 3) -> str:
    """`value` with `mark` after every `every`-th letter or digit (not at the end)."""
    out, seen = [], 0
    for i, ch in enumerate(value):
        out.append(ch)
        if ch.isalnum():
            seen += 1
            if seen % every == 0 and i < len(value) - 1:
                out.append(mark)
    return "".join(out)


BOTH_WAYS = "not detected: the value goes to the model as typed and reaches the wire as written"

CASES: tuple[Case, ...] = (
    # -- markdown around the value --------------------------------------------------------------
    text("markdown", "em-underscore-email", "_ann@example.org_", EMAIL),
    text("markdown", "strong-email", "**ann@example.org**", EMAIL),
    text("markdown", "strong-underscore-email", "__ann@example.org__", EMAIL),
    text("markdown", "escaped-underscore-email", r"ann\_lee@example.org", "ann_lee@example.org"),
    text("markdown", "em-inside-email", "_ann_@example.org", EMAIL),
    text("markdown", "link-email", "[mail me](mailto:ann@example.org)", EMAIL),
    text("markdown", "autolink-email", "<ann@example.org>", EMAIL),
    number("markdown", "code-card", "`4000 0566 5566 5556`", CARD),
    number("markdown", "strong-card", "**4000 0566 5566 5556**", CARD),
    number("markdown", "markers-inside-card", "4000 **0566** 5566 5556", CARD),
    number("markdown", "escaped-dots-card", r"4000\.0566\.5566\.5556", CARD),
    number("markdown", "strike-phone", "~~+44 20 7946 0958~~", LONDON),
    number("markdown", "strong-iban", "**DE89 3704 0044 0532 0130 00**", IBAN_DE),
    secret("markdown", "code-ghp", f"`{GHP}`", GHP),
    text("markdown", "em-term", "*Zyxwcanary Holdings*", CLIENT),
    text("markdown", "strong-forbidden", "**Operation Bluefinch**", FORBIDDEN),
    text("markdown", "markers-inside-forbidden", "Operation **Bluefinch**", FORBIDDEN),
    # -- a glued prefix ---------------------------------------------------------------------------
    number("glued", "tel-dot-plus49", "Tel.+49 30 1234 5678", BERLIN),
    number("glued", "tel-paren-zero", "Tel.+49 (0)30 1234 5678", BERLIN),
    number("glued", "tel-colon-plus44", "Tel:+44 20 7946 0958", LONDON),
    number("glued", "ph-colon-national", "Ph:020 7946 0958", LONDON),
    number("glued", "dashes-plus49", "+49-30-1234-5678", BERLIN),
    number("glued", "no-dot-card", "No.4000 0566 5566 5556", CARD),
    number("glued", "hash-card", "#4000 0566 5566 5556", CARD),
    number("glued", "hash-card-compact", "#4000056655665556", CARD),
    number("glued", "card-colon", "Card:4000056655665556", CARD),
    number("glued", "nr-ssn", "SSN#536-22-8147", SSN),
    number("glued", "ssn-colon", "SSN:536-22-8147", SSN),
    number("glued", "iban-colon", "IBAN:DE89370400440532013000", IBAN_DE),
    text("glued", "email-label", "E-Mail:ann@example.org", EMAIL),
    secret("glued", "key-equals-ghp", f"token={GHP}", GHP),
    secret("glued", "url-query-ghp", f"https://x.example/?token={GHP}", GHP),
    secret("glued", "json-ghp", f'{{"token":"{GHP}"}}', GHP),
    # -- a neighbour in another script ------------------------------------------------------------
    number("script", "cjk-card", "卡号4000 0566 5566 5556", CARD),
    number("script", "cjk-after-card", "4000 0566 5566 5556号", CARD),
    secret("script", "cjk-sk-proj", f"密钥{SK_PROJ}", SK_PROJ),
    secret("script", "cjk-ghp", f"令牌{GHP}", GHP),
    secret("script", "cjk-after-ghp", f"{GHP}是密钥", GHP),
    number("script", "cjk-phone", "电话+49 30 1234 5678", BERLIN),
    number("script", "cjk-ssn", "社保536-22-8147", SSN),
    text("script", "cjk-email", "邮箱ann@example.org", EMAIL),
    number("script", "cyrillic-card", "номер4000 0566 5566 5556", CARD),
    number("script", "arabic-card", "رقم4000 0566 5566 5556", CARD),
    number("script", "hangul-card-compact", "카드번호4000056655665556", CARD),
    number("script", "cjk-iban-fullwidth-colon", "账户：DE89 3704 0044 0532 0130 00", IBAN_DE),
    # -- separators: cards and SSNs ---------------------------------------------------------------
    number("separators", "card-dots", "4000.0566.5566.5556", CARD),
    number("separators", "card-slashes", "4000/0566/5566/5556", CARD),
    number("separators", "card-en-dashes", "4000–0566–5566–5556", CARD),
    number("separators", "card-mixed", "4000-0566 5566.5556", CARD),
    number("separators", "card-double-spaces", "4000  0566  5566  5556", CARD),
    number("separators", "card-nbsp", "4000\u00a00566\u00a05566\u00a05556", CARD),
    number("separators", "card-thin-space", "4000\u20090566\u20095566\u20095556", CARD),
    number("separators", "card-narrow-nbsp", "4000\u202f0566\u202f5566\u202f5556", CARD),
    number("separators", "card-tabs", "4000\t0566\t5566\t5556", CARD),
    number("separators", "mastercard-dots", "5105.1051.0510.5100", MASTERCARD),
    number("separators", "amex-dots", "3782.822463.10005", AMEX),
    number("separators", "card-minus-signs", "4000\u22120566\u22125566\u22125556", CARD),
    number("separators", "card-em-dashes", "4000—0566—5566—5556", CARD),
    number("separators", "ssn-dots", "536.22.8147", SSN),
    number("separators", "ssn-slashes", "536/22/8147", SSN),
    number("separators", "ssn-en-dashes", "536–22–8147", SSN),
    number("separators", "ssn-mixed", "536-22 8147", SSN),
    number("separators", "ssn-double-spaces", "536  22  8147", SSN),
    number("separators", "ssn-non-breaking-hyphens", "536\u201122\u20118147", SSN),
    number("separators", "ssn-minus-signs", "536\u221222\u22128147", SSN),
    # -- lower-case IBAN --------------------------------------------------------------------------
    number("iban-case", "de-lower", "de89 3704 0044 0532 0130 00", IBAN_DE),
    number("iban-case", "gb-lower", "gb82 west 1234 5698 7654 32", IBAN_GB),
    number("iban-case", "gb-lower-compact", "gb82west12345698765432", IBAN_GB),
    number("iban-case", "nl-lower-compact", "nl91abna0417164300", IBAN_NL),
    number("iban-case", "gb-lower-bank-code", "GB82 west 1234 5698 7654 32", IBAN_GB),
    number("iban-case", "gb-mixed-case", "Gb82 WeSt 1234 5698 7654 32", IBAN_GB),
    number("iban-case", "de-mixed-case-country", "De89 3704 0044 0532 0130 00", IBAN_DE),
    # -- invisible characters inside --------------------------------------------------------------
    number("invisible", "cgj-card", spread(CARD, "\u034f"), CARD),
    number("invisible", "zwsp-card", spread(CARD_DIGITS, "\u200b", 4), CARD),
    number("invisible", "bom-card", spread(CARD_DIGITS, "\ufeff", 4), CARD),
    number("invisible", "mongolian-fvs-card", spread(CARD, "\u180b"), CARD),
    number("invisible", "shorthand-format-card", spread(CARD, "\U0001bca0"), CARD),
    number("invisible", "musical-format-card", spread(CARD, "\U0001d173"), CARD),
    number("invisible", "word-joiner-phone", spread("+44 20 7946 0958", "\u2060"), LONDON),
    number("invisible", "lrm-phone", spread("+44 20 7946 0958", "\u200e"), LONDON),
    text("invisible", "variation-selector-email", spread(EMAIL, "\ufe0f"), EMAIL),
    text("invisible", "zwsp-email", "ann@exam\u200bple.org", EMAIL),
    secret("invisible", "tag-chars-ghp", spread(GHP, "\U000e0020", 8), GHP),
    secret("invisible", "zwsp-in-body-ghp", GHP[:14] + "\u200b" + GHP[14:], GHP),
    secret("invisible", "zwsp-after-underscore-ghp", "ghp_\u200b" + GHP[4:], GHP),
    secret("invisible", "cgj-in-body-whsec", WHSEC[:10] + "\u034f" + WHSEC[10:], WHSEC),
    secret("invisible", "zwsp-before-underscore-ghp", "ghp\u200b_" + GHP[4:], GHP),
    secret("invisible", "zwsp-spread-sk-live", spread(SK_LIVE, "\u200b", 6), SK_LIVE),
    text("invisible", "tag-chars-term", spread(CLIENT, "\U000e0061", 4), CLIENT),
    text("invisible", "hangul-filler-term", "Zyxw\u3164canary Holdings", CLIENT),
    text("invisible", "khmer-vowel-term", "Zyxw\u17b4canary Holdings", CLIENT),
    text("invisible", "halfwidth-filler-forbidden", "Opera\uffa0tion Bluefinch", FORBIDDEN),
    text("invisible", "choseong-filler-forbidden", "Operation Blue\u115ffinch", FORBIDDEN),
    number("invisible", "zwsp-iban", spread(IBAN_DE, "\u200b", 2), IBAN_DE),
    number("invisible", "soft-hyphen-ssn", "536\u00ad-22-81\u00ad47", SSN),
    text("invisible", "zwj-forbidden", "Operation Blue\u200dfinch", FORBIDDEN),
    # -- look-alikes ------------------------------------------------------------------------------
    text("look-alike", "cyrillic-a-forbidden", "Operаtion Bluefinch", FORBIDDEN),
    text("look-alike", "cyrillic-o-e-forbidden", "Оperation Bluеfinch", FORBIDDEN),
    text("look-alike", "greek-omicron-forbidden", "Operatiοn Bluefinch", FORBIDDEN),
    text("look-alike", "cyrillic-term", "Zyxwcаnary Hоldings", CLIENT),
    text("look-alike", "greek-zeta-term", "Ζyxwcanary Holdings", CLIENT),
    text("look-alike", "cyrillic-forbidden-host", "db01.vаultcаnary.internal", FORBIDDEN_HOST),
    text("look-alike", "cyrillic-email", "аnn@exаmple.org", EMAIL),
    number("look-alike", "math-bold-card", "𝟒𝟎𝟎𝟎 𝟎𝟓𝟔𝟔 𝟓𝟓𝟔𝟔 𝟓𝟓𝟓𝟔", CARD),
    number("look-alike", "math-monospace-card", "𝟺𝟶𝟶𝟶 𝟶𝟻𝟼𝟼 𝟻𝟻𝟼𝟼 𝟻𝟻𝟻𝟼", CARD),
    number("look-alike", "fullwidth-card", "４０００ ０５６６ ５５６６ ５５５６", CARD),
    number("look-alike", "superscript-card", "⁴⁰⁰⁰ ⁰⁵⁶⁶ ⁵⁵⁶⁶ ⁵⁵⁵⁶", CARD),
    number("look-alike", "circled-ssn", "⑤③⑥-②②-⑧①④⑦", SSN),
    number("look-alike", "math-bold-phone", "+𝟒𝟒 𝟐𝟎 𝟕𝟗𝟒𝟔 𝟎𝟗𝟓𝟖", LONDON),
    text("look-alike", "fullwidth-forbidden", "Ｏｐｅｒａｔｉｏｎ Ｂｌｕｅｆｉｎｃｈ", FORBIDDEN),
    text("look-alike", "math-bold-forbidden", "𝐎𝐩𝐞𝐫𝐚𝐭𝐢𝐨𝐧 Bluefinch", FORBIDDEN),
    text("look-alike", "fullwidth-email", "ａｎｎ＠ｅｘａｍｐｌｅ．ｏｒｇ", EMAIL),
    secret("look-alike", "fullwidth-ghp", "ｇｈｐ＿" + GHP[4:], GHP),
    number("look-alike", "cyrillic-iban-letters", "GB82 WЕЅT 1234 5698 7654 32", IBAN_GB),
    # -- combining marks and ligatures ------------------------------------------------------------
    text("combining", "fi-ligature-forbidden", "Operation Blueﬁnch", FORBIDDEN),
    text("combining", "fi-ligature-term", "Greenﬁeld Maritime", CLIENT_FI),
    text("combining", "acute-term", "Zy\u0301xwcanary Holdings", CLIENT),
    text("combining", "stroke-forbidden", "Ope\u0336ration Bluefinch", FORBIDDEN),
    text(
        "combining", "stacked-marks-forbidden", "O\u0301\u0302p\u0303eration Bluefinch", FORBIDDEN
    ),
    number("combining", "acute-card", "4\u0301000 0566 5566 5556", CARD),
    number("combining", "keycap-card", spread(CARD_DIGITS, "\u20e3", 1), CARD),
    text("combining", "underline-email", spread(EMAIL, "\u0332", 2), EMAIL),
    # -- spacing inside a term --------------------------------------------------------------------
    text("term-spacing", "two-spaces-forbidden", "Operation  Bluefinch", FORBIDDEN),
    text("term-spacing", "line-break-forbidden", "Operation\nBluefinch", FORBIDDEN),
    text("term-spacing", "blank-lines-forbidden", "Operation\n\n\nBluefinch", FORBIDDEN),
    text("term-spacing", "crlf-forbidden", "Operation\r\nBluefinch", FORBIDDEN),
    text("term-spacing", "cr-forbidden", "Operation\rBluefinch", FORBIDDEN),
    text("term-spacing", "soft-hyphen-forbidden", "Operation Blue\u00adfinch", FORBIDDEN),
    text("term-spacing", "soft-hyphens-and-break", "Opera\u00adtion\nBlue\u00adfinch", FORBIDDEN),
    text("term-spacing", "nbsp-forbidden", "Operation\u00a0Bluefinch", FORBIDDEN),
    text("term-spacing", "ideographic-space-forbidden", "Operation\u3000Bluefinch", FORBIDDEN),
    text("term-spacing", "soft-hyphen-host", "db01.vault\u00adcanary.internal", FORBIDDEN_HOST),
    text("term-spacing", "two-spaces-term", "Zyxwcanary  Holdings", CLIENT),
    text("term-spacing", "line-break-term", "Zyxwcanary\nHoldings", CLIENT),
    text("term-spacing", "crlf-term", "Zyxwcanary\r\nHoldings", CLIENT),
    text("term-spacing", "line-separator-term", "Zyxwcanary\u2028Holdings", CLIENT),
    text("term-spacing", "soft-hyphen-term", "Zyxw\u00adcanary Holdings", CLIENT),
    text("term-spacing", "tab-term", "Zyxwcanary\tHoldings", CLIENT),
    # -- national phone formats (regions GB, DE, US) ----------------------------------------------
    number("phone", "0049-berlin", "0049 30 1234 5678", BERLIN),
    number("phone", "00-44-london", "00 44 20 7946 0958", LONDON),
    number("phone", "011-44-london", "011 44 20 7946 0958", LONDON),
    number("phone", "011-49-berlin", "011 49 30 1234 5678", BERLIN),
    number("phone", "gb-national", "020 7946 0958", LONDON),
    number("phone", "gb-national-parens", "(020) 7946 0958", LONDON),
    number("phone", "gb-national-dashes", "020-7946-0958", LONDON),
    number("phone", "gb-plus44-paren-zero", "+44 (0)20 7946 0958", LONDON),
    number("phone", "gb-manchester", "0161 496 0000", MANCHESTER),
    number("phone", "de-national", "030 1234 5678", BERLIN),
    number("phone", "de-national-slash", "030/1234 5678", BERLIN),
    number("phone", "de-national-slash-spaced", "030 / 1234 5678", BERLIN),
    number("phone", "second-after-slash", "+49 30 1234 5678 / +49 30 1234 5679", BERLIN, BERLIN_2),
    number("phone", "second-after-slash-glued-plus", "+44 20 7946 0958/+44 20 7946 0959", LONDON_2),
    number("phone", "second-national-after-slash", "030 1234 5678 / 030 1234 5679", BERLIN_2),
    number("phone", "second-gb-after-slash", "020 7946 0958 / 020 7946 0959", LONDON_2),
    number("phone", "second-after-comma", "020 7946 0958,020 7946 0959", LONDON_2),
    number("phone", "second-after-slash-glued", "020 7946 0958/020 7946 0959", LONDON, LONDON_2),
    number("phone", "second-de-after-slash-glued", "030 1234 5678/030 1234 5679", BERLIN_2),
    number("phone", "second-after-slash-space-after", "020 7946 0958 /020 7946 0959", LONDON_2),
    # -- secrets with distinctive prefixes --------------------------------------------------------
    secret("secret", "ghp-no-digit", GHP, GHP),
    secret("secret", "gho-no-digit", GHO, GHO),
    secret("secret", "ghs-no-digit", GHS, GHS),
    secret("secret", "ghu-no-digit", GHU, GHU),
    secret("secret", "github-pat-no-digit", GITHUB_PAT, GITHUB_PAT),
    secret("secret", "sk-live-no-digit", SK_LIVE, SK_LIVE),
    secret("secret", "sk-test-no-digit", SK_TEST, SK_TEST),
    secret("secret", "sk-svcacct-no-digit", SK_SVCACCT, SK_SVCACCT),
    secret("secret", "whsec-no-digit", WHSEC, WHSEC),
    secret("secret", "rk-live-no-digit", RK_LIVE, RK_LIVE),
    secret("secret", "rk-test-no-digit", RK_TEST, RK_TEST),
    secret("secret", "slack-xoxb", SLACK, SLACK),
    secret("secret", "slack-xoxp", SLACK_USER, SLACK_USER),
    secret("secret", "aws-akia-no-digit", AWS, AWS),
    secret("secret", "aws-asia-no-digit", AWS_SESSION, AWS_SESSION),
    secret("secret", "google-aiza", GOOGLE, GOOGLE),
    secret("secret", "sk-proj", SK_PROJ, SK_PROJ),
    secret("secret", "anthropic", ANTHROPIC, ANTHROPIC),
    secret("secret", "ghp-in-quotes", f'"{GHP}"', GHP),
    # -- forbidden terms, typed as they are -------------------------------------------------------
    text("forbidden", "term", "Operation Bluefinch", FORBIDDEN),
    text("forbidden", "term-lower", "operation bluefinch", FORBIDDEN),
    text("forbidden", "term-upper", "OPERATION BLUEFINCH", FORBIDDEN),
    text("forbidden", "term-possessive", "Operation Bluefinch's", FORBIDDEN),
    text("forbidden", "term-in-code", "`Operation Bluefinch`", FORBIDDEN),
    text("forbidden", "host", FORBIDDEN_HOST, FORBIDDEN_HOST),
    text("forbidden", "host-upper", FORBIDDEN_HOST.upper(), FORBIDDEN_HOST),
    text("forbidden", "host-in-url", f"https://{FORBIDDEN_HOST}/status", FORBIDDEN_HOST),
    # -- HTML entities ----------------------------------------------------------------------------
    text("entity", "decimal-at", "ann&#64;example.org", EMAIL),
    text("entity", "hex-at", "ann&#x40;example.org", EMAIL),
    text("entity", "named-at", "ann&commat;example.org", EMAIL),
    text("entity", "named-period", "ann@example&period;org", EMAIL),
    number("entity", "spaces-card", "4000&#32;0566&#32;5566&#32;5556", CARD),
    number("entity", "nbsp-card", "4000&nbsp;0566&nbsp;5566&nbsp;5556", CARD),
    number("entity", "digit-card", "&#52;000 0566 5566 5556", CARD),
    number("entity", "double-escaped-card", "4000&amp;#32;0566 5566 5556", CARD),
    text("entity", "nbsp-forbidden", "Operation&nbsp;Bluefinch", FORBIDDEN),
    text("entity", "zwsp-forbidden", "Operation Blue&#8203;finch", FORBIDDEN),
    text("entity", "shy-forbidden", "Operation Blue&shy;finch", FORBIDDEN),
    text("entity", "hex-letter-forbidden", "Operation &#x42;luefinch", FORBIDDEN),
    text("entity", "letter-term", "&#90;yxwcanary Holdings", CLIENT),
    secret("entity", "underscore-ghp", GHP.replace("_", "&#95;"), GHP),
    # -- Unicode and punycode e-mail --------------------------------------------------------------
    text("idn-email", "punycode-domain", "ann@xn--mnchen-3ya.de", "ann@münchen.de"),
    text("idn-email", "punycode-upper", "ann@XN--MNCHEN-3YA.DE", "ann@münchen.de"),
    text("idn-email", "unicode-domain", "ann@münchen.de", "ann@münchen.de"),
    text("idn-email", "decomposed-domain", "ann@mu\u0308nchen.de", "ann@münchen.de"),
    text("idn-email", "unicode-local-and-domain", "jörg.müller@bücher.de", "jörg.müller@bücher.de"),
    text("idn-email", "cjk", "用户@例子.广告", "用户@例子.广告"),
    text("idn-email", "cyrillic", "ivan@пример.рф", "ivan@пример.рф"),
    text("idn-email", "greek-local", "αλέξης@example.org", "αλέξης@example.org"),
    text("idn-email", "ideographic-full-stop", "ann@münchen。de", "ann@münchen.de"),
)


def params(direction: str) -> list[Any]:
    """The cases, each with a strict xfail where its leak in `direction` is known."""
    out = []
    for case in CASES:
        reason = case.user_leaks if direction == "user" else case.model_leaks
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


CASE_IDS = [c.id for c in CASES]
CHUNKINGS = ("chunks-1-3", "one-shot")

# -- the server -------------------------------------------------------------------------------


class ScriptedUpstream(FakeUpstream):
    """Streams the current run's reply pieces to every request (none were scripted: a 500)."""

    def __init__(self) -> None:
        super().__init__()
        self.pieces: list[str] | None = None

    def reply_for(self, request: RecordedRequest) -> Reply:
        pieces = self.pieces
        if pieces is None:
            return Reply(status=500, chunks=[b'{"error": "no reply scripted"}'], headers={})
        return Reply(chunks=openai_sse(pieces))


@dataclass
class Server:
    client: TestClient
    upstream: ScriptedUpstream


def write_terms(directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    sensitive = directory / "clients.txt"
    sensitive.write_text(f"{CLIENT}\n{CLIENT_FI}\n", encoding="utf-8")
    forbidden = directory / "internal.txt"
    forbidden.write_text(f"{FORBIDDEN}\n{FORBIDDEN_HOST}\n", encoding="utf-8")
    return sensitive, forbidden


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("both-directions")
    sensitive, forbidden = write_terms(tmp / "terms")
    settings = make_settings(
        tmp,
        env={"HOLDBACK_RATE_LIMIT": "100000", "HOLDBACK_PHONE_REGIONS": "GB,DE,US"},
        sensitive_terms=[str(sensitive)],
        forbidden_terms=[str(forbidden)],
    )
    upstream = ScriptedUpstream()
    upstream.start()
    provider = make_provider(
        "openai:test",
        env={"OPENAI_BASE_URL": upstream.url + "/v1", "OPENAI_API_KEY": "x"},
        settings=StreamSettings(stall_timeout=RECEIVE_TIMEOUT, retry=RetryPolicy(attempts=1)),
    )
    try:
        with running_app(settings, provider) as client:
            yield Server(client, upstream)
    finally:
        upstream.stop()


def receive(ws: WebSocketTestSession) -> Frame:
    """The next frame, or a failure after RECEIVE_TIMEOUT (a hang is a finding, not a wait)."""

    async def next_message() -> Any:
        with anyio.fail_after(RECEIVE_TIMEOUT):
            return await ws._send_rx.receive()

    message = ws.portal.call(next_message)
    if message.get("type") != "websocket.send":
        raise AssertionError(f"the connection ended instead: {message}")
    frame: Frame = json.loads(message["text"])
    return frame


def run_chat(server: Server, user_text: str, pieces: list[str]) -> tuple[list[Frame], str]:
    """One new conversation: the user's message, every frame up to `assistant_done`, and the
    conversation's id. The upstream must have been asked exactly once."""
    server.upstream.pieces = pieces
    calls = len(server.upstream.requests)
    frames: list[Frame] = []
    try:
        with server.client.websocket_connect("/ws") as ws:
            ws.send_text(
                json.dumps({"type": "user_message", "conversation_id": None, "text": user_text})
            )
            for _ in range(FRAME_LIMIT):
                frames.append(receive(ws))
                if frames[-1].get("type") == "assistant_done":
                    break
            else:
                raise AssertionError("no assistant_done")
    finally:
        server.upstream.pieces = None
    assert len(server.upstream.requests) == calls + 1, frames[-1]
    assert frames[0]["type"] == "message_accepted", frames[0]
    return frames, str(frames[0]["conversation_id"])


def stored(client: TestClient, conversation_id: str, view: str = "") -> Frame:
    """The stored conversation once its reply no longer streams (bounded re-reads)."""
    url = f"/api/conversations/{conversation_id}" + (f"?view={view}" if view else "")
    for _ in range(1000):
        response = client.get(url)
        assert response.status_code == 200, response.text
        body: Frame = response.json()
        if not body.get("streaming") and all(
            m.get("status") != "streaming" for m in body["messages"]
        ):
            return body
    raise AssertionError("the reply is still streaming in storage")


def delta_texts(frames: Sequence[Frame]) -> list[str]:
    """Each channel's deltas joined, as the client assembles them (a value split across frames
    shows once they are joined)."""
    joined: dict[str, str] = {}
    for f in frames:
        if f.get("type") == "assistant_delta":
            key = f"{f.get('channel')}/{f.get('call_id', '')}"
            joined[key] = joined.get(key, "") + str(f.get("text", ""))
    return list(joined.values())


def report(case: Case, where: str, found: list[tuple[str, str]]) -> str:
    lines = [f"{case.id}: {where}"]
    lines += [f"  {how}: {shown!r}" for how, shown in found]
    return "\n".join(lines)


# -- the tests --------------------------------------------------------------------------------


def test_the_values_are_valid() -> None:
    """The cases use values a validator accepts, so a miss is the detector's, not the value's."""
    assert luhn_valid(CARD)
    assert luhn_valid(MASTERCARD)
    for iban in (IBAN_DE, IBAN_GB, IBAN_NL):
        compact = iban.replace(" ", "")
        rearranged = compact[4:] + compact[:4]
        assert int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1, iban
    area, group, serial = SSN.split("-")
    assert area not in ("000", "666")
    assert not area.startswith("9")
    assert group != "00"
    assert serial != "0000"
    no_digit = {
        "ghp_": GHP,
        "gho_": GHO,
        "github_pat_": GITHUB_PAT,
        "sk_live_": SK_LIVE,
        "sk-svcacct-": SK_SVCACCT,
        "whsec_": WHSEC,
        "rk_live_": RK_LIVE,
        "AKIA": AWS,
    }
    for prefix, key in no_digit.items():
        assert key.startswith(prefix), key
        assert not any(c.isdigit() for c in key[len(prefix) :]), key
    assert len(GHP) == len(GHO) == 40  # GitHub: the prefix and 36 characters
    assert len(GITHUB_PAT) == 93  # github_pat_, 22 characters, `_`, 59 characters
    assert len(AWS) == 20
    assert len(GOOGLE) == 39


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_the_oracle_sees_every_spelling(case: Case) -> None:
    """Each spelling shows its value to the oracle: a pass below is not an oracle's blind spot."""
    for value in case.values:
        assert oracle.shows(f"Please remember {case.spelled} for me.", value, case.fragment)
    assert oracle.shows("Please remember [redacted] <CARD_1> for me.", case.values[0]) is None


# A stored record's own timestamps (`2026-12-01T16:40:50.932013+00:00`) are digits the server
# made, not text of the conversation: seven of them can match seven of a number by chance.
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?")


def stored_strings(body: Any) -> list[str]:
    return [s for s in oracle.strings(body) if not _TIMESTAMP.fullmatch(s)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", params("user"))
def test_user_to_model(server: Server, case: Case) -> None:
    user_text = f"Please remember {case.spelled} for me."
    frames, conversation_id = run_chat(server, user_text, ["Noted."])
    body = server.upstream.requests[-1].json()
    sent = oracle.findings(oracle.strings(body), case.values, case.fragment)
    assert not sent, report(case, "the upstream was sent", sent)
    model_view = stored(server.client, conversation_id, "model")
    kept = oracle.findings(stored_strings(model_view), case.values, case.fragment)
    assert not kept, report(case, "the stored model view (next turn's history) holds", kept)
    assert frames[-1]["status"] == "complete"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("case", params("model"))
def test_model_to_user(server: Server, case: Case, chunking: str) -> None:
    reply = f"Sure. It is {case.spelled}, as you asked."
    seed = sum(map(ord, case.id))
    pieces = split_random(reply, random.Random(seed), 1, 3) if chunking != "one-shot" else [reply]
    frames, conversation_id = run_chat(server, "Tell me something, please.", pieces)
    problems: list[str] = []
    for frame in frames:
        if found := oracle.findings(oracle.strings(frame), case.values, case.fragment):
            problems.append(report(case, f"a {frame.get('type')} frame shows", found))
    if found := oracle.findings(delta_texts(frames), case.values, case.fragment):
        problems.append(report(case, "the reply as the client joins it shows", found))
    for view in ("", "model"):
        body = stored(server.client, conversation_id, view)
        if found := oracle.findings(stored_strings(body), case.values, case.fragment):
            problems.append(report(case, f"the stored {view or 'owner'} view shows", found))
    assert not problems, "\n".join(problems)
    shown = "".join(delta_texts(frames))
    # The reply did reach the client: only the value was taken out of it.
    assert shown.startswith("Sure. It is "), shown
    assert shown.endswith(", as you asked."), shown
