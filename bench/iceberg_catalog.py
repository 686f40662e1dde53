"""The Iceberg REST catalog over HTTP (`lakeshare serve` in its own process, one worker).

1. `loadTable` on a 100k-file table (bench/iceberg_metadata.py's table: 50 partitions,
   JSON statistics; the data files are not needed): the first request, which loads the
   Delta snapshot and generates the Iceberg metadata (cold), against loading the same
   Delta snapshot in this process (the baseline, same run); then warm requests (the
   files exist: a lookup; goal < 20 ms), and warm requests with `If-None-Match` (304).
2. A PyIceberg 0.12 full scan of a local 200-file table through the catalog, its files on
   the server's S3 endpoint (what a client on another machine does), against pyarrow
   reading the same parquet files directly (goal <= 1.3x) and pyarrow reading them
   through the S3 endpoint with the same key (the transport alone): once with a key
   opening the table's folder (`historyShared`), once with a key limited to the files the
   metadata names (a table without `historyShared`: every request is checked against
   that set, sharing.iceberg.named), with the scan's planning (manifests) timed apart.

Wall times (median of `--repeat`), with the load average, since other work shares the
machine: compare within the run.

Server CPU (the server's processes' user + system time) is printed per read and per file
beside the S3 endpoint's and the scans' times: the figure to judge the endpoint by on a
shared machine. The client's CPU (this process: pyarrow's and PyIceberg's threads) is
printed too: a scan through the endpoint costs the client itself more than reading the
files from disk, which bounds the ratio whatever the server does.

The scans run against a server without and with `sendfile` for file bodies
(`limits.sendfile`, app.zero_copy), and with `--compare REF` against REF's server with
`sendfile` too, pyarrow's direct read timed again before each; `--scan-rounds N` repeats
them, the order reversed every other round, and a summary gives each variant's median
ratio and server CPU per file.

With `--compare REF`, the cold loadTable is also timed on a server of git revision REF
(exported with `git archive`, run with this virtualenv), alternating with this tree's
server `--cold-runs` times (each a new server and an empty metadata cache): old and new
code in one run, by their server CPU.

Usage: python bench/iceberg_catalog.py [--files N] [--scan-files M] [--rows-per-file R]
       [--repeat K] [--workers W] [--compare REF] [--cold-runs C] [--scan-rounds S]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from iceberg_metadata import write_table as write_big_table  # noqa: E402

from sharing.catalog import SharedTable  # noqa: E402
from sharing.config import ServerConfig, TableConfig  # noqa: E402
from sharing.tables import TableService  # noqa: E402
from tests.support.processes import cpu_seconds, free_port, stop, wait_http  # noqa: E402

TOKEN = "bench-bearer-token-0123456789"
SECRET = "bench-signing-secret-0123456789abcdef"


def write_scan_table(root: Path, files: int, rows: int) -> list[Path]:
    """A table of `files` parquet files (id, value, name) committed in one version."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "double", "nullable": True, "metadata": {}},
            {"name": "name", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
    metadata = {
        "id": str(uuid.UUID(int=files * 7)),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema),
        "partitionColumns": [],
        "configuration": {},
        "createdTime": 0,
    }
    paths = []
    lines = [
        json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}),
        json.dumps({"metaData": metadata}),
    ]
    for i in range(files):
        start = i * rows
        table = pa.table(
            {
                "id": pa.array(range(start, start + rows), pa.int64()),
                "value": pa.array([float(v) * 0.5 for v in range(rows)], pa.float64()),
                "name": pa.array([f"name-{v % 1000:04d}" for v in range(rows)]),
            }
        )
        name = f"part-{i:05d}.parquet"
        pq.write_table(table, root / name)
        paths.append(root / name)
        stats = {
            "numRecords": rows,
            "minValues": {"id": start},
            "maxValues": {"id": start + rows - 1},
            "nullCount": {"id": 0, "value": 0, "name": 0},
        }
        add = {
            "path": name,
            "partitionValues": {},
            "size": (root / name).stat().st_size,
            "modificationTime": 0,
            "dataChange": True,
            "stats": json.dumps(stats),
        }
        lines.append(json.dumps({"add": add}))
    (log / f"{0:020d}.json").write_text("\n".join(lines) + "\n")
    return paths


REPO = HERE.parent


