"""Logins under abuse: throttled per account and per address with exponential backoff (429 and
`Retry-After`), accounts locked after repeated failures, and no timing difference between a
known and an unknown user name (the hash runs for both, off the event loop).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from holdback.app.auth import SESSION_COOKIE, LoginThrottle
from holdback.app.settings import resolve
from holdback.providers.demo import DemoProvider
from tests.app.conftest import PASSWORDS, Accounts
from tests.app.support import TestClient, make_settings, running_app

PASSWORD = PASSWORDS["alice"]
NO_THROTTLE = {"HOLDBACK_LOGIN_BACKOFF_AFTER": "1000000", "HOLDBACK_LOGIN_LOCK_AFTER": "1000000"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def throttle(clock: Clock, **env: str) -> LoginThrottle:
    settings = resolve(env={f"HOLDBACK_{k.upper()}": v for k, v in env.items()})
    return LoginThrottle(settings, clock=clock, capacity=50)


def fail(t: LoginThrottle, account: str = "alice", address: str = "10.0.0.1") -> float:
    wait = t.begin(account, address)
    if wait == 0:
        t.end(account, address, matched=False)
    return wait


def test_backoff_doubles_after_the_free_attempts() -> None:
    clock = Clock()
    t = throttle(clock, login_backoff_after="3", login_backoff="1", login_lock_after="100")
    waits = []
    for _ in range(8):
        assert fail(t) == 0
        waits.append(t.wait("alice", "10.0.0.1"))
        clock.now += waits[-1]
    assert waits == [0, 0, 1, 2, 4, 8, 16, 32]


def test_a_throttled_attempt_is_not_checked_and_waits_the_same() -> None:
    clock = Clock()
    t = throttle(clock, login_backoff_after="1", login_backoff="10")
    assert fail(t) == 0
    assert t.wait("alice", "10.0.0.1") == 10  # refused: nothing counted
    clock.now += 4
    assert t.wait("alice", "10.0.0.1") == 6
    clock.now += 6
    assert t.wait("alice", "10.0.0.1") == 0


def test_the_account_locks_after_repeated_failures() -> None:
    clock = Clock()
    t = throttle(clock, login_backoff_after="100", login_lock_after="5", login_lock_time="900")
    for _ in range(4):
        assert fail(t, address=f"10.0.0.{clock.now}") == 0
        clock.now += 1
    assert fail(t, address="10.9.9.9") == 0  # the fifth failure locks it
    assert t.wait("alice", "10.1.1.1") == 900  # from any address, even with the password
    assert t.wait("ALICE", "10.1.1.2") == 900  # names are compared case-blind
    clock.now += 899
    assert t.wait("alice", "10.1.1.1") == 1
    clock.now += 1
    assert t.wait("alice", "10.1.1.1") == 0


def test_an_address_is_throttled_across_accounts() -> None:
    clock = Clock()
    t = throttle(clock, login_backoff_after="3", login_backoff="5")
    for n in range(3):
        assert fail(t, account=f"user{n}") == 0
    assert t.wait("someone-else", "10.0.0.1") == 5
    assert t.wait("someone-else", "10.0.0.2") == 0  # another address is not


def test_success_clears_the_account_and_old_failures_are_forgotten() -> None:
    clock = Clock()
    t = throttle(clock, login_backoff_after="2", login_backoff="1", login_lock_time="60")
    assert fail(t, address="a") == 0
    assert t.begin("alice", "b") == 0
    t.end("alice", "b", matched=True)
    assert fail(t, address="c") == 0
    assert fail(t, address="d") == 0  # one failure since the success: under the threshold
    assert t.wait("alice", "e") == 1
    clock.now += 61  # a quiet minute: the record is forgotten
    assert fail(t, address="f") == 0
    assert t.wait("alice", "g") == 0


def test_one_check_at_a_time_per_account() -> None:
    clock = Clock()
    t = throttle(clock)
    assert t.begin("alice", "a") == 0
    assert t.begin("alice", "b") == 1  # a second, concurrent attempt waits
    t.end("alice", "a", matched=None)
    assert t.begin("alice", "b") == 0


def test_records_are_bounded() -> None:
    clock = Clock()
    t = throttle(clock)
    for n in range(500):
        fail(t, account=f"spray{n}", address=f"10.0.{n // 250}.{n % 250}")
    assert len(t._accounts) <= 50
    assert len(t._addresses) <= 50


# -- over HTTP --------------------------------------------------------------------------------
# The in-process client always comes from one address ("testclient"); addresses apart are
# covered above, and through a real server in test_abuse.py.


def app_with(tmp_path: Path, **env: str) -> TestClient:
    settings = make_settings(
        tmp_path, {f"HOLDBACK_{k.upper()}": v for k, v in env.items()}, auth="password"
    )
    return running_app(settings, DemoProvider())  # type: ignore[return-value]


def attempt(client: TestClient, name: str, password: str) -> tuple[int, str | None]:
    response = client.post("/api/login", json={"username": name, "password": password})
    return response.status_code, response.headers.get("retry-after")


def test_throttled_logins_get_429_with_retry_after(tmp_path: Path, accounts: Accounts) -> None:
    with app_with(tmp_path, login_backoff_after="3", login_backoff="30") as client:
        codes = [attempt(client, "alice", "wrong") for _ in range(4)]
        assert codes == [(401, None), (401, None), (401, None), (429, "30")]
        response = client.post("/api/login", json={"username": "alice", "password": "wrong"})
        assert response.status_code == 429
        assert response.json()["code"] == "login_throttled"
        assert "wrong" not in response.text


def test_known_and_unknown_names_are_throttled_alike(tmp_path: Path, accounts: Accounts) -> None:
    seen = []
    for name in ("alice", "nobody"):
        with app_with(tmp_path, login_backoff_after="2", login_backoff="30") as client:
            seen.append([attempt(client, name, "wrong") for _ in range(4)])
    assert seen[0] == seen[1] == [(401, None), (401, None), (429, "30"), (429, "30")]


def test_a_locked_account_refuses_even_the_right_password(
    tmp_path: Path, accounts: Accounts
) -> None:
    env = {"login_backoff_after": "1000", "login_lock_after": "5", "login_lock_time": "600"}
    with app_with(tmp_path, **env) as client:
        assert [attempt(client, "alice", f"guess {n}")[0] for n in range(5)] == [401] * 5
        status, retry = attempt(client, "alice", PASSWORD)
        assert status == 429
        assert retry is not None
        assert 590 <= int(retry) <= 600
        assert attempt(client, "bob", PASSWORDS["bob"])[0] == 200  # bob is not locked


def test_sixty_wrong_passwords_are_not_followed_by_a_working_login(
    tmp_path: Path, accounts: Accounts
) -> None:
    """The finding: 60 wrong passwords in 38 s were followed by a working login."""
    with app_with(tmp_path) as client:  # the defaults
        statuses = [attempt(client, "alice", f"guess {n}")[0] for n in range(60)]
        assert statuses[:3] == [401] * 3
        assert set(statuses[3:]) == {429}
        assert attempt(client, "alice", PASSWORD)[0] == 429


def test_a_right_password_signs_in_within_the_free_attempts(
    tmp_path: Path, accounts: Accounts
) -> None:
    with app_with(tmp_path) as client:
        assert attempt(client, "alice", "typo")[0] == 401
        assert attempt(client, "alice", "typo again")[0] == 401
        response = client.post("/api/login", json={"username": "alice", "password": PASSWORD})
        assert response.status_code == 200
        assert response.cookies.get(SESSION_COOKIE)


def test_unknown_and_known_names_take_as_long(tmp_path: Path, accounts: Accounts) -> None:
    """The finding: an unknown name answered in 16 ms, a known one in 540 ms."""
    settings = make_settings(tmp_path, NO_THROTTLE, auth="password")
    with running_app(settings, DemoProvider()) as client:
        timings: dict[str, list[float]] = {"alice": [], "nobody-at-all": []}
        for _ in range(7):
            for name, times in timings.items():
                started = time.perf_counter()
                response = client.post("/api/login", json={"username": name, "password": "no"})
                times.append(time.perf_counter() - started)
                assert response.status_code == 401
    known = statistics.median(timings["alice"])
    unknown = statistics.median(timings["nobody-at-all"])
    assert 1 / 3 < unknown / known < 3, (known, unknown)  # was 1/34
