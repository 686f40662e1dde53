"""Benchmark: data skipping over a 1,000,000-file snapshot.

Builds an ADD_SCHEMA files table in memory (partitioned by `date` and `region`, stats JSON
for four columns, held packed as a snapshot loaded in memory holds it, and the same
statistics typed as the `stats_parsed` column a snapshot loaded from a checkpoint written
with `delta.checkpoint.writeStatsAsStruct` carries) and times `select_files` (what the
query path runs: the kept files as row indices, taken batch by batch only as the response
is written) for a partition predicate (cold, and with the snapshot's partition codes
cached) and for a stats predicate — the latter cold on a never-queried snapshot (typed
statistics read as they are; JSON-only statistics parsed for the referenced column, the
baseline; JSON-only statistics typed once, as the server's snapshot store writes them for
every worker and restart to map; for an integer and for a timestamp column) and warm
(parsed columns cached), next to `filter_files` (the same selection copied out as a table,
as the query path did before) — plus `apply_limit`, against a naive per-file Python
evaluation (orjson.loads per stats string, Python comparisons) over the same data. For a
snapshot reloaded afresh (new buffers, as after a table-cache eviction), the background
warm-up a server starts on loading it (StatsWarmer, parsing the columns queried on the
previous snapshot: here `id`) is timed three ways: how long it runs, a query sent at the
moment of loading (it joins the warm-up in flight), and one sent after it finished.

    .venv/bin/python bench/skipping.py [--files N] [--repeat R]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import time
from collections.abc import Callable

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.actions import ADD_SCHEMA, STATS_PARSED, STRING_MAP, Metadata
from deltalog.json_stats import stats_type, typed_stats
from deltalog.packed_stats import can_pack, pack_adds
from sharing.skipping import StatsCache, apply_limit, filter_files, select_files
from sharing.skipping.partition_codes import DEFAULT_PARTITION_CODES
from sharing.skipping.warm import StatsWarmer

REGIONS = ["us-east", "us-west", "eu-central", "eu-west", "ap-south", "ap-east", "sa", "af"]
FIRST_DAY = dt.date(2023, 1, 1)
DAYS = 730
SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": name, "type": kind, "nullable": True, "metadata": {}}
        for name, kind in [
            ("date", "date"),
            ("region", "string"),
            ("id", "long"),
            ("price", "double"),
            ("name", "string"),
            ("ts", "timestamp"),
        ]
    ],
}
METADATA = Metadata.from_action(
    {
        "id": "bench",
        "schemaString": json.dumps(SCHEMA),
        "partitionColumns": ["date", "region"],
        "configuration": {},
    }
)


TYPED_VALUES = pa.struct(
    [
        ("id", pa.int64()),
        ("price", pa.float64()),
        ("name", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
TYPED_STATS = pa.struct(
    [
        ("numRecords", pa.int64()),
        ("minValues", TYPED_VALUES),
        ("maxValues", TYPED_VALUES),
        ("nullCount", pa.struct([(f.name, pa.int64()) for f in TYPED_VALUES])),
    ]
)


def build_files(n: int, seed: int = 7) -> pa.Table:
    """n files: ids in increasing ranges (so a point lookup hits few files), random prices,
    names and timestamps with millisecond stats, a few files without stats. The same
    statistics are also given typed, as the `stats_parsed` column a snapshot loaded from a
    checkpoint written with `delta.checkpoint.writeStatsAsStruct` carries."""
    rng = random.Random(seed)
    stats: list[str | None] = []
    typed: list[dict[str, object] | None] = []
    base_ts = dt.datetime(2023, 1, 1, tzinfo=dt.UTC)
    for i in range(n):
        if i % 1000 == 999:
            stats.append(None)
            typed.append(None)
            continue
        records = rng.randint(1000, 100_000)
        lo_id = i * 100_000
        lo_price = rng.uniform(0, 500)
        start = base_ts + dt.timedelta(seconds=i * 60)
        end = start + dt.timedelta(seconds=rng.randint(1, 3600))
        hi_price = lo_price + rng.uniform(0, 500)
        lo_name = f"customer-{rng.randint(0, 99999):05d}"
        hi_name = f"customer-{rng.randint(0, 99999):05d}"
        lo_ts = start.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        hi_ts = end.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        null_prices, null_names = rng.randint(0, 10), rng.randint(0, 10)
        typed.append(
            {
                "numRecords": records,
                "minValues": {
                    "id": lo_id,
                    "price": round(lo_price, 2),
                    "name": lo_name,
                    "ts": start,
                },
                "maxValues": {
                    "id": lo_id + records - 1,
                    "price": round(hi_price, 2),
                    "name": hi_name,
                    "ts": end,
                },
                "nullCount": {"id": 0, "price": null_prices, "name": null_names, "ts": 0},
            }
        )
        stats.append(
            f'{{"numRecords":{records},'
            f'"minValues":{{"id":{lo_id},"price":{lo_price:.2f},"name":"{lo_name}","ts":"{lo_ts}"}},'
            f'"maxValues":{{"id":{lo_id + records - 1},"price":{hi_price:.2f},'
            f'"name":"{hi_name}","ts":"{hi_ts}"}},'
            f'"nullCount":{{"id":0,"price":{null_prices},"name":{null_names},'
            f'"ts":0}},"tightBounds":true}}'
        )
    days = [(FIRST_DAY + dt.timedelta(days=d)).isoformat() for d in range(DAYS)]
    keys = pa.array(["date", "region"] * n, pa.string())
    values = pa.array(
        [v for i in range(n) for v in (days[(i // 1370) % DAYS], REGIONS[i % len(REGIONS)])],
        pa.string(),
    )
    offsets = pa.array(range(0, 2 * n + 1, 2), pa.int32())
    partition_values = pa.MapArray.from_arrays(offsets, keys, values).cast(STRING_MAP)
    columns = {
        "path": pa.array([f"part-{i:07d}.parquet" for i in range(n)], pa.string()),
        "partitionValues": partition_values,
        "size": pa.array([1 << 20] * n, pa.int64()),
        "modificationTime": pa.array([0] * n, pa.int64()),
        "dataChange": pa.array([True] * n, pa.bool_()),
        "stats": pa.array(stats, pa.string()),
    }
    for field in ADD_SCHEMA:
        if field.name not in columns:
            columns[field.name] = pa.nulls(n, field.type)
    columns[STATS_PARSED] = pa.array(typed, TYPED_STATS)
    return pa.table(columns, schema=ADD_SCHEMA.append(pa.field(STATS_PARSED, TYPED_STATS)))


Result = pa.Table | pa.Array | int | None  # files, their indices (None: all), a count


def kept_count(result: Result) -> str:
    if isinstance(result, int):
        return f"{result:,}"
    if isinstance(result, pa.Table):
        return f"{result.num_rows:,}"
    return "all" if result is None else f"{len(result):,}"


def cold() -> StatsCache:
    """Nothing cached: no parsed statistics, no partition codes."""
    DEFAULT_PARTITION_CODES.clear()
    return StatsCache()


def timed(label: str, fn: Callable[[], Result], repeat: int) -> None:
    best = float("inf")
    result: Result = 0
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    print(f"{label:<58} {best * 1000:9.1f} ms   files kept: {kept_count(result):>9}")


def naive_partition(files: pa.Table, day: str, region: str) -> int:
    kept = 0
    for pv in files.column("partitionValues").to_pylist():
        values = dict(pv)
        if values.get("date") == day and values.get("region") == region:
            kept += 1
    return kept


def naive_stats(files: pa.Table, id_value: int) -> int:
    kept = 0
    for text in files.column("stats").to_pylist():
        if text is None:
            kept += 1
            continue
        stats = orjson.loads(text)
        lo = stats.get("minValues", {}).get("id")
        hi = stats.get("maxValues", {}).get("id")
        if lo is None or hi is None or lo <= id_value <= hi:
            kept += 1
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    start = time.perf_counter()
    built = build_files(args.files)
    text = built.drop_columns([STATS_PARSED])  # JSON statistics only, as strings
    # A snapshot loaded in memory holds its stats packed (deltalog.packed_stats), one
    # mapped from a snapshot store holds strings (`store_typed` below).
    typed_files = pack_adds(built) if can_pack() else built
    files = typed_files.drop_columns([STATS_PARSED])  # JSON statistics only
    print(
        f"built {files.num_rows:,} files in {time.perf_counter() - start:.1f} s "
        f"(stats JSON {text.column('stats').nbytes / 1e6:.0f} MB, held packed in memory: "
        f"{files.column('stats').nbytes / 1e6:.0f} MB); "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    day = (FIRST_DAY + dt.timedelta(days=100)).isoformat()
    partition_hint = json.dumps(
        {
            "op": "and",
            "children": [
                {
                    "op": "equal",
                    "children": [
                        {"op": "column", "name": "date", "valueType": "date"},
                        {"op": "literal", "value": day, "valueType": "date"},
                    ],
                },
                {
                    "op": "equal",
                    "children": [
                        {"op": "column", "name": "region", "valueType": "string"},
                        {"op": "literal", "value": "eu-west", "valueType": "string"},
                    ],
                },
            ],
        }
    )
    id_value = (args.files // 2) * 100_000 + 17
    stats_hint = json.dumps(
        {
            "op": "equal",
            "children": [
                {"op": "column", "name": "id", "valueType": "long"},
                {"op": "literal", "value": str(id_value), "valueType": "long"},
            ],
        }
    )

    ts_hint = json.dumps(
        {
            "op": "greaterThan",
            "children": [
                {"op": "column", "name": "ts", "valueType": "timestamp"},
                {"op": "literal", "value": "2024-06-01T00:00:00Z", "valueType": "timestamp"},
            ],
        }
    )

    def run(hint: str | None, sql: list[str] | None, cache: StatsCache) -> pa.Array | None:
        return run_on(files, hint, cache, sql)

    def run_on(
        table: pa.Table, hint: str | None, cache: StatsCache, sql: list[str] | None = None
    ) -> pa.Array | None:
        return select_files(
            table,
            METADATA,
            json_hints=hint,
            sql_hints=sql,
            evaluate_json=True,
            evaluate_sql=True,
            stats_cache=cache,
        )

    print(f"\n{args.files:,} files, best of {args.repeat}")
    timed(
        "partition predicate (JSON: date = d AND region = r)",
        lambda: run(partition_hint, None, cold()),
        args.repeat,
    )
    sql = [f"date = '{day}'", "region = 'eu-west'"]
    timed("partition predicate (SQL hints)", lambda: run(None, sql, cold()), args.repeat)
    run(partition_hint, None, cold())
    timed(
        "partition predicate, warm (partition codes cached)",
        lambda: run(partition_hint, None, StatsCache()),
        args.repeat,
    )
    timed(
        "stats predicate (id = v), cold, typed stats (stats_parsed)",
        lambda: run_on(typed_files, stats_hint, cold()),
        args.repeat,
    )
    timed(
        "  same, cold, JSON stats only: parsed (baseline)",
        lambda: run(stats_hint, None, cold()),
        args.repeat,
    )
    # What a snapshot store with typed_stats (the server's) writes for JSON-only
    # statistics, once per table version: the typed columns every worker and restart maps.
    struct = stats_type(METADATA)
    assert struct is not None
    start = time.perf_counter()
    json_typed = typed_stats(text.column("stats").combine_chunks(), struct)
    typing_seconds = time.perf_counter() - start
    store_typed = text.append_column(pa.field(STATS_PARSED, struct), json_typed)
    timed(
        "  same, cold, JSON stats typed once by the snapshot store",
        lambda: run_on(store_typed, stats_hint, cold()),
        args.repeat,
    )
    print(
        f"  (typing the JSON stats at store build: {typing_seconds * 1000:.0f} ms, once per "
        "version)"
    )
    both_hint = json.dumps(
        {"op": "and", "children": [json.loads(partition_hint), json.loads(stats_hint)]}
    )
    timed(
        "partition AND stats predicate, cold (candidates' stats only)",
        lambda: run(both_hint, None, cold()),
        args.repeat,
    )
    timed(
        "stats predicate (ts > t), cold, typed stats",
        lambda: run_on(typed_files, ts_hint, cold()),
        args.repeat,
    )
    timed(
        "  same, cold, JSON stats only: parsed (baseline)",
        lambda: run(ts_hint, None, cold()),
        args.repeat,
    )
    timed(
        "  same, cold, JSON stats typed once by the snapshot store",
        lambda: run_on(store_typed, ts_hint, cold()),
        args.repeat,
    )

    def copied(table: pa.Table, hint: str, cache: StatsCache) -> pa.Table:
        """The selection copied out as a table (filter_files), as the query path did."""
        return filter_files(
            table,
            METADATA,
            json_hints=hint,
            sql_hints=None,
            evaluate_json=True,
            evaluate_sql=True,
            stats_cache=cache,
        )

    timed(
        "  same, typed, kept rows copied (filter_files, before)",
        lambda: copied(typed_files, ts_hint, cold()),
        args.repeat,
    )
    timed(
        "  same, store-typed, kept rows copied (filter_files, before)",
        lambda: copied(store_typed, ts_hint, cold()),
        args.repeat,
    )
    warm = cold()
    run(stats_hint, None, warm)
    timed(
        "stats predicate (id = v), warm: parsed stats cached",
        lambda: run(stats_hint, None, warm),
        args.repeat,
    )
    run(ts_hint, None, warm)
    timed("stats predicate (ts > t), warm", lambda: run(ts_hint, None, warm), args.repeat)
    timed(
        "  same, warm, kept rows copied (filter_files, before)",
        lambda: copied(files, ts_hint, warm),
        args.repeat,
    )
    timed(
        "apply_limit(1000) after warm-up",
        lambda: apply_limit(files, 1000, stats_cache=warm),
        args.repeat,
    )

    print("\nsnapshot reloaded afresh (new buffers); StatsWarmer warms id, queried before")
    stats_column = files.column("stats")
    reloaded = files.set_column(
        files.schema.get_field_index("stats"),
        "stats",
        pc.take(stats_column, pa.array(range(files.num_rows), pa.int64())),
    )
    versions = iter(range(1, 1_000_000))

    def queried_before() -> StatsCache:
        """A cache holding what the `id` query on the previous snapshot parsed."""
        cache = cold()
        run(stats_hint, None, cache)
        return cache

    def load(cache: StatsCache) -> StatsWarmer:
        warmer = StatsWarmer(cache)
        warmer.snapshot_loaded("bench", next(versions), reloaded, METADATA, previous=files)
        return warmer

    def timed_with(
        label: str,
        setup: Callable[[], StatsCache],
        query: Callable[[StatsCache], Result],
    ) -> None:
        """Like `timed`, with an untimed set-up before each run."""
        best, result = float("inf"), None
        for _ in range(args.repeat):
            cache = setup()
            start = time.perf_counter()
            result = query(cache)
            best = min(best, time.perf_counter() - start)
        print(f"{label:<58} {best * 1000:9.1f} ms   files kept: {kept_count(result):>9}")

    def warm_up_alone(cache: StatsCache) -> int:
        load(cache).shutdown()  # shutdown waits for the warm-up
        return reloaded.num_rows

    def sent_at_load(cache: StatsCache) -> pa.Array | None:
        warmer = load(cache)
        try:
            return run_on(reloaded, stats_hint, cache)
        finally:
            warmer.shutdown()

    def warmed_up() -> StatsCache:
        cache = queried_before()
        load(cache).shutdown()
        return cache

    timed_with("warm-up itself (off the request path)", queried_before, warm_up_alone)
    timed_with("stats predicate sent as it loads (joins the warm-up)", queried_before, sent_at_load)
    timed_with(
        "stats predicate sent after the warm-up finished",
        warmed_up,
        lambda cache: run_on(reloaded, stats_hint, cache),
    )
    timed(
        "stats predicate, no warmer (cold, as before)",
        lambda: run_on(reloaded, stats_hint, cold()),
        args.repeat,
    )
    print()
    timed(
        "naive per-file Python: partition predicate",
        lambda: naive_partition(text, day, "eu-west"),
        1,
    )
    timed(
        "naive per-file Python: stats predicate (orjson per file)",
        lambda: naive_stats(text, id_value),
        1,
    )


if __name__ == "__main__":
    main()
