"""The provider console at /admin/console through HTTP (the app in-process, a real SQLite
store and corpus tables): sign-in, sessions and CSRF refusals, security headers, and each
page and action doing what the admin API does. The browser walk-through with the official
client is tests/http/test_console_browser.py."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from sharing.recipients.hashing import hash_token
from tests.support.corpus import CORPUS
from tests.support.server import make_config

ADMIN_TOKEN = "console-admin-token-0123456789"
BASIC = CORPUS / "levi/dat/basic_append/delta"
CONSOLE = "/admin/console"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    table = {"name": "t", "location": str(BASIC)}
    config = make_config(
        {
            "host": "127.0.0.1",
            "shares": [{"name": "filed", "schemas": [{"name": "d", "tables": [table]}]}],
            "store": {"url": f"sqlite:///{tmp_path / 'state.db'}", "cacheSeconds": 0},
            "admin": {"tokenHash": hash_token(ADMIN_TOKEN)},
        }
    )
    with TestClient(create_app(config), follow_redirects=False) as test_client:
        yield test_client


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "a form without a CSRF token"
    return found.group(1)


def _sign_in(client: TestClient) -> str:
    """Sign in; the CSRF token of the session's forms."""
    page = client.get(f"{CONSOLE}/signin")
    answer = client.post(f"{CONSOLE}/signin", data={"csrf": _csrf(page.text), "token": ADMIN_TOKEN})
    assert answer.status_code == 303, answer.text
    return _csrf(client.get(f"{CONSOLE}/shares").text)


