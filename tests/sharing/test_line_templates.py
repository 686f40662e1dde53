"""Line templates (sharing.formats.templates) filled with real signatures are the bytes the
format writers write, on corpus snapshots, with dictionary-encoded columns too; lines that
need a second signature get none; the selection cache stays within its bounds."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import deltalog
from deltalog.packed_stats import stats_text
from sharing.formats import FileContext, storage_keys
from sharing.formats.ids import with_file_ids
from sharing.formats.templates import LineTemplates, line_templates
from sharing.formats.writers import writer_for
from sharing.presign.base import SignedUrls
from sharing.presign.local import LocalSigner, TableRef, UrlHolder
from sharing.query.small import Selection, SelectionCache
from tests.support.corpus import corpus_table

PARTITIONED = "levi/dat/basic_partitioned/delta"
DV_TABLE = "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta"


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 1_900_000_000.25)


def _snapshot(relative: str) -> deltalog.Snapshot:
    return deltalog.DeltaTable(str(corpus_table(relative))).snapshot()


def _context(snapshot: deltalog.Snapshot, scheme: str, version: int | None = None) -> FileContext:
    signer = LocalSigner(
        secret="secret-for-templates",
        base_url="http://lakeshare.test/",
        endpoint="/delta-sharing",
        table=TableRef("s", "d", "t"),
        table_root=snapshot.table_root,
        ttl_seconds=900,
        holder=UrlHolder("recipient", "cred-1"),
    )
    return FileContext(
        snapshot.storage,
        snapshot.table_root,
        signer,
        scheme,
        version=version,
        timestamp=None if version is None else 1_700_000_000_000,
    )


def _dictionary(files: pa.Table, name: str) -> pa.Table:
    column = stats_text(files.column(name)).combine_chunks()
    if isinstance(column, pa.MapArray):  # dictionary-encoded partition values
        items = pc.dictionary_encode(column.items)
        encoded: pa.Array = pa.MapArray.from_arrays(column.offsets, column.keys, items)
    else:
        encoded = pc.dictionary_encode(column)
    index = files.schema.get_field_index(name)
    return files.set_column(index, pa.field(name, encoded.type), pa.chunked_array([encoded]))


@pytest.mark.parametrize("scheme", ["parquet", "delta"])
@pytest.mark.parametrize("encoded", [None, "path", "stats", "partitionValues"])
@pytest.mark.parametrize("version", [None, 1])
def test_filled_templates_are_the_writers_lines(
    scheme: str, encoded: str | None, version: int | None
) -> None:
    snapshot = _snapshot(PARTITIONED)
    files = snapshot.files if encoded is None else _dictionary(snapshot.files, encoded)
    writer = writer_for(scheme)
    context = _context(snapshot, scheme, version)
    (batch,) = with_file_ids(files.combine_chunks(), scheme).to_batches()
    want = writer.file_lines(batch, context)
    templates = line_templates(writer, batch, context)
    assert templates is not None
    got = templates.render(context.signer)
    assert got == want
    assert bytes(want.text).count(b"\n") == snapshot.num_files == 6
    paths = batch.column("path")
    assert templates.keys == tuple(storage_keys(paths, snapshot.storage, snapshot.table_root))


def test_joined_templates_sign_once_and_match_batch_by_batch() -> None:
    snapshot = _snapshot(PARTITIONED)
    writer, context = writer_for("delta"), _context(snapshot, "delta")
    batches = with_file_ids(snapshot.files, "delta").combine_chunks().to_batches(max_chunksize=4)
    assert len(batches) == 2
    parts = [line_templates(writer, b, context) for b in batches]
    joined = LineTemplates.joined([p for p in parts if p is not None])
    assert joined is not None

    calls: list[int] = []

    class Counting:
        def sign(self, keys: Sequence[str]) -> SignedUrls:
            calls.append(len(keys))
            return context.signer.sign(keys)

    filled = joined.render(Counting())
    assert calls == [6]
    assert filled.text == b"".join(writer.file_lines(b, context).text for b in batches)


def test_lines_with_deletion_vectors_in_files_get_no_templates() -> None:
    snapshot = _snapshot(DV_TABLE)
    writer, context = writer_for("delta"), _context(snapshot, "delta")
    (batch,) = with_file_ids(snapshot.files, "delta").combine_chunks().to_batches()
    assert pc.any(pc.is_valid(batch.column("deletionVector"))).as_py()
    assert line_templates(writer, batch, context) is None
    # Without the deletion vectors the same files are templated.
    plain = batch.set_column(
        batch.schema.get_field_index("deletionVector"),
        "deletionVector",
        pa.nulls(batch.num_rows, batch.schema.field("deletionVector").type),
    )
    assert line_templates(writer, plain, context) is not None


def test_an_empty_batch_has_empty_templates() -> None:
    snapshot = _snapshot(PARTITIONED)
    writer, context = writer_for("parquet"), _context(snapshot, "parquet")
    (batch,) = with_file_ids(snapshot.files, "parquet").combine_chunks().to_batches()
    templates = line_templates(writer, batch.slice(0, 0), context)
    assert templates is not None
    assert templates.render(context.signer).text == b""


def _selection(size: int) -> Selection:
    return Selection(b"x" * size, None, None, None, 0)


def test_the_selection_cache_is_bounded_by_entries_and_bytes() -> None:
    cache = SelectionCache(max_entries=3, max_bytes=1_000)
    for i in range(5):
        cache.put(i, _selection(10))
    assert len(cache) == 3
    assert cache.get(0) is None and cache.get(4) is not None
    cache.get(2)  # used: kept over 3 when room is needed
    cache.put("big", _selection(900))
    assert cache.get(2) is not None and cache.get(3) is None
    assert cache.get("big") is not None
    cache.put("too-big", _selection(1_001))
    assert cache.get("too-big") is None
    cache.put("other", _selection(500))
    # Over the bytes: the least recently used go until the rest fits.
    assert cache.get("big") is None and cache.get(2) is None
    assert cache.get("other") is not None
