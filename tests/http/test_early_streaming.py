"""Cold snapshot queries stream while the snapshot loads (sharing.query.early,
deltalog.loading), and their responses are the finished snapshot's, byte for byte.

Each table below is queried twice on one server: the first request finds the table cold
and is answered from the load under way (checked: `plan_early` made its plan), the second
from the finished snapshot. The wall clock is frozen, so URL signatures and token expiries
are the same bytes in both; everything else must be too: status, `Delta-Table-Version`,
the protocol and metadata lines (whose size and numFiles the early head computes ahead of
the rows) and every file line, in order. The corpus tables cover classic, multi-part and
V2 checkpoints (with parquet and JSON manifests and sidecars), and commits after the
checkpoint that remove, re-add (with deletion vectors) and add files. Two knobs make the
small corpus tables take the paths a million-file table takes: `MIN_FILES` (tables below
it wait for their snapshot) is 0, and with a backlog of one row the load stops handing
batches to the response at once, which then continues from the finished snapshot.

The last test shows, without timing, that the first file line is written before the log
is read to its end: the table's real local storage is wrapped so that reading the
statistics of its last checkpoint part (which only the row pass reads; the head reads
path, size and deletion vector columns) blocks until the client has received its first
file line.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

import deltalog.loading
import sharing.query.early
import sharing.query.snapshot
import sharing.tables
from app.main import create_app
from deltalog.storage.base import Storage
from deltalog.storage.ranged import RangedFile
from tests.support.corpus import corpus_table
from tests.support.emulators import moto_client
from tests.support.server import TEST_BEARER_TOKEN, make_config, run_server

FROZEN_NS = 1_900_000_000_123_456_789
AUTH = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
FORMATS = {
    "parquet": "responseformat=parquet",
    "delta": "responseformat=delta;readerfeatures=deletionvectors,columnmapping,v2checkpoint",
}
TABLES = {
    # classic checkpoint at 10, commits 11..14 remove and add files
    "classic_removes": "delta-kernel-rs/golden_data/checkpoint/delta",
    "inserts_deletes": "delta-kernel-rs/golden_data/basic-with-inserts-deletes-checkpoint/delta",
    # deletion vectors: files removed and re-added with new DVs after the checkpoint
    "dv_readds": "delta/kernel-defaults/basic-dv-with-checkpoint",
    "dv_partitioned": "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta",
    # three-part checkpoint, then adds
    "multipart": "delta/kernel-defaults/kernel-pagination-multi-part-checkpoints",
    "multipart_only": "delta-kernel-rs/golden_data/multi-part-checkpoint/delta",
    # V2 checkpoints whose files are in sidecars (parquet and JSON manifests)
    "v2_sidecars": "delta-kernel-rs/data/v2-checkpoints-parquet-with-sidecars",
    "v2_json_sidecars": "delta-kernel-rs/data/v2-checkpoints-json-with-sidecars",
    "v2_then_add": "delta-rs/checkpoint-v2-table",
    "appends": "dask-deltatable/checkpoint",
}
# Keeps the files whose `id` may be below 5 (the tables with an `id` column), all others.
ID_BELOW_5 = json.dumps(
    {
        "op": "lessThan",
        "children": [
            {"op": "column", "name": "id", "valueType": "long"},
            {"op": "literal", "value": "5", "valueType": "long"},
        ],
    }
)
BODIES = {
    "plain": {},
    "predicate_refresh": {"jsonPredicateHints": ID_BELOW_5, "includeRefreshToken": True},
    # a limit is ignored with predicates, so this one streams too
    "predicate_limit": {"jsonPredicateHints": ID_BELOW_5, "limitHint": 1},
}


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Wall-clock time stands still (monotonic time, which timeouts use, does not)."""
    monkeypatch.setattr(time, "time", lambda: FROZEN_NS / 1e9)
    monkeypatch.setattr(time, "time_ns", lambda: FROZEN_NS)
    yield


