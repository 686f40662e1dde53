"""Throughput and latency of `lakeshare serve` under load, next to a trivial FastAPI route.

    .venv/bin/python bench/http_load.py [--workers 1 2] [--connections 1 4 16 50]
                                        [--duration 8] [--big-files 100000]

Starts, on 127.0.0.1: a trivial FastAPI app on uvicorn (one route answering a constant
`{"items": [...]}` — the ceiling of the stack on this machine), and the real server
(`lakeshare serve`, once per `--workers` value) sharing the DAT table `basic_partitioned`
(6 files) and a generated table of `--big-files` files. Drives each with `wrk` (Debian's
package) at each connection count and prints requests/s, p50 and p99 latency and the ratio
of requests/s to the trivial route. The 2 cores are shared with other work whose load
changes by the minute, so the trivial route is measured right before every cell at the
same connection count (the ratio is of that pair), and each row shows the 1-minute load
average when it was measured.

Requests: `GET /shares`, `GET …/version`, `POST …/query {}` on the small table, and
`POST …/query {}` on the big table (1 and 4 connections: each response is tens of MB).
The load generator shares the 2 cores with the server: compare ratios, not absolutes.
`srv ms` is the server's own mean time per request in the cell (request to end of body,
from its `lakeshare_http_request_duration_seconds` histogram on /metrics), without the
load generator's and the loopback's share of the latency.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from snapshot_load import write_table  # noqa: E402

from tests.support.corpus import corpus_table  # noqa: E402
from tests.support.processes import free_port, serve_command, stop, wait_http  # noqa: E402

TOKEN = "bench-bearer-token-0123456789"
SECRET = "bench-signing-secret-0123456789abcdef"
SMALL = "levi/dat/basic_partitioned/delta"

TRIVIAL_APP = """
from fastapi import FastAPI
app = FastAPI()
ITEMS = {"items": [{"name": "share"}]}

@app.get("/items")
async def items():
    return ITEMS
"""

# wrk prints one JSON line from `done`: requests/s, latency percentiles (µs), failures.
WRK_SCRIPT = """
wrk.method = "{method}"
wrk.body = {body}
wrk.headers["Authorization"] = "Bearer {token}"
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.status + summary.errors.timeout
  io.write(string.format(
    '{{"requests": %d, "seconds": %.6f, "p50": %d, "p99": %d, "errors": %d}}\\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50),
    latency:percentile(99), errors))
