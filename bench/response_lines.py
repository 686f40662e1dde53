"""Response-line throughput for a large snapshot query, per stage, with a naive baseline.

    .venv/bin/python bench/response_lines.py [--files 1000000] [--json out.json]

Builds an in-memory snapshot files table (ADD_SCHEMA) of `--files` files that look like a
real partitioned table (two partition directories, UUID names, stats JSON with strings,
5% deletion vectors), then produces the complete NDJSON body of a snapshot query through
the real path (`QueryPlan.body`, the format writers, the local signer and the S3 signer
with static credentials), for both response formats. Stages are timed on their own over
the same batches: file ids, storage keys, signing; line assembly is the rest of the body's
time. The first body of a snapshot pays for its file ids; later requests on the same
snapshot reuse them (`warm`). The baseline formats one dict per file with orjson, signing
with the same signer. `packed` is the warm body of the same files with their statistics
packed, as a snapshot loaded in memory holds them (deltalog.packed_stats; one mapped from
a snapshot store holds strings, like the other figures).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import orjson
import pyarrow as pa
from botocore.credentials import Credentials

from deltalog import z85
from deltalog.actions import ADD_SCHEMA, DELETION_VECTOR_TYPE, STRING_MAP, Metadata
from deltalog.actions import Protocol as DeltaProtocol
from deltalog.packed_stats import pack_adds
from deltalog.storage.local import LocalStorage
from deltalog.storage.s3 import S3Storage
from sharing.formats import ID_HASHES, FileContext, TableHead, storage_keys
from sharing.formats.delta import DeltaWriter
from sharing.formats.ids import DEFAULT_ID_CACHE, with_file_ids
from sharing.formats.parquet import ParquetWriter
from sharing.presign.base import Signer
from sharing.presign.local import LocalSigner, TableRef, UrlHolder
from sharing.presign.s3 import S3Signer
from sharing.query.plan import BATCH_ROWS, FileSection, QueryPlan

LOCAL_ROOT = "/data/lake/tables/events"
S3_ROOT = "lake-bucket/tables/events"
DV_SHARE = 0.05


# --------------------------------------------------------------------------------------
# The snapshot


def build_files(count: int, seed: int = 7) -> pa.Table:
    """A snapshot files table of `count` files partitioned by date and region."""
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    regions = ["us-east", "us-west", "eu-central", "ap-south"]
    dates = [f"2024-{m:02d}-{d:02d}" for m in range(1, 13) for d in range(1, 29)]
    date_idx = np_rng.integers(0, len(dates), count)
    region_idx = np_rng.integers(0, len(regions), count)
    paths, stats = [], []
    for i in range(count):
        date, region = dates[date_idx[i]], regions[region_idx[i]]
        name = f"part-{i % 10_000:05d}-{uuid.UUID(int=rng.getrandbits(128))}-c000.snappy.parquet"
        paths.append(f"date={date}/region={region}/{name}")
        rows = rng.randint(1_000, 2_000_000)
        stats.append(
            f'{{"numRecords":{rows},"minValues":{{"id":{i * 10},"name":"a\\"{i % 97}",'
            f'"ts":"2024-01-01T00:00:00.000Z"}},"maxValues":{{"id":{i * 10 + rows},'
            f'"name":"zz{i % 89}","ts":"2024-12-31T23:59:59.999Z"}},'
            f'"nullCount":{{"id":0,"name":{i % 5},"ts":0}}}}'
        )
    keys = pa.array(["date", "region"] * count, pa.string())
    interleaved = np.stack([date_idx, len(dates) + region_idx], 1).reshape(-1)
    items = pa.array(dates + regions, pa.string()).take(pa.array(interleaved))
    offsets = pa.array(np.arange(0, 2 * count + 1, 2, dtype=np.int32))
    partition_values = pa.MapArray.from_arrays(offsets, keys, items, type=STRING_MAP)
    with_dv = np_rng.random(count) < DV_SHARE
    dv_rows = [
        {
            "storageType": "u",
            "pathOrInlineDv": "ab" + z85.encode(uuid.UUID(int=rng.getrandbits(128)).bytes),
            "offset": 1,
            "sizeInBytes": 36,
            "cardinality": rng.randint(1, 500),
            "maxRowIndex": None,
        }
        if has
        else None
        for has in with_dv
    ]
    size = np_rng.integers(100_000, 200_000_000, count)
    columns = {
        "path": pa.array(paths, pa.string()),
        "partitionValues": partition_values,
        "size": pa.array(size, pa.int64()),
        "modificationTime": pa.array(1_700_000_000_000 + np.arange(count), pa.int64()),
        "dataChange": pa.array(np.ones(count, bool)),
        "stats": pa.array(stats, pa.string()),
        "tags": pa.nulls(count, STRING_MAP),
        "deletionVector": pa.array(dv_rows, DELETION_VECTOR_TYPE),
        "baseRowId": pa.nulls(count, pa.int64()),
        "defaultRowCommitVersion": pa.nulls(count, pa.int64()),
        "clusteringProvider": pa.nulls(count, pa.string()),
        "version": pa.array(np.full(count, 42), pa.int64()),
    }
    return pa.table(columns, schema=ADD_SCHEMA)


def table_head(files: pa.Table) -> TableHead:
    schema = {
        "type": "struct",
        "fields": [
            {"name": n, "type": t, "nullable": True, "metadata": {}}
            for n, t in [
                ("id", "long"),
                ("name", "string"),
                ("ts", "timestamp"),
                ("date", "string"),
                ("region", "string"),
            ]
        ],
    }
    metadata = Metadata.from_action(
        {
            "id": "b8f6bbdc-0e1e-4b4f-9a4b-6d5d3a7ef0a1",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(schema),
            "partitionColumns": ["date", "region"],
            "configuration": {"delta.enableDeletionVectors": "true"},
            "createdTime": 1_700_000_000_000,
        }
    )
    protocol = DeltaProtocol.from_action(
        {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"],
            "writerFeatures": ["deletionVectors"],
        }
    )
    return TableHead(protocol, metadata, size=None, num_files=files.num_rows, history_shared=True)


# --------------------------------------------------------------------------------------
# Signers


def local_signer() -> tuple[Signer, LocalStorage, str]:
    signer = LocalSigner(
        secret="bench-signing-secret-0123456789abcdef",
        base_url="https://sharing.example.com",
        endpoint="/delta-sharing",
        table=TableRef("share", "schema", "events"),
        table_root=LOCAL_ROOT,
        ttl_seconds=3600,
        holder=UrlHolder("acme", "c0ffee"),
    )
    return signer, LocalStorage(), LOCAL_ROOT


def s3_signer() -> tuple[Signer, S3Storage, str]:
    access, secret = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    storage = S3Storage(
        {"region": "us-west-2", "access_key_id": access, "secret_access_key": secret}
    )
    signer = S3Signer(
        Credentials(access, secret), region="us-west-2", table_root=S3_ROOT, ttl_seconds=3600
    )
    return signer, storage, S3_ROOT


# --------------------------------------------------------------------------------------
# Timing


REPEAT = 3


def timed(run: Callable[[], Any], setup: Callable[[], Any] | None = None, repeat: int = 0) -> float:
    """The best of `repeat` runs (default REPEAT): the machines are shared, and the minimum
    is the figure least disturbed by other processes. `setup` runs before each, untimed."""
    best = float("inf")
    for _ in range(repeat or REPEAT):
        if setup is not None:
            setup()
        gc.collect()
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def batches(files: pa.Table) -> list[pa.RecordBatch]:
    return files.to_batches(max_chunksize=BATCH_ROWS)


def body(files: pa.Table, response_format: str, ctx: FileContext) -> Iterator[bytes]:
    """The body as `plan_query` builds it for an unfiltered query: ids attached from the
    cache, then the writer over batches."""
    writer = DeltaWriter() if response_format == "delta" else ParquetWriter()
    selected = with_file_ids(files, ctx.id_scheme)
    plan = QueryPlan(
        version=42,
        response_format=response_format,
        head=writer.head_lines(table_head(files)),
        sections=[FileSection(selected, ctx)],
        writer=writer,
        end_stream=True,
    )
    return plan.body()


def drain(chunks: Iterator[bytes]) -> int:
    return sum(len(c) for c in chunks)


def stages(
    files: pa.Table, packed: pa.Table, response_format: str, ctx: FileContext
) -> dict[str, float]:
    """Each stage alone over the body's batches, then the whole body (cold and warm ids),
    and the warm body of `packed` (the same files, statistics packed)."""
    parts = batches(files)
    paths = files.column("path")
    out: dict[str, float] = {}
    out["ids_cold"] = timed(
        lambda: DEFAULT_ID_CACHE.ids(paths, response_format), setup=DEFAULT_ID_CACHE.clear
    )
    out["ids_warm"] = timed(lambda: DEFAULT_ID_CACHE.ids(paths, response_format))
    keys = [storage_keys(b.column("path"), ctx.storage, ctx.table_root) for b in parts]
    out["keys"] = timed(
        lambda: [storage_keys(b.column("path"), ctx.storage, ctx.table_root) for b in parts]
    )
    out["sign"] = timed(lambda: [ctx.signer.sign(k) for k in keys])
    size = [0]
    out["body_cold"] = timed(
        lambda: size.__setitem__(0, drain(body(files, response_format, ctx))),
        setup=DEFAULT_ID_CACHE.clear,
    )
    out["body_warm"] = timed(lambda: drain(body(files, response_format, ctx)))
    out["body_packed"] = timed(lambda: drain(body(packed, response_format, ctx)))
    out["assembly"] = out["body_warm"] - out["ids_warm"] - out["keys"] - out["sign"]
    out["megabytes"] = size[0] / 1e6
    return out


def naive_body(files: pa.Table, response_format: str, ctx: FileContext) -> int:
    """One dict per file and one orjson.dumps per line, the same signer: the approach the
    design rules out, as the baseline."""
    digest = ID_HASHES[response_format]
    prefix = ctx.storage.join(ctx.table_root, "")
    total = 0
    for batch in batches(files):
        rows = batch.to_pylist()
        signed = ctx.signer.sign([prefix + r["path"] for r in rows])
        expiration = signed.expiration_ms
        for row, url in zip(rows, signed.urls, strict=True):
            file_id = digest(row["path"].encode(), usedforsecurity=False).hexdigest()
            values = dict(row["partitionValues"] or [])
            if response_format == "parquet":
                line = {
                    "file": {
                        "url": url,
                        "id": file_id,
                        "partitionValues": values,
                        "size": row["size"],
                        "stats": row["stats"],
                        "expirationTimestamp": expiration,
                    }
                }
            else:
                add: dict[str, Any] = {
                    "path": url,
                    "partitionValues": values,
                    "size": row["size"],
                    "modificationTime": row["modificationTime"],
                    "dataChange": row["dataChange"],
                    "stats": row["stats"],
                }
                if row["deletionVector"] is not None:
                    add["deletionVector"] = {
                        k: v for k, v in row["deletionVector"].items() if v is not None
                    }
                line = {
                    "file": {
                        "id": file_id,
                        "expirationTimestamp": expiration,
                        "deltaSingleAction": {"add": add},
                    }
                }
            total += len(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=REPEAT)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    globals()["REPEAT"] = args.repeat

    start = time.perf_counter()
    files = build_files(args.files)
    print(f"built {files.num_rows:,} files in {time.perf_counter() - start:.1f} s", flush=True)
    packed = pack_adds(files)

    results: list[dict[str, Any]] = []
    for signer_name, make in (("local", local_signer), ("s3", s3_signer)):
        signer, storage, root = make()
        for response_format in ("parquet", "delta"):
            ctx = FileContext(
                storage=storage, table_root=root, signer=signer, id_scheme=response_format
            )
            row: dict[str, Any] = {"signer": signer_name, "format": response_format}
            row.update(stages(files, packed, response_format, ctx))
            row["naive"] = timed(lambda: naive_body(files, response_format, ctx), repeat=1)  # noqa: B023
            results.append(row)
            print(
                f"{signer_name:5} {response_format:7} "
                f"ids {row['ids_cold']:.2f}/{row['ids_warm']:.2f}  keys {row['keys']:.2f}  "
                f"sign {row['sign']:.2f}  assembly {row['assembly']:.2f}  "
                f"body cold {row['body_cold']:.2f} warm {row['body_warm']:.2f}  "
                f"packed {row['body_packed']:.2f}  "
                f"naive {row['naive']:.2f} s  ({row['megabytes']:.0f} MB)",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps({"files": args.files, "results": results}, indent=2))


if __name__ == "__main__":
    main()
