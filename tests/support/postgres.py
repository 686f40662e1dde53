"""A throwaway PostgreSQL server from the machine's binaries (`initdb`, `pg_ctl`), on
127.0.0.1 and a free port, for the tests of the state store. No mock: the real server.

`postgres_server()` starts one cluster (as the `postgres` user when run as root, since
initdb refuses root) and yields its base URL; `fresh_database(base)` creates an empty
database and returns its URL, so tests do not see each other's rows.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.requirements import require

__all__ = [
    "fresh_database",
    "postgres_available",
    "postgres_base",
    "postgres_server",
    "store_url",
]

_DEBIAN_BIN = Path("/usr/lib/postgresql")


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(_DEBIAN_BIN.glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    return None


def postgres_available() -> bool:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return False
    return _binary("initdb") is not None and _binary("pg_ctl") is not None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_user(command: list[str]) -> tuple[list[str], int | None]:
    """Run as `postgres` when we are root (initdb refuses root)."""
    if os.geteuid() != 0:
        return command, None
    try:
        uid = pwd.getpwnam("postgres").pw_uid
    except KeyError:
        uid = pwd.getpwnam("nobody").pw_uid
    user = pwd.getpwuid(uid).pw_name
    return ["runuser", "-u", user, "--", *command], uid


@contextmanager
def postgres_server() -> Iterator[str]:
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    assert initdb and pg_ctl
    root = Path(tempfile.mkdtemp(prefix="lakeshare-pg-"))
    data = root / "data"
    port = _free_port()
    _, uid = _as_user([])
    if uid is not None:
        os.chown(root, uid, -1)
    init, _ = _as_user(
        [initdb, "-D", str(data), "-U", "lakeshare", "-A", "trust", "-E", "UTF8", "--no-sync"]
    )
    subprocess.run(init, check=True, capture_output=True)
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off"
    start, _ = _as_user(
        [pg_ctl, "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"]
    )
    subprocess.run(start, check=True, capture_output=True)
    try:
        yield f"postgresql://lakeshare@127.0.0.1:{port}"
    finally:
        stop, _ = _as_user([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"])
        subprocess.run(stop, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def fresh_database(base_url: str) -> str:
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    deadline = time.monotonic() + 10
    while True:
        try:
            with psycopg.connect(f"{base_url}/postgres", autocommit=True) as connection:
                connection.execute(f'CREATE DATABASE "{name}"')
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    return f"{base_url}/{name}"


def store_url(request: pytest.FixtureRequest, kind: str, sqlite_file: Path | None) -> str | None:
    """The state store of a test run on both stores: a fresh database on the session's
    PostgreSQL for "postgresql" (skipped without the binaries), else SQLite at
    `sqlite_file` (None: the default file beside the configuration)."""
    if kind != "postgresql":
        return None if sqlite_file is None else f"sqlite:///{sqlite_file}"
    base = request.getfixturevalue("postgres_base")
    require(base is not None, "PostgreSQL binaries (initdb, pg_ctl) and psycopg")
    return fresh_database(base)


@pytest.fixture(scope="session")
def postgres_base() -> Iterator[str | None]:
    """One PostgreSQL cluster for the whole run (each test takes a `fresh_database`), or
    None when the machine has no PostgreSQL binaries (tests then call `require`)."""
    if not postgres_available():
        yield None
        return
    with postgres_server() as url:
        yield url
