"""The generated Iceberg metadata of corpus tables is what it was before the cheaper builder.

`generated_content.json` holds, per corpus table, a digest of every generated file's content
(the metadata JSON; each manifest list's and manifest's header metadata, schema and
records), recorded with the builder as it was before manifest entries were built
column-wise, passed to fastavro pre-shaped and carried over from memory (2026-11-27).
Paths are made relative to the table and the cache folder; commit timestamps (the
commit files' modification times in a checkout) and the lengths of files that hold
absolute paths are left out; everything else — manifest
entries, statuses, bounds, null counts, partition tuples, first row ids, sequence numbers,
snapshot ids, manifest counts — must be equal. Each table is generated two ways: the
latest version straight from the base (later versions' manifests carried over in memory)
and one version at a time (carried over from the files on disk).

To record again after a deliberate change of the generated metadata:
`LAKESHARE_RECORD_ICEBERG_CONTENT=1 pytest tests/sharing/iceberg/test_generated_content.py`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from sharing.catalog import SharedTable
from sharing.config import TableConfig
from sharing.iceberg.avro_files import AvroContent
from sharing.iceberg.generator import IcebergMetadata
from sharing.tables import TableService
from tests.support.corpus import corpus_table
from tests.support.server import make_config

RECORDED = Path(__file__).with_name("generated_content.json")
RECORD = os.environ.get("LAKESHARE_RECORD_ICEBERG_CONTENT") == "1"
LEFT_OUT = ("timestamp-ms", "last-updated-ms", "manifest_length")
"""Commit timestamps, and lengths of files that hold absolute paths."""

# Partitioned (types), deletion vectors (with checkpoints, column mapping, partitions), column
# mapping by name and id, row tracking, all primitive types (bounds of each), nested types,
# schema change, change data, a void column, a long history.
TABLES = [
    "levi/dat/basic_partitioned/delta",
    "delta-rs/delta-2.2.0-partitioned-types",
    "delta-kernel-rs/data/table-with-dv-small",
    "delta-kernel-rs/data/with-short-dv",
    "delta-rs/table_with_deletion_logs",
    "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta",
    "delta-kernel-rs/golden_data/dv-with-columnmapping/delta",
    "delta/kernel-defaults/basic-dv-with-checkpoint",
    "delta/kernel-defaults/column-mapping-id",
    "delta/kernel-defaults/data-reader-partition-values-column-mapping-name",
    "delta-rs/table_with_column_mapping",
    "delta-kernel-rs/golden_data/table-with-columnmapping-mode-id/delta",
    "delta-kernel-rs/golden_data/table-with-columnmapping-mode-name/delta",
    "delta-rs/simple_table_with_checkpoint",
    "delta-rs/table_with_liquid_clustering",
    "levi/dat/all_primitive_types/delta",
    "levi/dat/nested_types/delta",
    "levi/dat/with_schema_change/delta",
    "delta/golden/type-widening-nested",
    "delta-rs/cdf-table",
    "delta-kernel-rs/data/cdf-column-mapping-id-mode",
    "delta-kernel-rs/data/void-column",
]


SYNTHETIC = "synthetic: 4,500 files in 5 partitions, then removals and additions"
"""A table of several manifests (corpus tables fit in one): later versions rewrite some."""


def write_synthetic_table(root: Path) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True)
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "s", "type": "string", "nullable": True, "metadata": {}},
            {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
    metadata = {
        "id": "00000000-0000-0000-0000-000000004500",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema),
        "partitionColumns": ["p"],
        "configuration": {},
        "createdTime": 0,
    }

    def add(i: int) -> str:
        stats = {
            "numRecords": 10 + i % 7,
            "minValues": {"id": i * 100, "s": f"a{i:06d}"},
            "maxValues": {"id": i * 100 + 99, "s": f"z{i:06d}" * (1 + i % 9)},
            "nullCount": {"id": 0, "s": i % 3},
        }
        path = f"p={i % 5}/part-{i:07d}.parquet"
        action = {"path": path, "partitionValues": {"p": str(i % 5)}, "size": 1000 + i}
        action.update(modificationTime=0, dataChange=True, stats=json.dumps(stats))
        return json.dumps({"add": action})

    def remove(i: int) -> str:
        return json.dumps({"remove": {"path": f"p={i % 5}/part-{i:07d}.parquet"}})

    commits = [
        [
            json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}),
            json.dumps({"metaData": metadata}),
            *(add(i) for i in range(4500)),
        ],
        [remove(3), remove(2222), remove(4400), *(add(i) for i in range(4500, 4503))],
        [remove(10)],
        [add(4503)],
    ]
    for version, lines in enumerate(commits):
        (log / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def _shared(location: Path) -> SharedTable:
    config = TableConfig(name="t", location=str(location), id="id-t", history_shared=True)
    return SharedTable("s", "d", "t", config)


def _normalized(value: Any, replacements: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for old, new in replacements:
            value = value.replace(old, new)
        return value
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        out = {
            k: "<left out>" if k in LEFT_OUT else _normalized(v, replacements)
            for k, v in value.items()
        }
        if out.get("file_format") == "PUFFIN":
            out["file_size_in_bytes"] = "<left out>"  # its footer names data files
        return out
    if isinstance(value, list):
        return [_normalized(v, replacements) for v in value]
    return value


def _digest(content: Any) -> str:
    text = orjson.dumps(content, option=orjson.OPT_SORT_KEYS, default=repr)  # Decimal and such
    return hashlib.sha256(text).hexdigest()


def generated_content(
    service: TableService, cache: Path, location: Path, *, stepwise: bool
) -> dict[str, str]:
    """Digests of the normalized content of every file a table's latest generated version
    names, by file name (`stepwise`: every version generated in turn)."""
    shared = _shared(location)
    generator = IcebergMetadata(cache, service)
    latest = service.latest(shared).version
    if stepwise:
        for version in range(service.delta_table(shared).earliest_version(), latest):
            generator.generate(shared, version)
    generated = generator.generate(shared)
    folder = generated.metadata_path.parent.parent.parent  # <cache>/<table digest>
    replacements = [(str(folder), "<generated>"), (str(location), "<table>")]
    metadata = orjson.loads(generated.metadata_path.read_bytes())
    out = {"metadata.json": _digest(_normalized(metadata, replacements))}
    manifests: set[str] = set()
    for snapshot in metadata["snapshots"]:
        listing = AvroContent(Path(snapshot["manifest-list"]).read_bytes())
        name = Path(snapshot["manifest-list"]).name
        out[name] = _digest(
            _normalized([listing.schema, listing.metadata, listing.records], replacements)
        )
        manifests.update(m["manifest_path"] for m in listing.records)
    for path in sorted(manifests):
        content = AvroContent(Path(path).read_bytes())
        out[Path(path).name] = _digest(
            _normalized([content.schema, content.metadata, content.records], replacements)
        )
    return out


@pytest.fixture(scope="module")
def recorded() -> dict[str, dict[str, str]]:
    if RECORD:
        return {}
    loaded: dict[str, dict[str, str]] = json.loads(RECORDED.read_text())
    return loaded


@pytest.mark.parametrize("stepwise", [False, True], ids=["straight", "stepwise"])
@pytest.mark.parametrize("table", [*TABLES, SYNTHETIC])
def test_generated_content_is_as_recorded(
    table: str, stepwise: bool, tmp_path: Path, recorded: dict[str, dict[str, str]]
) -> None:
    service = TableService(make_config())
    if table == SYNTHETIC:
        location = tmp_path / "synthetic"
        write_synthetic_table(location)
    else:
        location = corpus_table(table)
    content = generated_content(service, tmp_path / "cache", location, stepwise=stepwise)
    if RECORD:
        all_recorded = json.loads(RECORDED.read_text()) if RECORDED.exists() else {}
        all_recorded[table] = content
        RECORDED.write_text(json.dumps(all_recorded, indent=1, sort_keys=True) + "\n")
        return
    assert content == recorded[table]
