"""The delta response format: Delta log actions wrapped for the recipient's Delta reader.

The client writes these actions into a local `_delta_log` and reads the table with a Delta
library, so each action (`add`; `remove` and `cdc` in change ranges) keeps its log fields
(stats and partition values with physical column names, tags, row tracking ids) with
`path` replaced by a signed URL. Deletion vectors stored in files are signed as well and
rewritten to storage type `p`; inline ones pass through unchanged.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from deltalog import DeletionVectorError
from deltalog.deletion_vectors import DeletionVectorDescriptor, absolute_paths
from deltalog.packed_stats import stats_text
from sharing.errors import UnsupportedOperation
from sharing.formats import (
    CDC,
    FILE,
    REMOVE,
    FileContext,
    FileLines,
    TableHead,
    batch_file_ids,
    dumps_line,
    signed_urls,
)
from sharing.formats.jsoncols import (
    Piece,
    concat,
    field,
    field_pieces,
    joined_text,
    json_bool,
    json_number,
    json_string,
    json_string_map,
    json_string_map_pieces,
    json_string_pieces,
    string_field,
)

_NULL_STRING = pa.scalar(None, pa.string())


class DeltaWriter:
    """Writes `responseformat=delta` lines."""

    def head_lines(self, head: TableHead, version: int | None = None) -> bytes:
        protocol = dumps_line({"protocol": {"deltaProtocol": protocol_object(head)}})
        return protocol + self.metadata_line(head, version)

    def metadata_line(self, head: TableHead, version: int | None) -> bytes:
        wrapper: dict[str, Any] = {} if version is None else {"version": version}
        wrapper["deltaMetadata"] = metadata_object(head)
        if head.size is not None:
            wrapper["size"] = head.size
        if head.num_files is not None:
            wrapper["numFiles"] = head.num_files
        return dumps_line({"metaData": wrapper})

    def protocol_line(self, head: TableHead, version: int) -> bytes:
        return dumps_line(
            {"protocol": {"version": version, "deltaProtocol": protocol_object(head)}}
        )

    def file_lines(self, batch: pa.RecordBatch, ctx: FileContext, action: str = FILE) -> FileLines:
        if batch.num_rows == 0:
            return FileLines(b"", None)
        signed = signed_urls(batch.column("path"), ctx)
        ids = batch_file_ids(batch, ctx.id_scheme)
        pieces: list[Piece] = ['{"file":{"id":"', ids, '"']
        if ctx.version is not None:
            pieces.append(f',"version":{ctx.version}')
        if ctx.timestamp is not None:
            pieces.append(f',"timestamp":{ctx.timestamp}')
        expiration = signed.expiration_ms
        if action == CDC:
            kind, body = "cdc", _cdc_fields(batch)
        else:
            dvs, dv_expiration = deletion_vectors(batch.column("deletionVector"), ctx)
            if dv_expiration is not None:
                expiration = min(expiration, dv_expiration)
            kind = "remove" if action == REMOVE else "add"
            body = _remove_fields(batch) if action == REMOVE else _add_fields(batch)
            body += [
                *field_pieces("deletionVector", dvs),
                *field_pieces("baseRowId", json_number(batch.column("baseRowId"))),
                *field_pieces(
                    "defaultRowCommitVersion", json_number(batch["defaultRowCommitVersion"])
                ),
            ]
        pieces += [
            f',"expirationTimestamp":{expiration}',
            f',"deltaSingleAction":{{"{kind}":{{"path":"',
            *json_string_pieces(signed.pieces, safe=signed.json_safe),
            '"',
            *body,
            "}}}}\n",
        ]
        lines = concat(pieces, skip_null_pieces=True)
        return FileLines(joined_text(lines), expiration)


def _add_fields(batch: pa.RecordBatch) -> list[Piece]:
    """The fields of an `add` after `path` (modificationTime and dataChange always set:
    Delta readers require them)."""
    return [
        ',"partitionValues":',
        *json_string_map_pieces(batch.column("partitionValues")),
        *field_pieces("size", json_number(pc.fill_null(batch.column("size"), 0))),
        *field_pieces("modificationTime", json_number(pc.fill_null(batch["modificationTime"], 0))),
        *field_pieces("dataChange", json_bool(pc.fill_null(batch.column("dataChange"), True))),
        *string_field("stats", stats_text(batch.column("stats"))),
        *_tags(batch),
        *_optional_string("clusteringProvider", batch.column("clusteringProvider")),
    ]


def _remove_fields(batch: pa.RecordBatch) -> list[Piece]:
    """The fields of a `remove` after `path`, as far as the log had them."""
    return [
        *field_pieces("deletionTimestamp", json_number(batch.column("deletionTimestamp"))),
        *field_pieces("dataChange", json_bool(pc.fill_null(batch.column("dataChange"), True))),
        *field_pieces("extendedFileMetadata", json_bool(batch.column("extendedFileMetadata"))),
        ',"partitionValues":',
        *json_string_map_pieces(batch.column("partitionValues")),
        *field_pieces("size", json_number(batch.column("size"))),
        *string_field("stats", stats_text(batch.column("stats"))),
        *_tags(batch),
    ]


def _cdc_fields(batch: pa.RecordBatch) -> list[Piece]:
    """The fields of a `cdc` after `path`; Delta readers require partitionValues, size and
    dataChange (always false for change data files)."""
    return [
        ',"partitionValues":',
        *json_string_map_pieces(batch.column("partitionValues")),
        *field_pieces("size", json_number(pc.fill_null(batch.column("size"), 0))),
        *field_pieces("dataChange", json_bool(pc.fill_null(batch.column("dataChange"), False))),
        *_tags(batch),
    ]


def _tags(batch: pa.RecordBatch) -> list[Piece]:
    tags = batch.column("tags")
    if tags.null_count == len(tags):
        return []  # no file has tags: nothing to format
    return [field("tags", pc.if_else(tags.is_valid(), json_string_map(tags), _NULL_STRING))]


def _optional_string(name: str, values: pa.Array) -> list[Piece]:
    """A string field most files leave out: nothing to escape when none has it."""
    if values.null_count == len(values):
        return []
    return [field(name, json_string(values))]


def protocol_object(head: TableHead) -> dict[str, Any]:
    """The table's protocol, feature lists left out when empty."""
    protocol = head.protocol
    out: dict[str, Any] = {
        "minReaderVersion": protocol.min_reader_version,
        "minWriterVersion": protocol.min_writer_version,
    }
    if protocol.reader_features:
        out["readerFeatures"] = list(protocol.reader_features)
    if protocol.writer_features:
        out["writerFeatures"] = list(protocol.writer_features)
    return out


