"""What metrics and the access log cost per request, in-process (no network, no server).

    .venv/bin/python bench/metrics_overhead.py [--requests 2000] [--rounds 3]

Drives the real app (`create_app`) through httpx's ASGI transport with `GET /shares` and
`POST …/query {}` on the DAT table `basic_partitioned` (6 files), with the access log
formatted as JSON into /dev/null, in three modes, each in its own process (prometheus-
client picks where values live at import time):

- `baseline`: `metrics.enabled: false` (middleware and access log only) — the baseline;
- `memory`: metrics in the process's own registry (one worker);
- `multiprocess`: values in files under PROMETHEUS_MULTIPROC_DIR (`lakeshare serve`).

Prints microseconds per request (median of the rounds; modes take turns per round) and the
difference to the baseline, plus the throughput of counting file lines in NDJSON bodies.
The machine is shared: compare the modes of one run, not absolutes across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = ("baseline", "memory", "multiprocess")
REPO = Path(__file__).resolve().parent.parent
TOKEN = "bench-bearer-token-0123456789"


def _config(metrics: bool) -> object:
    sys.path.insert(0, str(REPO))
    from sharing.config import parse_config
    from tests.support.corpus import corpus_table

    table = str(corpus_table("levi/dat/basic_partitioned/delta"))
    document = {
        "version": 1,
        "authorization": {"bearerToken": TOKEN},
        "signingSecret": "bench-signing-secret-0123456789",
        "metrics": {"enabled": metrics},
        "shares": [
            {"name": "s", "schemas": [{"name": "d", "tables": [{"name": "t", "location": table}]}]}
        ],
    }
    return parse_config(document, environ={})


async def _drive(requests: int) -> dict[str, float]:
    import httpx

    from app.logs import JsonFormatter
    from app.main import create_app

    access = logging.getLogger("lakeshare.access")
    handler = logging.StreamHandler(open(os.devnull, "w"))  # noqa: SIM115 - lives as long as the run
    handler.setFormatter(JsonFormatter())
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    access.propagate = False

    mode = os.environ["BENCH_MODE"]
    app = create_app(_config(metrics=mode != "baseline"))  # type: ignore[arg-type]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    transport = httpx.ASGITransport(app=app)
    timings: dict[str, float] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for name, call in (
            ("GET /shares", lambda: client.get("/delta-sharing/shares", headers=headers)),
            (
                "POST query (6 files)",
                lambda: client.post(
                    "/delta-sharing/shares/s/schemas/d/tables/t/query", headers=headers, json={}
                ),
            ),
        ):
            for _ in range(50):  # warm up: table loaded, caches filled
                (await call()).raise_for_status()
            begin = time.perf_counter()
            for _ in range(requests):
                (await call()).raise_for_status()
            timings[name] = (time.perf_counter() - begin) / requests * 1e6
    return timings


def _observer_cost() -> float:
    """Microseconds per `Metrics.request_finished` (best of 5 x 20,000 calls)."""
    from app.metrics import Metrics
    from app.middleware import RequestRecord

    metrics = Metrics(_config(metrics=True))  # type: ignore[arg-type]
    route = "/delta-sharing/shares/{share}/schemas/{schema}/tables/{table}/query"
    record = RequestRecord(
        "id",
        "POST",
        "/p",
        route,
        200,
        "s",
        "d",
        "t",
        "127.0.0.1",
        "ua",
        None,
        1000,
        6,
        False,
        None,
        0.01,
    )
    best = float("inf")
    for _ in range(5):
        begin = time.perf_counter()
        for _ in range(20_000):
            metrics.request_finished(record)
        best = min(best, (time.perf_counter() - begin) / 20_000 * 1e6)
    return best


def _child(requests: int) -> None:
    timings = asyncio.run(_drive(requests))
    if os.environ["BENCH_MODE"] != "baseline":
        timings["Metrics.request_finished alone"] = _observer_cost()
    print(json.dumps(timings))


def _run_mode(mode: str, requests: int) -> dict[str, float]:
    env = {**os.environ, "BENCH_MODE": mode, "PYTHONPATH": str(REPO)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as directory:
        if mode == "multiprocess":
            env["PROMETHEUS_MULTIPROC_DIR"] = directory
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--requests", str(requests)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def _counter_throughput() -> tuple[float, float]:
    """MB/s counting file lines: in writer-shaped chunks (a batch of file lines), and in
    chunks cut inside lines (every kind of line start searched)."""
    sys.path.insert(0, str(REPO))
    from app.middleware import _FileActionCounter

    line = b'{"file":{"url":"' + b"x" * 400 + b'","id":"abc","partitionValues":{},"size":1}}\n'
    chunk = line * 2000  # ~1 MB, like one formatted batch
    results = []
    for piece in (chunk, chunk[:-1]):  # the second never ends on a line end
        counter = _FileActionCounter()
        begin = time.perf_counter()
        for _ in range(200):
            counter.feed(piece)
        results.append(len(piece) * 200 / (time.perf_counter() - begin) / 1e6)
    return results[0], results[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        _child(args.requests)
        return
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            runs[mode].append(_run_mode(mode, args.requests))
    print(f"load average {os.getloadavg()[0]:.2f}; {args.requests} requests x {args.rounds} rounds")
    names = list(runs["baseline"][0])
    print(f"{'request':<24}" + "".join(f"{m:>22}" for m in MODES))
    for name in runs["memory"][0]:
        if name not in names:
            cells = [f"{statistics.median(r[name] for r in runs[m]):>10.1f} us" for m in MODES[1:]]
            print(f"{name:<34}{'':>12}" + "".join(f"{c:>22}" for c in cells))
    for name in names:
        base = statistics.median(r[name] for r in runs["baseline"])
        cells = []
        for mode in MODES:
            value = statistics.median(r[name] for r in runs[mode])
            delta = "" if mode == "baseline" else f" ({value - base:+.0f})"
            cells.append(f"{value:>10.0f} us{delta:>9}")
        print(f"{name:<24}" + "".join(f"{c:>22}" for c in cells))
    batches, cut = _counter_throughput()
    print(f"file-line counting: {batches:,.0f} MB/s in writer batches, {cut:,.0f} MB/s cut")


if __name__ == "__main__":
    main()