@pytest.fixture
def early_plans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every table is worth streaming early; the versions of the plans made early."""
    monkeypatch.setattr(sharing.query.early, "MIN_FILES", 0)
    made: list[str] = []
    real = sharing.query.snapshot.plan_early

    def spy(*args: Any, **kwargs: Any) -> Any:
        plan = real(*args, **kwargs)
        made.append(str(plan.version))
        return plan

    monkeypatch.setattr(sharing.query.snapshot, "plan_early", spy)
    return made


def _config(tables: list[dict[str, Any]], store: Path | None, **extra: Any) -> Any:
    return make_config(
        {
            "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
            "snapshotCacheDir": str(store) if store is not None else "off",
            **extra,
        }
    )


def _local_tables() -> list[dict[str, Any]]:
    return [{"name": name, "location": str(corpus_table(rel))} for name, rel in TABLES.items()]


def _twice(
    post: Callable[[str, dict[str, str], dict[str, Any]], tuple[int, str | None, bytes]],
    early_plans: list[str],
    caps: str,
    body: dict[str, Any],
) -> dict[str, bytes]:
    """Query every table cold, then warm, and check both answers are the same bytes; the
    cold answers by table."""
    cold_bodies = {}
    for name in TABLES:
        url = f"/delta-sharing/shares/s/schemas/d/tables/{name}/query"
        headers = {**AUTH, "delta-sharing-capabilities": caps}
        made = len(early_plans)
        cold = post(url, headers, body)
        streamed_early = len(early_plans) > made
        warm = post(url, headers, body)
        assert len(early_plans) == made + streamed_early, "the warm query streamed early"
        assert cold == warm, f"{name}: the cold response differs from the finished snapshot's"
        if cold[0] == 200:
            assert streamed_early, f"{name}: the cold query did not stream early"
            assert cold[1] == early_plans[-1]
        cold_bodies[name] = cold[2]
    return cold_bodies


@pytest.mark.usefixtures("frozen_clock")
@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize(
    ("store", "backlog"),
    [(False, None), (False, 1), (True, None), (True, 1)],
    ids=["memory", "memory-cut", "store", "store-cut"],
)
def test_cold_responses_are_the_finished_snapshots(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    early_plans: list[str],
    fmt: str,
    store: bool,
    backlog: int | None,
) -> None:
    if backlog is not None:
        monkeypatch.setattr(deltalog.loading, "MAX_BACKLOG_ROWS", backlog)
    answers: dict[str, dict[str, bytes]] = {}
    for label, body in BODIES.items():
        # A server of its own per body, so every table is cold for each.
        directory = tmp_path / f"store-{label}" if store else None
        with TestClient(create_app(_config(_local_tables(), directory))) as client:

            def post(
                url: str, headers: dict[str, str], body: dict[str, Any]
            ) -> tuple[int, str | None, bytes]:
                response = client.post(url, headers=headers, json=body)
                return (
                    response.status_code,
                    response.headers.get("delta-table-version"),
                    response.content,
                )

            answers[label] = _twice(post, early_plans, FORMATS[fmt], body)
    # The predicate did skip files somewhere, so skipping ran on the streamed batches.
    assert len(answers["predicate_refresh"]["v2_sidecars"].splitlines()) < len(
        answers["plain"]["v2_sidecars"].splitlines()
    )
    if fmt == "parquet":  # deletion vectors, refused before the first byte as always
        assert b"UNSUPPORTED_OPERATION" in answers["plain"]["dv_readds"]


def test_paged_sliced_and_limited_queries_wait_for_the_snapshot(
    tmp_path: Path, early_plans: list[str]
) -> None:
    """Paging, a limit without predicates, time travel and a recipient's slice are planned
    on the finished snapshot (their files or figures depend on all files); a plain query
    on the same table streams early."""
    location = str(corpus_table(TABLES["dv_partitioned"]))
    tables = [
        {"name": "t", "location": location, "historyShared": True},
        {"name": "slice", "location": location, "partitionFilter": "part = 1"},
    ]
    url = "/delta-sharing/shares/s/schemas/d/tables/{}/query"
    headers = {**AUTH, "delta-sharing-capabilities": FORMATS["delta"]}
    cases = [("t", {"maxFiles": 5}), ("t", {"limitHint": 1}), ("t", {"version": 12})]
    for table, body in [*cases, ("slice", {})]:
        with TestClient(create_app(_config(tables, None))) as client:
            response = client.post(url.format(table), headers=headers, json=body)
            assert response.status_code == 200, response.text
    assert early_plans == []
    with TestClient(create_app(_config(tables, None))) as client:
        assert client.post(url.format("t"), headers=headers, json={}).status_code == 200
    assert early_plans == ["15"]


class _GatedStorage:
    """A real storage (`inner`) whose reads of the byte ranges `gated` of one file wait
    until `gate` is set (at most 20 s); everything else is the inner storage's. Reads go
    through deltalog's own ranged file (what object stores use), without read-ahead, so
    the gated ranges are only read when a reader asks for them."""

    def __init__(
        self, inner: Storage, key: str, gated: list[tuple[int, int]], gate: threading.Event
    ) -> None:
        self._inner = inner
        self._key = key
        self._gated = gated
        self._gate = gate
        self.released_reads = 0  # gated reads that went through

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def open_input_file(self, key: str) -> Any:
        if key != self._key:
            return self._inner.open_input_file(key)
        import pyarrow as pa

        size = self._inner.info(key).size

        def fetch(offset: int, length: int) -> bytes:
            # The footer is read from the end of the file, with whatever precedes it in a
            # small file: only reads of the gated ranges themselves wait.
            reaches_end = offset + length >= size
            gated = any(offset < end and start < offset + length for start, end in self._gated)
            if gated and not reaches_end:
                self._gate.wait(timeout=20)
                self.released_reads += 1
            return self._inner.read_range(key, offset, length)

        return pa.PythonFile(RangedFile(fetch, size, key, read_ahead=0), mode="r")


def _stats_ranges(path: Path) -> list[tuple[int, int]]:
    """The byte ranges of the `add.stats` column chunks of a checkpoint part."""
    metadata = pq.ParquetFile(path).metadata
    ranges = []
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for i in range(row_group.num_columns):
            column = row_group.column(i)
            if column.path_in_schema == "add.stats":
                start = column.dictionary_page_offset or column.data_page_offset
                ranges.append((start, start + column.total_compressed_size))
    return ranges


@pytest.mark.usefixtures("frozen_clock")
def test_first_line_is_sent_before_the_last_checkpoint_part_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early_plans: list[str]
) -> None:
    root = corpus_table(TABLES["multipart"])
    parts = sorted((root / "_delta_log").glob("*.checkpoint.*.parquet"))
    assert len(parts) == 3
    last = parts[-1]
    gate = threading.Event()
    wrapped: list[_GatedStorage] = []
    real_resolve = sharing.tables.resolve

    def resolve(location: str, options: Any = None) -> tuple[Any, str]:
        storage, table_root = real_resolve(location, options)
        gated = _GatedStorage(storage, str(last), _stats_ranges(last), gate)
        wrapped.append(gated)
        return gated, table_root

    monkeypatch.setattr(sharing.tables, "resolve", resolve)
    tables = [{"name": "t", "location": str(root)}]
    with run_server(_config(tables, None), tmp_path) as server:
        url = server.url("/shares/s/schemas/d/tables/t/query")
        released_at_first_line = None
        body = b""
        with (
            httpx.Client(timeout=60) as client,
            client.stream("POST", url, headers=AUTH, json={}) as response,
        ):
            assert response.status_code == 200
            for line in response.iter_lines():
                if released_at_first_line is None and line.startswith('{"file"'):
                    released_at_first_line = wrapped[0].released_reads
                    gate.set()
                body += line.encode() + b"\n"
        gate.set()
        # The first file line came while the last part's statistics were still unread.
        assert released_at_first_line == 0
        assert early_plans == ["2"]
        assert wrapped[0].released_reads > 0  # and the load did read them afterwards
        warm = httpx.post(url, headers=AUTH, json={}, timeout=60)
        assert warm.content == body
        assert len(body.splitlines()) == 2 + 20


@pytest.mark.slow
@pytest.mark.usefixtures("frozen_clock")
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_cold_responses_on_s3_are_the_finished_snapshots(
    moto_s3: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early_plans: list[str], fmt: str
) -> None:
    """The same on S3 (moto): the load reads the checkpoint through ranged GETs."""
    monkeypatch.setattr(deltalog.loading, "MAX_BACKLOG_ROWS", 1)
    bucket = f"early-{fmt}"
    client = moto_client(moto_s3)
    client.create_bucket(Bucket=bucket)
    for name, relative in TABLES.items():
        root = corpus_table(relative)
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.name.endswith(".crc"):
                key = f"t/{name}/{path.relative_to(root).as_posix()}"
                client.upload_file(str(path), bucket, key)
    profile = {
        "endpointUrl": moto_s3,
        "pathStyle": True,
        "region": "us-east-1",
        "accessKeyId": "testing",
        "secretAccessKey": "testing",
    }
    tables = [
        {"name": name, "location": f"s3a://{bucket}/t/{name}", "storageProfile": "moto"}
        for name in TABLES
    ]
    config = _config(tables, tmp_path / "store", storageProfiles={"moto": profile})
    with TestClient(create_app(config)) as http:

        def post(
            url: str, headers: dict[str, str], body: dict[str, Any]
        ) -> tuple[int, str | None, bytes]:
            response = http.post(url, headers=headers, json=body)
            return (
                response.status_code,
                response.headers.get("delta-table-version"),
                response.content,
            )

        bodies = _twice(post, early_plans, FORMATS[fmt], {})
    assert b"X-Amz-Signature" in bodies["appends"]


@pytest.mark.usefixtures("frozen_clock")
def test_a_request_streams_from_a_load_already_under_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """A query arriving while the table is being loaded by someone else (the start-up
    table check of `lakeshare serve`, or another request) streams from that load rather
    than waiting for it: its first rows come while the last checkpoint part's statistics
    are still unread (the same gated real storage as above). With `refreshWindowMs: 0`
    the joining request first lists the log for a newer version (tests/http
    /test_early_races.py), which must not wait for the load either."""
    from deltalog import SnapshotLoading
    from sharing.table_check import configured_tables

    root = corpus_table(TABLES["multipart"])
    last = sorted((root / "_delta_log").glob("*.checkpoint.*.parquet"))[-1]
    gate = threading.Event()
    wrapped: list[_GatedStorage] = []
    real_resolve = sharing.tables.resolve

    def resolve(location: str, options: Any = None) -> tuple[Any, str]:
        storage, table_root = real_resolve(location, options)
        wrapped.append(_GatedStorage(storage, str(last), _stats_ranges(last), gate))
        return wrapped[-1], table_root

    monkeypatch.setattr(sharing.tables, "resolve", resolve)
    config = _config([{"name": "t", "location": str(root)}], None, refreshWindowMs=0)
    service = sharing.tables.TableService(config)
    shared = next(iter(configured_tables(config)))
    checker = threading.Thread(target=service.latest, args=(shared,), daemon=True)
    checker.start()  # as the start-up table check does
    deadline = time.monotonic() + 20
    while not service._loadings and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        found = service.resolve_early(shared)
        assert isinstance(found, SnapshotLoading)
        batches = found.files(100)
        first = next(batches)
        assert first.num_rows > 0
        assert wrapped[0].released_reads == 0  # the load is still waiting at the gate
    finally:
        gate.set()
    checker.join(timeout=30)
    paths = first.column("path").to_pylist() + [
        p for batch in batches for p in batch.column("path").to_pylist()
    ]
    assert paths == service.latest(shared).files.column("path").to_pylist()
    assert wrapped[0].released_reads > 0


@pytest.mark.usefixtures("frozen_clock")
def test_a_worker_streams_while_another_builds_the_store_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers (two table services over one snapshot store directory, as `lakeshare
    serve --workers 2` runs them): while the first builds the table's store file (held at
    the gate above, so its build lock stays taken), a query on the second does not wait
    for the file: it reads the log's first rows itself and streams them."""
    from deltalog import SnapshotLoading, SnapshotStore
    from sharing.table_check import configured_tables

    root = corpus_table(TABLES["multipart"])
    last = sorted((root / "_delta_log").glob("*.checkpoint.*.parquet"))[-1]
    gate = threading.Event()
    wrapped: list[_GatedStorage] = []
    real_resolve = sharing.tables.resolve

    def resolve(location: str, options: Any = None) -> tuple[Any, str]:
        storage, table_root = real_resolve(location, options)
        wrapped.append(_GatedStorage(storage, str(last), _stats_ranges(last), gate))
        return wrapped[-1], table_root

    monkeypatch.setattr(sharing.tables, "resolve", resolve)
    config = _config([{"name": "t", "location": str(root)}], tmp_path / "store")
    first_worker, second_worker = (
        sharing.tables.TableService(config, snapshot_store=SnapshotStore(tmp_path / "store"))
        for _ in range(2)
    )
    shared = next(iter(configured_tables(config)))
    builder = threading.Thread(target=first_worker.latest, args=(shared,), daemon=True)
    builder.start()
    deadline = time.monotonic() + 20
    while not first_worker._loadings and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the first worker takes the build lock and blocks at the gate
    try:
        found = second_worker.resolve_early(shared)
        assert isinstance(found, SnapshotLoading)
        batches = found.files(100)
        first = next(batches)
        assert first.num_rows > 0
        assert all(w.released_reads == 0 for w in wrapped)  # the file is not built yet
    finally:
        gate.set()
    builder.join(timeout=30)
    paths = first.column("path").to_pylist() + [
        p for batch in batches for p in batch.column("path").to_pylist()
    ]
    assert paths == first_worker.latest(shared).files.column("path").to_pylist()
    assert paths == second_worker.latest(shared).files.column("path").to_pylist()
