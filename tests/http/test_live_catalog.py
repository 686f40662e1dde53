"""The live catalog against a real `lakeshare serve --workers 2` (SQLite and PostgreSQL
stores): a table added with the CLI is listed and read by the official client within
`store.cacheSeconds` on every worker, a removed one answers 404, with no restart and no
failed request in a concurrent read loop; the same for the admin API."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import delta_sharing
import httpx
import pytest
import yaml

from sharing.recipients.hashing import hash_token
from tests.support import REPO_ROOT
from tests.support.corpus import CORPUS
from tests.support.postgres import store_url
from tests.support.processes import free_port, serve_command, stop, wait_http
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET

pytestmark = pytest.mark.slow

ADMIN_TOKEN = "live-catalog-admin-token-0123456789"
CACHE_SECONDS = 1
POLL_SECONDS = 1
# What "within cacheSeconds" allows on this shared 2-core machine: the period, the
# background check's own interval, and the time a loaded machine takes to answer.
SLACK_SECONDS = 4
BASIC = CORPUS / "levi/dat/basic_append/delta"
PARTITIONED = CORPUS / "levi/dat/basic_partitioned/delta"
AUTH = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}


@dataclass
class Server:
    root: str
    config: Path
    profile: Path
    process: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        return f"{self.root}/delta-sharing"


def write_config(path: Path, url: str | None, shares: list[dict[str, Any]], **extra: Any) -> None:
    document: dict[str, Any] = {
        "version": 1,
        "signingSecret": TEST_SIGNING_SECRET,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "host": "127.0.0.1",
        "shares": shares,
        "store": {"url": url, "cacheSeconds": CACHE_SECONDS},
        "admin": {"tokenHash": hash_token(ADMIN_TOKEN)},
        "configReloadPollSeconds": POLL_SECONDS,
        **extra,
    }
    path.write_text(yaml.safe_dump(document))


def file_share(name: str = "filed", location: Path = BASIC) -> dict[str, Any]:
    table = {"name": "t", "location": str(location)}
    return {"name": name, "schemas": [{"name": "d", "tables": [table]}]}


@pytest.fixture(params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    url = store_url(request, request.param, sqlite_file=tmp_path / "state.db")
    yield from _serve(tmp_path, url)


@pytest.fixture
def sqlite_server(tmp_path: Path) -> Iterator[Server]:
    yield from _serve(tmp_path, f"sqlite:///{tmp_path / 'state.db'}")


def _serve(tmp_path: Path, url: str | None) -> Iterator[Server]:
    config = tmp_path / "server.yaml"
    write_config(config, url, [file_share()])
    port = free_port()
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen(
        serve_command(config, port, "--workers", "2"), cwd=REPO_ROOT, stdout=log, stderr=log
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", process)
        root = f"http://127.0.0.1:{port}"
        profile = tmp_path / "profile.share"
        document = {
            "shareCredentialsVersion": 1,
            "endpoint": f"{root}/delta-sharing/",
            "bearerToken": TEST_BEARER_TOKEN,
        }
        profile.write_text(json.dumps(document))
        yield Server(root, config, profile, process)
    finally:
        stop(process)
        log.close()


@dataclass
class ReadLoop:
    """Reads the file's table and lists every share, over and over, with the official
    client; every failure is kept."""

    profile: Path
    failures: list[str] = field(default_factory=list)
    reads: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        client = delta_sharing.SharingClient(str(self.profile))
        while not self._stop.is_set():
            try:
                assert len(delta_sharing.load_as_pandas(f"{self.profile}#filed.d.t")) > 0
                assert "filed" in [s.name for s in client.list_shares()]
                self.reads += 1
            except Exception as exc:  # every failure is the finding
                self.failures.append(repr(exc))

    def __enter__(self) -> ReadLoop:
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "shares", *args, "--config", str(config)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def status_of(server: Server, path: str) -> int:
    return httpx.get(f"{server.endpoint}{path}", headers=AUTH, timeout=30).status_code


def wait_until_every_worker(
    server: Server,
    path: str,
    status: int,
    since: float,
    within: float = CACHE_SECONDS + SLACK_SECONDS,
) -> float:
    """Seconds from `since` until `path` answers `status` 20 times in a row, all before
    `since + within` (new connections: the kernel spreads them over both workers, and each
    worker follows within the period on its own)."""
    deadline = since + within
    streak: list[float] = []
    while len(streak) < 20:
        answered = status_of(server, path)
        now = time.monotonic()
        assert now < deadline, f"{path} did not answer {status} on every worker in time"
        streak = [*streak, now] if answered == status else []
        if not streak:
            time.sleep(0.05)
    return streak[-1] - since


def test_cli_adds_and_removes_tables_while_serving(server: Server) -> None:
    table_path = "/shares/partners/schemas/web/tables/orders/version"
    with ReadLoop(server.profile) as loop:
        created = cli(server.config, "create", "partners", "--comment", "from the CLI")
        assert created.returncode == 0, created.stderr
        added = cli(
            server.config,
            "add-table",
            "partners.web.orders",
            "--location",
            str(PARTITIONED),
            "--history-shared",
        )
        assert added.returncode == 0, added.stderr
        assert "ok, version" in added.stdout
        started = time.monotonic()  # committed when the command returns
        seen = wait_until_every_worker(server, table_path, 200, started)
        frame = delta_sharing.load_as_pandas(f"{server.profile}#partners.web.orders")
        assert len(frame) > 0
        client = delta_sharing.SharingClient(str(server.profile))
        names = {(t.share, t.schema, t.name) for t in client.list_all_tables()}
        assert ("partners", "web", "orders") in names

        # A table that cannot be opened is refused with the reason; nothing changes.
        refused = cli(server.config, "add-table", "partners.web.gone", "--location", "/no/such")
        assert refused.returncode == 1 and "/no/such" in refused.stderr
        # The file's shares are read-only here.
        read_only = cli(server.config, "add-table", "filed.d.x", "--location", str(BASIC))
        assert read_only.returncode == 1 and "configuration file" in read_only.stderr

        removed = cli(server.config, "remove-table", "partners.web.orders")
        assert removed.returncode == 0, removed.stderr
        started = time.monotonic()
        gone = wait_until_every_worker(server, table_path, 404, started)
        with pytest.raises(Exception, match=r"404|does not exist"):
            delta_sharing.load_as_pandas(f"{server.profile}#partners.web.orders")
        time.sleep(1)  # the loop keeps reading after the change
    assert loop.failures == [] and loop.reads > 0
    assert seen <= CACHE_SECONDS + SLACK_SECONDS and gone <= CACHE_SECONDS + SLACK_SECONDS
    listed = cli(server.config, "list")
    assert "partners" in listed.stdout and "store" in listed.stdout

    # The changes are in the audit trail as the admin's.
    audit = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "audit",
            "--config",
            str(server.config),
            "--share",
            "partners",
            "--format",
            "json",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    operations = [line for line in audit.stdout.splitlines() if "_admin" in line]
    assert any('"add_table"' in line for line in operations), audit.stdout
    assert any('"remove_table"' in line for line in operations), audit.stdout


def test_admin_api_manages_store_shares(server: Server) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    base = f"{server.root}/admin/shares"
    assert httpx.post(base, headers=admin, json={"name": "api"}).status_code == 201
    refused = httpx.post(
        f"{base}/api/schemas/s/tables/t", headers=admin, json={"location": "/no/such"}
    )
    assert refused.status_code == 400
    assert refused.json()["check"]["status"] == "unusable"
    started = time.monotonic()
    added = httpx.post(
        f"{base}/api/schemas/s/tables/t", headers=admin, json={"location": str(BASIC)}
    )
    assert added.status_code == 201, added.text
    wait_until_every_worker(server, "/shares/api/schemas/s/tables/t/metadata", 200, started)
    altered = httpx.patch(
        f"{base}/api/schemas/s/tables/t", headers=admin, json={"comment": "changed"}
    )
    assert altered.status_code == 200 and altered.json()["table"]["comment"] == "changed"
    checked = httpx.get(f"{base}/filed/schemas/d/tables/t/check", headers=admin).json()
    assert checked["check"]["status"] == "ok" and checked["table"]["location"] == str(BASIC)
    spec = httpx.get(f"{server.root}/admin/openapi.json").json()
    entry = spec["components"]["schemas"]["TableEntry"]["properties"]
    assert {"location", "historyShared", "startVersion", "partitionFilter", "force"} <= set(entry)
    read_only = httpx.delete(f"{base}/filed", headers=admin)
    assert read_only.status_code == 409
    assert "configuration file" in read_only.json()["message"]
    listed = httpx.get(base, headers=admin).json()["items"]
    assert [(i["name"], i["source"]) for i in listed] == [("filed", "config"), ("api", "store")]
    started = time.monotonic()
    assert httpx.delete(f"{base}/api", headers=admin).status_code == 200
    wait_until_every_worker(server, "/shares/api/schemas/s/tables/t/metadata", 404, started)
    assert status_of(server, "/shares/api") == 404


def readyz_details(server: Server) -> str:
    return str(httpx.get(f"{server.root}/readyz", timeout=30).json().get("details", {}))


def wait_every_worker_says(server: Server, text: str, since: float, within: float) -> None:
    """Until /readyz's details contain `text` on 20 requests in a row (both workers)."""
    deadline = since + within
    while True:
        answers = [readyz_details(server) for _ in range(20)]
        if all(text in answer for answer in answers):
            return
        assert time.monotonic() < deadline, answers
        time.sleep(0.1)


