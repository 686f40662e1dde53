"""Fixed per-request cost of `lakeshare serve`, in CPU instructions, next to a trivial route.

    .venv/bin/python bench/request_cost.py [--requests 1000] [--code DIR] [--routes R ...]

Throughput on this machine's 2 shared cores swings with other jobs by a factor of two
within minutes; an instruction count does not. Each server (a trivial FastAPI app on
uvicorn, as in bench/http_load.py, and `lakeshare serve --workers 1` on the DAT table
`basic_partitioned`) runs under `valgrind --tool=callgrind` with counting switched on only
while one keep-alive client sends `--requests` requests to one route (after 200 warm-up
requests), so the figure is the server process's instructions per request — HTTP parsing,
middleware, authentication, audit and access log, metrics, routing and the route — and
the ratio trivial/route is the throughput ratio a single CPU-bound worker can reach.
`--code DIR` runs the server from another checkout (e.g. an older commit's `git archive`)
for a before/after comparison. The servers run in parallel: a run takes a few minutes.
Route `file` is the download of one signed file URL of the table (the URL a query gave,
fetched again and again): the signature check, the holder's current state from the
recipient cache, and the file sent. `--routes` measures only those named (and `trivial`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from http_load import SMALL, TOKEN, TRIVIAL_APP, write_config  # noqa: E402

from tests.support.corpus import corpus_table  # noqa: E402
from tests.support.processes import free_port, serve_command  # noqa: E402

TABLE = "/delta-sharing/shares/share/schemas/s/tables/small"
ROUTES = {
    "trivial": "/items",
    "shares": "/delta-sharing/shares",
    "version": TABLE + "/version",
    "query": TABLE + "/query",  # POST {}: the small query
    "file": "",  # a file URL the small query gives (resolved once the server is up)
}
WARM_UP = 200


def _command(route: str, workdir: Path, port: int) -> list[str]:
    if route == "trivial":
        (workdir / "trivial_app.py").write_text(TRIVIAL_APP)
        return [
            *(sys.executable, "-m", "uvicorn", "trivial_app:app", "--host", "127.0.0.1"),
            *("--port", str(port), "--log-level", "warning", "--no-access-log"),
        ]
    small = workdir / "small"
    shutil.copytree(corpus_table(SMALL), small)
    config = workdir / "config.yaml"
    write_config(config, small, None)
    document = yaml.safe_load(config.read_text())
    slow_limits(document)
    config.write_text(yaml.safe_dump(document))
    return serve_command(config, port, "--workers", "1")


def measure(route: str, requests: int, code: Path | None) -> int:
    """Instructions the server process spent per request on `route`."""
    workdir = Path(tempfile.mkdtemp(prefix=f"request-cost-{route}-"))
    port = free_port()
    body = b"{}" if route in ("query", "file") else None
    url = f"http://127.0.0.1:{port}{ROUTES[route] or ROUTES['query']}"
    return instructions_per_request(
        _command(route, workdir, port),
        workdir,
        url,
        TOKEN,
        body,
        requests,
        code,
        file_url=route == "file",
    )


def slow_limits(document: dict[str, Any]) -> None:
    """Under valgrind everything is ~50x slower: no limit may cut a connection short."""
    slow = 600
    document["limits"] = {
        "headerReadTimeoutSeconds": slow,
        "bodyReadTimeoutSeconds": slow,
        "idleTimeoutSeconds": slow,
    }
    document["requestTimeoutSeconds"] = slow


def instructions_per_request(
    command: list[str],
    workdir: Path,
    url: str,
    token: str,
    body: bytes | None,
    requests: int,
    code: Path | None = None,
    *,
    file_url: bool = False,
) -> int:
    """Instructions the server process started with `COMMAND` in `workdir` spent per
    request to `url` (POST `body`, or GET when None), counted by callgrind after a warm-up;
    removes `workdir`. With `file_url`, `url` is a query whose first file URL is then the
    one requested (without the bearer token: the URL carries its own signature)."""
    env = dict(os.environ, ARROW_USER_SIMD_LEVEL="NONE")  # valgrind decodes no AVX-512
    if code is not None:
        env["PYTHONPATH"] = str(code)
    report = workdir / "valgrind.txt"
    server = subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={workdir / 'callgrind.out'}",
            *command,
        ],
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=report.open("wb"),
    )
    headers = {"Authorization": f"Bearer {token}", "User-Agent": "request-cost"}

    def send(client: httpx.Client) -> httpx.Response:
        if body is not None:
            return client.post(url, headers=headers, content=body)
        return client.get(url, headers=headers)

    try:
        with httpx.Client(timeout=300) as client:
            deadline = time.monotonic() + 600
            while True:
                try:
                    if send(client).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"{url}: the server did not start; see {report}")
                time.sleep(1)
            if file_url:
                lines = client.post(url, headers=headers, content=b"{}").text.splitlines()
                url = next(json.loads(line)["file"]["url"] for line in lines if '"file"' in line)
                body, headers = None, {"User-Agent": "request-cost"}
            for _ in range(WARM_UP):
                send(client).raise_for_status()
            subprocess.run(
                ["callgrind_control", "-i", "on", str(server.pid)], check=True, capture_output=True
            )
            for _ in range(requests):
                send(client).raise_for_status()
            subprocess.run(
                ["callgrind_control", "-i", "off", str(server.pid)], check=True, capture_output=True
            )
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=600)
    counted = re.findall(r"Collected : (\d+)", report.read_text())
    shutil.rmtree(workdir, ignore_errors=True)
    return int(counted[-1]) // requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--code", type=Path, default=None, help="run lakeshare from here")
    parser.add_argument("--routes", nargs="+", choices=list(ROUTES), default=list(ROUTES))
    args = parser.parse_args()
    routes = {"trivial", *args.routes}
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    code = args.code.resolve() if args.code is not None else None
    chosen = [route for route in ROUTES if route in routes]
    with ThreadPoolExecutor(len(chosen)) as pool:
        costs = dict(
            zip(
                chosen,
                pool.map(
                    lambda route: measure(
                        route, args.requests, None if route == "trivial" else code
                    ),
                    chosen,
                ),
                strict=True,
            )
        )
    print(f"lakeshare from: {code or HERE.parent}; {args.requests} requests per route")
    print(f"{'route':<10} {'instructions/request':>21} {'trivial/route':>14}")
    for route, cost in costs.items():
        print(f"{route:<10} {cost:>21,} {costs['trivial'] / cost:>14.3f}")


if __name__ == "__main__":
    main()
