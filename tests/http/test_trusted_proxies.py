"""Forwarding headers against a running server (security issue 20, finding 3).

From 127.0.0.1, uvicorn used to believe `X-Forwarded-For`: a recipient allowed only from
203.0.113.0/24 got in by sending the header, a rotating header escaped the token endpoint's
failed-attempt limit, and the audit recorded the claimed address. Now no header counts
unless its sender is in `trustedProxies`; then the right-most untrusted address does.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.corpus import CORPUS
from tests.support.server import TEST_BEARER_TOKEN, RunningServer, make_config, run_server

BASIC = CORPUS / "levi/dat/basic_append/delta"
ACME_TOKEN = "acme-token-0123456789abcdef"
ACME = {"Authorization": f"Bearer {ACME_TOKEN}"}
ALLOWED = "203.0.113.9"  # inside acme's allow-list
OUTSIDE = "198.51.100.7"


@contextmanager
def _server(tmp_path: Path, **extra: Any) -> Iterator[RunningServer]:
    config = make_config(
        {
            "shares": [
                {
                    "name": "s",
                    "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(BASIC)}]}],
                }
            ],
            "recipients": [
                {
                    "name": "acme",
                    "shares": ["s"],
                    "ipAllowList": ["203.0.113.0/24"],
                    "credentials": [{"token": ACME_TOKEN}],
                }
            ],
            "oauth": {"failedAttemptsLimit": 3},
            "basicAuth": {"failedAttemptsPerAddress": 3, "failedAttemptsPerUser": 1000},
            **extra,
        }
    )
    with run_server(config, tmp_path) as running:
        yield running


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _audited(caplog: pytest.LogCaptureFixture, count: int) -> list[dict[str, Any]]:
    """The audit log's records, once `count` of them are there (written after the response)."""
    deadline = time.monotonic() + 5
    while True:
        events = [r.audit for r in caplog.records if r.name == "lakeshare.audit"]
        if len(events) >= count or time.monotonic() > deadline:
            return events
        time.sleep(0.02)


def _token_failures(server: RunningServer, addresses: list[str]) -> list[int]:
    """Statuses of failed token requests, each claiming the next address."""
    return [
        httpx.post(
            server.url("/oauth/token"),
            data={"grant_type": "client_credentials"},
            headers={"Authorization": _basic("nobody", "x"), "X-Forwarded-For": address},
        ).status_code
        for address in addresses
    ]


def _basic_failures(server: RunningServer, addresses: list[str]) -> list[int]:
    return [
        httpx.get(
            server.url("/shares"),
            headers={
                "Authorization": _basic("acme", f"guess-{uuid.uuid4()}"),
                "X-Forwarded-For": a,
            },
        ).status_code
        for a in addresses
    ]


def test_forwarding_headers_are_ignored_by_default(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lakeshare.audit")
    with _server(tmp_path) as server:
        shares = server.url("/shares")
        assert httpx.get(shares, headers=ACME).status_code == 403
        # Before the fix: 200 (uvicorn trusted X-Forwarded-For from 127.0.0.1).
        for spoof in ({"X-Forwarded-For": ALLOWED}, {"Forwarded": f"for={ALLOWED}"}):
            response = httpx.get(shares, headers={**ACME, **spoof})
            assert response.status_code == 403, spoof
            assert response.json()["errorCode"] == "PERMISSION_DENIED"
        events = _audited(caplog, 3)
        assert [(e["recipient"], e["client"], e["reason"]) for e in events] == [
            ("acme", "127.0.0.1", "address_not_allowed")
        ] * 3
        # The failed-attempt limits count the peer, whatever address each request claims.
        assert _token_failures(server, [f"192.0.2.{i}" for i in range(4)]) == [401] * 3 + [429]
        assert _basic_failures(server, [f"192.0.2.{i}" for i in range(4)]) == [401] * 3 + [429]
        # The scheme and host of the URLs the server builds are not the header's either.
        lines = _query(server, {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example"})
        assert lines[-1]["file"]["url"].startswith(server.base_url + "/")


def _query(server: RunningServer, headers: dict[str, str]) -> list[dict[str, Any]]:
    response = httpx.post(
        server.url("/shares/s/schemas/d/tables/t/query"),
        headers={"Authorization": f"Bearer {TEST_BEARER_TOKEN}", **headers},
        json={},
    )
    assert response.status_code == 200, response.text
    return [orjson.loads(line) for line in response.text.splitlines()]


def test_a_trusted_proxy_names_the_client(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lakeshare.audit")
    with _server(tmp_path, trustedProxies=["127.0.0.1/32", "10.0.0.0/8"]) as server:
        shares = server.url("/shares")

        def status(xff: str) -> int:
            return httpx.get(shares, headers={**ACME, "X-Forwarded-For": xff}).status_code

        assert httpx.get(shares, headers=ACME).status_code == 403  # the proxy itself
        assert status(ALLOWED) == 200
        assert status(f"{ALLOWED}, 10.0.0.7") == 200  # trusted hops are skipped
        # The right-most untrusted address counts, not what the client wrote left of it.
        assert status(f"{ALLOWED}, {OUTSIDE}") == 403
        assert status(f"{OUTSIDE}, {ALLOWED}") == 200
        # Only the configured header: a Forwarded header would be the client's own copy.
        assert httpx.get(shares, headers={**ACME, "Forwarded": f"for={ALLOWED}"}).status_code == 403
        events = _audited(caplog, 6)
        assert [e["client"] for e in events[:6]] == [
            "127.0.0.1",
            ALLOWED,
            ALLOWED,
            OUTSIDE,
            ALLOWED,
            "127.0.0.1",
        ]
        # Each forwarded address has its own failed-attempt count.
        assert _token_failures(server, [f"192.0.2.{i}" for i in range(4)]) == [401] * 4
        assert _token_failures(server, ["192.0.2.9"] * 4) == [401] * 3 + [429]
        assert _basic_failures(server, [f"192.0.2.{i}" for i in range(4)]) == [401] * 4
        assert _basic_failures(server, ["192.0.2.9"] * 4) == [401] * 3 + [429]
        # The scheme and host the proxy received make the server's file URLs.
        lines = _query(
            server, {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "share.example:8443"}
        )
        url = lines[-1]["file"]["url"]
        assert url.startswith("https://share.example:8443/delta-sharing/files/"), url


def test_forwarded_header_when_configured(tmp_path: Path) -> None:
    with _server(tmp_path, trustedProxies=["127.0.0.1"], forwardedHeader="Forwarded") as server:
        shares = server.url("/shares")
        allowed = {**ACME, "Forwarded": f'for="{ALLOWED}:4711";proto=https'}
        assert httpx.get(shares, headers=allowed).status_code == 200
        assert httpx.get(shares, headers={**ACME, "X-Forwarded-For": ALLOWED}).status_code == 403


def test_a_bad_trusted_proxy_is_a_configuration_error() -> None:
    from sharing.config import ConfigError

    with pytest.raises(ConfigError, match=r"trustedProxies.*10\.0\.0\.0/33"):
        make_config(trustedProxies=["10.0.0.0/33"])
    with pytest.raises(ConfigError, match="forwardedHeader"):
        make_config(forwardedHeader="X-Real-IP")