def metadata_object(head: TableHead) -> dict[str, Any]:
    """The table's metaData action, raw schema and full configuration, fixed key order."""
    meta = head.metadata
    out: dict[str, Any] = {"id": meta.id}
    if meta.name is not None:
        out["name"] = meta.name
    if meta.description is not None:
        out["description"] = meta.description
    out["format"] = {"provider": meta.format_provider, "options": dict(meta.format_options)}
    out["schemaString"] = meta.schema_string
    out["partitionColumns"] = list(meta.partition_columns)
    out["configuration"] = dict(meta.configuration)
    if meta.created_time is not None:
        out["createdTime"] = meta.created_time
    return out


def deletion_vectors(column: pa.Array, ctx: FileContext) -> tuple[pa.Array, int | None]:
    """The `deletionVector` JSON of each row (null where the file has none) and the expiry
    of the DV URLs signed for it. DVs are few, so they are handled row by row."""
    present = pc.is_valid(column)
    if not pc.any(present).as_py():
        return pa.nulls(len(column), pa.string()), None
    indices = pc.indices_nonzero(present)
    rows = indices.to_pylist()
    descriptors: list[DeletionVectorDescriptor] = []
    try:
        # One conversion of the DV rows: a scalar's as_py() per row costs ~10x more.
        for value in column.take(indices).to_pylist():
            descriptors.append(DeletionVectorDescriptor.from_dict(value))
    except DeletionVectorError as exc:
        raise UnsupportedOperation(f"Table has an invalid deletion vector: {exc}") from exc
    on_disk = [d for d in descriptors if d.storage_type != "i"]
    urls: list[str] = []
    expiration = None
    if on_disk:
        keys = absolute_paths(ctx.table_root, on_disk, ctx.storage)
        signed = ctx.signer.sign(keys)
        urls, expiration = signed.urls, signed.expiration_ms
    url_iter = iter(urls)
    texts: list[str | None] = [None] * len(column)
    for i, d in zip(rows, descriptors, strict=True):
        url = None if d.storage_type == "i" else next(url_iter)
        texts[i] = orjson.dumps(_descriptor_object(d, url)).decode()
    return pa.array(texts, pa.string()), expiration


def _descriptor_object(d: DeletionVectorDescriptor, url: str | None) -> dict[str, Any]:
    if url is None:
        return d.to_dict()
    out: dict[str, Any] = {"storageType": "p", "pathOrInlineDv": url}
    if d.offset is not None:
        out["offset"] = d.offset
    out["sizeInBytes"] = d.size_in_bytes
    out["cardinality"] = d.cardinality
    return out
