"""Makers of valid machine-issued values: IP addresses, API keys and tokens, PEM private keys,
URL passwords and JWTs, in the forms they appear in configs, logs and chat.

Same rules as `value_makers`: each maker returns a `Fragment` whose gold spans cover the value
alone (not a port, a `/prefix`, brackets, or the URL around a password), and evasions sit
inside a value, never at its ends. IP addresses come from every range, loopback and the
documentation ranges included (those are findings too); keys follow each issuer's published
prefix and length.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import random
import string

from value_makers import (
    ALNUM,
    B64URL,
    Fragment,
    digits,
    insert_invisible,
    to_fullwidth,
    whole,
    wrapped,
)

# ---- IP address ---------------------------------------------------------------------------


def ipv4(rng: random.Random) -> str:
    def o() -> int:
        return rng.randint(0, 255)

    r = rng.random
    last = rng.randint(1, 254)
    if r() < 0.3:
        return rng.choice(
            (f"10.{o()}.{o()}.{last}", f"172.{rng.randint(16, 31)}.{o()}.{last}",
             f"192.168.{o()}.{last}")
        )  # fmt: skip
    if r() < 0.15:
        return rng.choice(("127.0.0.1", f"127.0.{rng.randint(0, 9)}.{last}"))
    if r() < 0.35:
        return rng.choice(("192.0.2", "198.51.100", "203.0.113")) + f".{last}"
    first = rng.choice([n for n in range(1, 224) if n not in (10, 127)])
    return f"{first}.{o()}.{o()}.{last}"


def ipv6(rng: random.Random) -> str:
    r = rng.random()
    groups = [rng.randrange(0, 0x10000) for _ in range(8)]
    if r < 0.08:
        return "::1"
    if r < 0.4:
        groups[:2] = [0x2001, 0x0DB8]
    elif r < 0.55:
        groups[:4] = [0xFE80, 0, 0, 0]
    elif r < 0.65:
        groups[0] = 0xFD00 | rng.randrange(0, 0x100)
    else:
        groups[0] = rng.choice((0x2001, 0x2400, 0x2600, 0x2A00, 0x2A03, 0x2C0F))
    zero_from = rng.randint(2, 6)
    for i in range(zero_from, zero_from + rng.randint(0, 8 - zero_from)):
        groups[i] = 0
    address = ipaddress.IPv6Address(sum(g << (16 * (7 - i)) for i, g in enumerate(groups)))
    style = rng.random()
    if style < 0.12:
        text = address.exploded
    elif style < 0.2:
        text = ":".join(f"{g:x}" for g in groups)
    else:
        text = address.compressed
    return text.upper() if rng.random() < 0.1 else text


def make_ip(rng: random.Random, variant: str, evade: float) -> Fragment:
    v6 = variant in ("v6", "plain6") or (variant not in ("v4", "plain4") and rng.random() < 0.35)
    text = ipv6(rng) if v6 else ipv4(rng)
    evaded = rng.random() < evade
    if evaded:
        text = insert_invisible(rng, text) if rng.random() < 0.6 else to_fullwidth(rng, text)
    if variant.startswith("plain"):
        return whole(text, "ip_address", evaded)
    r = rng.random()
    if r < 0.1:
        port = rng.choice((22, 80, 443, 5432, 6379, 8080, 8443, 9200))
        if v6:
            return wrapped("[", text, f"]:{port}", "ip_address", evaded)
        return wrapped("", text, f":{port}", "ip_address", evaded)
    if r < 0.18 and not evaded and text != "::1" and not text.startswith("127."):
        return wrapped(
            "", text, f"/{rng.choice((64, 48, 128) if v6 else (8, 16, 24, 32))}", "ip_address"
        )
    return whole(text, "ip_address", evaded)


# ---- secrets ------------------------------------------------------------------------------


def _rand(rng: random.Random, pool: str, n: int) -> str:
    return "".join(rng.choice(pool) for _ in range(n))


def _b64url_tail(rng: random.Random, n: int) -> str:
    return _rand(rng, B64URL, n - 1) + rng.choice(ALNUM)


def token_secret(rng: random.Random, family: str | None = None) -> str:
    family = family or rng.choice(
        ("openai", "openai", "anthropic", "github", "github", "aws", "aws", "slack", "stripe",
         "stripe", "google")
    )  # fmt: skip
    if family == "openai":
        if rng.random() < 0.35:
            return "sk-" + _rand(rng, ALNUM, 48)
        return f"sk-{rng.choice(('proj', 'proj', 'svcacct'))}-" + _b64url_tail(
            rng, rng.randint(48, 156)
        )
    if family == "anthropic":
        return f"sk-ant-{rng.choice(('api03', 'api03', 'admin01'))}-" + _b64url_tail(rng, 93) + "AA"
    if family == "github":
        if rng.random() < 0.3:
            return "github_pat_" + _rand(rng, ALNUM, 22) + "_" + _rand(rng, ALNUM, 59)
        return rng.choice(("ghp_", "ghp_", "gho_")) + _rand(rng, ALNUM, 36)
    if family == "aws":
        return "AKIA" + _rand(rng, string.ascii_uppercase + "234567", 16)
    if family == "slack":
        kind = rng.choice("bpa")
        ids = "-".join(digits(rng, rng.randint(10, 13)) for _ in range(3 if kind == "p" else 2))
        tail = _rand(rng, "0123456789abcdef", 32) if kind == "p" else _rand(rng, ALNUM, 24)
        return f"xox{kind}-{ids}-{tail}"
    if family == "stripe":
        prefix = rng.choice(("sk_live_", "sk_live_", "rk_live_", "sk_test_"))
        return prefix + _rand(rng, ALNUM, rng.choice((24, 99)))
    return "AIza" + _b64url_tail(rng, 35)


def pem_block(rng: random.Random) -> str:
    label = rng.choice(("RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY",
                        "OPENSSH PRIVATE KEY", "ENCRYPTED PRIVATE KEY"))  # fmt: skip
    size = {"EC PRIVATE KEY": 121}.get(label, rng.choice((240, 460, 630)))
    body = base64.b64encode(rng.randbytes(size)).decode("ascii")
    width = 70 if label.startswith("OPENSSH") else 64
    lines = [body[i : i + width] for i in range(0, len(body), width)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----"


_SCHEMES = (
    "postgres", "postgresql", "mysql", "redis", "amqp", "mongodb", "mongodb+srv", "https", "ftp",
    "smtp", "sftp", "rediss",
)  # fmt: skip
_USERS = (
    "app", "admin", "svc_reporting", "deploy", "root", "etl", "grafana", "web", "backup",
)  # fmt: skip
_HOSTS = (
    "db", "localhost", "postgres", "redis", "cache", "mq", "db-primary", "mongo", "warehouse",
    "rabbitmq",
)  # fmt: skip
_PW_POOL = ALNUM * 3 + "!*._~-"


def url_password(rng: random.Random) -> Fragment:
    """A URL with credentials; spans: the password (secret) and the host if it is an IP."""
    scheme, user = rng.choice(_SCHEMES), rng.choice(_USERS)
    password = rng.choice(ALNUM) + _rand(rng, _PW_POOL, rng.randint(6, 22)) + rng.choice(ALNUM)
    head = f"{scheme}://{user}:"
    spans = [(len(head), len(head) + len(password), "secret")]
    text = head + password + "@"
    if rng.random() < 0.25:
        host = ipv4(rng)
        spans.append((len(text), len(text) + len(host), "ip_address"))
    else:
        host = rng.choice(_HOSTS)
    text += host
    if rng.random() < 0.6:
        text += f":{rng.choice((5432, 3306, 6379, 5672, 27017, 21, 587))}"
    text += rng.choice(("", "/app", "/prod", "/0", "/reports?sslmode=require", "/"))
    return Fragment(text, tuple(spans))


def make_secret(rng: random.Random, variant: str, evade: float) -> Fragment:
    if variant == "url":
        return url_password(rng)
    if variant == "pem":
        return whole(pem_block(rng), "secret")
    value = token_secret(rng, variant or None)
    if rng.random() < evade:
        return whole(insert_invisible(rng, value), "secret", True)
    return whole(value, "secret")


# ---- JWT ----------------------------------------------------------------------------------


def _b64json(obj: object) -> str:
    raw = json.dumps(obj, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def jwt_token(rng: random.Random) -> str:
    alg = rng.choice(("HS256", "HS256", "RS256", "ES256", "HS512"))
    header: dict[str, str] = {"alg": alg, "typ": "JWT"}
    if rng.random() < 0.3:
        header = {"typ": "JWT", "alg": alg, "kid": _rand(rng, ALNUM, 12)}
    iat = rng.randint(1_600_000_000, 1_750_000_000)
    payload: dict[str, object] = {"sub": str(rng.randint(1000, 99_999_999)), "iat": iat}
    if rng.random() < 0.7:
        payload["exp"] = iat + rng.choice((900, 3600, 86400))
    if rng.random() < 0.5:
        payload["iss"] = rng.choice(("https://auth.example.net", "accounts", "holdback-idp"))
    if rng.random() < 0.4:
        payload["scope"] = rng.choice(("read", "read write", "admin", "openid profile"))
    if rng.random() < 0.3:
        payload["role"] = rng.choice(("user", "admin", "service"))
    sig_bytes = {"HS256": 32, "HS512": 64, "RS256": 256, "ES256": 64}[alg]
    signature = base64.urlsafe_b64encode(rng.randbytes(sig_bytes)).decode().rstrip("=")
    return f"{_b64json(header)}.{_b64json(payload)}.{signature}"


def make_jwt(rng: random.Random, variant: str, evade: float) -> Fragment:
    token = jwt_token(rng)
    if rng.random() < evade:
        return whole(insert_invisible(rng, token), "jwt", True)
    return whole(token, "jwt")