def test_configuration_reload_on_sighup_and_file_change(sqlite_server: Server) -> None:
    server = sqlite_server
    url = f"sqlite:///{server.config.parent / 'state.db'}"
    token = "reloaded-recipient-token-0123456789"
    reloaded = [
        file_share(),
        file_share("added", PARTITIONED),
    ]
    recipient = {
        "name": "partner",
        "shares": ["added"],
        "credentials": [{"token": token}],
    }
    partner = {"Authorization": f"Bearer {token}"}
    with ReadLoop(server.profile) as loop:
        # A new share and a recipient of the file, and a port change (needs a restart).
        write_config(server.config, url, reloaded, recipients=[recipient], port=1)
        server.process.send_signal(signal.SIGHUP)
        started = time.monotonic()
        seen = wait_until_every_worker(
            server, "/shares/added/schemas/d/tables/t/version", 200, started
        )
        frame = delta_sharing.load_as_pandas(f"{server.profile}#added.d.t")
        assert len(frame) > 0
        shares = httpx.get(f"{server.endpoint}/shares", headers=partner, timeout=30)
        assert shares.status_code == 200 and [s["name"] for s in shares.json()["items"]] == [
            "added"
        ]
        wait_every_worker_says(server, "restart needed to apply: port", started, 10)

        # An invalid edit: the previous configuration keeps serving, and says so.
        server.config.write_text(server.config.read_text().replace("location:", "locaton:"))
        server.process.send_signal(signal.SIGHUP)
        started = time.monotonic()
        wait_every_worker_says(
            server, "reload failed, serving the previous configuration", started, 10
        )
        assert "'location' in a table must be provided" in readyz_details(server)
        assert status_of(server, "/shares/added/schemas/d/tables/t/version") == 200
        assert httpx.get(f"{server.root}/readyz", timeout=30).status_code == 200
        metrics = httpx.get(f"{server.root}/metrics", headers=AUTH, timeout=30).text
        assert "lakeshare_config_reload_failed 1.0" in metrics
        assert 'lakeshare_config_reloads_total{result="failed"}' in metrics

        # A corrected file without the share, noticed without a signal (polled).
        write_config(server.config, url, [file_share()])
        started = time.monotonic()
        gone = wait_until_every_worker(
            server,
            "/shares/added/schemas/d/tables/t/version",
            404,
            started,
            within=POLL_SECONDS + SLACK_SECONDS,
        )
        assert (
            httpx.get(f"{server.endpoint}/shares", headers=partner, timeout=30).status_code == 401
        )
        wait_every_worker_says(server, "'configuration': 'ok'", started, 10)
        time.sleep(1)
    assert loop.failures == [] and loop.reads > 0
    assert seen <= CACHE_SECONDS + SLACK_SECONDS and gone <= POLL_SECONDS + SLACK_SECONDS
    log = (server.config.parent / "server.log").read_text()
    assert "configuration reload (SIGHUP) failed, serving the previous configuration" in log
    assert "these settings need a restart and were left unchanged: port" in log
