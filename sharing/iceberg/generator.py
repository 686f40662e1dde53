"""Iceberg v3 table metadata for a shared Delta table at a version, generated from its log.

`IcebergMetadata.generate(shared, version)` returns the path of a metadata JSON file that
an Iceberg reader opens like any table's: one snapshot per Delta version of the shared
history, manifests listing the data files (with partition values, record counts, safe
bounds, `first_row_id`), deletion vectors as Puffin blobs in delete manifests.

Versions and snapshots. The history starts at a base version: with `historyShared`, the
later of the table's `startVersion` and the earliest version its log can still
reconstruct; without, the latest version alone (an older one is time travel, refused).
Delta version v is the snapshot with id v + 1 and sequence number v + 1 (ids and sequence
numbers must be positive), committed at v's commit timestamp (the same timeline the Delta
Sharing routes use).

Incremental generation. The base version is written from its snapshot; every later one
from its predecessor's generated files: the Delta snapshots of v - 1 and v are compared
(files by path, deletion vector and `baseRowId`), manifests without a removed file are
reused as they are, those with one are rewritten with the file marked deleted, and the
new files and deletion vectors go to new manifests and one Puffin file. Versions are
always generated in order from the base, so a version's files depend only on (table,
base, version): generating twice gives the same bytes (tests check it).

Row lineage. A table with row tracking gives each data file `first_row_id` = its
`baseRowId`, and data sequence number `defaultRowCommitVersion` + 1, so `_row_id` and
`_last_updated_sequence_number` are what Delta's row tracking says (read through the
sequence-number mapping above). Other tables get row ids assigned here in file order
(the next row id after the previous version's `next-row-id`), stable while a file lives.
Rows whose ids Delta materialized in a hidden column (after an update on a row-tracking
table) are not mapped yet: their `_row_id` is the default one.

A recipient's partition filter (`SharedTable.partition_filter`, sharing.slices) selects the
files of every version with `visible_files`, the rule every door applies, and the bound
filter's key is part of the cache identity: each distinct bound filter has its own files.

Locations. By default a file is named where the server reads it (a local path, `s3://`,
`gs://`). With `bucket` (a local table served by the server's S3 endpoint, sharing.s3),
every location is on that bucket instead: data files as `s3://<bucket>/<key in the table
folder>`, generated files as `s3://<bucket>/_lakeshare_iceberg/<path under the table's
cache folder>` (GENERATED_PREFIX), which the S3 endpoint maps back to the cache. The
bucket is part of the cache identity, so each naming has its own deterministic files.

Not yet (the catalog's next steps): data file locations for Azure, pruning old generated
versions.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import deltalog
from deltalog.deletion_vectors import DeletionVectorDescriptor, stored_frame
from deltalog.packed_stats import text_table
from deltalog.paths import resolve_key
from deltalog.schema import DecimalType, column_mapping_mode, parse_schema
from deltalog.snapshot_store import table_identity
from deltalog.storage.kinds import StorageKind
from sharing.catalog import SharedTable
from sharing.errors import InvalidParameter, UnsupportedOperation
from sharing.formats import storage_key_column
from sharing.iceberg import avro_files as av
from sharing.iceberg.collector import collector_paused
from sharing.iceberg.files import TableFiles, write_once
from sharing.iceberg.publish import publish_version
from sharing.iceberg.puffin import DeletionVectorBlob, puffin_file
from sharing.iceberg.schema import ConvertedSchema, convert_schema, ids_of
from sharing.iceberg.values import BoundsReader, partition_value, string_prefix_length
from sharing.slices import BoundFilter, visible_files
from sharing.tables import TableService, require_history

log = logging.getLogger(__name__)

GENERATED_PREFIX = "_lakeshare_iceberg/"
AZURE_METADATA_FOLDER = "_lakeshare_iceberg"
"""The folder inside an Azure table's own folder its generated metadata is copied to: the
table's SAS reaches it (one SAS, one directory). Delta readers never look there, and
Delta's VACUUM leaves folders whose names start with `_` alone."""
"""Where generated files appear on a table's S3-endpoint bucket."""

MANIFEST_ENTRIES = 2_000
"""Data files per new manifest: a removal rewrites the manifest holding the file, so smaller
manifests make the next version cheaper (measured: 10,000 made the rewrite dominate it);
readers open a few more files."""
FIRST_PARTITION_FIELD_ID = 1000
ROW_TRACKING_DOMAIN = "delta.rowTracking"
NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
CHANGE_DATA_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")
"""Columns of change data that some writers (delta-rs) also leave in data files."""
MATERIALIZED_COLUMN_KEYS = (
    "delta.rowTracking.materializedRowIdColumnName",
    "delta.rowTracking.materializedRowCommitVersionColumnName",
)


@dataclass(frozen=True)
class GeneratedVersion:
    """A version's generated metadata: where it is and which snapshot is current."""

    metadata_path: Path
    version: int
    snapshot_id: int
    published: str | None = None
    """With a metadata location (`generate(..., published=...)`): the URI of the metadata
    JSON there."""
    published_folder: str | None = None
    """... and of the folder holding every generated file of the table (what vended
    credentials must reach besides the table)."""
    base: int = 0
    """The first version of the generated history (its files' folder, TableFiles)."""


def snapshot_id(version: int) -> int:
    """The Iceberg snapshot id (and sequence number) of a Delta version."""
    return version + 1


