"""Snapshot load benchmark: Lakeshare's log reader next to deltalake (delta-rs).

Generates a partitioned table whose log is a 1,000,000-add classic checkpoint (with JSON
stats, written directly with pyarrow in the protocol's checkpoint schema) plus 100 JSON
commits, then measures, each in a fresh subprocess so timings are cold and peak memory
(ru_maxrss) belongs to one reader only:

- ours: `DeltaTable(path).snapshot()`
- deltalake: `DeltaTable(path)` + `get_add_actions()`
- ours with a snapshot store (deltalog.snapshot_store, in /dev/shm by default): the first
  process streams the checkpoint into the store file and maps it ("building the store"),
  later ones map the file after one listing ("restart"), with and without the checksum
  pass over the file
- ours, incremental: a warm snapshot, one more commit appended, `snapshot()` again

Usage: python bench/snapshot_load.py [--files N] [--commits N] [--keep DIR] [--runs N]
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
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SCHEMA_STRING = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "double", "nullable": True, "metadata": {}},
            {"name": "name", "type": "string", "nullable": True, "metadata": {}},
            {"name": "part", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
)
STRING_MAP = pa.map_(pa.string(), pa.string())
ADD_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("partitionValues", STRING_MAP),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("tags", STRING_MAP),
    ]
)
REMOVE_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("deletionTimestamp", pa.int64()),
        ("dataChange", pa.bool_()),
    ]
)
PROTOCOL_TYPE = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
METADATA_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STRING_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("configuration", STRING_MAP),
        ("createdTime", pa.int64()),
    ]
)
PARTITIONS = 100
ROW_GROUP = 100_000


def _file_names(start: int, n: int) -> tuple[pa.Array, np.ndarray]:
    ids = np.arange(start, start + n)
    parts = ids % PARTITIONS
    names = np.char.add(
        np.char.add(np.char.add("part=", parts.astype(str)), "/part-"),
        np.char.add(ids.astype(str), "-c000.snappy.parquet"),
    )
    return pa.array(names.astype(object), pa.string()), parts


def _stats(ids: np.ndarray) -> pa.Array:
    lo = (ids * 10).astype(str).astype(object)
    hi = (ids * 10 + 9).astype(str).astype(object)
    pieces = [
        '{"numRecords":10,"minValues":{"id":',
        pa.array(lo, pa.string()),
        ',"value":0.5,"name":"a"},"maxValues":{"id":',
        pa.array(hi, pa.string()),
        ',"value":99.5,"name":"zz"},"nullCount":{"id":0,"value":0,"name":1}}',
    ]
    return pc.binary_join_element_wise(*pieces, "")


def _adds(start: int, n: int) -> pa.StructArray:
    paths, parts = _file_names(start, n)
    offsets = pa.array(np.arange(n + 1, dtype=np.int32))
    pv = pa.MapArray.from_arrays(
        offsets, pa.array(["part"] * n), pa.array(parts.astype(str).astype(object), pa.string())
    )
    return pa.StructArray.from_arrays(
        [
            paths,
            pv,
            pa.array(np.full(n, 4096, dtype=np.int64)),
            pa.array(np.full(n, 1_700_000_000_000, dtype=np.int64)),
            pa.array(np.ones(n, dtype=bool)),
            _stats(np.arange(start, start + n)),
            pa.nulls(n, STRING_MAP),
        ],
        fields=list(ADD_TYPE),
    )


def write_table(root: Path, files: int, commits: int) -> None:
    """A table whose checkpoint at version 0 holds `files` adds, then `commits` commits
    that each add 10 files and remove 5 checkpointed ones."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    schema = pa.schema(
        [
            ("add", ADD_TYPE),
            ("remove", REMOVE_TYPE),
            ("metaData", METADATA_TYPE),
            ("protocol", PROTOCOL_TYPE),
        ]
    )
    meta = {
        "id": "bench-table",
        "format": {"provider": "parquet", "options": []},
        "schemaString": SCHEMA_STRING,
        "partitionColumns": ["part"],
        "configuration": [],
        "createdTime": 1_700_000_000_000,
    }
    with pq.ParquetWriter(log / f"{0:020d}.checkpoint.parquet", schema) as writer:
        head = pa.table(
            {
                "add": pa.nulls(2, ADD_TYPE),
                "remove": pa.nulls(2, REMOVE_TYPE),
                "metaData": pa.array([meta, None], METADATA_TYPE),
                "protocol": pa.array(
                    [None, {"minReaderVersion": 1, "minWriterVersion": 2}], PROTOCOL_TYPE
                ),
            },
            schema=schema,
        )
        writer.write_table(head)
        for start in range(0, files, ROW_GROUP):
            n = min(ROW_GROUP, files - start)
            batch = pa.table(
                {
                    "add": _adds(start, n),
                    "remove": pa.nulls(n, REMOVE_TYPE),
                    "metaData": pa.nulls(n, METADATA_TYPE),
                    "protocol": pa.nulls(n, PROTOCOL_TYPE),
                },
                schema=schema,
            )
            writer.write_table(batch, row_group_size=ROW_GROUP)
    commit0 = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                **meta,
                "format": {"provider": "parquet", "options": {}},
                "configuration": {},
            }
        },
    ]
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in commit0) + "\n")
    (log / "_last_checkpoint").write_text(json.dumps({"version": 0, "size": files + 2}))
    for v in range(1, commits + 1):
        append_commit(root, v, files)


