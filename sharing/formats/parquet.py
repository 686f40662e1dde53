"""The parquet response format: flat `file` lines with `url`, for every Delta Sharing client
(`add`, `remove` and `cdf` lines in streaming and change data feed responses).

Only tables readable as plain parquet reach this writer (capabilities.choose_format
refuses deletion vectors and column mapping), so the protocol line is always reader
version 1 and the schema is the cleaned one, without Delta-internal field metadata.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.packed_stats import stats_text
from deltalog.schema import clean_schema_for_sharing
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
    joined_text,
    json_number,
    json_string_map_pieces,
    json_string_pieces,
    string_field,
)

_PROTOCOL_LINE = dumps_line({"protocol": {"minReaderVersion": 1}})


class ParquetWriter:
    """Writes `responseformat=parquet` lines."""

    def head_lines(self, head: TableHead, version: int | None = None) -> bytes:
        return _PROTOCOL_LINE + self.metadata_line(head, version)

    def metadata_line(self, head: TableHead, version: int | None) -> bytes:
        meta = metadata_object(head)
        if version is not None:
            meta["version"] = version
        return dumps_line({"metaData": meta})

    def protocol_line(self, head: TableHead, version: int) -> bytes:
        return _PROTOCOL_LINE

    def file_lines(self, batch: pa.RecordBatch, ctx: FileContext, action: str = FILE) -> FileLines:
        if batch.num_rows == 0:
            return FileLines(b"", None)
        signed = signed_urls(batch.column("path"), ctx)
        pieces: list[Piece] = [
            f'{{"{action}":{{"url":"',
            *json_string_pieces(signed.pieces, safe=signed.json_safe),
            '","id":"',
            batch_file_ids(batch, ctx.id_scheme),
            '","partitionValues":',
            *json_string_map_pieces(batch.column("partitionValues")),
            ',"size":',
            json_number(pc.fill_null(batch.column("size"), 0)),
        ]
        # Removes and change data files carry no stats for the client to use.
        if action not in (REMOVE, CDC):
            pieces += string_field("stats", stats_text(batch.column("stats")))
        pieces.append(f',"expirationTimestamp":{signed.expiration_ms}')
        if ctx.timestamp is not None:
            pieces.append(f',"timestamp":{ctx.timestamp}')
        if ctx.version is not None:
            pieces.append(f',"version":{ctx.version}')
        pieces.append("}}\n")
        lines = concat(pieces, skip_null_pieces=True)
        return FileLines(joined_text(lines), signed.expiration_ms)


def metadata_object(head: TableHead) -> dict[str, object]:
    """The parquet-format metaData object, in a fixed key order."""
    meta = head.metadata
    out: dict[str, object] = {"id": meta.id}
    if meta.name is not None:
        out["name"] = meta.name
    if meta.description is not None:
        out["description"] = meta.description
    out["format"] = {"provider": meta.format_provider}
    out["schemaString"] = clean_schema_for_sharing(meta.schema_string)
    cdf = head.history_shared and meta.change_data_feed_enabled
    out["configuration"] = {"enableChangeDataFeed": "true"} if cdf else {}
    out["partitionColumns"] = list(meta.partition_columns)
    if head.size is not None:
        out["size"] = head.size
    if head.num_files is not None:
        out["numFiles"] = head.num_files
    return out
