"""Iceberg metadata generation (sharing/iceberg) on a large table.

Writes a partitioned table whose commit 0 adds N files (JSON stats for two columns; the
data files themselves are not needed: record counts come from the stats) and whose commit
1 removes K of them from K partitions and adds K, then measures in one process:

- the Delta snapshot of version 0 (deltalog, for scale),
- generating version 0's Iceberg metadata from nothing (N data files into manifests),
- generating version 1 from version 0's files (the incremental step: manifests holding a
  removed file are rewritten, the others reused),
- asking for version 1 again (the files exist: a lookup),
- PyIceberg planning a full scan of version 1 (reading every manifest).

Usage: python bench/iceberg_metadata.py [--files N] [--changed K] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from sharing.catalog import SharedTable
from sharing.config import ServerConfig, TableConfig
from sharing.iceberg.generator import IcebergMetadata
from sharing.tables import TableService

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "s", "type": "string", "nullable": True, "metadata": {}},
        {"name": "p", "type": "string", "nullable": True, "metadata": {}},
    ],
}
PARTITIONS = 50


def _add(i: int) -> str:
    stats = {
        "numRecords": 100,
        "minValues": {"id": i * 100, "s": f"a{i:06d}"},
        "maxValues": {"id": i * 100 + 99, "s": f"z{i:06d}"},
        "nullCount": {"id": 0, "s": 1},
    }
    add = {
        "path": f"p={i % PARTITIONS}/part-{i:07d}.parquet",
        "partitionValues": {"p": str(i % PARTITIONS)},
        "size": 1000 + i,
        "modificationTime": 0,
        "dataChange": True,
        "stats": json.dumps(stats),
    }
    return json.dumps({"add": add})


def write_table(root: Path, files: int, changed: int) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True)
    metadata = {
        "id": str(uuid.UUID(int=files)),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(SCHEMA),
        "partitionColumns": ["p"],
        "configuration": {},
        "createdTime": 0,
    }
    with open(log / f"{0:020d}.json", "w") as out:
        out.write(json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}) + "\n")
        out.write(json.dumps({"metaData": metadata}) + "\n")
        for i in range(files):
            out.write(_add(i) + "\n")
    with open(log / f"{1:020d}.json", "w") as out:
        for i in range(changed):
            path = f"p={i % PARTITIONS}/part-{i:07d}.parquet"
            out.write(json.dumps({"remove": {"path": path, "dataChange": True}}) + "\n")
        for i in range(files, files + changed):
            out.write(_add(i) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--keep", type=Path, default=None)
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="iceberg-bench-"))
    try:
        root = work / "table"
        if not root.exists():
            write_table(root, args.files, args.changed)
        config = TableConfig(name="t", location=str(root), id="t", history_shared=True)
        shared = SharedTable("s", "d", "t", config)
        service = TableService(ServerConfig.model_validate({"version": 1}))
        cache = work / "iceberg"
        shutil.rmtree(cache, ignore_errors=True)
        generator = IcebergMetadata(cache, service)

        def timed(label: str, run: object) -> object:
            begin = time.perf_counter()
            result = run()  # type: ignore[operator]
            print(f"{label}: {time.perf_counter() - begin:.3f} s")
            return result

        timed("delta snapshot, version 0", lambda: service.at_version(shared, 0))
        timed(
            f"iceberg version 0 from nothing ({args.files} files)",
            lambda: generator.generate(shared, 0),
        )
        service.at_version(shared, 1)
        generated = timed(
            f"iceberg version 1 from version 0 ({args.changed} removed, {args.changed} added)",
            lambda: generator.generate(shared, 1),
        )
        timed("iceberg version 1 again (files exist)", lambda: generator.generate(shared, 1))
        try:
            from pyiceberg.table import StaticTable
        except ImportError:
            return
        path = str(generated.metadata_path)  # type: ignore[attr-defined]
        planned = timed(
            "pyiceberg: plan a full scan of version 1",
            lambda: list(StaticTable.from_metadata(path).scan().plan_files()),
        )
        print(f"planned {len(planned)} files")  # type: ignore[arg-type]
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
