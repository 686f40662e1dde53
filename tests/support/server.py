"""Run the real server (app.serving's uvicorn + `create_app`) on 127.0.0.1 for HTTP tests.

    from server_fixture import run_server, make_config

    def test_something(tmp_path):
        config = make_config({"shares": [...]})
        with run_server(config, tmp_path) as server:
            client = delta_sharing.SharingClient(str(server.profile_path))
            httpx.get(server.url("/shares"), headers=server.auth_headers)

The server runs in a daemon thread of the test process (so its code is covered and can be
debugged), on a port the OS picks, and is shut down when the block exits.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from app.main import create_app
from app.serving import build_server
from sharing.config import ServerConfig, parse_config

__all__ = [
    "TEST_BEARER_TOKEN",
    "TEST_SIGNING_SECRET",
    "RunningServer",
    "history_table",
    "make_config",
    "run_server",
    "sales_share",
    "write_test_config",
]

TEST_BEARER_TOKEN = "test-bearer-token-0123456789"
TEST_SIGNING_SECRET = "test-signing-secret-0123456789abcdef"


def make_config(raw: Mapping[str, Any] | None = None, **overrides: Any) -> ServerConfig:
    """A validated config from a dict in the YAML format: version 1, the test bearer token
    and signing secret, then `raw` and `overrides` (camelCase keys) on top."""
    document: dict[str, Any] = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        # Tests commit and read back at once: every request checks the log (tests of the
        # refresh window set it themselves).
        "refreshWindowMs": 0,
    }
    document.update(raw or {})
    document.update(overrides)
    return parse_config(document, environ={})


@dataclass(frozen=True)
class RunningServer:
    """A started server: `base_url` is the endpoint root without a trailing slash."""

    base_url: str
    profile_path: Path
    config: ServerConfig

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    @property
    def auth_headers(self) -> dict[str, str]:
        if self.config.authorization is None:
            return {}
        return {"Authorization": f"Bearer {self.config.authorization.bearer_token}"}

    def table_url(self, share: str, schema: str, table: str) -> str:
        """The `delta_sharing` client's table URL: `<profile>#share.schema.table`."""
        return f"{self.profile_path}#{share}.{schema}.{table}"


def _bind_free_port() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def run_server(
    config: ServerConfig,
    directory: Path,
    *,
    start_timeout: float = 15.0,
    tls: tuple[Path, Path] | None = None,
) -> Iterator[RunningServer]:
    """Serve `config` on a free 127.0.0.1 port; write `<directory>/profile.share` for it.
    With `tls` (certificate and key files) it serves HTTPS."""
    sock = _bind_free_port()
    port = sock.getsockname()[1]
    options: dict[str, Any] = {"lifespan": "on"}
    if tls is not None:
        options.update(ssl_certfile=str(tls[0]), ssl_keyfile=str(tls[1]))
    # The production serving stack (app.serving), with the config's limits.
    server = build_server(create_app(config), config.limits, **options)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"lakeshare-{port}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    scheme = "https" if tls is not None else "http"
    base_url = f"{scheme}://127.0.0.1:{port}{config.endpoint}"
    directory.mkdir(parents=True, exist_ok=True)
    profile_path = directory / "profile.share"
    profile: dict[str, Any] = {"shareCredentialsVersion": 1, "endpoint": f"{base_url}/"}
    if config.authorization is not None:
        profile["bearerToken"] = config.authorization.bearer_token
    profile_path.write_text(json.dumps(profile), encoding="utf-8")
    try:
        yield RunningServer(base_url=base_url, profile_path=profile_path, config=config)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def history_table(name: str, location: Path, **extra: Any) -> dict[str, Any]:
    """A table entry with its history shared (time travel, streams, credentials)."""
    return {"name": name, "location": str(location), "historyShared": True, **extra}


def sales_share(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """The share `sales` with one schema `d` holding `tables`."""
    return {"name": "sales", "schemas": [{"name": "d", "tables": tables}]}


def write_test_config(
    path: Path, shares: list[dict[str, Any]], store: Path | str, **settings: Any
) -> Path:
    """A configuration file with the test bearer token and signing secret and a state store
    read afresh on every request (cacheSeconds 0): SQLite at `store`, or the store URL
    `store` names."""
    document: dict[str, Any] = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "host": "127.0.0.1",
        "port": 0,
        **settings,
        "store": {
            "cacheSeconds": 0,
            "url": store if isinstance(store, str) else f"sqlite:///{store}",
        },
        "shares": shares,
    }
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path
