"""End-to-end `/query` times for a big table on S3 (moto) and on local disk, over real HTTP.

    .venv/bin/python bench/query_e2e.py [--files 1000000] [--runs 3] [--concurrent 4]

Generates a table whose log is one classic checkpoint with `--files` adds (the generator of
bench/snapshot_load.py), uploads its `_delta_log` to a moto S3 server on 127.0.0.1 (the data
files are not needed: the server only signs their URLs), and serves it, and the same table
on local disk, with the real server (`lakeshare serve`, one worker per core) in its own
process. Full `POST /query` responses are streamed with httpx: time to the first line and
to the last byte, in parquet and delta format.

Cold: each table and format `--cold-runs` times on a server of its own that has never
loaded the table (a fresh process and an empty snapshot store). Warm: one server, each
table and format asked once to warm it, then `--runs` times. The table prints the medians,
with the server's CPU seconds of a warm request (all its processes: the figure to compare
on a busy machine, where wall times mostly measure the load).

`--concurrent N` then starts the server again for each table, warms it, and times one
response alone and N at once (each read by its own curl process, so the clients do not
share a GIL), sampling the server's memory meanwhile: goal each of the N within 2.5x of
one alone, the server's memory (proportional set size of all its processes, mapped
snapshot pages included) under 2x the snapshot's store file.

`--compare-signing` then serves both tables from two servers at once, one signing in its
signing helper processes (the default) and one in its workers (`signingHelper: false`),
and alternates their runs: the old and the new way in the same load, wall and CPU time.

`--compare-with CHECKOUT` then serves both tables from this checkout's server and from
the server code of another checkout (say `git worktree add /tmp/old <commit>`), runs
alternated: the old and the new code in the same load, wall and CPU time per response,
and whether their bytes match (clock-dependent signatures and expiries masked).

Baseline in the same run: botocore's `generate_presigned_url` for the same number of keys
(timed on a share and extrapolated). The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import boto3
import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from snapshot_load import write_table  # noqa: E402

from tests.support.processes import free_port, stop, wait_http  # noqa: E402

TOKEN = "bench-bearer-token-0123456789"
SECRET = "bench-signing-secret-0123456789abcdef"
BUCKET = "bench-bucket"
PREFIX = "warehouse/big"
SERVER = {"workers": 0}
"""Settings of every server the bench starts (`--workers`; 0: one per core)."""
BOTO_SHARE = 10  # botocore signs 1/BOTO_SHARE of the keys; its time is extrapolated


def start_moto(workdir: Path) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    binary = Path(sys.executable).with_name("moto_server")
    log = open(workdir / "moto.log", "wb")  # noqa: SIM115 (lives as long as the process)
    process = subprocess.Popen(
        [str(binary), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    endpoint = f"http://127.0.0.1:{port}"
    wait_http(endpoint, process)
    return endpoint, process


def upload_log(endpoint: str, table: Path) -> None:
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    client.create_bucket(Bucket=BUCKET)
    for path in sorted((table / "_delta_log").iterdir()):
        client.upload_file(str(path), BUCKET, f"{PREFIX}/_delta_log/{path.name}")


def write_config(
    path: Path,
    endpoint: str,
    local_table: Path,
    snapshot_cache: bool,
    cache_dir: Path | None = None,
    only: str | None = None,
    signing_helper: bool = True,
) -> None:
    tables = [
        {
            "name": "s3",
            "location": f"s3a://{BUCKET}/{PREFIX}",
            "storage": {
                "endpointUrl": endpoint,
                "pathStyle": True,
                "region": "us-east-1",
                "accessKeyId": "bench",
                "secretAccessKey": "${BENCH_SECRET_KEY}",
            },
        },
        {"name": "local", "location": str(local_table)},
    ]
    if only is not None:  # the server's start-up table check then loads just this one
        tables = [t for t in tables if t["name"] == only]
    config = {
        "version": 1,
        "authorization": {"bearerToken": TOKEN},
        "signingSecret": SECRET,
        "queryTablePageSizeLimit": 1_000_000,
        "requestTimeoutSeconds": 0,
        "logLevel": "WARNING",
        "shares": [{"name": "bench", "schemas": [{"name": "s", "tables": tables}]}],
        "signingHelper": signing_helper,
        **SERVER,
    }
    if not snapshot_cache:
        config["snapshotCacheDir"] = "off"  # snapshots loaded in memory: statistics packed
    elif cache_dir is not None:
        config["snapshotCacheDir"] = str(cache_dir)
    path.write_text(json.dumps(config))  # JSON is YAML


def start_server(
    config: Path, workdir: Path, code: Path | None = None
) -> tuple[str, subprocess.Popen[bytes]]:
    """`lakeshare serve` with `config`; `code`: the server's code from that checkout (its
    packages first on the path) instead of this one's, with this environment."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("lakeshare"))]
    env = {**os.environ, "BENCH_SECRET_KEY": "bench"}
    if code is not None:
        command = [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"]
        env["PYTHONPATH"] = str(code)
    log = open(workdir / "server.log", "ab")  # noqa: SIM115 (lives as long as the process)
    process = subprocess.Popen(
        [
            *command,
            "serve",
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=code,
    )
    base = f"http://127.0.0.1:{port}/delta-sharing"
    wait_http(f"{base}/shares", process)
    return base, process


def query_url(base: str, table: str) -> str:
    return f"{base}/shares/bench/schemas/s/tables/{table}/query"


def query_headers(fmt: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {TOKEN}",
        "delta-sharing-capabilities": f"responseformat={fmt}",
    }


def timed_query(client: httpx.Client, base: str, table: str, fmt: str) -> tuple[float, float, int]:
    """(seconds to the first line, seconds to the last byte, lines) of one full query."""
    start = time.perf_counter()
    first = None
    lines = 0
    url = query_url(base, table)
    with client.stream("POST", url, headers=query_headers(fmt), json={}) as response:
        response.raise_for_status()
        for chunk in response.iter_bytes():
            if first is None and b"\n" in chunk:
                first = time.perf_counter() - start
            lines += chunk.count(b"\n")
    total = time.perf_counter() - start
    return first or total, total, lines


def descendants(pid: int) -> list[int]:
    """`pid` and all its descendants (the server's workers and their signing helpers), Linux."""
    found = [pid]
    for each in found:  # children are listed by the thread that started them
        for task in Path(f"/proc/{each}/task").glob("*/children"):
            try:
                found += [int(p) for p in task.read_text().split()]
            except OSError:
                continue
    return found


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its descendants (the server's workers and their
    signing helpers), Linux."""
    total = 0.0
    for each in descendants(pid):
        try:
            with open(f"/proc/{each}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def children_cpu_seconds() -> float:
    """User + system CPU of this script's children that have been waited for (the readers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def wait_idle(pid: int, quiet: float = 0.02, period: float = 0.5, limit: float = 120) -> None:
    """Wait until the server's processes use less than `quiet` CPU seconds per `period`:
    every worker has started and the start-up table check has loaded the tables, so the
    warm figures measure the queries alone."""
    deadline = time.monotonic() + limit
    before = tree_cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(period)
        now = tree_cpu_seconds(pid)
        if now - before < quiet:
            return
        before = now


def timed_cold_query(
    client: httpx.Client, base: str, table: str, fmt: str, pid: int
) -> tuple[float, float, int, float, float]:
    """`timed_query`, plus the server's CPU seconds (all its processes) spent by the first
    file line and by the end: on a shared machine, what the server did, not the wait."""
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "delta-sharing-capabilities": f"responseformat={fmt}",
    }
    url = f"{base}/shares/bench/schemas/s/tables/{table}/query"
    cpu0 = tree_cpu_seconds(pid)
    start = time.perf_counter()
    first = first_cpu = None
    lines = 0
    with client.stream("POST", url, headers=headers, json={}) as response:
        response.raise_for_status()
        for chunk in response.iter_bytes():
            lines += chunk.count(b"\n")
            if first is None and lines >= 3:  # protocol, metadata, first file
                first = time.perf_counter() - start
                first_cpu = tree_cpu_seconds(pid) - cpu0
    total = time.perf_counter() - start
    total_cpu = tree_cpu_seconds(pid) - cpu0
    return first or total, total, lines, first_cpu or total_cpu, total_cpu


def cold_queries(
    workdir: Path, endpoint: str, table: Path, snapshot_cache: bool, runs: int
) -> dict[tuple[str, str], list[tuple[float, float, int, float, float]]]:
    """Each (table, format) `runs` times as the first query of a server of its own that
    shares only that table, with an empty snapshot cache: sent as soon as the server
    answers, so it meets the table being loaded by the server's start-up table check (it
    streams from that load: sharing.query.early), or, on the other worker, cold (it reads
    the log's first rows itself while the first worker builds the store file). The CPU
    figures are the whole server's (every worker, the start-up check's load included)."""
    results: dict[tuple[str, str], list[tuple[float, float, int, float, float]]] = {}
    for run in range(runs):
        for name in ("s3", "local"):
            for fmt in ("parquet", "delta"):
                config = workdir / f"cold-{run}-{name}-{fmt}.yaml"
                cache = workdir / f"cold-cache-{run}-{name}-{fmt}"
                write_config(config, endpoint, table, snapshot_cache, cache_dir=cache, only=name)
                base, server = start_server(config, workdir)
                try:
                    with httpx.Client(timeout=300) as client:
                        result = timed_cold_query(client, base, name, fmt, server.pid)
                finally:
                    stop(server, signal.SIGINT)
                    shutil.rmtree(cache, ignore_errors=True)
                results.setdefault((name, fmt), []).append(result)
    return results


def print_cold(
    results: dict[tuple[str, str], list[tuple[float, float, int, float, float]]],
) -> None:
    """Median cold first line and total per (table, format), with the server's CPU time
    by then (all its processes), against the issue's goal."""
    print("\ncold (fresh server and snapshot cache per query), median of runs:")
    print(
        f"{'table':<6} {'format':<8} {'first line':>11} {'(cpu)':>8} {'total':>8} {'(cpu)':>8}"
        f" {'lines':>9}  each run's first line (ms)"
    )
    verdicts = []
    for (name, fmt), runs in results.items():
        first = statistics.median(r[0] for r in runs)
        total = statistics.median(r[1] for r in runs)
        first_cpu = statistics.median(r[3] for r in runs)
        total_cpu = statistics.median(r[4] for r in runs)
        each = ", ".join(f"{r[0] * 1000:.0f}" for r in runs)
        print(
            f"{name:<6} {fmt:<8} {first * 1000:>9.0f}ms {first_cpu * 1000:>6.0f}ms {total:>7.2f}s"
            f" {total_cpu:>7.2f}s {runs[0][2]:>9,}  {each}"
        )
        goal = 2.0 if name == "s3" else 1.0
        verdicts.append((name, fmt, first, goal))
    for name, fmt, first, goal in verdicts:
        met = "met" if first < goal else "NOT met"
        print(f"goal: cold first line of {name} {fmt} under {goal:.0f} s: {met} ({first:.2f} s)")


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"


def server_pids(server: subprocess.Popen[bytes]) -> list[int]:
    """The supervisor, its worker processes and their signing helpers."""
    return descendants(server.pid)


def memory_bytes(pids: list[int]) -> tuple[int, int]:
    """(proportional set size of all the processes, largest resident set of one)."""
    pss = rss = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        values = {
            line.split(":")[0]: int(line.split()[1]) * 1024
            for line in text.splitlines()[1:]
            if line.split(":")[0] in ("Rss", "Pss")
        }
        pss += values.get("Pss", 0)
        rss = max(rss, values.get("Rss", 0))
    return pss, rss


def median(values: list[float]) -> float:
    return statistics.median(values)


def boto3_presign_seconds(files: int) -> float:
    """botocore's generate_presigned_url for `files` keys (timed on a share)."""
    client = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=boto3.session.Config(s3={"addressing_style": "path"}, signature_version="s3v4"),
    )
    count = max(1, files // BOTO_SHARE)
    start = time.perf_counter()
    for i in range(count):
        client.generate_presigned_url(
            "get_object",
            Params={
                "Bucket": BUCKET,
                "Key": f"{PREFIX}/part={i % 100}/part-{i}-c000.snappy.parquet",
            },
            ExpiresIn=3600,
        )
    return (time.perf_counter() - start) * files / count


TABLES = ("s3", "local")
FORMATS = ("parquet", "delta")
WARM_GOAL_S = 3.0
ColdResults = dict[tuple[str, str], list[tuple[float, float, int, float, float]]]


@dataclass
class Warm:
    """The warm figures of one table and format over the runs."""

    first: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


K = TypeVar("K")


def alternate_runs(
    client: httpx.Client,
    servers: Mapping[K, tuple[str, subprocess.Popen[bytes]]],
    cells: Mapping[tuple[str, str, K], Warm],
    name: str,
    fmt: str,
    args: argparse.Namespace,
) -> None:
    """`args.runs` warm queries of one table and format per server, the servers taking
    turns so that all see the same load: total time and server CPU (helpers included)."""
    for _ in range(args.runs):
        for key, (base, server) in servers.items():
            cell = cells[(name, fmt, key)]
            before = tree_cpu_seconds(server.pid)
            _, total, lines = timed_query(client, base, name, fmt)
            cell.cpu.append(tree_cpu_seconds(server.pid) - before)
            check_lines(lines, args.files)
            cell.total.append(total)


def fresh_config(
    workdir: Path,
    endpoint: str,
    table: Path,
    name: str,
    snapshot_cache: bool,
    only: str | None = None,
    signing_helper: bool = True,
) -> Path:
    """A configuration whose snapshot store is a new empty folder (sharing only the table
    `only` when given)."""
    cache = workdir / f"snapshots-{name}"
    shutil.rmtree(cache, ignore_errors=True)
    config = workdir / f"config-{name}.yaml"
    write_config(
        config,
        endpoint,
        table,
        snapshot_cache,
        cache_dir=cache,
        only=only,
        signing_helper=signing_helper,
    )
    return config


def warm_queries(
    args: argparse.Namespace, workdir: Path, endpoint: str, table: Path
) -> dict[tuple[str, str], Warm]:
    """One server: each table and format once to warm it, then `--runs` times."""
    cells = {(name, fmt): Warm() for name in TABLES for fmt in FORMATS}
    config = fresh_config(workdir, endpoint, table, "warm", not args.no_snapshot_cache)
    base, server = start_server(config, workdir)
    try:
        wait_idle(server.pid)
        with httpx.Client(timeout=600) as client:
            for name in TABLES:
                for fmt in FORMATS:
                    check_lines(timed_query(client, base, name, fmt)[2], args.files)
                    cell = cells[(name, fmt)]
                    for _ in range(args.runs):
                        before = tree_cpu_seconds(server.pid)
                        first, total, lines = timed_query(client, base, name, fmt)
                        cell.cpu.append(tree_cpu_seconds(server.pid) - before)
                        check_lines(lines, args.files)
                        cell.first.append(first)
                        cell.total.append(total)
    finally:
        stop(server, signal.SIGINT)
    return cells


def compare_signing(args: argparse.Namespace, workdir: Path, endpoint: str, table: Path) -> None:
    """Warm responses from two servers at once, one signing in its signing helper
    processes and one in its workers (`signingHelper: false`), runs alternated so both see
    the same load: wall time and the server's CPU (helpers included), medians."""
    servers = {}
    try:
        for helper in (True, False):
            name = "helper" if helper else "in-worker"
            config = fresh_config(
                workdir, endpoint, table, name, not args.no_snapshot_cache, None, helper
            )
            servers[helper] = start_server(config, workdir)
        for _, server in servers.values():
            wait_idle(server.pid)
        cells = {(t, fmt, helper): Warm() for t in TABLES for fmt in FORMATS for helper in servers}
        with httpx.Client(timeout=600) as client:
            for name, fmt, helper in cells:
                check_lines(timed_query(client, servers[helper][0], name, fmt)[2], args.files)
            for name in TABLES:
                for fmt in FORMATS:
                    alternate_runs(client, servers, cells, name, fmt, args)
    finally:
        for _, server in servers.values():
            stop(server, signal.SIGINT)
    print(f"\nSigning in the helper vs in the worker, runs alternated (median of {args.runs}):\n")
    print("| table | format | signed in | warm total | server CPU (helpers included) |")
    print("|---|---|---|---|---|")
    for (name, fmt, helper), cell in cells.items():
        total = median(cell.total)
        label = "S3 (moto)" if name == "s3" else "local"
        print(
            f"| {label} | {fmt} | "
            f"{'helper process' if helper else 'worker (signingHelper: false)'} | "
            f"{total:.2f} s ({args.files / total / 1000:,.0f}k files/s) | "
            f"{median(cell.cpu):.2f} s |"
        )


def compare_code(args: argparse.Namespace, workdir: Path, endpoint: str, table: Path) -> None:
    """Warm responses from two servers at once, this checkout's and `--compare-with`'s (the
    old code), runs alternated so both see the same load: wall time, the server's CPU per
    response (helpers included) and whether both sent the same bytes (one response per
    table and format, its clock-dependent signatures and expiries masked)."""
    old = Path(args.compare_with).resolve()
    servers: dict[str, tuple[str, subprocess.Popen[bytes]]] = {}
    try:
        for label, code in (("new", None), ("old", old)):
            config = fresh_config(workdir, endpoint, table, label, not args.no_snapshot_cache)
            servers[label] = start_server(config, workdir, code)
        for _, server in servers.values():
            wait_idle(server.pid)
        cells = {(t, fmt, label): Warm() for t in TABLES for fmt in FORMATS for label in servers}
        same: dict[tuple[str, str], bool] = {}
        with httpx.Client(timeout=600) as client:
            for name in TABLES:
                for fmt in FORMATS:
                    digests = {
                        label: masked_digest(client, base, name, fmt)
                        for label, (base, _) in servers.items()
                    }
                    same[(name, fmt)] = digests["new"] == digests["old"]
                    alternate_runs(client, servers, cells, name, fmt, args)
    finally:
        for _, server in servers.values():
            stop(server, signal.SIGINT)
    print(f"\nThis code (new) vs {old} (old), runs alternated (median of {args.runs}):\n")
    print("| table | format | old: total / CPU | new: total / CPU | CPU new/old | same bytes |")
    print("|---|---|---|---|---|---|")
    for name in TABLES:
        for fmt in FORMATS:
            before, after = cells[(name, fmt, "old")], cells[(name, fmt, "new")]
            old_cpu, new_cpu = median(before.cpu), median(after.cpu)
            label = "S3 (moto)" if name == "s3" else "local"
            print(
                f"| {label} | {fmt} | {median(before.total):.2f} s / {old_cpu:.2f} s | "
                f"{median(after.total):.2f} s / {new_cpu:.2f} s | {new_cpu / old_cpu:.2f} | "
                f"{'yes' if same[(name, fmt)] else 'NO'} |"
            )


# Clock-dependent parts, and the server's own port in local file URLs.
_VARYING = re.compile(
    rb"(X-Amz-Date=|X-Amz-Signature=|exp=|sig=|Timestamp\":|127\.0\.0\.1:)[0-9A-Za-z]+"
)


def masked_digest(client: httpx.Client, base: str, table: str, fmt: str) -> str:
    """SHA-256 of one whole response with what depends on the clock (signatures, dates,
    expiries) masked: two servers' responses compare equal when all else is."""
    digest = hashlib.sha256()
    tail = b""
    url = query_url(base, table)
    with client.stream("POST", url, headers=query_headers(fmt), json={}) as response:
        response.raise_for_status()
        for chunk in response.iter_bytes():
            text = tail + chunk
            cut = text.rfind(b"\n") + 1
            digest.update(_VARYING.sub(rb"\1", text[:cut]))
            tail = text[cut:]
    digest.update(_VARYING.sub(rb"\1", tail))
    return digest.hexdigest()


def check_lines(lines: int, files: int) -> None:
    if lines != files + 2:
        raise SystemExit(f"a response had {lines:,} lines, not {files + 2:,}")


def print_table(
    cold: ColdResults, warm: dict[tuple[str, str], Warm], args: argparse.Namespace
) -> bool:
    """The issue's table: cold and warm first line / total per table and format (medians),
    with the server's CPU seconds of a warm response; whether every warm one met the goal."""
    print(
        f"\n{args.files:,} files; cold: median of {args.cold_runs}, warm: median of {args.runs}:\n"
    )
    print("| table | format | cold: first line / total | warm: first line / total | warm CPU |")
    print("|---|---|---|---|---|")
    met = True
    for (name, fmt), cell in warm.items():
        total = median(cell.total)
        met = met and total <= WARM_GOAL_S
        runs = cold.get((name, fmt))
        cold_text = "-"
        if runs:
            first_ms = median([r[0] for r in runs]) * 1000
            cold_text = f"{first_ms:,.0f} ms / {median([r[1] for r in runs]):.2f} s"
        label = "S3 (moto)" if name == "s3" else "local"
        print(
            f"| {label} | {fmt} | {cold_text} | {median(cell.first) * 1000:,.0f} ms / "
            f"{total:.2f} s ({args.files / total / 1000:,.0f}k files/s) | "
            f"{median(cell.cpu):.2f} s |"
        )
    return met


def curl_query(base: str, table: str, fmt: str) -> subprocess.Popen[bytes]:
    """One full query read by curl (prints its total seconds)."""
    command = ["curl", "-sS", "-o", "/dev/null", "-w", "%{time_total} %{http_code}", "-X", "POST"]
    for name, value in query_headers(fmt).items():
        command += ["-H", f"{name}: {value}"]
    command += ["-H", "content-type: application/json", "-d", "{}", query_url(base, table)]
    return subprocess.Popen(command, stdout=subprocess.PIPE)


def curl_seconds(process: subprocess.Popen[bytes]) -> float:
    out, _ = process.communicate(timeout=900)
    seconds, status = out.decode().split()
    if status != "200":
        raise SystemExit(f"a concurrent query answered {status}")
    return float(seconds)


def concurrent_memory_peak(
    server: subprocess.Popen[bytes], base: str, table: str, fmt: str, count: int
) -> list[int]:
    """(PSS of the server's processes, largest RSS of one) at the peak of `count` responses
    at once, sampled every 0.1 s: a second round, after the timed one."""
    peak = [0, 0]
    running = [curl_query(base, table, fmt) for _ in range(count)]
    while any(p.poll() is None for p in running):
        # Listed each time: signing helpers start with the first big batch.
        pss, rss = memory_bytes(server_pids(server))
        peak = [max(peak[0], pss), max(peak[1], rss)]
        time.sleep(0.1)
    for process in running:
        curl_seconds(process)
    return peak


def run_concurrent(
    args: argparse.Namespace, workdir: Path, endpoint: str, table: Path, moto: int
) -> bool:
    """Per table: a fresh server, warmed, then each format alone and `--concurrent` at once.

    Besides the server's CPU it prints what else ran on the cores while the N ran (their
    `curl` readers, moto, this script sampling memory), and the least time the N could take
    on this machine's cores with all that CPU (a floor for the ratio, whatever the server
    does with its cores: N responses need N times one's CPU). The server's memory at the
    peak is sampled in a second round of N."""
    met = True
    print(f"\n{args.concurrent} concurrent queries (each read by curl), per table and format:\n")
    print(
        "| table | format | alone | each of N at once (max) | ratio | server memory (PSS) "
        "| snapshot | server CPU: alone / all N | other CPU during the N: readers, moto, "
        "bench | floor on the cores: time, ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    cores = len(os.sched_getaffinity(0))
    for name in TABLES:
        config = fresh_config(
            workdir, endpoint, table, f"concurrent-{name}", not args.no_snapshot_cache, name
        )
        base, server = start_server(config, workdir)
        try:
            wait_idle(server.pid)
            for fmt in FORMATS:  # load the snapshot and hash both id schemes
                curl_seconds(curl_query(base, name, fmt))
            # The goal's yardstick is the snapshot's store file alone; the file-id sidecars
            # next to it (shared by the workers) count in the server's memory, not here.
            store = workdir / f"snapshots-concurrent-{name}"
            snapshot = sum(f.stat().st_size for f in store.rglob("*.snapshot"))
            wait_idle(server.pid)
            rest = memory_bytes(server_pids(server))[0]  # warm, before the measured queries
            for fmt in FORMATS:
                cpu_start = tree_cpu_seconds(server.pid)
                alone = curl_seconds(curl_query(base, name, fmt))
                cpu_alone = tree_cpu_seconds(server.pid) - cpu_start
                # Timed without sampling memory: reading the server's smaps ten times a
                # second costs this script a sixth of a core, taken from the N.
                readers_start = children_cpu_seconds()
                moto_start = tree_cpu_seconds(moto)
                bench_start = own_cpu_seconds()
                running = [curl_query(base, name, fmt) for _ in range(args.concurrent)]
                times = [curl_seconds(p) for p in running]
                cpu_all = tree_cpu_seconds(server.pid) - cpu_start - cpu_alone
                readers = children_cpu_seconds() - readers_start
                moto_cpu = tree_cpu_seconds(moto) - moto_start
                bench_cpu = own_cpu_seconds() - bench_start
                floor = (cpu_all + readers + moto_cpu + bench_cpu) / cores
                peak = concurrent_memory_peak(server, base, name, fmt, args.concurrent)
                ratio = max(times) / alone
                sidecars = sum(f.stat().st_size for f in store.rglob("*.snapshot.*"))
                ok = ratio <= 2.5 and peak[0] < 2 * snapshot
                met = met and ok
                label = "S3 (moto)" if name == "s3" else "local"
                print(
                    f"| {label} | {fmt} | {alone:.2f} s | {max(times):.2f} s | {ratio:.2f}x | "
                    f"{peak[0] / 2**20:,.0f} MiB ({peak[0] / snapshot:.2f}x; at rest "
                    f"{rest / 2**20:,.0f} MiB; largest process RSS {peak[1] / 2**20:,.0f} MiB) | "
                    f"{snapshot / 2**20:,.0f} MiB "
                    f"(+ {sidecars / 2**20:,.0f} MiB of file ids) | {cpu_alone:.2f} s / "
                    f"{cpu_all:.2f} s | {readers:.2f} s, {moto_cpu:.2f} s, {bench_cpu:.2f} s | "
                    f"{floor:.2f} s, {floor / alone:.2f}x |"
                )
        finally:
            stop(server, signal.SIGINT)
    return met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3, help="warm queries per table and format")
    parser.add_argument(
        "--cold-runs",
        type=int,
        default=3,
        help="cold queries per table and format, each on a fresh server (0: none)",
    )
    parser.add_argument(
        "--concurrent",
        type=int,
        default=4,
        help="queries at once in the concurrency measurement (0: skip it)",
    )
    parser.add_argument(
        "--no-snapshot-cache",
        action="store_true",
        help="serve snapshots loaded in memory (statistics packed) instead of the server's "
        "default snapshot cache (mapped store files, statistics as strings)",
    )
    parser.add_argument("--no-boto", action="store_true", help="skip the botocore baseline")
    parser.add_argument(
        "--compare-signing",
        action="store_true",
        help="also time both tables signed in the workers (signingHelper: false) against "
        "the signing helper, runs alternated between two servers",
    )
    parser.add_argument(
        "--compare-with",
        metavar="CHECKOUT",
        help="also time this code against the server code of another checkout (e.g. a git "
        "worktree of the old commit), two servers, runs alternated, CPU per response",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="worker processes of every server the bench starts (0, the default: one per "
        "core, what `lakeshare serve` runs)",
    )
    args = parser.parse_args()
    SERVER["workers"] = args.workers

    print(f"before: {load_average()}; server workers: {args.workers or 'one per core'}")
    workdir = Path(tempfile.mkdtemp(prefix="lakeshare-query-bench-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        table = workdir / "big"
        t0 = time.perf_counter()
        write_table(table, args.files, 0)
        print(f"generated a {args.files:,}-file table in {time.perf_counter() - t0:.1f} s")
        endpoint, moto = start_moto(workdir)
        processes.append(moto)
        upload_log(endpoint, table)
        cold: ColdResults = {}
        if args.cold_runs:
            cold = cold_queries(
                workdir, endpoint, table, not args.no_snapshot_cache, args.cold_runs
            )
            print_cold(cold)
            print(load_average())
        warm_met = None
        if args.runs > 0:
            warm = warm_queries(args, workdir, endpoint, table)
            warm_met = print_table(cold, warm, args)
            print(load_average())
        if args.compare_signing:
            compare_signing(args, workdir, endpoint, table)
            print(load_average())
        if args.compare_with:
            compare_code(args, workdir, endpoint, table)
            print(load_average())
        concurrent_met = None
        if args.concurrent > 0:
            concurrent_met = run_concurrent(args, workdir, endpoint, table, moto.pid)
            print(load_average())
        if not args.no_boto:
            boto = boto3_presign_seconds(args.files)
            print(
                f"\nbotocore generate_presigned_url for {args.files:,} keys: {boto:.2f} s "
                f"(timed on {args.files // BOTO_SHARE:,}, extrapolated)"
            )
        if warm_met is not None:
            print(
                f"\ngoal: every warm response within {WARM_GOAL_S:.0f} s "
                f"(>= {args.files / WARM_GOAL_S / 1000:,.0f}k files/s): "
                f"{'met' if warm_met else 'NOT met'}"
            )
        if concurrent_met is not None:
            print(
                f"goal: {args.concurrent} at once each within 2.5x of one alone, server memory "
                f"under 2x the snapshot: {'met' if concurrent_met else 'NOT met'}"
            )
        print(f"after: {load_average()}")
    finally:
        for process in reversed(processes):
            stop(process, signal.SIGINT)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