class IcebergMetadata:
    """Generates and caches Iceberg metadata for shared tables under `directory`."""

    def __init__(
        self,
        directory: Path | str,
        tables: TableService,
        metadata_locations: Sequence[str] = (),
        azure_in_table_folder: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.tables = tables
        self.metadata_locations = tuple(metadata_locations)
        """Where cloud tables' generated files are copied (`iceberg.metadataLocation`)."""
        self.azure_in_table_folder = azure_in_table_folder
        """Whether an Azure table's are copied into its own folder, under
        AZURE_METADATA_FOLDER (`iceberg.azureMetadataInTableFolder`)."""

    def generated_root(
        self, shared: SharedTable, bucket: str, current: deltalog.Snapshot | None = None
    ) -> Path:
        """The cache folder GENERATED_PREFIX maps to for `shared` named on `bucket` (its
        latest Delta table id, or `current`'s: a recreated table's old files are out of
        reach)."""
        if current is None:
            current = self.tables.latest(shared)
        return TableFiles.table_dir(self.directory, self._identity(shared, current, bucket))

    @staticmethod
    def _identity(
        shared: SharedTable,
        current: deltalog.Snapshot,
        bucket: str | None,
        published: str | None = None,
    ) -> str:
        identity = f"{table_identity(current.storage, current.table_root)}|{current.metadata.id}"
        if shared.slice_key:
            # A recipient's partition filter selects files: its own generated files.
            identity = f"{identity}|slice:{shared.slice_key}"
        if bucket is not None:
            identity = f"{identity}|bucket:{bucket}"
        if published is not None:
            identity = f"{identity}|published:{published}"
        return identity

    def generate(
        self,
        shared: SharedTable,
        version: int | None = None,
        bucket: str | None = None,
        published: str | None = None,
    ) -> GeneratedVersion:
        """The metadata of `shared` at `version` (None: the latest), generated if needed.
        Versions before the shared history are the Delta Sharing routes' 400. A table
        this recipient sees a slice of (sharing.slices) lists only the slice's files,
        generated and cached per bound filter. With `bucket`, locations are on the
        server's S3 endpoint (see the module's docstring). With `published` (a cloud
        table's metadata location, `iceberg.metadataLocation`), generated files are named
        under that URI and copied there (sharing.iceberg.publish)."""
        if version is None:
            version = self.tables.latest(shared).version
        elif not shared.config.history_shared and version != self.tables.latest(shared).version:
            require_history(shared)  # an older version is time travel: the routes' 400
        start = shared.config.start_version
        if version < start:
            raise InvalidParameter(f"You can only query table data since version {start}.")
        if shared.config.history_shared:
            table = self.tables.delta_table(shared)
            with self.tables.errors(shared):
                earliest = table.earliest_version()
            base = max(start, earliest)
            if version < base:
                raise InvalidParameter(
                    f"Cannot load table version {version}: the earliest version that can be "
                    f"reconstructed is {base}."
                )
        else:
            base = version
        current = self.tables.at_version(shared, version)
        if bucket is not None and current.storage.kind is not StorageKind.LOCAL:
            raise UnsupportedOperation("Only local tables are named on the S3 endpoint")
        if published is not None:
            published = published.rstrip("/")
        identity = self._identity(shared, current, bucket, published)
        files = TableFiles(self.directory, identity, base)
        path = files.metadata_path(version)
        if not path.exists():
            with files.generating(), collector_paused():
                self._generate(shared, files, base, version, bucket, published)
        if published is None:
            return GeneratedVersion(path, version, snapshot_id(version), base=base)
        with self.tables.errors(shared):
            publish_version(current.storage, files, version, published, self.directory)
        folder = f"{published}/{files.table_root.relative_to(self.directory).as_posix()}"
        location = f"{published}/{path.relative_to(self.directory).as_posix()}"
        return GeneratedVersion(path, version, snapshot_id(version), location, folder, base=base)

    def _generate(
        self,
        shared: SharedTable,
        files: TableFiles,
        base: int,
        version: int,
        bucket: str | None,
        published: str | None = None,
    ) -> None:
        """Step from the latest generated version at or before `version` (else from the
        base) to `version`. Only the last step's metadata JSON is written: the catalog
        serves a table's latest metadata (older versions are its snapshots), and every
        version's JSON would add up to the square of the history's length. A version
        asked for later gets its own JSON by stepping again, to the same bytes."""
        done = [v for v in files.generated_versions() if base <= v <= version]
        if done and done[-1] == version:
            return  # another process wrote it while this one waited for the lock
        metadata: dict[str, Any] | None = None
        previous: deltalog.Snapshot | None = None
        first = base
        if done:
            metadata = orjson.loads(files.metadata_path(done[-1]).read_bytes())
            previous = self.tables.at_version(shared, done[-1])
            first = done[-1] + 1
        known: dict[str, list[av.Record]] = {}
        for v in range(first, version + 1):
            snapshot = self.tables.at_version(shared, v)
            with self.tables.errors(shared):
                step = _Step(
                    files,
                    metadata,
                    previous,
                    snapshot,
                    shared.partition_filter,
                    bucket,
                    published,
                    known,
                )
                metadata = step.write()
            known = step.entries
            previous = snapshot
        assert metadata is not None
        write_once(files.metadata_path(version), orjson.dumps(metadata, option=orjson.OPT_INDENT_2))


def location_of(storage: Any, key: str) -> str:
    """The location an Iceberg reader opens for a storage key."""
    kind = storage.kind
    if kind is StorageKind.LOCAL:
        return key
    if kind is StorageKind.S3:
        return f"s3://{key}"
    if kind is StorageKind.GCS:
        return f"gs://{key}"
    if kind is StorageKind.AZURE:  # key: `container/path`; readers want the account's host
        container, _, path = key.partition("/")
        host = f"{storage.account}.dfs.{storage.endpoint_suffix}"
        return f"abfss://{container}@{host}/{path}".rstrip("/")
    raise UnsupportedOperation(f"Iceberg metadata is not generated for {kind.label} tables yet")


class _Step:
    """One version's files: from its predecessor's metadata (None for the base version)."""

    def __init__(
        self,
        files: TableFiles,
        previous_metadata: dict[str, Any] | None,
        previous: deltalog.Snapshot | None,
        snapshot: deltalog.Snapshot,
        bound: BoundFilter | None = None,
        bucket: str | None = None,
        published: str | None = None,
        known: Mapping[str, list[av.Record]] | None = None,
    ) -> None:
        self.files = files
        self.known = known or {}
        """The previous version's manifests generated in this run: their entries by
        location (a manifest not here is decoded from its file)."""
        self.entries: dict[str, list[av.Record]] = {}
        """This version's manifests' entries by location (the next step's `known`)."""
        self.bucket = bucket
        self.published = published
        self.bound = bound
        self.prev = previous_metadata
        self.previous = previous
        self.snapshot = snapshot
        self.version = snapshot.version
        self.snapshot_id = snapshot_id(self.version)
        self.sequence = snapshot_id(self.version)
        self.storage = snapshot.storage
        self.root = snapshot.table_root
        self._root_prefix = self.root.rstrip("/") + "/"
        meta = snapshot.metadata
        protocol = snapshot.protocol
        mode = column_mapping_mode(
            meta.configuration, protocol.min_reader_version, protocol.reader_features
        )
        self.column_mapping = mode in ("name", "id")
        self.delta_schema = parse_schema(meta.schema_string)
        self.row_tracking = (
            str(meta.configuration.get("delta.enableRowTracking", "false")).lower() == "true"
        )
        self.prefix = string_prefix_length(meta.configuration)

    # -- the whole step ------------------------------------------------------------------

    def write(self) -> dict[str, Any]:
        prev = self.prev
        converted = self._schema()
        schemas, schema_id = self._schemas(converted)
        specs, spec_id, spec_fields, last_partition_id = self._spec(converted)
        prev_next_row_id = int(prev["next-row-id"]) if prev else 0
        cur = self._visible(self.snapshot)
        old = self._visible(self.previous) if self.previous is not None else None
        self._old = old
        plan = _diff(old, cur)
        self._converted = converted
        self._decimal_stats = any(
            isinstance(leaf.delta_type, DecimalType) for leaf in converted.leaves
        )
        self._spec_fields = spec_fields
        self._spec_id = spec_id
        self._bounds = BoundsReader(converted.leaves, self.prefix)
        self._partitions: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._partition_plan = [
            (
                _avro_name(name),
                key,
                self.delta_schema.field(name).type,
                av.branch(av.avro_type(iceberg_type)),
            )
            for _field_id, name, iceberg_type, key in spec_fields
        ]

        carried: list[dict[str, Any]] = []
        if prev is not None:
            carried = self._carry_over(prev, plan)
        added = text_table(cur.take(pa.array(plan.data_added, pa.int64())))
        # In path order (Arrow sorts UTF-8 bytewise: code point order, as Python would).
        added = added.take(pc.sort_indices(added.column("path")))
        new_data, next_row_id = self._new_data_manifests(added, prev_next_row_id)
        if self.row_tracking:
            next_row_id = max(next_row_id, self._high_water_mark() + 1)
        new_manifests = list(new_data)
        dv_rows = (
            cur.select(["path", "partitionValues", "deletionVector"])
            .take(pa.array(plan.dv_added, pa.int64()))
            .to_pylist()
        )
        dv_rows.sort(key=lambda r: r["path"])
        new_manifests += self._new_delete_manifest(dv_rows)
        manifests = new_manifests + carried
        manifest_list = self.files.manifest_list_path(self.version)
        write_once(
            manifest_list,
            av.encode(
                av.MANIFEST_FILE_SCHEMA,
                manifests,
                {
                    "snapshot-id": str(self.snapshot_id),
                    "parent-snapshot-id": str(self.snapshot_id - 1) if prev else "null",
                    "sequence-number": str(self.sequence),
                    "first-row-id": str(prev_next_row_id),
                    "format-version": av.FORMAT_VERSION,
                },
                manifest_list.name,
            ),
        )
        summary = _summary(plan, new_data, dv_rows, manifests)
        snapshot_json: dict[str, Any] = {
            "snapshot-id": self.snapshot_id,
            "sequence-number": self.sequence,
            "timestamp-ms": self.snapshot.timestamp,
            "manifest-list": self._generated(manifest_list),
            "summary": summary,
            "schema-id": schema_id,
            "first-row-id": prev_next_row_id,
            "added-rows": next_row_id - prev_next_row_id,
        }
        if prev is not None:
            snapshot_json["parent-snapshot-id"] = self.snapshot_id - 1
        metadata = self._metadata(
            converted,
            schemas,
            schema_id,
            specs,
            spec_id,
            last_partition_id,
            snapshot_json,
            next_row_id,
        )
        return metadata

    def _visible(self, snapshot: deltalog.Snapshot) -> pa.Table:
        """The files of `snapshot` the recipient's partition filter lets through (the one
        rule every door applies: sharing.slices)."""
        return visible_files(snapshot.files, snapshot.metadata, self.bound)

    # -- schema and partition spec -------------------------------------------------------

    def _schema(self) -> ConvertedSchema:
        previous_ids: dict[str, int] = {}
        last_column_id = 0
        if self.prev is not None:
            last_column_id = int(self.prev["last-column-id"])
            current = next(
                s for s in self.prev["schemas"] if s["schema-id"] == self.prev["current-schema-id"]
            )
            previous_ids = ids_of(current, column_mapping=self.column_mapping)
        configuration = self.snapshot.metadata.configuration
        extra = [*CHANGE_DATA_COLUMNS]
        extra += [str(configuration[k]) for k in MATERIALIZED_COLUMN_KEYS if k in configuration]
        return convert_schema(
            self.delta_schema,
            column_mapping=self.column_mapping,
            previous_ids=previous_ids,
            last_column_id=last_column_id,
            extra_file_columns=extra,
        )

    def _schemas(self, converted: ConvertedSchema) -> tuple[list[dict[str, Any]], int]:
        schemas: list[dict[str, Any]] = list(self.prev["schemas"]) if self.prev else []
        for existing in schemas:
            if existing["fields"] == converted.fields:
                return schemas, int(existing["schema-id"])
        schema_id = max((int(s["schema-id"]) for s in schemas), default=-1) + 1
        schemas.append(converted.schema_json(schema_id))
        return schemas, schema_id

    def _spec(
        self, converted: ConvertedSchema
    ) -> tuple[list[dict[str, Any]], int, list[tuple[int, str, str, str]], int]:
        """The partition specs, the current one's id, its fields (partition field id,
        column name, Iceberg type, key in `partitionValues`) and the last partition id."""
        columns = list(self.snapshot.metadata.partition_columns)
        specs: list[dict[str, Any]] = list(self.prev["partition-specs"]) if self.prev else []
        last_partition_id = (
            int(self.prev["last-partition-id"]) if self.prev else FIRST_PARTITION_FIELD_ID - 1
        )
        wanted = [(converted.top_level_ids[c], c) for c in columns]
        spec_json: dict[str, Any] | None = None
        for spec in specs:
            if [(f["source-id"], f["name"]) for f in spec["fields"]] == wanted:
                spec_json = spec
                break
        if spec_json is None:
            fields = []
            for source_id, name in wanted:
                last_partition_id += 1
                fields.append(
                    {
                        "source-id": source_id,
                        "field-id": last_partition_id,
                        "name": name,
                        "transform": "identity",
                    }
                )
            spec_id = max((int(s["spec-id"]) for s in specs), default=-1) + 1
            spec_json = {"spec-id": spec_id, "fields": fields}
            specs.append(spec_json)
        types = {f["id"]: f["type"] for f in converted.fields}
        spec_fields = []
        for f in spec_json["fields"]:
            column = self.delta_schema.field(f["name"])
            if not isinstance(types[f["source-id"]], str):
                raise UnsupportedOperation(
                    f"Partition column {f['name']!r} has a nested type, which an Iceberg "
                    "identity partition cannot have"
                )
            key = column.physical_name if self.column_mapping else column.name
            spec_fields.append((int(f["field-id"]), f["name"], types[f["source-id"]], key))
        return specs, int(spec_json["spec-id"]), spec_fields, last_partition_id

    # -- data files ------------------------------------------------------------------------

    def _location(self, path: str) -> str:
        key = resolve_key(self.storage, self.root, path)
        if self.bucket is None:
            return location_of(self.storage, key)
        return self._bucket_location(key, path)

    def _bucket_location(self, key: str, path: str) -> str:
        """The location on `bucket` of the storage key `key` (of the log path `path`)."""
        relative = key[len(self._root_prefix) :]
        if (
            not key.startswith(self._root_prefix)
            or relative.startswith(".")
            or "/." in relative
            or "//" in relative
        ):
            relative = os.path.relpath(key, self.root)  # anything unusual: normalised
        if relative.startswith(".."):  # the S3 endpoint serves only the table's folder
            raise UnsupportedOperation(
                f"A data file outside the table's folder cannot be served: {path}"
            )
        return f"s3://{self.bucket}/{relative}"

    def _generated(self, path: Path) -> str:
        """The location of a generated file."""
        if self.published is not None:
            relative = path.relative_to(self.files.table_root.parent).as_posix()
            return f"{self.published}/{relative}"
        if self.bucket is None:
            return str(path)
        relative = path.relative_to(self.files.table_root).as_posix()
        return f"s3://{self.bucket}/{GENERATED_PREFIX}{relative}"

    def _cache_path(self, location: str) -> Path:
        """The cache file a generated location names (the inverse of `_generated`)."""
        if self.published is not None:
            prefix = f"{self.published}/"
            assert location.startswith(prefix), location
            return self.files.table_root.parent / location[len(prefix) :]
        if self.bucket is None:
            return Path(location)
        prefix = f"s3://{self.bucket}/{GENERATED_PREFIX}"
        assert location.startswith(prefix), location
        return self.files.table_root / location[len(prefix) :]

    def _partition(self, values: Any) -> dict[str, Any]:
        """A file's partition tuple from its `partitionValues` (key/value pairs)."""
        given = dict(values or [])
        return self._partition_of(tuple(given.get(key) for _, key, _, _ in self._partition_plan))

    def _partition_of(self, raw: tuple[str | None, ...]) -> dict[str, Any]:
        """The partition tuple (values in tuple notation) of the serialized partition
        values `raw`, in `_partition_plan` order; files of one partition share one
        (read-only) dict."""
        known = self._partitions.get(raw)
        if known is None:
            known = {}
            for (name, _key, delta_type, branch), text in zip(
                self._partition_plan, raw, strict=True
            ):
                value = partition_value(text, delta_type)
                known[name] = None if value is None else (branch, value)
            self._partitions[raw] = known
        return known

    def _partitions_column(self, files: pa.Table) -> list[dict[str, Any]]:
        """Each file's partition tuple, the values looked up column-wise (the last one of
        a key given twice, as `_partition`'s dict keeps)."""
        if not self._partition_plan:
            return [self._partition_of(())] * files.num_rows
        column = files.column("partitionValues").combine_chunks()
        if not pa.types.is_map(column.type):  # all null: stored without its type
            return [self._partition_of((None,) * len(self._partition_plan))] * files.num_rows
        values = [
            _strings(pc.map_lookup(column, key, "last")) for _, key, _, _ in self._partition_plan
        ]
        memo = self._partition_of
        return [memo(raw) for raw in zip(*values, strict=True)]

    def _locations(self, paths: pa.Array, path_list: list[str]) -> list[str]:
        """`_location` of every path; the keys of plain relative paths joined in bulk."""
        keys = _strings(storage_key_column(paths, self.storage, self.root))
        if self.bucket is not None:
            located = self._bucket_location
            return [located(key, path) for key, path in zip(keys, path_list, strict=True)]
        if self.storage.kind is StorageKind.LOCAL:
            return keys
        return [location_of(self.storage, key) for key in keys]

    def _data_entries(self, added: pa.Table, next_row_id: int) -> tuple[list[av.Record], int]:
        """The manifest entries of the added files (in tuple notation), built from the
        table's columns, and the next row id after them."""
        paths = added.column("path").combine_chunks()
        if pa.types.is_dictionary(paths.type):
            paths = paths.dictionary_decode()
        row_tracking = self.row_tracking
        sequence = self.sequence
        snapshot = ("long", self.snapshot_id)
        file_sequence = ("long", sequence)
        parse, bounds_of = self._parse_stats, self._bounds
        path_list = _strings(paths)
        entries = []
        for path, location, partition, size, stats_text, base_row_id, commit_version in zip(
            path_list,
            self._locations(paths, path_list),
            self._partitions_column(added),
            _column(added, "size"),
            _column(added, "stats"),
            _column(added, "baseRowId"),
            _column(added, "defaultRowCommitVersion"),
            strict=True,
        ):
            stats = parse(stats_text) if stats_text else None
            records = stats.get("numRecords") if isinstance(stats, dict) else None
            if not isinstance(records, int):
                records = self._footer_rows(path)
            bounds = bounds_of(stats)
            if row_tracking and base_row_id is not None:
                first_row_id = int(base_row_id)
                next_row_id = max(next_row_id, first_row_id + records)
            else:
                first_row_id = next_row_id
                next_row_id += records
            data_sequence = (
                int(commit_version) + 1 if row_tracking and commit_version is not None else sequence
            )
            nulls, lower, upper = bounds.null_count_pairs, bounds.lower_pairs, bounds.upper_pairs
            entries.append(
                {
                    "status": av.ADDED,
                    "snapshot_id": snapshot,
                    "sequence_number": ("long", min(data_sequence, sequence)),
                    "file_sequence_number": file_sequence,
                    "data_file": {
                        "content": av.DATA,
                        "file_path": location,
                        "file_format": "PARQUET",
                        "partition": partition,
                        "record_count": records,
                        "file_size_in_bytes": int(size),
                        "null_value_counts": None if nulls is None else ("array", nulls),
                        "lower_bounds": None if lower is None else ("array", lower),
                        "upper_bounds": None if upper is None else ("array", upper),
                        "first_row_id": ("long", first_row_id),
                    },
                }
            )
        return entries, next_row_id

    def _parse_stats(self, text: str) -> Any:
        """A file's statistics JSON; numbers with a fraction as `Decimal` when the table
        has decimal columns (a float would lose digits of their bounds)."""
        try:
            if self._decimal_stats:
                return _DECIMAL_JSON.decode(text)
            return orjson.loads(text)
        except ValueError:
            return None  # unreadable statistics: no bounds, the footer gives the count

    def _footer_rows(self, path: str) -> int:
        """A file's row count from its parquet footer (its add action had no stats)."""
        key = resolve_key(self.storage, self.root, path)
        with self.storage.open_input_file(key) as handle:
            return int(pq.read_metadata(handle).num_rows)

    def _high_water_mark(self) -> int:
        domain = self.snapshot.domain_metadata.get(ROW_TRACKING_DOMAIN)
        if not domain:
            return -1
        try:
            config = json.loads(domain.get("configuration") or "{}")
            return int(config.get("rowIdHighWaterMark", -1))
        except (ValueError, TypeError):
            return -1

    def _new_data_manifests(
        self, added: pa.Table, next_row_id: int
    ) -> tuple[list[dict[str, Any]], int]:
        """Manifests of the added files (in path order), and the next row id after them.
        Each manifest's entries are built, written and let go before the next one's: a
        few thousand live entries at a time keep the garbage collector's passes short."""
        out = []
        for index in range(0, added.num_rows, MANIFEST_ENTRIES):
            chunk, next_row_id = self._data_entries(
                added.slice(index, MANIFEST_ENTRIES), next_row_id
            )
            path = self.files.manifest_path(self.version, "data", index // MANIFEST_ENTRIES)
            paths = [e["data_file"]["file_path"] for e in chunk]
            span = {PATH_SPAN_FIRST: min(paths), PATH_SPAN_LAST: max(paths)}
            length = self._write_manifest(path, chunk, av.MANIFEST_DATA, span)
            first_ids = [e["data_file"]["first_row_id"][1] for e in chunk]
            out.append(self._manifest_file(path, length, av.MANIFEST_DATA, chunk, min(first_ids)))
        return out, next_row_id

    def _new_delete_manifest(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not rows:
            return []
        blobs = []
        for row in rows:
            descriptor = DeletionVectorDescriptor.from_dict(row["deletionVector"])
            frame = stored_frame(self.storage, self.root, descriptor)
            blobs.append(
                DeletionVectorBlob(self._location(row["path"]), frame, descriptor.cardinality)
            )
        data, locations = puffin_file(blobs)
        puffin_path = self.files.puffin_path(self.version)
        write_once(puffin_path, data)
        entries = []
        for row, blob, where in zip(rows, blobs, locations, strict=True):
            entries.append(
                {
                    "status": av.ADDED,
                    "snapshot_id": ("long", self.snapshot_id),
                    "sequence_number": ("long", self.sequence),
                    "file_sequence_number": ("long", self.sequence),
                    "data_file": {
                        "content": av.POSITION_DELETES,
                        "file_path": self._generated(puffin_path),
                        "file_format": "PUFFIN",
                        "partition": self._partition(row["partitionValues"]),
                        "record_count": blob.cardinality,
                        "file_size_in_bytes": len(data),
                        "referenced_data_file": ("string", blob.referenced_data_file),
                        "content_offset": ("long", where.offset),
                        "content_size_in_bytes": ("long", where.length),
                    },
                }
            )
        path = self.files.manifest_path(self.version, "deletes", 0)
        length = self._write_manifest(path, entries, av.MANIFEST_DELETES)
        return [self._manifest_file(path, length, av.MANIFEST_DELETES, entries, None)]

    def _write_manifest(
        self,
        path: Path,
        entries: list[av.Record],
        content: int,
        extra: dict[str, str] | None = None,
    ) -> int:
        schema = av.manifest_entry_schema(
            av.partition_avro_fields(
                [(fid, _avro_name(name), itype) for fid, name, itype, _ in self._spec_fields]
            ),
            content,
        )
        spec = [
            {
                "source-id": self._converted.top_level_ids[name],
                "field-id": fid,
                "name": name,
                "transform": "identity",
            }
            for fid, name, _itype, _key in self._spec_fields
        ]
        metadata = {
            "schema": orjson.dumps(self._converted.schema_json(0)).decode(),
            "partition-spec": orjson.dumps(spec).decode(),
            "partition-spec-id": str(self._spec_id),
            "format-version": av.FORMAT_VERSION,
            "content": "data" if content == av.MANIFEST_DATA else "deletes",
        }
        metadata.update(extra or {})
        data = av.encode(schema, entries, metadata, path.name)
        write_once(path, data)
        self.entries[self._generated(path)] = entries
        return len(data)

    def _manifest_file(
        self,
        path: Path,
        length: int,
        content: int,
        entries: Sequence[dict[str, Any]],
        first_row_id: int | None,
        spec_id: int | None = None,
    ) -> dict[str, Any]:
        counts = {av.ADDED: [0, 0], av.EXISTING: [0, 0], av.DELETED: [0, 0]}
        live_sequences = []
        for e in entries:
            tally = counts[e["status"]]
            tally[0] += 1
            tally[1] += int(e["data_file"]["record_count"])
            if e["status"] != av.DELETED:
                live_sequences.append(int(av.untagged(e["sequence_number"])))
        return {
            "manifest_path": self._generated(path),
            "manifest_length": length,
            "partition_spec_id": self._spec_id if spec_id is None else spec_id,
            "content": content,
            "sequence_number": self.sequence,
            "min_sequence_number": min(live_sequences, default=self.sequence),
            "added_snapshot_id": self.snapshot_id,
            "added_files_count": counts[av.ADDED][0],
            "existing_files_count": counts[av.EXISTING][0],
            "deleted_files_count": counts[av.DELETED][0],
            "added_rows_count": counts[av.ADDED][1],
            "existing_rows_count": counts[av.EXISTING][1],
            "deleted_rows_count": counts[av.DELETED][1],
            "first_row_id": first_row_id if content == av.MANIFEST_DATA else None,
        }

    # -- earlier manifests -----------------------------------------------------------------

    def _carry_over(self, prev: dict[str, Any], plan: _Plan) -> list[dict[str, Any]]:
        """The previous snapshot's manifests, rewritten where a file left."""
        assert self.previous is not None
        assert self._old is not None
        old = self._old.select(["path"])
        gone_data = {
            self._location(p) for p in old.column("path").take(plan.data_removed).to_pylist()
        }
        gone_dvs = {self._location(p) for p in old.column("path").take(plan.dv_removed).to_pylist()}
        current = next(
            s for s in prev["snapshots"] if s["snapshot-id"] == prev["current-snapshot-id"]
        )
        listing = av.AvroContent(self._cache_path(current["manifest-list"]).read_bytes())
        out: list[dict[str, Any]] = []
        rewritten = 0
        for manifest in listing.records:
            live = manifest["added_files_count"] + manifest["existing_files_count"]
            if live == 0:
                continue  # only deletions, recorded by the snapshot that made them
            location = manifest["manifest_path"]
            is_data = manifest["content"] == av.MANIFEST_DATA
            gone = gone_data if is_data else gone_dvs
            if not gone:
                self._carry(location, manifest, out)
                continue
            data = self._cache_path(location).read_bytes()
            header = av.AvroHeader(data)
            if is_data and not _may_hold(header.metadata, gone):
                self._carry(location, manifest, out)  # no removed file within its paths
                continue
            records = self.known.get(location)
            if records is None:  # not generated in this run: decoded
                tag = av.tagger(header.schema)
                records = [tag(e) for e in av.AvroContent(data).records]
            key = "file_path" if is_data else "referenced_data_file"
            if not any(
                e["status"] != av.DELETED and av.untagged(e["data_file"][key]) in gone
                for e in records
            ):
                self._carry(location, manifest, out)
                continue
            snapshot = ("long", self.snapshot_id)
            entries = []
            for e in records:
                if e["status"] == av.DELETED:
                    continue
                if av.untagged(e["data_file"][key]) in gone:
                    entries.append({**e, "status": av.DELETED, "snapshot_id": snapshot})
                else:
                    entries.append({**e, "status": av.EXISTING})
            kind = "data-rewritten" if is_data else "deletes-rewritten"
            path = self.files.manifest_path(self.version, kind, rewritten)
            rewritten += 1
            data = av.encode(header.schema, entries, header.metadata, path.name)
            write_once(path, data)  # the header (and its path span) is the original's
            self.entries[self._generated(path)] = entries
            out.append(
                self._manifest_file(
                    path,
                    len(data),
                    manifest["content"],
                    entries,
                    None,
                    spec_id=manifest["partition_spec_id"],
                )
            )
        return out

    def _carry(self, location: str, manifest: dict[str, Any], out: list[dict[str, Any]]) -> None:
        """Keep a previous manifest as it is (and its entries, when known, for the next
        version)."""
        out.append(manifest)
        records = self.known.get(location)
        if records is not None:
            self.entries[location] = records

    # -- table metadata ----------------------------------------------------------------------

    def _metadata(
        self,
        converted: ConvertedSchema,
        schemas: list[dict[str, Any]],
        schema_id: int,
        specs: list[dict[str, Any]],
        spec_id: int,
        last_partition_id: int,
        snapshot_json: dict[str, Any],
        next_row_id: int,
    ) -> dict[str, Any]:
        prev = self.prev
        snapshots = [*prev["snapshots"], snapshot_json] if prev else [snapshot_json]
        snapshot_log = [*prev["snapshot-log"]] if prev else []
        snapshot_log.append(
            {"timestamp-ms": snapshot_json["timestamp-ms"], "snapshot-id": self.snapshot_id}
        )
        meta = self.snapshot.metadata
        properties = {
            NAME_MAPPING_PROPERTY: orjson.dumps(converted.name_mapping).decode(),
            "lakeshare.delta.version": str(self.version),
        }
        if meta.name:
            properties["lakeshare.delta.name"] = str(meta.name)
        return {
            "format-version": 3,
            "table-uuid": _table_uuid(meta.id),
            "location": (
                location_of(self.storage, self.root)
                if self.bucket is None
                else f"s3://{self.bucket}"
            ),
            "last-sequence-number": self.sequence,
            "last-updated-ms": snapshot_json["timestamp-ms"],
            "last-column-id": max(
                converted.last_column_id, int(prev["last-column-id"]) if prev else 0
            ),
            "current-schema-id": schema_id,
            "schemas": schemas,
            "default-spec-id": spec_id,
            "partition-specs": specs,
            "last-partition-id": last_partition_id,
            "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": properties,
            "current-snapshot-id": self.snapshot_id,
            "refs": {"main": {"snapshot-id": self.snapshot_id, "type": "branch"}},
            "snapshots": snapshots,
            "snapshot-log": snapshot_log,
            "metadata-log": [],
            "statistics": [],
            "partition-statistics": [],
            "next-row-id": next_row_id,
        }


PATH_SPAN_FIRST = "lakeshare.first-file-path"
PATH_SPAN_LAST = "lakeshare.last-file-path"
"""Header metadata of a data manifest: the least and greatest `file_path` it lists, so the
next version decodes only the manifests whose span holds a removed file."""


def _may_hold(header: dict[str, str], gone: set[str]) -> bool:
    """Whether a data manifest with this header may list one of the `gone` paths (True
    when it has no span: written before spans were)."""
    first, last = header.get(PATH_SPAN_FIRST), header.get(PATH_SPAN_LAST)
    if first is None or last is None:
        return True
    return any(first <= path <= last for path in gone)


def _column(table: pa.Table, name: str) -> list[Any]:
    """A column as Python values (all None when the snapshot has no such column)."""
    if name not in table.column_names:
        return [None] * table.num_rows
    values: list[Any] = table.column(name).to_pylist()
    return values


def _strings(values: pa.Array | pa.ChunkedArray) -> list[Any]:
    """A string column as Python strings (None for null): through numpy, several times
    faster than `to_pylist`."""
    out: list[Any] = values.to_numpy(zero_copy_only=False).tolist()
    return out


@dataclass
class _Plan:
    """Row indexes: of the current files (data entries to add, DVs to add) and of the
    previous files (data entries and DVs that end)."""

    data_added: list[int]
    dv_added: list[int]
    data_removed: pa.Array
    dv_removed: pa.Array


def _diff(old: pa.Table | None, cur: pa.Table) -> _Plan:
    """What changed between two versions' files: a file is the same data entry while its
    path and `baseRowId` stay, and keeps its DV entry while its DV stays."""
    cur_data, cur_dv, cur_has_dv = _signatures(cur)
    if old is None:
        empty = pa.array([], pa.int64())
        return _Plan(list(range(cur.num_rows)), _indexes(cur_has_dv).to_pylist(), empty, empty)
    old_data, old_dv, old_has_dv = _signatures(old)
    new_data = pc.invert(pc.is_in(cur_data, value_set=old_data))
    new_dv = pc.and_(pc.invert(pc.is_in(cur_dv, value_set=old_dv)), cur_has_dv)
    new_dv = pc.or_(new_dv, pc.and_(new_data, cur_has_dv))
    ended_data = pc.invert(pc.is_in(old_data, value_set=cur_data))
    ended_dv = pc.and_(
        old_has_dv, pc.or_(pc.invert(pc.is_in(old_dv, value_set=cur_dv)), ended_data)
    )
    return _Plan(
        _indexes(new_data).to_pylist(),
        _indexes(new_dv).to_pylist(),
        _indexes(ended_data),
        _indexes(ended_dv),
    )


def _indexes(mask: pa.Array) -> pa.Array:
    return pc.indices_nonzero(mask).cast(pa.int64())


def _signatures(files: pa.Table) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Per file: path + baseRowId, path + DV id, and whether it has a DV."""
    paths = files.column("path").combine_chunks().cast(pa.string())
    base = pc.fill_null(pc.cast(files.column("baseRowId").combine_chunks(), pa.string()), "")
    data = pc.binary_join_element_wise(paths, base, "\x00")
    dv = files.column("deletionVector").combine_chunks()
    if not pa.types.is_struct(dv.type) or files.num_rows == 0:
        # An all-null column may be stored without its struct type (deltalog.null_columns).
        return data, data, pa.array([False] * files.num_rows, pa.bool_())
    parts = [
        pc.fill_null(pc.cast(dv.field(name), pa.string()), "")
        for name in ("storageType", "pathOrInlineDv", "offset")
    ]
    dv_id = pc.binary_join_element_wise(paths, *parts, "\x00")
    return data, dv_id, dv.is_valid()


_DECIMAL_JSON = json.JSONDecoder(parse_float=Decimal)

_AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _avro_name(name: str) -> str:
    """A column name as an Avro field name (readers match partition fields by id)."""
    if _AVRO_NAME.match(name):
        return name
    out = []
    for i, ch in enumerate(name):
        valid = ch == "_" or (ch.isascii() and (ch.isalpha() or (ch.isdigit() and i > 0)))
        out.append(ch if valid else f"_x{ord(ch):X}")
    return "".join(out)


def _table_uuid(table_id: str | None) -> str:
    """The Delta table id when it is a UUID (as Delta writers make it), else one derived."""
    try:
        return str(uuid.UUID(str(table_id)))
    except ValueError:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"lakeshare-delta-table:{table_id}"))


def _summary(
    plan: _Plan,
    new_data: Sequence[dict[str, Any]],
    dv_rows: Sequence[dict[str, Any]],
    manifests: Sequence[dict[str, Any]],
) -> dict[str, str]:
    added_files = sum(m["added_files_count"] for m in new_data)
    removed_files = len(plan.data_removed)
    if removed_files == 0 and not dv_rows:
        operation = "append"
    elif not added_files:
        operation = "delete"
    else:
        operation = "overwrite"
    total_files = sum(
        m["added_files_count"] + m["existing_files_count"]
        for m in manifests
        if m["content"] == av.MANIFEST_DATA
    )
    total_rows = sum(
        m["added_rows_count"] + m["existing_rows_count"]
        for m in manifests
        if m["content"] == av.MANIFEST_DATA
    )
    return {
        "operation": operation,
        "added-data-files": str(added_files),
        "deleted-data-files": str(removed_files),
        "added-records": str(sum(m["added_rows_count"] for m in new_data)),
        "added-delete-files": str(len(dv_rows)),
        "total-data-files": str(total_files),
        "total-records": str(total_rows),
    }