def start_server(
    config: Path, workdir: Path, workers: int = 1, tree: Path = REPO
) -> tuple[str, subprocess.Popen[bytes]]:
    """`lakeshare serve` of the source tree `tree`, with this virtualenv."""
    port = free_port()
    log = open(workdir / "server.log", "ab")  # noqa: SIM115 (lives as long as the process)
    process = subprocess.Popen(
        [
            *(sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"),
            *("serve", "--config", str(config)),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    base = f"http://127.0.0.1:{port}/delta-sharing"
    wait_http(f"{base}/shares", process)
    return base, process


def median_time(run: Callable[[], object], repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        begin = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - begin)
    return statistics.median(times), result


def endpoint_filesystem(properties: dict[str, str]) -> Any:
    """pyarrow's S3 file system on the server's S3 endpoint, with the key loadTable vended
    (as PyIceberg builds its own)."""
    from urllib.parse import urlsplit

    from pyarrow.fs import S3FileSystem

    endpoint = urlsplit(properties["s3.endpoint"])
    return S3FileSystem(
        access_key=properties["s3.access-key-id"],
        secret_key=properties["s3.secret-access-key"],
        session_token=properties["s3.session-token"],
        region=properties.get("s3.region", "us-east-1"),
        endpoint_override=properties["s3.endpoint"],
        scheme=endpoint.scheme,
        force_virtual_addressing=False,
    )


def scan_through_catalog(
    base: str,
    pid: int,
    parquet_files: list[Path],
    rows: int,
    direct_s: float,
    args: argparse.Namespace,
) -> dict[str, tuple[float, float]]:
    """pyarrow through the S3 endpoint, then PyIceberg scans with the folder's key and with a
    key for named files, against `direct_s` (pyarrow from disk); server CPU from `pid`.
    Returns, per measure, the wall-time ratio to `direct_s` and the server CPU per file (ms)."""
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("bench", type="rest", uri=f"{base}/iceberg", token=TOKEN, warehouse="s")
    # Local tables are read through the server's S3 endpoint (docs/s3-endpoint.md): pyarrow
    # reading the same files there with the vended key separates the transport from
    # PyIceberg's own work.
    folder_table = catalog.load_table("d.scan_s3")
    fs = endpoint_filesystem(folder_table.io.properties)
    bucket = folder_table.location().removeprefix("s3://").rstrip("/")
    keys = [f"{bucket}/{p.name}" for p in parquet_files]
    cpu, own = cpu_seconds(pid), time.process_time()
    over_s3_s, _ = median_time(lambda: pq.read_table(keys, filesystem=fs), args.repeat)
    over_s3_cpu = (cpu_seconds(pid) - cpu) / args.repeat
    client_cpu = (time.process_time() - own) / args.repeat
    results = {"pyarrow via S3": (over_s3_s / direct_s, over_s3_cpu / args.scan_files * 1000)}
    print(
        f"    pyarrow reading them through the server's S3 endpoint: {over_s3_s:.3f} s "
        f"= {over_s3_s / direct_s:.2f}x; server CPU {over_s3_cpu:.3f} s per read "
        f"({over_s3_cpu / args.scan_files * 1000:.2f} ms per file); "
        f"client CPU {client_cpu:.3f} s"
    )
    for name, label, short in (
        ("scan_s3", "PyIceberg through the catalog, the folder's key", "PyIceberg, folder key"),
        ("scan_latest", "PyIceberg through the catalog, a key for named files", "PyIceberg, named"),
    ):
        table = catalog.load_table(f"d.{name}")
        plan_s, _ = median_time(lambda t=table: list(t.scan().plan_files()), args.repeat)
        cpu, own = cpu_seconds(pid), time.process_time()
        scan_s, result = median_time(lambda t=table: t.scan().to_arrow(), args.repeat)
        scan_cpu = (cpu_seconds(pid) - cpu) / args.repeat
        client_cpu = (time.process_time() - own) / args.repeat
        assert result.num_rows == rows  # type: ignore[attr-defined]
        print(
            f"    {label}: {scan_s:.3f} s = {scan_s / direct_s:.2f}x "
            f"(goal <= 1.3x; planning {plan_s:.3f} s); server CPU {scan_cpu:.3f} s "
            f"per scan ({scan_cpu / args.scan_files * 1000:.2f} ms per file); "
            f"client CPU {client_cpu:.3f} s"
        )
        results[short] = (scan_s / direct_s, scan_cpu / args.scan_files * 1000)
    return results


def load_average() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def export_tree(ref: str, target: Path) -> Path:
    """The files of git revision `ref` of this repository under `target`."""
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def cold_load(
    config: dict[str, Any], work: Path, name: str, tree: Path
) -> tuple[float, float, str, subprocess.Popen[bytes]]:
    """A new server of `tree` with an empty metadata cache: the first loadTable of the
    big table, its wall time and the server's CPU for it; the server is left running."""
    cache = work / f"iceberg-cache-{name}"
    shutil.rmtree(cache, ignore_errors=True)
    config = {**config, "iceberg": {"cacheDir": str(cache)}}
    config_path = work / f"config-{name}.yaml"
    config_path.write_text(json.dumps(config))  # JSON is YAML
    base, server = start_server(config_path, work, tree=tree)
    try:
        url = f"{base}/iceberg/v1/shares/s/namespaces/d/tables/big"
        with httpx.Client(timeout=600) as client:
            begin, cpu = time.perf_counter(), cpu_seconds(server.pid)
            response = client.get(url, headers={"Authorization": f"Bearer {TOKEN}"})
            wall, used = time.perf_counter() - begin, cpu_seconds(server.pid) - cpu
        response.raise_for_status()
    except BaseException:
        stop(server)
        raise
    return wall, used, base, server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--scan-files", type=int, default=200)
    parser.add_argument("--rows-per-file", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1, help="server workers for the scans")
    parser.add_argument(
        "--compare", metavar="REF", help="git revision whose cold loadTable is timed too"
    )
    parser.add_argument("--cold-runs", type=int, default=1)
    parser.add_argument(
        "--scan-rounds",
        type=int,
        default=1,
        help="times each scan variant runs (order reversed every other round)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lakeshare-iceberg-catalog-bench-"))
    server = None
    try:
        big, scan = work / "big", work / "scan"
        write_big_table(big, args.files, 10)
        parquet_files = write_scan_table(scan, args.scan_files, args.rows_per_file)
        tables = [
            {"name": "big", "location": str(big), "historyShared": True},
            {"name": "scan_latest", "location": str(scan)},
            {"name": "scan_s3", "location": str(scan), "historyShared": True},
        ]
        config = {
            "version": 1,
            "authorization": {"bearerToken": TOKEN},
            "signingSecret": SECRET,
            "snapshotCacheDir": "off",
            "requestTimeoutSeconds": 0,  # a cold 100k-file loadTable may pass the default 30 s
            "iceberg": {"cacheDir": str(work / "iceberg-cache")},
            "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
        }
        trees = [("this tree", REPO)]
        if args.compare:
            trees.append((args.compare, export_tree(args.compare, work / "compared")))
        print(f"load average at start: {load_average()}")

        # Baseline: the Delta snapshot of the big table, cold, in this process.
        service = TableService(ServerConfig.model_validate({"version": 1}))
        shared = SharedTable("s", "d", "big", TableConfig(name="big", location=str(big)))
        begin, cpu = time.perf_counter(), time.process_time()
        service.at_version(shared, 1)
        snapshot_s, snapshot_cpu = time.perf_counter() - begin, time.process_time() - cpu

        # Cold loadTable, each tree's server in turn (the last one of this tree stays for
        # the warm requests).
        colds: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in trees}
        base = ""
        for run in range(args.cold_runs):
            for index, (label, tree) in enumerate(reversed(trees) if run % 2 else trees):
                wall, cpu, url_base, started = cold_load(config, work, f"{run}-{index}", tree)
                colds[label].append((wall, cpu))
                if label == trees[0][0] and run == args.cold_runs - 1:
                    base, server = url_base, started
                else:
                    stop(started)
        assert server is not None
        cold_s = statistics.median(w for w, _ in colds[trees[0][0]])
        cold_cpu = statistics.median(c for _, c in colds[trees[0][0]])
        headers = {"Authorization": f"Bearer {TOKEN}"}
        url = f"{base}/iceberg/v1/shares/s/namespaces/d/tables/big"
        with httpx.Client(timeout=600) as client:
            etag = client.get(url, headers=headers).headers["etag"]
            warm_s, _ = median_time(lambda: client.get(url, headers=headers), 20)
            not_modified_s, _ = median_time(
                lambda: client.get(url, headers={**headers, "If-None-Match": etag}), 20
            )
        print(f"\nloadTable, {args.files}-file table (50 partitions), over HTTP:")
        print(
            f"  Delta snapshot load in this process (baseline): {snapshot_s:.2f} s "
            f"({snapshot_cpu:.2f} s CPU)"
        )
        print(
            f"  cold loadTable (snapshots of versions 0 and 1 + their metadata): {cold_s:.2f} s "
            f"= {cold_s / snapshot_s:.1f}x the snapshot load; server CPU {cold_cpu:.2f} s "
            f"= {cold_cpu / snapshot_cpu:.1f}x the snapshot load's CPU "
            f"(median of {args.cold_runs})"
        )
        if args.compare:
            print("  cold loadTable, each server (wall s / server CPU s per run, alternating):")
            for label, runs in colds.items():
                cpu = statistics.median(c for _, c in runs)
                listed = ", ".join(f"{w:.2f}/{c:.2f}" for w, c in runs)
                print(
                    f"    {label}: median server CPU {cpu:.2f} s "
                    f"= {cpu / snapshot_cpu:.1f}x the snapshot load's CPU ({listed})"
                )
            old_cpu = statistics.median(c for _, c in colds[args.compare])
            print(f"  this tree's cold CPU / {args.compare}'s: {cold_cpu / old_cpu:.2f}")
        print(f"  warm loadTable: {warm_s * 1000:.1f} ms (median of 20; goal < 20 ms)")
        print(f"  warm loadTable with If-None-Match (304): {not_modified_s * 1000:.1f} ms")

        stop(server)
        server = None

        def read_directly() -> pa.Table:
            return pq.read_table([str(p) for p in parquet_files])

        direct_s, direct = median_time(read_directly, args.repeat)
        rows = direct.num_rows  # type: ignore[attr-defined]
        print(
            f"\nfull scan of a {args.scan_files}-file local table ({rows} rows), "
            f"median of {args.repeat}, server with {args.workers} worker(s):"
        )
        print(f"  pyarrow reading the files directly (baseline): {direct_s:.3f} s")
        # The same server without and with sendfile (limits.sendfile), and with --compare
        # REF's server with sendfile, one after the other; with --scan-rounds, again in
        # the reverse order, and so on (old and new code alternating in one run).
        variants = [("this tree, no sendfile", REPO, False), ("this tree, sendfile", REPO, True)]
        if args.compare:
            variants.append((f"{args.compare}, sendfile", trees[1][1], True))
        found: dict[str, dict[str, list[tuple[float, float]]]] = {v[0]: {} for v in variants}
        for round_ in range(args.scan_rounds):
            for label, tree, sendfile in reversed(variants) if round_ % 2 else variants:
                variant = work / f"config-sendfile-{sendfile}.yaml"
                variant.write_text(json.dumps({**config, "limits": {"sendfile": sendfile}}))
                base, server = start_server(variant, work, args.workers, tree=tree)
                own = time.process_time()
                direct_s, _ = median_time(read_directly, args.repeat)  # the baseline, again
                direct_cpu = (time.process_time() - own) / args.repeat
                print(
                    f"  {label} (pyarrow from disk now {direct_s:.3f} s, "
                    f"{direct_cpu:.3f} s CPU; load average {load_average()}):"
                )
                measured = scan_through_catalog(
                    base, server.pid, parquet_files, rows, direct_s, args
                )
                for measure, figures in measured.items():
                    found[label].setdefault(measure, []).append(figures)
                stop(server)
                server = None
        print(
            f"\n  summary, median of {args.scan_rounds} round(s): wall-time ratio to pyarrow "
            "from disk / server CPU per file"
        )
        for label, measures in found.items():
            cells = [
                f"{measure} {statistics.median(r for r, _ in runs):.2f}x / "
                f"{statistics.median(c for _, c in runs):.2f} ms"
                for measure, runs in measures.items()
            ]
            print(f"    {label}: " + "; ".join(cells))
        print(f"\nload average at end: {load_average()}")
    finally:
        if server is not None:
            stop(server)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
