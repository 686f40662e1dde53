"""Steady latency on a table that never stops committing: a snapshot that followed N
incremental refreshes against a freshly loaded snapshot of the same version.

    .venv/bin/python bench/refresh_steady.py [--files 614] [--commits 1000] [--repeat 30]

Writes a small table (a first commit of `--files` files with stats, then `--commits`
commits of 10 files each, every 7th also removing two files), follows it with one
long-lived DeltaTable (a refresh after every commit, as a server does on `/version`),
then times the per-snapshot work of a query on three snapshots of the last version:

- fresh: `DeltaTable(path).snapshot()` in the same process (the baseline);
- followed: the snapshot the long-lived table reached by incremental refreshes;
- one chunk per commit: the fresh snapshot's rows split at commit boundaries, the layout
  refreshes produced before compaction (issue 11 item 6 measured 47x on it).

The operation is what a snapshot query does with a snapshot's files on the server: a
stats predicate (`jsonPredicateHints`, parsed stats cached as on a warm server), file ids
from the per-snapshot cache, then the parquet-format response lines batch by batch with
the local signer. Median and best of `--repeat` rounds (each round runs every case once,
so a busy moment of the machine hits all alike) are printed, and the refreshes' own
median/p99 cost.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.compute as pc

from deltalog import DeltaTable, Snapshot
from deltalog.storage.local import LocalStorage
from sharing.formats import FileContext
from sharing.formats.ids import with_file_ids
from sharing.formats.parquet import ParquetWriter
from sharing.presign.local import LocalSigner, TableRef, UrlHolder
from sharing.query.rows import row_batches
from sharing.skipping import StatsCache, select_files

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "name", "type": "string", "nullable": True, "metadata": {}},
    ],
}
BATCH_ROWS = 10_000


def _add(path: str, n: int) -> dict[str, object]:
    stats = {
        "numRecords": 100,
        "minValues": {"id": n * 100, "name": f"a{n}"},
        "maxValues": {"id": n * 100 + 99, "name": f"z{n}"},
        "nullCount": {"id": 0, "name": 0},
    }
    return {
        "add": {
            "path": path,
            "partitionValues": {},
            "size": 1000 + n,
            "modificationTime": 1_700_000_000_000,
            "dataChange": True,
            "stats": json.dumps(stats),
        }
    }


def _write(root: Path, version: int, actions: list[dict[str, object]]) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(a) + "\n" for a in actions)
    (log / f"{version:020d}.json").write_text(text)


def build_and_follow(root: Path, files: int, commits: int) -> tuple[Snapshot, list[float]]:
    """Write the table commit by commit, refreshing one DeltaTable after each."""
    first: list[dict[str, object]] = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": "steady",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(SCHEMA),
                "partitionColumns": [],
                "configuration": {},
                "createdTime": 1_700_000_000_000,
            }
        },
        *(_add(f"base-{i}.parquet", i) for i in range(files)),
    ]
    _write(root, 0, first)
    table = DeltaTable(str(root))
    snapshot = table.snapshot()
    refreshes = []
    n = files
    for v in range(1, commits + 1):
        actions = [{"commitInfo": {"timestamp": v, "operation": "WRITE"}}]
        for i in range(10):
            actions.append(_add(f"c{v}-{i}.parquet", n))
            n += 1
        if v % 7 == 0:
            actions.append({"remove": {"path": f"base-{v % files}.parquet", "dataChange": True}})
            actions.append({"remove": {"path": f"c{v - 1}-3.parquet", "dataChange": True}})
        _write(root, v, actions)
        start = time.perf_counter()
        snapshot = table.snapshot()
        refreshes.append(time.perf_counter() - start)
    return snapshot, refreshes


def per_commit_chunks(files: pa.Table) -> pa.Table:
    """The rows split into one chunk per commit (the pre-compaction layout)."""
    ordered = files.take(pc.sort_indices(files, [("version", "ascending")]))
    versions = ordered.column("version").to_numpy()
    starts = [0, *(i for i in range(1, len(versions)) if versions[i] != versions[i - 1])]
    ends = [*starts[1:], len(versions)]
    batches = [
        b for s, e in zip(starts, ends, strict=True) for b in ordered.slice(s, e - s).to_batches()
    ]
    return pa.Table.from_batches(batches, schema=files.schema)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=614)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "steady"
        start = time.perf_counter()
        followed, refreshes = build_and_follow(root, args.files, args.commits)
        took = time.perf_counter() - start
        fresh = DeltaTable(str(root)).snapshot()
        assert fresh.version == followed.version and fresh.num_files == followed.num_files
        signer = LocalSigner(
            secret="bench-signing-secret-0123456789abcdef",
            base_url="http://127.0.0.1:8080",
            endpoint="/delta-sharing",
            table=TableRef("share", "schema", "steady"),
            table_root=str(root),
            ttl_seconds=3600,
            holder=UrlHolder("acme", "c0ffee"),
        )
        ctx = FileContext(
            storage=LocalStorage(), table_root=str(root), signer=signer, id_scheme="parquet"
        )
        writer = ParquetWriter()
        hint = json.dumps(
            {
                "op": "greaterThan",
                "children": [
                    {"op": "column", "name": "id", "valueType": "long"},
                    {"op": "literal", "value": "1000", "valueType": "long"},
                ],
            }
        )
        cache = StatsCache()

        def query(files: pa.Table) -> Callable[[], int]:
            def run() -> int:
                selected = with_file_ids(files, "parquet")
                rows = select_files(
                    selected,
                    fresh.metadata,
                    json_hints=hint,
                    sql_hints=None,
                    evaluate_json=True,
                    evaluate_sql=False,
                    stats_cache=cache,
                )
                size = 0
                for batch in row_batches(selected, rows, BATCH_ROWS):
                    size += len(writer.file_lines(batch, ctx).text)
                return size

            return run

        cases = [
            ("fresh snapshot (baseline)", fresh.files),
            (f"followed {args.commits} refreshes", followed.files),
            ("one chunk per commit (before)", per_commit_chunks(fresh.files)),
        ]
        load = os.getloadavg()[0]
        print(
            f"{fresh.num_files:,} files at version {fresh.version}; table written and "
            f"followed in {took:.1f} s; load average {load:.2f} on {os.cpu_count()} cores"
        )
        refresh_ms = sorted(r * 1000 for r in refreshes)
        print(
            f"refresh after each commit: median {statistics.median(refresh_ms):.2f} ms, "
            f"p99 {refresh_ms[int(len(refresh_ms) * 0.99) - 1]:.2f} ms"
        )
        print(f"\n{'snapshot':<34}{'chunks':>7}{'median ms':>11}{'best ms':>9}{'ratio':>8}")
        runs = [query(files) for _, files in cases]
        expected = [run() for run in runs]  # warm: parsed stats and file ids cached
        times: list[list[float]] = [[] for _ in cases]
        # Rounds over the cases, so a busy moment of the machine hits them all alike.
        for _ in range(args.repeat):
            for i, run in enumerate(runs):
                t0 = time.perf_counter()
                assert run() == expected[i]
                times[i].append(time.perf_counter() - t0)
        baseline = statistics.median(times[0]) * 1000
        for (label, files), taken in zip(cases, times, strict=True):
            median = statistics.median(taken) * 1000
            print(
                f"{label:<34}{files.column('path').num_chunks:>7}{median:>11.2f}"
                f"{min(taken) * 1000:>9.2f}{median / baseline:>7.2f}x"
            )
        print(f"load average afterwards {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
