"""Cost of per-recipient authorization: `/shares` and a small `/query` served to a recipient
among 10,000 in the store (SQLite, then PostgreSQL), next to the single-token configuration
(`authorization.bearerToken`) measured in the same run.

    .venv/bin/python bench/recipients.py [--recipients 10000] [--connections 4] [--duration 6]
        [--instructions 500]

Each configuration runs as its own `lakeshare serve` on 127.0.0.1, driven by `wrk` (Debian's
package). The store is filled directly (one transaction of recipients, grants and bearer
credentials), plus one recipient created through the repository whose token wrk sends.
Goal: authorization overhead within 10 % of request time (ratio ≥ 0.90). The load generator
shares the 2 cores with the server: compare ratios, not absolutes. The measured
recipient is granted all 20 shares by name, so both list the same. Also printed: the
in-process cost of authenticating one request, which does not depend on machine noise, and
with `--instructions N` the server's instructions per request under callgrind (single token
vs the stored recipient, SQLite): the load-independent figure of the whole request.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from http_load import WRK_SCRIPT, Result, start  # noqa: E402
from request_cost import instructions_per_request, slow_limits  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from sharing.catalog import Catalog  # noqa: E402
from sharing.config import load_config  # noqa: E402
from sharing.recipients.directory import RecipientDirectory  # noqa: E402
from sharing.recipients.hashing import hash_token, new_credential_id, new_token  # noqa: E402
from sharing.recipients.repository import RecipientRepository  # noqa: E402
from sharing.store import open_store  # noqa: E402
from sharing.store import schema as t  # noqa: E402
from sharing.store.clock import now_ms  # noqa: E402
from tests.support.corpus import corpus_table  # noqa: E402
from tests.support.postgres import fresh_database, postgres_available, postgres_server  # noqa: E402
from tests.support.processes import free_port, serve_command, stop  # noqa: E402

TOKEN = "bench-bearer-token-0123456789"
SECRET = "bench-signing-secret-0123456789abcdef"
SMALL = "levi/dat/basic_partitioned/delta"
SHARES = 20


def fill(url: str, recipients: int) -> str:
    """`recipients` recipients with a grant and a token each; returns one usable token."""
    store = open_store(url)
    now = now_ms()
    rows, grants, credentials = [], [], []
    for i in range(recipients):
        name = f"r{i:05d}"
        rows.append(
            {
                "name": name,
                "comment": "",
                "enabled": True,
                "expires_at": None,
                "ip_allow_list": "",
                "created_at": now,
                "updated_at": now,
            }
        )
        grants.append({"recipient": name, "share": f"share{i % SHARES}", "created_at": now})
        cid = new_credential_id()
        credentials.append(
            {
                "id": cid,
                "recipient": name,
                "type": "bearer",
                "secret_hash": hash_token(new_token(cid)),
                "created_at": now,
            }
        )
    with store.write() as connection:
        for table, batch in (
            (t.recipients, rows),
            (t.recipient_grants, grants),
            (t.credentials, credentials),
        ):
            for start_at in range(0, len(batch), 1000):
                connection.execute(insert(table), batch[start_at : start_at + 1000])
    repository = RecipientRepository(store, known_shares=[f"share{i}" for i in range(SHARES)])
    # Granted every share by name (not "*"), so its listings match the baseline's while the
    # per-grant catalog view is exercised.
    _, issued = repository.create("bench", [f"share{i}" for i in range(SHARES)])
    store.close()
    assert issued is not None and issued.secret is not None
    return issued.secret


def auth_microseconds(url: str, small: Path, tokens: list[str], n: int = 20_000) -> list[float]:
    """In-process cost of authenticating one request (directory lookup, hash compare, grant
    view of the catalog), per token, in µs — the part of request time authorization adds."""
    path = small.parent / "micro.yaml"
    config(path, small, url)
    loaded = load_config(path)
    store = open_store(url)
    directory = RecipientDirectory(loaded, store)
    catalog = Catalog(loaded)
    figures = []
    for token in tokens:
        header = f"Bearer {token}"
        directory.authenticate(header, "127.0.0.1")
        begin = time.perf_counter()
        for _ in range(n):
            directory.needs_io(header)
            catalog.visible_to(directory.authenticate(header, "127.0.0.1").shares)
        figures.append((time.perf_counter() - begin) / n * 1e6)
    store.close()
    return figures


def config(path: Path, small: Path, store_url: str) -> None:
    tables = [{"name": "small", "location": str(small)}]
    document: dict[str, Any] = {
        "version": 1,
        "authorization": {"bearerToken": TOKEN},
        "signingSecret": SECRET,
        "host": "127.0.0.1",
        "store": {"url": store_url},
        "shares": [
            {"name": f"share{i}", "schemas": [{"name": "s", "tables": tables}]}
            for i in range(SHARES)
        ],
    }
    path.write_text(yaml.safe_dump(document))


def instructions(sqlite_url: str, small: Path, token: str, requests: int) -> None:
    """Server instructions per request (callgrind, as bench/request_cost.py counts them) for
    the single token and a stored recipient's token, same server and store: the part of
    request time authorization adds, independent of the machine's load."""
    print(f"\ncallgrind, instructions per request ({requests} after a warm-up):", flush=True)
    for case, body, route in (
        ("GET /shares", None, "/delta-sharing/shares"),
        ("POST small /query", b"{}", "/delta-sharing/shares/share0/schemas/s/tables/small/query"),
    ):
        counts = []
        for who in (TOKEN, token):
            workdir = Path(tempfile.mkdtemp(prefix="bench-recipients-cg-"))
            path = workdir / "config.yaml"
            config(path, small, sqlite_url)
            document = yaml.safe_load(path.read_text())
            slow_limits(document)
            path.write_text(yaml.safe_dump(document))
            port = free_port()
            command = serve_command(path, port, "--workers", "1")  # callgrind: one process
            url = f"http://127.0.0.1:{port}{route}"
            counts.append(instructions_per_request(command, workdir, url, who, body, requests))
        single, stored = counts
        print(
            f"  {case:<18} single token {single:>11,}   stored recipient {stored:>11,}"
            f"   ratio {stored / single:.3f}"
        )


