"""Bounded soak of `lakeshare serve`: steady load on a table that never stops committing,
first alone (the baseline), then with hostile clients alongside.

    .venv/bin/python bench/soak.py [--duration 600] [--baseline-duration SECONDS]
                                   [--connections 50] [--hostile 12]

Everything runs on 127.0.0.1 and stops by itself. A writer (delta-rs) appends to a served
table every second and checkpoints every 10 commits. `--connections` well-formed clients
loop over a mix of listing (`/shares`, tables of a schema), metadata, version, query and
signed-file requests (the file URL from a query). In the hostile phase `--hostile` clients
also send, in turn: an endless header line (1 MB pieces), a 100 MB declared query body, a
chunked body that never ends, headers a byte at a time (slowloris) and connections that
send nothing.

Printed per phase: requests, statuses, responses >= 500 (must be 0), transport errors,
inconsistent snapshots (a query whose file count is not the count the writer produced at
the version the response names, or a version that goes backwards for one client), p50 and
p99 latency of well-formed requests (the baseline phase is the baseline: the hostile phase
is reported as a ratio to it), what the hostile clients got back, and the server's RSS
(start, peak, end; from /proc). The load generator shares the cores with the server and
the writer: compare the phases, not absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.support.corpus import corpus_table  # noqa: E402
from tests.support.processes import free_port, stop, wait_http  # noqa: E402

TOKEN = "soak-bearer-token-0123456789"
SECRET = "soak-signing-secret-0123456789abcdef"
STATIC = "levi/dat/basic_partitioned/delta"
MOVING = "levi/dat/basic_append/delta"
TABLES = "/shares/s/schemas/d/tables"


# --- the writer -----------------------------------------------------------------------------


class Writer(threading.Thread):
    """Appends one small file per commit every second; a checkpoint every 10 commits.
    Records, per version, how many files the table has (the consistency oracle)."""

    def __init__(self, table: Path) -> None:
        super().__init__(name="writer", daemon=True)
        import deltalake

        self.table = table
        self.stop_event = threading.Event()
        dt = deltalake.DeltaTable(str(table))
        self.files_at: dict[int, int] = {dt.version(): len(dt.file_uris())}
        self.sample = dt.to_pyarrow_table().slice(0, 1)
        self.commits = 0
        self.checkpoints = 0
        self.errors: list[str] = []

    def run(self) -> None:
        import deltalake

        while not self.stop_event.wait(1.0):
            try:
                deltalake.write_deltalake(str(self.table), self.sample, mode="append")
                dt = deltalake.DeltaTable(str(self.table))
                self.files_at[dt.version()] = len(dt.file_uris())
                self.commits += 1
                if self.commits % 10 == 0:
                    dt.create_checkpoint()
                    self.checkpoints += 1
            except Exception as exc:  # report, keep writing
                self.errors.append(repr(exc))


# --- the server -----------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@dataclass
class Phase:
    name: str
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    transport_errors: Counter[str] = field(default_factory=Counter)
    inconsistent: list[str] = field(default_factory=list)
    hostile: Counter[str] = field(default_factory=Counter)
    rss: list[int] = field(default_factory=list)

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


# --- well-formed clients --------------------------------------------------------------------


async def client_loop(base: str, phase: Phase, writer: Writer, deadline: float, seed: int) -> None:
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    last_version = -1
    async with httpx.AsyncClient(
        base_url=base, headers=headers, timeout=60, limits=httpx.Limits(max_connections=1)
    ) as client:
        while time.monotonic() < deadline:
            kind = rng.choices(
                ["shares", "tables", "metadata", "version", "query", "file"],
                weights=[2, 2, 2, 2, 3, 2],
            )[0]
            table = rng.choice(["moving", "static"])
            began = time.perf_counter()
            try:
                if kind == "shares":
                    response = await client.get("/shares")
                elif kind == "tables":
                    response = await client.get("/shares/s/schemas/d/tables")
                elif kind == "metadata":
                    response = await client.get(f"{TABLES}/{table}/metadata")
                elif kind == "version":
                    response = await client.get(f"{TABLES}/{table}/version")
                else:
                    response = await client.post(f"{TABLES}/{table}/query", json={})
                    if kind == "file" and response.status_code == 200:
                        lines = response.content.splitlines()
                        urls = [orjson.loads(x)["file"]["url"] for x in lines[2:]]
                        phase.latencies.append(time.perf_counter() - began)
                        phase.statuses[response.status_code] += 1
                        began = time.perf_counter()
                        response = await client.get(rng.choice(urls), headers={})
                await response.aread()
            except httpx.HTTPError as exc:
                phase.transport_errors[type(exc).__name__] += 1
                continue
            phase.latencies.append(time.perf_counter() - began)
            phase.statuses[response.status_code] += 1
            phase.kinds[kind] += 1
            if kind == "query" and table == "moving" and response.status_code == 200:
                version = int(response.headers["delta-table-version"])
                files = len(response.content.splitlines()) - 2
                expected = writer.files_at.get(version)
                if expected is not None and files != expected:
                    phase.inconsistent.append(f"v{version}: {files} files, expected {expected}")
                if version < last_version:
                    phase.inconsistent.append(f"version went back {last_version} -> {version}")
                last_version = max(last_version, version)


# --- hostile clients ------------------------------------------------------------------------


async def _answer(reader: asyncio.StreamReader, limit: float = 30) -> str:
    try:
        line = await asyncio.wait_for(reader.readline(), limit)
    except TimeoutError:
        return "no answer"
    except ConnectionError:
        return "reset"  # closed on us mid-send: the refusal went down with the reset
    parts = line.split()
    return parts[1].decode() if len(parts) > 1 else "closed"


async def endless_header(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /delta-sharing/shares HTTP/1.1\r\nHost: x\r\nX-Big: ")
    piece = b"a" * (1 << 20)
    try:
        for _ in range(100):
            writer.write(piece)
            await writer.drain()
            if reader.at_eof() or len(reader._buffer):  # type: ignore[attr-defined]
                break
    except ConnectionError:
        pass
    answer = await _answer(reader)
    writer.close()
    return f"header:{answer}"


async def huge_declared_body(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST /delta-sharing{TABLES}/moving/query HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Length: 104857600\r\n\r\n".encode()
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    answer = await _answer(reader)
    writer.close()
    return f"declared-body:{answer}"


async def endless_chunked_body(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST /delta-sharing{TABLES}/moving/query HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    )
    chunk = b"100000\r\n" + b" " * 0x100000 + b"\r\n"
    try:
        for _ in range(100):
            writer.write(chunk)
            await writer.drain()
            if reader.at_eof() or len(reader._buffer):  # type: ignore[attr-defined]
                break
    except ConnectionError:
        pass
    answer = await _answer(reader)
    writer.close()
    return f"chunked-body:{answer}"


async def slowloris(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /delta-sharing/shares HTTP/1.1\r\n")
        for _ in range(120):
            await asyncio.sleep(0.5)
            writer.write(b"X: y\r\n")
            await writer.drain()
            if reader.at_eof() or len(reader._buffer):  # type: ignore[attr-defined]
                break
    except ConnectionError:
        pass
    answer = await _answer(reader, 5)
    writer.close()
    return f"slowloris:{answer}"


async def silent(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answer = await _answer(reader, 60)
    writer.close()
    return f"silent:{answer}"


async def hostile_loop(port: int, phase: Phase, deadline: float, seed: int) -> None:
    rng = random.Random(seed)
    attacks = [endless_header, huge_declared_body, endless_chunked_body, slowloris, silent]
    while time.monotonic() < deadline:
        attack = rng.choice(attacks)
        try:
            outcome = await attack(port)
        except OSError as exc:
            outcome = f"{attack.__name__}:{type(exc).__name__}"
        phase.hostile[outcome] += 1


# --- phases ---------------------------------------------------------------------------------


async def run_phase(
    phase: Phase,
    *,
    base: str,
    port: int,
    pid: int,
    writer: Writer,
    seconds: float,
    connections: int,
    hostile: int,
) -> None:
    deadline = time.monotonic() + seconds
    tasks = [client_loop(base, phase, writer, deadline, i) for i in range(connections)]
    tasks += [hostile_loop(port, phase, deadline, 1000 + i) for i in range(hostile)]

    async def sample_rss() -> None:
        while time.monotonic() < deadline:
            phase.rss.append(rss_kib(pid))
            await asyncio.sleep(1)

    await asyncio.gather(sample_rss(), *tasks)


def report(phase: Phase, baseline: Phase | None) -> None:
    total = sum(phase.statuses.values())
    server_errors = sum(n for status, n in phase.statuses.items() if status >= 500)
    p50, p99 = phase.percentile(50), phase.percentile(99)
    print(f"\n== {phase.name}")
    print(f"well-formed requests: {total}  by kind: {dict(phase.kinds)}")
    print(f"statuses: {dict(sorted(phase.statuses.items()))}")
    print(f"responses >= 500: {server_errors}")
    print(f"transport errors: {dict(phase.transport_errors) or 0}")
    print(f"inconsistent snapshots: {len(phase.inconsistent)} {phase.inconsistent[:5]}")
    ratio = ""
    if baseline is not None:
        ratio = f"  (p99 {p99 / baseline.percentile(99):.2f}x the baseline's)"
    print(f"latency ms: p50 {p50:.1f}  p99 {p99:.1f}{ratio}")
    if phase.hostile:
        print(f"hostile clients got: {dict(sorted(phase.hostile.items()))}")
    if phase.rss:
        print(
            f"server RSS MiB: start {phase.rss[0] / 1024:.0f}  peak {max(phase.rss) / 1024:.0f}"
            f"  end {phase.rss[-1] / 1024:.0f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600, help="hostile phase, seconds")
    parser.add_argument(
        "--baseline-duration", type=float, help="phase without hostile clients (default: same)"
    )
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--hostile", type=int, default=12)
    args = parser.parse_args()
    baseline_seconds = args.baseline_duration or args.duration

    work = Path(tempfile.mkdtemp(prefix="lakeshare-soak-"))
    try:
        moving = work / "moving"
        shutil.copytree(corpus_table(MOVING), moving)
        port = free_port()
        config = {
            "version": 1,
            "host": "127.0.0.1",
            "port": port,
            "authorization": {"bearerToken": TOKEN},
            "signingSecret": SECRET,
            "logLevel": "ERROR",
            "shares": [
                {
                    "name": "s",
                    "schemas": [
                        {
                            "name": "d",
                            "tables": [
                                {"name": "moving", "location": str(moving)},
                                {"name": "static", "location": str(corpus_table(STATIC))},
                            ],
                        }
                    ],
                }
            ],
        }
        config_path = work / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        log = (work / "server.log").open("wb")
        server = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from app.cli import main; sys.exit(main(sys.argv[1:]))",
                "serve",
                "--config",
                str(config_path),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=HERE.parent,
        )
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", server)
            writer = Writer(moving)
            writer.start()
            base = f"http://127.0.0.1:{port}/delta-sharing"
            print(
                f"soak: {args.connections} connections, baseline {baseline_seconds:g}s, "
                f"then {args.hostile} hostile clients for {args.duration:g}s; "
                "writer: 1 commit/s, checkpoint every 10"
            )
            baseline = Phase("baseline: load + writer, no hostile clients")
            asyncio.run(
                run_phase(
                    baseline,
                    base=base,
                    port=port,
                    pid=server.pid,
                    writer=writer,
                    seconds=baseline_seconds,
                    connections=args.connections,
                    hostile=0,
                )
            )
            hostile = Phase("hostile: the same load + writer + hostile clients")
            asyncio.run(
                run_phase(
                    hostile,
                    base=base,
                    port=port,
                    pid=server.pid,
                    writer=writer,
                    seconds=args.duration,
                    connections=args.connections,
                    hostile=args.hostile,
                )
            )
            writer.stop_event.set()
            writer.join(timeout=30)
            report(baseline, None)
            report(hostile, baseline)
            print(
                f"\nwriter: {writer.commits} commits, {writer.checkpoints} checkpoints, "
                f"errors {len(writer.errors)} {writer.errors[:2]}"
            )
            failures = (
                sum(n for p in (baseline, hostile) for s, n in p.statuses.items() if s >= 500)
                + len(baseline.inconsistent)
                + len(hostile.inconsistent)
            )
            return 1 if failures else 0
        finally:
            stop(server)
            log.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