def _eventually(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _flush(client: TestClient) -> None:
    client.app.state.recipients.writer.flush()  # type: ignore[attr-defined]


def test_pages_need_a_session_and_actions_a_csrf_token(client: TestClient) -> None:
    assert client.get(CONSOLE).headers["location"] == f"{CONSOLE}/"
    assert client.get(f"{CONSOLE}/").headers["location"] == f"{CONSOLE}/signin"
    page = client.get(f"{CONSOLE}/shares")
    assert page.status_code == 303
    assert page.headers["location"] == f"{CONSOLE}/signin"
    refused = client.post(f"{CONSOLE}/shares", data={"name": "nosession", "csrf": "x"})
    assert refused.status_code == 403

    csrf = _sign_in(client)
    forged = client.post(f"{CONSOLE}/shares", data={"name": "forged", "csrf": csrf[:-2] + "xx"})
    assert forged.status_code == 403
    missing = client.post(f"{CONSOLE}/shares", data={"name": "forged"})
    assert missing.status_code == 403
    names = [s["name"] for s in client.app.state.shares.list()]  # type: ignore[attr-defined]
    assert "forged" not in names and "nosession" not in names
    # A session cookie made up by someone without the server's keys opens nothing.
    client.cookies.set("lakeshare_console", "1700000000.abc.def", path=CONSOLE)
    assert client.get(f"{CONSOLE}/shares").status_code == 303


def test_sign_in_sets_a_strict_http_only_cookie_and_a_strict_policy(client: TestClient) -> None:
    page = client.get(f"{CONSOLE}/signin")
    assert "<script" not in page.text
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src" not in policy
    assert page.headers["x-frame-options"] == "DENY"
    wrong = client.post(f"{CONSOLE}/signin", data={"csrf": _csrf(page.text), "token": "nope"})
    assert wrong.status_code == 401
    assert "set-cookie" not in {k.lower() for k in wrong.headers if "lakeshare_console=" in k}
    answer = client.post(
        f"{CONSOLE}/signin", data={"csrf": _csrf(wrong.text), "token": ADMIN_TOKEN}
    )
    cookie = next(c for c in answer.headers.get_list("set-cookie") if "lakeshare_console=" in c)
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and f"Path={CONSOLE}" in cookie
    assert "Secure" not in cookie  # plain HTTP here; set when the request came over TLS
    assert ADMIN_TOKEN not in cookie


def test_shares_recipients_audit_and_activity(client: TestClient) -> None:
    csrf = _sign_in(client)
    created = client.post(f"{CONSOLE}/shares", data={"csrf": csrf, "name": "partners"})
    assert created.status_code == 303 and created.headers["location"].endswith("/partners")
    added = client.post(
        f"{CONSOLE}/shares/partners/tables",
        data={"csrf": csrf, "schema": "s", "table": "basic", "location": str(BASIC)},
    )
    assert added.status_code == 303, added.text
    share = client.get(f"{CONSOLE}/shares/partners").text
    assert "basic" in share and 'class="status-ok"' in share
    assert "every Delta Sharing client" in share
    refused = client.post(
        f"{CONSOLE}/shares/partners/tables",
        data={"csrf": csrf, "schema": "s", "table": "gone", "location": "/no/such/table"},
    )
    assert refused.status_code == 400 and "cannot be served" in refused.text
    altered = client.post(
        f"{CONSOLE}/shares/partners/schemas/s/tables/basic/alter",
        data={"csrf": csrf, "historyShared": "yes", "comment": "changed here"},
    )
    assert altered.status_code == 303, altered.text
    shares = client.app.state.shares  # type: ignore[attr-defined]
    [entry] = shares.show("partners")["schemas"][0]["tables"]
    assert entry["historyShared"] is True and entry["comment"] == "changed here"
    moved = client.post(
        f"{CONSOLE}/shares/partners/schemas/s/tables/basic/alter",
        data={"csrf": csrf, "location": "/no/such/table"},
    )
    assert moved.status_code == 400 and "cannot be served" in moved.text
    empty = client.post(
        f"{CONSOLE}/shares/partners/schemas/s/tables/basic/alter", data={"csrf": csrf}
    )
    assert empty.status_code == 400
    assert shares.show("partners")["schemas"][0]["tables"][0]["location"] == str(BASIC)
    filed = client.post(
        f"{CONSOLE}/shares/filed/tables",
        data={"csrf": csrf, "schema": "s", "table": "x", "location": str(BASIC)},
    )
    assert filed.status_code == 409 and "read-only" in filed.text

    download = client.post(
        f"{CONSOLE}/recipients",
        data={"csrf": csrf, "name": "acme", "shares": "partners", "deliver": "download"},
    )
    assert download.status_code == 200
    assert download.headers["content-disposition"] == 'attachment; filename="acme.share"'
    profile = json.loads(download.text)
    bearer = {"Authorization": f"Bearer {profile['bearerToken']}"}
    # The share made in the store is served within store.cacheSeconds (the catalog's check).
    assert _eventually(
        lambda: (
            client.get("/delta-sharing/shares", headers=bearer).json().get("items")
            == [{"name": "partners"}]
        )
    )
    page = client.get(f"{CONSOLE}/recipients/acme").text
    assert profile["bearerToken"] not in page
    assert "enabled" in page

    shown = client.post(
        f"{CONSOLE}/recipients",
        data={"csrf": csrf, "name": "beta", "shares": "*", "type": "oauth", "deliver": "show"},
    )
    assert shown.status_code == 200 and "clientSecret" in shown.text
    link = client.post(
        f"{CONSOLE}/recipients",
        data={"csrf": csrf, "name": "gamma", "shares": "partners", "deliver": "link"},
    )
    assert link.status_code == 200 and "/delta-sharing/activation/" in link.text

    for action, data in (
        ("properties", {"key": "region", "value": "emea"}),
        ("grant", {"shares": "filed"}),
        ("disable", {}),
    ):
        answer = client.post(f"{CONSOLE}/recipients/acme/{action}", data={"csrf": csrf, **data})
        assert answer.status_code == 303, answer.text
    repository = client.app.state.recipients.directory.repository  # type: ignore[attr-defined]
    acme = repository.require("acme")
    assert not acme.enabled and dict(acme.properties) == {"region": "emea"}
    assert sorted(acme.shares) == ["filed", "partners"]
    assert _eventually(
        lambda: client.get("/delta-sharing/shares", headers=bearer).status_code == 403
    )
    rotated = client.post(
        f"{CONSOLE}/recipients/acme/rotate", data={"csrf": csrf, "grace": "1h", "deliver": "show"}
    )
    assert rotated.status_code == 200 and "bearerToken" in rotated.text

    _flush(client)
    audit = client.get(f"{CONSOLE}/audit", params={"recipient": "acme", "failed": "1"}).text
    assert "recipient_disabled" in audit
    guessed = {"Authorization": "Basic " + base64.b64encode(b"acme:wrong").decode()}
    assert client.get("/delta-sharing/shares", headers=guessed).status_code == 401
    _flush(client)
    claimed = client.get(f"{CONSOLE}/audit", params={"claimed": "acme"}).text
    assert "invalid_credentials" in claimed and "recipient_disabled" not in claimed
    admin = client.get(f"{CONSOLE}/audit", params={"share": "partners"}).text
    assert "console_create_share" in admin and "console_add_table" in admin
    activity = client.get(f"{CONSOLE}/activity", params={"by": "recipient"}).text
    assert "<svg" in activity and "Recipient acme" in activity
    assert "<script" not in activity


def test_the_session_cookie_is_secure_over_tls(client: TestClient) -> None:
    base = f"https://testserver{CONSOLE}"
    page = client.get(f"{base}/signin")
    answer = client.post(f"{base}/signin", data={"csrf": _csrf(page.text), "token": ADMIN_TOKEN})
    assert answer.status_code == 303
    cookie = next(c for c in answer.headers.get_list("set-cookie") if "lakeshare_console=" in c)
    assert "Secure" in cookie and "HttpOnly" in cookie


def test_failed_sign_ins_are_throttled_per_address(tmp_path: Path) -> None:
    config = make_config(
        {
            "store": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
            "admin": {"tokenHash": hash_token(ADMIN_TOKEN)},
            "basicAuth": {"failedAttemptsPerAddress": 3, "failedAttemptsWindowSeconds": 600},
        }
    )
    with TestClient(create_app(config), follow_redirects=False) as client:
        page = client.get(f"{CONSOLE}/signin")
        for _ in range(3):
            page = client.post(
                f"{CONSOLE}/signin", data={"csrf": _csrf(page.text), "token": "guess" * 4}
            )
            assert page.status_code == 401
        # Even the right token waits now: the guesser cannot tell a hit from a miss.
        answer = client.post(
            f"{CONSOLE}/signin", data={"csrf": _csrf(page.text), "token": ADMIN_TOKEN}
        )
        assert answer.status_code == 429 and int(answer.headers["retry-after"]) > 0
        assert "lakeshare_console=" not in answer.headers.get("set-cookie", "")