end
"""


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    body: str | None
    connections: tuple[int, ...] | None = None  # None: every --connections value


@dataclass(frozen=True)
class Result:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int


def run_wrk(url: str, case: Case, connections: int, duration: int, workdir: Path) -> Result:
    script = workdir / f"{case.name}.lua"
    body = "nil" if case.body is None else json.dumps(case.body)
    script.write_text(WRK_SCRIPT.format(method=case.method, body=body, token=TOKEN))
    threads = min(2, connections)
    completed = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{max(1, duration)}s",
            "--timeout",
            "30s",
            "-s",
            str(script),
            url + case.path,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(ln for ln in completed.stdout.splitlines() if ln.startswith('{"requests"'))
    data = json.loads(line)
    return Result(
        rps=data["requests"] / data["seconds"],
        p50_ms=data["p50"] / 1000,
        p99_ms=data["p99"] / 1000,
        errors=data["errors"],
    )


def server_seconds(url: str) -> tuple[float, float]:
    """Total seconds and requests the server has measured, over every route but /metrics."""
    request = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
    totals = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        for kind in totals:
            metric = f"lakeshare_http_request_duration_seconds_{kind}"
            if name == metric and 'route="/metrics"' not in rest:
                totals[kind] += float(rest.rsplit(" ", 1)[1])
    return totals["sum"], totals["count"]


def start(args: list[str], workdir: Path, name: str, ready: str) -> subprocess.Popen[bytes]:
    log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115 (lives as long as the process)
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    wait_http(ready, process, timeout=120)
    return process


def supports_workers() -> bool:
    help_text = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE.parent,
    ).stdout
    return "--workers" in help_text


def write_config(path: Path, small: Path, big: Path | None) -> None:
    tables = [{"name": "small", "location": str(small)}]
    if big is not None:
        tables.append({"name": "big", "location": str(big)})
    config = {
        "version": 1,
        "authorization": {"bearerToken": TOKEN},
        "signingSecret": SECRET,
        "shares": [{"name": "share", "schemas": [{"name": "s", "tables": tables}]}],
    }
    path.write_text(yaml.safe_dump(config))


def _load_average() -> list[str]:
    """The 1, 5 and 15-minute load averages (/proc/loadavg)."""
    return Path("/proc/loadavg").read_text().split()[:3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1])
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 4, 16, 50])
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--big-files", type=int, default=100_000)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (apt-get install wrk)")
    if any(w != 1 for w in args.workers) and not supports_workers():
        sys.exit("this lakeshare serve has no --workers option")

    workdir = Path(tempfile.mkdtemp(prefix="http-load-"))
    small = workdir / "small"
    shutil.copytree(corpus_table(SMALL), small)
    big = None
    if args.big_files:
        big = workdir / "big"
        print(f"generating a {args.big_files:,}-file table ...", flush=True)
        write_table(big, files=args.big_files, commits=0)
    config = workdir / "config.yaml"
    write_config(config, small, big)

    table = "/delta-sharing/shares/share/schemas/s/tables"
    every = tuple(args.connections)
    cases = [
        Case("shares", "GET", "/delta-sharing/shares", None),
        Case("version", "GET", f"{table}/small/version", None),
        Case("query_small", "POST", f"{table}/small/query", "{}"),
    ]
    if big is not None:
        cases.append(
            Case("query_big", "POST", f"{table}/big/query", "{}", tuple(c for c in every if c <= 4))
        )

    trivial_port = free_port()
    (workdir / "trivial_app.py").write_text(TRIVIAL_APP)
    trivial = start(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "trivial_app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(trivial_port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        workdir,
        "trivial",
        f"http://127.0.0.1:{trivial_port}/items",
    )
    trivial_case = Case("trivial", "GET", "/items", None)

    def baseline(connections: int) -> Result:
        """The trivial route at `connections`, measured now (next to the cell it scales)."""
        return run_wrk(
            f"http://127.0.0.1:{trivial_port}", trivial_case, connections, args.duration, workdir
        )

    print(
        f"\nmachine: {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()}"
        f" cores; load average before the run: {_load_average()}"
    )
    print(
        f"{'request':<14} {'workers':>7} {'conns':>5} {'req/s':>9} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'errors':>6} {'trivial':>9} {'vs trivial':>10} {'srv ms':>7} "
        f"{'load':>5}"
    )
    try:
        for workers in args.workers:
            port = free_port()
            command = serve_command(config, port)
            if workers != 1 or supports_workers():
                command += ["--workers", str(workers)]  # the default is one per core
            server = start(
                command, workdir, f"lakeshare-{workers}", f"http://127.0.0.1:{port}/healthz"
            )
            url = f"http://127.0.0.1:{port}"
            try:
                # Warm every table in every worker (snapshot loads are measured elsewhere):
                # a few connections, so that each worker accepts some.
                for case in cases:
                    run_wrk(url, case, 4 * workers, 1, workdir)
                for case in cases:
                    for c in case.connections or every:
                        b = baseline(c)
                        before = server_seconds(url)
                        r = run_wrk(url, case, c, args.duration, workdir)
                        after = server_seconds(url)
                        served = after[1] - before[1]
                        server_ms = (after[0] - before[0]) / served * 1000 if served else 0.0
                        print(
                            f"{case.name:<14} {workers:>7} {c:>5} {r.rps:>9.0f} "
                            f"{r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {r.errors:>6} {b.rps:>9.0f} "
                            f"{r.rps / b.rps:>10.3f} {server_ms:>7.2f} {_load_average()[0]:>5}",
                            flush=True,
                        )
                        time.sleep(0.5)
            finally:
                stop(server)
    finally:
        stop(trivial)
    print(f"load average after the run: {_load_average()}")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