def wrk(
    url: str,
    method: str,
    body: str | None,
    token: str,
    connections: int,
    duration: int,
    workdir: Path,
) -> Result:
    script = workdir / "case.lua"
    lua_body = "nil" if body is None else json.dumps(body)
    script.write_text(WRK_SCRIPT.format(method=method, body=lua_body, token=token))
    done = subprocess.run(
        [
            "wrk",
            f"-t{min(2, connections)}",
            f"-c{connections}",
            f"-d{duration}s",
            "--timeout",
            "30s",
            "-s",
            str(script),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith('{"requests"'))
    data = json.loads(line)
    return Result(
        rps=data["requests"] / data["seconds"],
        p50_ms=data["p50"] / 1000,
        p99_ms=data["p99"] / 1000,
        errors=data["errors"],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipients", type=int, default=10_000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--duration", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--instructions",
        type=int,
        default=0,
        metavar="N",
        help="also count server instructions per request under callgrind (N requests)",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (apt-get install wrk)")
    workdir = Path(tempfile.mkdtemp(prefix="bench-recipients-"))
    small = workdir / "small"
    shutil.copytree(corpus_table(SMALL), small)

    setups: list[tuple[str, str, str]] = []  # name, store URL, token
    empty = f"sqlite:///{workdir / 'empty.db'}"
    setups.append(("single token (baseline)", empty, TOKEN))
    sqlite_url = f"sqlite:///{workdir / 'many.db'}"
    print(f"filling SQLite with {args.recipients:,} recipients ...", flush=True)
    setups.append(
        (f"SQLite, {args.recipients:,} recipients", sqlite_url, fill(sqlite_url, args.recipients))
    )
    pg = postgres_server() if postgres_available() else None
    if pg is not None:
        base = pg.__enter__()
        pg_url = fresh_database(base)
        print(f"filling PostgreSQL with {args.recipients:,} recipients ...", flush=True)
        setups.append(
            (f"PostgreSQL, {args.recipients:,} recipients", pg_url, fill(pg_url, args.recipients))
        )
    else:
        print("PostgreSQL binaries not found: skipping the PostgreSQL case")

    cases = [
        ("GET /shares", "GET", "/delta-sharing/shares", None),
        (
            "POST small /query",
            "POST",
            "/delta-sharing/shares/share0/schemas/s/tables/small/query",
            "{}",
        ),
    ]
    results: dict[tuple[str, str], float] = {}
    processes = []
    try:
        servers = []
        for index, (name, url, token) in enumerate(setups):
            path = workdir / f"{index}.yaml"
            config(path, small, url)
            port = free_port()
            processes.append(
                start(
                    serve_command(path, port),
                    workdir,
                    f"serve-{port}",
                    f"http://127.0.0.1:{port}/healthz",
                )
            )
            servers.append((name, f"http://127.0.0.1:{port}", token))
        # Rounds interleave the configurations, so a busy moment of the machine does not
        # land on one of them only; the best round of each is kept.
        for _ in range(args.rounds):
            for case, method, route, body in cases:
                for name, base, token in servers:
                    wrk(base + route, method, body, token, 1, 1, workdir)  # warm-up
                    rps = wrk(
                        base + route, method, body, token, args.connections, args.duration, workdir
                    ).rps
                    results[(name, case)] = max(results.get((name, case), 0.0), rps)
    finally:
        for process in processes:
            stop(process)
        if pg is not None:
            pg.__exit__(None, None, None)

    single, many = auth_microseconds(setups[1][1], small, [TOKEN, setups[1][2]])
    print(
        f"\nauthentication in process (SQLite, {args.recipients:,} recipients): "
        f"single token {single:.1f} µs, a stored recipient's token {many:.1f} µs per request"
    )
    if args.instructions:
        instructions(setups[1][1], small, setups[1][2], args.instructions)
    baseline = setups[0][0]
    print(
        f"\n{args.connections} connections, {args.duration}s x {args.rounds} rounds (best), "
        "requests/s and ratio to the single-token configuration:"
    )
    for case, *_ in cases:
        print(f"  {case}")
        for name, *_ in setups:
            rps = results[(name, case)]
            print(f"    {name:<34} {rps:8.0f} req/s   ratio {rps / results[(baseline, case)]:.2f}")


if __name__ == "__main__":
    main()