def append_commit(root: Path, version: int, files: int) -> None:
    new = files + version * 10
    paths, parts = _file_names(new, 10)
    lines = [{"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "WRITE"}}]
    for p, part in zip(paths.to_pylist(), parts.tolist(), strict=True):
        lines.append(
            {
                "add": {
                    "path": p,
                    "partitionValues": {"part": str(part)},
                    "size": 4096,
                    "modificationTime": 1_700_000_000_000,
                    "dataChange": True,
                    "stats": '{"numRecords":10}',
                }
            }
        )
    removed, _ = _file_names(version * 5, 5)
    for p in removed.to_pylist():
        lines.append({"remove": {"path": p, "deletionTimestamp": 1, "dataChange": True}})
    text = "\n".join(json.dumps(a) for a in lines) + "\n"
    (root / "_delta_log" / f"{version:020d}.json").write_text(text)


# -- measurements, each run in a fresh interpreter -----------------------------------

# Each script prints: load seconds (after imports), total seconds (with imports), peak
# RSS in KiB, number of active files, private memory after the load in KiB (pages no other
# process maps: a mapped snapshot store file is shared page cache), RSS after imports in
# KiB. Imports are timed apart.
#
# pyarrow imports pandas on its first `pa.array` call when pandas is installed (about
# 0.7 s and 40 MB). The server's install (`pip install lakeshare`, the Docker image) has
# no pandas: nothing of the server uses it, and neither does deltalake. This development
# environment has it, for the test clients. So our reader runs as the server's install
# does, with pandas not importable (_WITHOUT_PANDAS), and once more as this environment
# would run it, for comparison.

_WITHOUT_PANDAS = """
import importlib.abc, sys
class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None
sys.meta_path.insert(0, _NoPandas())
"""

_MEMORY = """
def _private_kib():
    fields = dict(l.split(":", 1) for l in open("/proc/self/smaps_rollup").read().splitlines()[1:])
    return sum(int(fields[k].split()[0]) for k in ("Private_Clean", "Private_Dirty"))
def _rss_kib():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])
def _peak_kib():
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec, so a child would report
    # at least the RSS of the bench process that started it.
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
"""

_OURS = (
    _MEMORY
    + """
import sys, time
t00 = time.perf_counter()
from deltalog import DeltaTable, SnapshotStore
import pyarrow as pa; pa.array([0])
imported = _rss_kib()
store = SnapshotStore(sys.argv[2], verify=sys.argv[3] == "1") if sys.argv[2] != "-" else None
t0 = time.perf_counter()
snap = DeltaTable(sys.argv[1], snapshot_store=store).snapshot()
n = snap.num_files
t1 = time.perf_counter()
peak = _peak_kib()
print(t1 - t0, t1 - t00, peak, n, _private_kib(), imported)
"""
)

_DELTALAKE = (
    _MEMORY
    + """
import sys, time
t00 = time.perf_counter()
import deltalake
imported = _rss_kib()
t0 = time.perf_counter()
dt = deltalake.DeltaTable(sys.argv[1])
actions = dt.get_add_actions()
n = actions.num_rows if hasattr(actions, "num_rows") else len(actions)
t1 = time.perf_counter()
peak = _peak_kib()
print(t1 - t0, t1 - t00, peak, n, _private_kib(), imported)
"""
)

_INCREMENTAL = (
    _MEMORY
    + """
import sys, time
sys.path.insert(0, sys.argv[3])
from snapshot_load import append_commit
from deltalog import DeltaTable
from pathlib import Path
imported = _rss_kib()
table = DeltaTable(sys.argv[1])
before = table.snapshot()
append_commit(Path(sys.argv[1]), before.version + 1, int(sys.argv[2]))
t0 = time.perf_counter()
after = table.snapshot()
elapsed = time.perf_counter() - t0
assert after.version == before.version + 1
peak = _peak_kib()
print(elapsed, elapsed, peak, after.num_files, _private_kib(), imported)
"""
)

Run = tuple[float, float, int, int, int, int]


def _run(script: str, *args: str, pandas: bool = False) -> Run:
    if not pandas:
        script = _WITHOUT_PANDAS + script
    out = subprocess.run(
        [sys.executable, "-c", script, *args], check=True, capture_output=True, text=True
    ).stdout.split()
    return (float(out[0]), float(out[1]), int(out[2]), int(out[3]), int(out[4]), int(out[5]))


def _report(label: str, runs: list[Run], baseline_peak: float | None = None) -> float:
    """One line: median and best load time, best with imports, median peak RSS (and its
    ratio to the baseline's), median private memory and RSS after imports; returns the
    median peak in MB."""
    load = statistics.median(r[0] for r in runs)
    best = min(r[0] for r in runs)
    total = min(r[1] for r in runs)
    peak = statistics.median(r[2] for r in runs) / 1024
    private = statistics.median(r[4] for r in runs) / 1024
    imported = statistics.median(r[5] for r in runs) / 1024
    ratio = f"{peak / baseline_peak:.2f}x" if baseline_peak else "-"
    print(
        f"{label:<40}{load:>9.3f}{best:>8.3f}{total:>9.3f}{peak:>8.0f}{ratio:>7}"
        f"{private:>9.0f}{imported:>9.0f}{runs[-1][3]:>11,}"
    )
    return peak


def _load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--keep", type=Path, help="write the table here and keep it")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--store-dir",
        type=Path,
        default=Path("/dev/shm") if Path("/dev/shm").is_dir() else None,
        help="where the snapshot store cases keep their files (default /dev/shm)",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp) / "bench_table"
        if not (root / "_delta_log").exists():
            t0 = time.perf_counter()
            write_table(root, args.files, args.commits)
            took = time.perf_counter() - t0
            print(f"generated {args.files:,} files + {args.commits} commits in {took:.1f} s")
        store = Path(tempfile.mkdtemp(prefix="lakeshare-bench-store-", dir=args.store_dir))
        bench_dir = str(Path(__file__).resolve().parent)
        print(f"before: {_load_average()}; {args.runs} runs each, each in a fresh process")
        print(
            f"{'':<40}{'load s':>9}{'best':>8}{'+imports':>9}{'peak MB':>8}{'vs dl':>7}"
            f"{'priv. MB':>9}{'imp. MB':>9}{'files':>11}"
        )
        runs = [_run(_DELTALAKE, str(root)) for _ in range(args.runs)]
        baseline = _report("deltalake open+add actions (baseline)", runs)
        runs = [_run(_OURS, str(root), "-", "1") for _ in range(args.runs)]
        _report("lakeshare cold snapshot, in memory", runs, baseline)
        runs = [_run(_OURS, str(root), "-", "1", pandas=True) for _ in range(args.runs)]
        _report("  same, pandas importable (dev env)", runs, baseline)

        def cold_with_store() -> Run:
            shutil.rmtree(store, ignore_errors=True)
            return _run(_OURS, str(root), str(store), "1")

        runs = [cold_with_store() for _ in range(args.runs)]
        _report("lakeshare cold, building the store", runs, baseline)
        runs = [_run(_OURS, str(root), str(store), "1") for _ in range(args.runs)]
        _report("lakeshare restart, store file mapped", runs, baseline)
        runs = [_run(_OURS, str(root), str(store), "0") for _ in range(args.runs)]
        _report("  same, checksum not verified", runs, baseline)
        shutil.rmtree(store, ignore_errors=True)
        # Last, because each run appends one more commit to the table.
        runs = [_run(_INCREMENTAL, str(root), str(args.files), bench_dir) for _ in range(args.runs)]
        _report("lakeshare refresh, +1 commit", runs, baseline)
        print(f"after: {_load_average()}")
        print(
            "load s: median; best: best load; +imports: best with imports; peak MB: median "
            "peak RSS (vs dl: ratio to deltalake's); priv. MB: private memory after the load "
            "(a mapped store file is shared, not private); imp. MB: RSS after imports. "
            "Lakeshare runs without pandas, as the server's install does (see _WITHOUT_PANDAS)"
        )


if __name__ == "__main__":
    main()
